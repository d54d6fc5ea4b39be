"""Stand-ins for the kernels a decode step runs between its linears (norms, the residual add, attention over the KV
cache, SwiGLU's elementwise product), a part of the CUDA runner: each reads and writes the bytes its kernel would, in
one launch, so a chain of linears is timed with the gaps a model has (``gemvtune.bench.gaps`` says which gaps, and
their bytes).

Two kinds, as engines have them:

- plain: it starts when the kernel before it has finished and ends before the next one starts, as a cuBLAS call, an
  Inductor kernel or any kernel launched without programmatic dependent launch. It ends a PDL chain: the next kernel
  cannot start early behind it.
- pdl: launched with programmatic stream serialization, it waits for the kernel before it
  (``griddepcontrol.wait``), then releases the next one at once (``launch_dependents``), as PDL-aware engine
  kernels do (FlashInfer's norms, TensorRT-LLM's), so the next linear's first weight loads overlap it.

Launched through the driver (``cuLaunchKernelEx``) on the caller's stream, so they can be captured into the step's
CUDA graph beside the linears' launch plans.
"""

from __future__ import annotations

import ctypes
from typing import Any

from ...build.compile import compile_source
from ...device.plan import _driver, check, device_context

KERNEL = "standin"
SOURCE = r"""
// A stand-in: reads n_in 16-byte words, writes n_out, each write depending on this thread's reads (so nothing is
// optimized away). pdl != 0: wait for the previous kernel, then release the next one at once.
extern "C" __global__ void standin(const uint4* __restrict__ in, unsigned long long n_in, uint4* __restrict__ out,
                                   unsigned long long n_out, int pdl) {
#if __CUDA_ARCH__ >= 900
    if (pdl) {
        asm volatile("griddepcontrol.wait;" ::: "memory");
        asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    }
#endif
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    const unsigned long long t = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int a = 0x9e3779b9u;
    for (unsigned long long i = t; i < n_in; i += stride) { const uint4 v = __ldg(in + i); a ^= v.x ^ v.y ^ v.z ^ v.w; }
    for (unsigned long long i = t; i < n_out; i += stride) out[i] = make_uint4(a, (unsigned int)i, a, 0u);
}
"""
THREADS = 256


class StandIns:
    """The stand-in kernel loaded on the runner's device; ``launch`` enqueues one on a stream."""

    def __init__(self, runner: Any):
        drv = _driver()
        self.device, self.sm_count = runner.device_id, runner.sm_count
        compiled = compile_source(SOURCE, "standin", runner.arch, kernel=KERNEL)
        with open(compiled.cubin_path, "rb") as f:
            cubin = f.read()
        with device_context(self.device):
            self._module = check(drv.cuModuleLoadData(cubin), "cuModuleLoadData")
            self._fn = check(drv.cuModuleGetFunction(self._module, KERNEL.encode()), "cuModuleGetFunction(standin)")
        attr = drv.CUlaunchAttribute()
        attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        attr.value.programmaticStreamSerializationAllowed = 1
        self._attr = attr
        self._keep: list[Any] = []

    def blocks(self, words: int) -> int:
        """One block per 1,024 words (4 per thread), between 1 and two per SM: a small kernel's grid."""
        return max(1, min(2 * self.sm_count, -(-words // (THREADS * 4))))

    def launch(self, src: int, n_in: int, dst: int, n_out: int, stream: int, pdl: bool) -> None:
        """Enqueue one stand-in reading ``n_in`` 16-byte words at ``src`` and writing ``n_out`` at ``dst``."""
        drv = _driver()
        cfg = drv.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = self.blocks(max(n_in, n_out)), 1, 1
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = THREADS, 1, 1
        cfg.sharedMemBytes = 0
        cfg.hStream = stream
        if pdl:
            cfg.attrs = [self._attr]
            cfg.numAttrs = 1
        else:
            cfg.numAttrs = 0
        args = (ctypes.c_void_p(src), ctypes.c_ulonglong(n_in), ctypes.c_void_p(dst), ctypes.c_ulonglong(n_out),
                ctypes.c_int(1 if pdl else 0))
        ptrs = (ctypes.c_void_p * len(args))(*[ctypes.addressof(a) for a in args])
        self._keep.append((args, ptrs))   # (alive until the launch is enqueued; a capture copies the values)
        err = drv.cuLaunchKernelEx(cfg, self._fn, ctypes.addressof(ptrs), 0)[0]
        if int(err) == 201:   # CUDA_ERROR_INVALID_CONTEXT: a thread that never made the device's context current
            with device_context(self.device):
                err = drv.cuLaunchKernelEx(cfg, self._fn, ctypes.addressof(ptrs), 0)[0]
        check((err,), "cuLaunchKernelEx of a stand-in")
        self._keep.clear()

    def close(self) -> None:
        if self._module is not None:
            with device_context(self.device):
                _driver().cuModuleUnload(self._module)
            self._module = None
