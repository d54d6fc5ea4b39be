"""The launch plan: one variant ready to launch on one device, built once and launched with raw device
pointers on the caller's stream, with no CuPy, DLPack or torch object in the way.

A ``LaunchPlan`` holds what ``gemvtune.kernels.launchspec`` describes, made real through NVIDIA's CUDA Python
bindings (``cuda.bindings.driver``): the compiled cubin loaded into the device's primary context (the
one CuPy and PyTorch use), one ``CUfunction`` per kernel, its grid and block, the workspace (one
allocation, zeroed once: the kernels leave it zero again) and the kernel arguments packed once in a
ctypes array whose pointer slots are rewritten per call. ``launch(W, x, y, bias, stream)`` is then a
few slot writes and one ``cuLaunchKernel`` per kernel (``cuLaunchKernelEx`` with programmatic stream
serialization for ``pdl=on`` configs). The runner (measurement, decode-step benchmark), the
dispatcher (``table.gemv``) and the PyTorch op all launch through it; export reads the same
``LaunchSpec``.

A plan must be built outside CUDA-graph capture (it compiles, allocates and zeroes); launches may be
captured. Its workspace is shared by every launch of the plan: launches on one stream (or inside one
graph) are ordered, which is how a model's layers run; two streams running the same split-K plan at
the same time would share it.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
from collections.abc import Iterator
from typing import Any

from ..errors import GemvtuneError
from ..kernels.epilogue import DEFAULT, Epilogue
from ..kernels.launchspec import LaunchSpec, launch_spec
from ..kernels.shapes import Shape

_N_PTRS = 6  # W, x, y, bias, ws, counters; then int M (the kernel ABI in launchspec)


def group_args_type(members: int) -> type:
    """The ctypes twin of a grouped kernel's ``GroupArgs { const T* W[G]; OUT_T* y[G]; const T* bias[G];
    int end[G]; }`` (``gemvtune.kernels.group``): the same fields in the same order, so the same C layout."""
    P = ctypes.c_void_p
    return type(f"GroupArgs{members}", (ctypes.Structure,),
                {"_fields_": [("W", P * members), ("y", P * members), ("bias", P * members),
                             ("end", ctypes.c_int * members)]})
_INVALID_CONTEXT = 201  # CUDA_ERROR_INVALID_CONTEXT


class LaunchError(GemvtuneError):
    """A CUDA driver call of a plan failed (the message names the call and the CUresult)."""


def _driver() -> Any:
    from cuda.bindings import driver

    return driver


def check(result: Any, what: str) -> Any:
    """The value(s) of a cuda-bindings call, or LaunchError naming ``what`` and the error."""
    err = result[0]
    if int(err) != 0:
        drv = _driver()
        name = drv.cuGetErrorName(err)
        raise LaunchError(f"{what} failed: {name[1].decode() if int(name[0]) == 0 else int(err)}")
    return result[1] if len(result) == 2 else result[1:]


_init_lock = threading.Lock()
_initialized = False


def _init() -> None:
    global _initialized
    if not _initialized:
        with _init_lock:
            if not _initialized:
                check(_driver().cuInit(0), "cuInit")
                _initialized = True


@contextlib.contextmanager
def device_context(device: int) -> Iterator[None]:
    """The device's primary context current on this thread for the block, then the caller's back."""
    _init()
    drv = _driver()
    dev = check(drv.cuDeviceGet(device), "cuDeviceGet")
    ctx = check(drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    check(drv.cuCtxPushCurrent(ctx), "cuCtxPushCurrent")
    try:
        yield
    finally:
        check(drv.cuCtxPopCurrent(), "cuCtxPopCurrent")


def arch_of(device: int) -> str:
    """The arch of a device (what NVRTC compiles for): ``gemvtune.kernels.arch.for_device`` of its compute capability
    (an unsupported GPU is one UsageError)."""
    _init()
    drv = _driver()
    dev = check(drv.cuDeviceGet(device), "cuDeviceGet")
    A = drv.CUdevice_attribute
    major = check(drv.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "cuDeviceGetAttribute")
    minor = check(drv.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "cuDeviceGetAttribute")
    from ..kernels.arch import for_device

    return for_device(int(major), int(minor)).name


def capturing(stream: int) -> bool:
    """Whether ``stream`` is capturing a CUDA graph now."""
    drv = _driver()
    status = check(drv.cuStreamIsCapturing(drv.CUstream(stream)), "cuStreamIsCapturing")
    return int(status) != 0


class LaunchPlan:
    """One variant of one (M, d, n) shape with one epilogue on one device: functions, grid, block,
    workspace and packed arguments. Build with ``LaunchPlan.build`` (compiles if needed)."""

    def __init__(self, spec: LaunchSpec, cubin: bytes, device: int):
        drv = _driver()
        self.spec, self.device = spec, device
        self.align = spec.align
        self._lock = threading.RLock()   # (reentrant: launch_group fills its struct, then launches)
        self._module = None
        self._ws = 0
        with device_context(device):
            self._module = check(drv.cuModuleLoadData(cubin), "cuModuleLoadData")
            funcs = {}
            for name, _, _ in spec.kernels:
                if name not in funcs:
                    funcs[name] = check(drv.cuModuleGetFunction(self._module, name.encode()),
                                        f"cuModuleGetFunction({name})")
                    if spec.smem:   # dynamic shared memory: opt in to it (static + dynamic past 48 KiB needs it)
                        check(drv.cuFuncSetAttribute(
                            funcs[name], drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                            spec.smem), f"cuFuncSetAttribute({name}, {spec.smem} B of dynamic shared memory)")
            if spec.needs_workspace:
                self._ws = int(check(drv.cuMemAlloc(spec.workspace_bytes), "cuMemAlloc"))
                check(drv.cuMemsetD8(self._ws, 0, spec.workspace_bytes), "cuMemsetD8")
                check(drv.cuCtxSynchronize(), "cuCtxSynchronize")
        # Packed arguments: six pointer slots and M, and the array of their addresses (void** params).
        self._vals = (ctypes.c_void_p * _N_PTRS)(0, 0, 0, 0, self._ws or None,
                                                  (self._ws + spec.counters_offset) if self._ws else None)
        self._m = ctypes.c_int(spec.shape.M)
        base = ctypes.addressof(self._vals)
        size = ctypes.sizeof(ctypes.c_void_p)
        self._scales = ctypes.c_void_p(0)   # FP8 weights (spec.scales): the trailing ``const float* scales``
        self._fp8 = bool(spec.scales)
        extra = [ctypes.addressof(self._scales)] if spec.scales else []
        self._group = None
        if spec.group is not None:   # one more argument, by value: the members' pointers and row ends
            G = len(spec.group.Ms)
            self._group = group_args_type(G)()
            for i, e in enumerate(spec.group.ends):
                self._group.end[i] = e
            extra = [ctypes.addressof(self._group)]
        self._params = (ctypes.c_void_p * (_N_PTRS + 1 + len(extra)))(*[base + i * size for i in range(_N_PTRS)],
                                                                    ctypes.addressof(self._m), *extra)
        self._params_addr = ctypes.addressof(self._params)
        self._launches = [(funcs[name], grid, block) for name, grid, block in spec.kernels]
        self._smem = spec.smem
        self._single = ((self._launches[0][0], *self._launches[0][1], *self._launches[0][2], spec.smem)
                        if len(self._launches) == 1 and not spec.pdl else None)
        if spec.pdl:
            attr = drv.CUlaunchAttribute()
            attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            attr.value.programmaticStreamSerializationAllowed = 1
            self._configs = []
            for fn, grid, block in self._launches:
                cfg = drv.CUlaunchConfig()
                cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid
                cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = block
                cfg.sharedMemBytes = spec.smem
                cfg.attrs = [attr]
                cfg.numAttrs = 1
                self._configs.append((fn, cfg))
        self._launch_fn = drv.cuLaunchKernel
        self._launch_ex = drv.cuLaunchKernelEx

    @classmethod
    def build(cls, config: Any, shape: Shape, epilogue: Epilogue = DEFAULT, device: int = 0,
              arch: str | None = None, cubin_path: str | None = None) -> LaunchPlan:
        """Compile (or take from the disk cache) and load. ``cubin_path`` gives a compiled variant
        instead (the runner passes planted sources this way)."""
        from ..build.compile import compile_variant

        spec = launch_spec(config, shape, epilogue)
        if cubin_path is None:
            cubin_path = compile_variant(config, shape, arch or arch_of(device), epilogue=epilogue).cubin_path
        with open(cubin_path, "rb") as f:
            cubin = f.read()
        return cls(spec, cubin, device)

    @classmethod
    def build_group(cls, config: Any, group: Any, epilogue: Epilogue = DEFAULT, device: int = 0,
                    arch: str | None = None) -> LaunchPlan:
        """Compile (or take from the disk cache) and load the grouped variant of ``config`` over ``group``'s
        members (a ``gemvtune.kernels.group.GroupShape``); launch it with ``launch_group``."""
        from ..build.compile import compile_variant

        spec = launch_spec(config, group.fused, epilogue, group)
        path = compile_variant(config, group.fused, arch or arch_of(device), epilogue=epilogue, group=group).cubin_path
        with open(path, "rb") as f:
            return cls(spec, f.read(), device)

    def launch_group(self, Ws: Any, x: int, ys: Any, biases: Any = None, stream: int = 0) -> None:
        """Enqueue one grouped call: ``Ws``, ``ys`` (and ``biases``, when the epilogue has one) one raw device
        pointer per member, in the group's order; x is shared. Checked by the caller, like ``launch``."""
        g = self._group
        if g is None:
            raise LaunchError(f"{self.spec.config.label} is not a grouped plan: launch it with launch()")
        G = len(self.spec.group.Ms)
        if len(Ws) != G or len(ys) != G or (biases is not None and len(biases) != G):
            raise LaunchError(f"a grouped launch of {G} members needs {G} weights and outputs"
                              + (" and biases" if biases is not None else ""))
        with self._lock:   # the struct is the plan's (one launch sequence at a time, as for launch)
            for i in range(G):
                g.W[i], g.y[i] = Ws[i], ys[i]
                g.bias[i] = (biases[i] or None) if biases is not None else None
            self.launch(Ws[0], x, ys[0], (biases[0] if biases is not None else 0) or 0, stream)

    def launch(self, W: int, x: int, y: int, bias: int = 0, stream: int = 0, scales: int = 0) -> None:
        """Enqueue one call on ``stream`` (a raw ``cudaStream_t``; 0 is the legacy default stream).
        Pointers are raw device addresses, already checked by the caller (shape, dtype, alignment); a plan of FP8
        weights (``spec.scales``) takes W's E4M3 codes and their float32 ``scales``."""
        vals = self._vals
        if self._fp8 and not scales:
            raise LaunchError(f"{self.spec.config.label} reads FP8 weights: launch it with their scales")
        with self._lock:  # the slots are shared: one launch sequence at a time per plan
            vals[0], vals[1], vals[2], vals[3] = W, x, y, bias or None
            if self._fp8:
                self._scales.value = scales
            one = self._single
            if one is not None:   # the common case, inlined: one kernel, no PDL
                err = self._launch_fn(one[0], one[1], one[2], one[3], one[4], one[5], one[6], one[7], stream,
                                      self._params_addr, 0)[0]
            else:
                err = self._enqueue(stream)
            if err == _INVALID_CONTEXT:  # a thread that never made the device's context current
                with device_context(self.device):
                    err = self._enqueue(stream)
            if err:
                check((err,), ("cuLaunchKernelEx (programmatic dependent launch) of " if self.spec.pdl
                               else "cuLaunchKernel of ") + self.spec.config.label)

    def _enqueue(self, stream: int) -> int:
        """Launch every kernel of the call; the first error code (0: all launched)."""
        if self.spec.pdl:
            for fn, cfg in self._configs:
                cfg.hStream = stream
                err = self._launch_ex(cfg, fn, self._params_addr, 0)[0]
                if err:
                    return int(err)
            return 0
        for fn, (gx, gy, gz), (bx, by, bz) in self._launches:
            err = self._launch_fn(fn, gx, gy, gz, bx, by, bz, self._smem, stream, self._params_addr, 0)[0]
            if err:
                return int(err)
        return 0

    def close(self) -> None:
        """Free the workspace and unload the module (the plan cannot launch afterwards)."""
        drv = _driver()
        if self._module is None:
            return
        with device_context(self.device):
            if self._ws:
                drv.cuMemFree(self._ws)
                self._ws = 0
            drv.cuModuleUnload(self._module)
        self._module = None


class PlanCache:
    """Plans by (config, shape, epilogue, device), built on first use and kept for the process (the
    dispatcher's and the PyTorch op's; CUDA graphs that captured a plan's launches keep working)."""

    def __init__(self) -> None:
        self._plans: dict[tuple, LaunchPlan] = {}
        self._lock = threading.Lock()

    def get(self, config: Any, shape: Shape, epilogue: Epilogue, device: int, stream: int | None = None) -> LaunchPlan:
        key = (config, shape, epilogue, device)
        plan = self._plans.get(key)
        if plan is None:
            with self._lock:
                plan = self._plans.get(key)
                if plan is None:
                    if stream is not None and capturing(stream):
                        raise GemvtuneError(
                            f"gemvtune: no kernel is ready for {shape} yet and the stream is capturing a CUDA "
                            f"graph; run the layer once outside capture first (it compiles and allocates)")
                    plan = self._plans[key] = LaunchPlan.build(config, shape, epilogue, device)
        return plan

    def __len__(self) -> int:
        return len(self._plans)


PLANS = PlanCache()
