"""The launch plan without a GPU: a fake CUDA driver records what ``LaunchPlan`` asks of cuda-bindings,
so the packed kernel arguments (the ABI in gemvtune.kernels.launchspec), grids, workspace, programmatic
dependent launch, the context retry and the capture guard are checked on the CPU."""

import ctypes
import types

import pytest

pytest.importorskip("cuda.bindings.driver", reason="cuda-bindings is not installed")

import cuda.bindings.driver as real  # noqa: E402

from gemvtune import GemvConfig, Shape, SplitKConfig  # noqa: E402
from gemvtune.device import plan as planmod  # noqa: E402
from gemvtune.errors import GemvtuneError  # noqa: E402
from gemvtune.kernels.epilogue import Epilogue  # noqa: E402
from gemvtune.kernels.launchspec import launch_spec  # noqa: E402

OK = (real.CUresult.CUDA_SUCCESS,)


def _read_params(addr: int) -> tuple[list[int | None], int]:
    """The six pointer arguments and M that a ``void** kernelParams`` at ``addr`` points to."""
    slots = (ctypes.c_void_p * 7).from_address(addr)
    ptrs = [ctypes.c_void_p.from_address(slots[i]).value for i in range(6)]
    return ptrs, ctypes.c_int.from_address(slots[6]).value


class FakeDriver(types.SimpleNamespace):
    def __init__(self, fail_first: int = 0, capturing: bool = False):
        super().__init__(CUlaunchAttribute=real.CUlaunchAttribute, CUlaunchConfig=real.CUlaunchConfig,
                         CUlaunchAttributeID=real.CUlaunchAttributeID, CUstream=real.CUstream,
                         CUdevice_attribute=real.CUdevice_attribute)
        self.calls, self.launches, self.fail_first, self.is_capturing = [], [], fail_first, capturing
        self.ctx_depth = 0

    def _rec(self, name, *a):
        self.calls.append((name,) + a)

    def cuInit(self, flags): self._rec("cuInit"); return OK
    def cuDeviceGet(self, i): return (OK[0], i)
    def cuDevicePrimaryCtxRetain(self, dev): return (OK[0], f"ctx{dev}")
    def cuCtxPushCurrent(self, ctx): self.ctx_depth += 1; self._rec("push", ctx); return OK
    def cuCtxPopCurrent(self): self.ctx_depth -= 1; self._rec("pop"); return (OK[0], None)
    def cuModuleLoadData(self, data): self._rec("load", data); return (OK[0], "module")
    def cuModuleGetFunction(self, mod, name): return (OK[0], "fn:" + name.decode())
    def cuMemAlloc(self, n): self._rec("alloc", n); return (OK[0], 0x7000_0000)
    def cuMemsetD8(self, p, v, n): self._rec("memset", p, v, n); return OK
    def cuCtxSynchronize(self): return OK
    def cuMemFree(self, p): self._rec("free", p); return OK
    def cuModuleUnload(self, m): self._rec("unload", m); return OK
    def cuGetErrorName(self, err): return (OK[0], b"CUDA_ERROR_FAKE")
    def cuStreamIsCapturing(self, s): return (OK[0], 1 if self.is_capturing else 0)

    def _launch(self, fn, grid, block, stream, params):
        if self.fail_first:
            self.fail_first -= 1
            return (201,)
        self.launches.append((fn, grid, block, int(stream), *_read_params(params), self.ctx_depth))
        return OK

    def cuLaunchKernel(self, fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        return self._launch(fn, (gx, gy, gz), (bx, by, bz), stream, params)

    def cuLaunchKernelEx(self, cfg, fn, params, extra):
        assert cfg.numAttrs == 1 and cfg.attrs[0].id == real.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        assert cfg.attrs[0].value.programmaticStreamSerializationAllowed == 1
        return self._launch(fn, (cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ),
                            (cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ), cfg.hStream, params)


@pytest.fixture
def fake(monkeypatch):
    drv = FakeDriver()
    monkeypatch.setattr(planmod, "_driver", lambda: drv)
    monkeypatch.setattr(planmod, "_initialized", False)
    return drv


def test_split_k_gemv_packs_pointers_workspace_and_m(fake):
    shape = Shape(129, 4104, 3)
    cfg = GemvConfig(block=128, vec="half8", tpr=32, split_k=4)
    spec = launch_spec(cfg, shape, Epilogue("fp16", True))
    assert spec.needs_workspace and spec.counters_offset % 256 == 0
    p = planmod.LaunchPlan(spec, b"cubin-bytes", 0)
    assert ("load", b"cubin-bytes") in fake.calls and ("alloc", spec.workspace_bytes) in fake.calls
    assert ("memset", 0x7000_0000, 0, spec.workspace_bytes) in fake.calls    # zeroed once
    assert fake.ctx_depth == 0                                               # the caller's context is back
    p.launch(0x1000, 0x2000, 0x3000, 0x4000, stream=77)
    p.launch(0x1100, 0x2100, 0x3100, 0, stream=78)                          # new pointers each call
    (fn, grid, block, stream, ptrs, M, depth), second = fake.launches
    assert fn == "fn:gemv" and grid == cfg.grid(shape) and block == (128, 1, 1) and stream == 77 and depth == 0
    assert ptrs == [0x1000, 0x2000, 0x3000, 0x4000, 0x7000_0000, 0x7000_0000 + spec.counters_offset] and M == 129
    assert second[4][:4] == [0x1100, 0x2100, 0x3100, None] and second[3] == 78
    p.close()
    assert ("free", 0x7000_0000) in fake.calls and ("unload", "module") in fake.calls


def test_split_k_gemm_launches_every_kernel_in_order_without_workspace(fake):
    shape = Shape(300, 4096, 8)
    cfg = SplitKConfig(split=4, combine="atomic")
    p = planmod.LaunchPlan(launch_spec(cfg, shape), b"x", 0)
    assert not any(c[0] == "alloc" for c in fake.calls)                     # atomics need no workspace
    p.launch(16, 32, 48)
    assert [launch[0] for launch in fake.launches] == ["fn:zero_y", "fn:splitk_gemm"]
    assert [launch[1] for launch in fake.launches] == [k[1] for k in cfg.kernels(shape)]
    assert fake.launches[0][4][4:] == [None, None]                           # ws, counters null


def test_pdl_config_launches_with_programmatic_serialization(fake):
    shape = Shape(1024, 4096)
    cfg = GemvConfig(vec="half8", tpr=256, pdl="on")
    p = planmod.LaunchPlan(launch_spec(cfg, shape), b"x", 0)
    p.launch(1, 2, 3, 0, stream=99)
    assert fake.launches[0][3] == 99 and fake.launches[0][1] == cfg.grid(shape)


def test_invalid_context_is_retried_inside_the_devices_context(fake):
    p = planmod.LaunchPlan(launch_spec(GemvConfig(), Shape(64, 256)), b"x", 0)
    fake.fail_first = 1
    p.launch(1, 2, 3)
    assert len(fake.launches) == 1 and fake.launches[0][-1] == 1           # launched with the context pushed
    fake.fail_first = 2
    with pytest.raises(planmod.LaunchError, match="cuLaunchKernel of .*CUDA_ERROR_FAKE"):
        p.launch(1, 2, 3)


def test_plan_cache_refuses_to_build_during_capture(fake, monkeypatch):
    monkeypatch.setattr("gemvtune.build.compile.compile_variant",
                        lambda *a, **k: pytest.fail("must not compile during capture"))
    fake.is_capturing = True
    cache = planmod.PlanCache()
    with pytest.raises(GemvtuneError, match="outside capture"):
        cache.get(GemvConfig(), Shape(64, 256), Epilogue(), 0, stream=5)
    assert len(cache) == 0
