"""Run-time dispatch for ``Table.gemv`` (part of the CUDA runner package, the only place that imports cupy)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...compile import compile_variant
from ...errors import NoDeviceError, UsageError
from ...shapes import Shape
from ._cupy import cp, cuda_available
from .pdl import launcher


class Dispatcher:
    """Run-time dispatch behind ``Table.gemv``: one compile per (config, d) per process, workspaces
    kept per shape, and a hot path of a dict lookup, a few checks and the launch."""

    def __init__(self) -> None:
        why = cuda_available()
        if why:
            raise NoDeviceError(why)
        self._plans: dict[tuple[int, int, int], tuple] = {}
        self._modules: dict[str, Any] = {}
        self._streams: dict[int, Any] = {}

    def device_name(self) -> str:
        p = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
        return p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])

    def _plan(self, table, shape: Shape, dev: int) -> tuple:
        cfg = table.config_for(shape)
        with cp.cuda.Device(dev):
            props = cp.cuda.runtime.getDeviceProperties(dev)
            arch = f"sm_{props['major']}{props['minor']}"
            compiled = compile_variant(cfg, shape, arch)
            kernels = []
            for name, grid, block in cfg.kernels(shape):
                key = (compiled.cubin_path, name)
                if key not in self._modules:
                    self._modules[key] = cp.RawModule(path=compiled.cubin_path).get_function(name)
                fn = self._modules[key]
                kernels.append((launcher(fn, cfg), grid, block))
            nws, ncount = cfg.workspace(shape)
            ws = cp.empty(nws, dtype=cp.float32)
            counters = cp.zeros(ncount, dtype=cp.uint32)
            # The zeroing ran on CuPy's current stream; the kernels may run on another (torch's, non-
            # blocking): wait for it once, here, outside any graph capture (a plan is built before).
            cp.cuda.get_current_stream().synchronize()
        plan = (tuple(kernels), ws, counters, np.int32(shape.M), cfg.vec_elems * 2, cfg)
        self._plans[(shape.M, shape.d, shape.n, dev)] = plan
        return plan

    def gemv(self, table, W, x, out=None):
        torch_mod = None
        if not isinstance(W, cp.ndarray):
            if type(W).__module__.split(".")[0] == "torch":
                import torch as torch_mod
            else:
                raise UsageError(f"W must be a CuPy array or a torch tensor, got {type(W).__name__}")
            torch_out = out
            for name, t in (("W", W), ("x", x), ("out", out)):
                if t is not None and not isinstance(t, torch_mod.Tensor):
                    raise UsageError(f"{name} must be a torch tensor like W, got {type(t).__name__}")
                if t is not None and not t.is_cuda:
                    raise UsageError(f"{name} is on the CPU; gemv needs CUDA tensors")
            for name, t, want in (("W", W, torch_mod.float16), ("x", x, torch_mod.float16),
                                  ("out", out, torch_mod.float32)):
                if t is not None and t.dtype != want:
                    raise UsageError(f"{name} must be {str(want).replace('torch.', '')}, got {str(t.dtype).replace('torch.', '')}")
            if out is None:
                rows = W.shape[0] if W.dim() == 2 else 0
                ysh = (rows,) if x.dim() == 1 or (x.dim() == 2 and x.shape[0] == 1) else (x.shape[0], rows)
                torch_out = torch_mod.empty(ysh, dtype=torch_mod.float32, device=W.device)
            sptr = torch_mod.cuda.current_stream(W.device).cuda_stream
            stream = self._streams.get(sptr)
            if stream is None:
                stream = self._streams[sptr] = cp.cuda.ExternalStream(sptr, W.device.index)
            with stream:  # the consumer stream is torch's own: DLPack adds no cross-stream wait (capture-safe)
                # detach(): a view of the same memory; DLPack refuses tensors that require grad, and
                # gemv records no gradient (the PyTorch drop-in uses F.linear whenever one is needed).
                W, x, out = cp.from_dlpack(W.detach()), cp.from_dlpack(x.detach()), cp.from_dlpack(torch_out)
        else:
            stream = None
        # The checks below read cheap attributes (dtype char, the contiguity bit, the pointer's device)
        # rather than building Flags/Device objects: this is the per-call hot path.
        if W.dtype.char != "e" or x.dtype.char != "e":
            raise UsageError(f"W and x must be float16, got {W.dtype} and {x.dtype}")
        if W.ndim != 2:
            raise UsageError(f"W must be 2-D [M, d], got shape {W.shape}")
        M, d = W.shape
        xs = x.shape
        if len(xs) == 2 and xs[0] == 1:
            x = x.reshape(-1)
            xs = x.shape
        n = 1 if len(xs) == 1 else xs[0]
        if len(xs) not in (1, 2) or xs[-1] != d or not 1 <= n <= 16:
            raise UsageError(f"x must have shape [{d}] or [n, {d}] with n <= 16 to match W {tuple(W.shape)}, "
                             f"got {tuple(xs)}")
        if not (_contiguous(W) and _contiguous(x)):
            raise UsageError("W and x must be C-contiguous (row-major, no strided views)")
        wd, xd = W.data, x.data
        dev = wd.device_id
        if xd.device_id != dev or (out is not None and out.data.device_id != dev):
            raise UsageError(f"W, x and out must be on one device (W on {dev}, x on {xd.device_id})")
        plan = self._plans.get((M, d, n, dev)) or self._plan(table, Shape(M, d, n), dev)
        kernels, ws, counters, M32, align, _ = plan
        if wd.ptr % align or xd.ptr % align:
            raise UsageError(f"W and x must be {align}-byte aligned for the tuned kernel "
                             f"(is W an offset view?)")
        if out is None:
            out = cp.empty((M,) if n == 1 else (n, M), dtype=cp.float32)
        elif out.dtype.char != "f" or out.size != n * M or not _contiguous(out):
            raise UsageError(f"out must be a contiguous float32 array of {n * M} elements")
        if stream is None:
            for fn, grid, block in kernels:
                fn(grid, block, (W, x, out, ws, counters, M32))
            return out
        with stream:
            for fn, grid, block in kernels:
                fn(grid, block, (W, x, out, ws, counters, M32))
        return torch_out


def _contiguous(a) -> bool:
    """C-contiguity from CuPy's cached bit where it is exposed, else through ``flags``."""
    try:
        return a._c_contiguous
    except AttributeError:
        return a.flags.c_contiguous


def dispatch_overhead(table, shape: Shape, calls: int = 200, repeats: int = 15) -> dict[str, float]:
    """CPU time per call of ``table.gemv(W, x, out=out)`` against launching the same kernels bare
    (``RawKernel(grid, block, args)``), interleaved over repeats; medians in µs and their ratio."""
    import statistics
    import time

    xs = (shape.d,) if shape.n == 1 else (shape.n, shape.d)
    W = cp.ones((shape.M, shape.d), dtype=cp.float16)
    x = cp.ones(xs, dtype=cp.float16)
    out = cp.empty((shape.M,) if shape.n == 1 else (shape.n, shape.M), dtype=cp.float32)
    table.gemv(W, x, out=out)                       # builds the plan (compile, module, workspaces)
    disp = table._dispatch
    kernels, ws, counters, M32, _, _ = disp._plans[(shape.M, shape.d, shape.n, W.device.id)]
    args = (W, x, out, ws, counters, M32)

    def bare() -> None:
        for fn, grid, block in kernels:
            fn(grid, block, args)

    def tuned() -> None:
        table.gemv(W, x, out=out)

    per: dict[str, list[float]] = {"bare": [], "table": []}
    for _ in range(repeats):
        for name, f in (("bare", bare), ("table", tuned)):
            cp.cuda.Device().synchronize()
            t0 = time.perf_counter()
            for _ in range(calls):
                f()
            per[name].append((time.perf_counter() - t0) / calls * 1e6)
    cp.cuda.Device().synchronize()
    b, t = statistics.median(per["bare"]), statistics.median(per["table"])
    return {"bare_launch_us": b, "table_gemv_us": t, "dispatch_ratio": t / b}
