"""Run-time dispatch for ``Table.gemv`` (part of the CUDA runner package, the only place that imports cupy)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...compile import compile_variant
from ...errors import NoDeviceError
from ...shapes import Shape
from ._cupy import cp, cuda_available


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
                kernels.append((self._modules[key], grid, block))
            nws, ncount = cfg.workspace(shape)
            ws = cp.empty(nws, dtype=cp.float32)
            counters = cp.zeros(ncount, dtype=cp.uint32)
        plan = (tuple(kernels), ws, counters, np.int32(shape.M), cfg.vec_elems * 2, cfg)
        self._plans[(shape.M, shape.d, shape.n, dev)] = plan
        return plan

    def gemv(self, table, W, x, out=None):
        from ...errors import UsageError

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
                W, x, out = cp.from_dlpack(W), cp.from_dlpack(x), cp.from_dlpack(torch_out)
        else:
            stream = None
        if W.dtype != cp.float16 or x.dtype != cp.float16:
            raise UsageError(f"W and x must be float16, got {W.dtype} and {x.dtype}")
        if W.ndim != 2:
            raise UsageError(f"W must be 2-D [M, d], got shape {W.shape}")
        M, d = W.shape
        if x.ndim == 2 and x.shape[0] == 1:
            x = x.reshape(-1)
        n = 1 if x.ndim == 1 else x.shape[0]
        if x.ndim not in (1, 2) or x.shape[-1] != d or not 1 <= n <= 16:
            raise UsageError(f"x must have shape [{d}] or [n, {d}] with n <= 16 to match W {tuple(W.shape)}, "
                             f"got {tuple(x.shape)}")
        if not W.flags.c_contiguous or not x.flags.c_contiguous:
            raise UsageError("W and x must be C-contiguous (row-major, no strided views)")
        dev = W.device.id
        if x.device.id != dev or (out is not None and out.device.id != dev):
            raise UsageError(f"W, x and out must be on one device (W on {dev}, x on {x.device.id})")
        plan = self._plans.get((M, d, n, dev)) or self._plan(table, Shape(M, d, n), dev)
        kernels, ws, counters, M32, align, _ = plan
        if W.data.ptr % align or x.data.ptr % align:
            raise UsageError(f"W and x must be {align}-byte aligned for the tuned kernel "
                             f"(is W an offset view?)")
        yshape = (M,) if n == 1 else (n, M)
        if out is None:
            out = cp.empty(yshape, dtype=cp.float32)
        elif out.dtype != cp.float32 or out.size != n * M or not out.flags.c_contiguous:
            raise UsageError(f"out must be a contiguous float32 array of {n * M} elements")
        if stream is None:
            for fn, grid, block in kernels:
                fn(grid, block, (W, x, out, ws, counters, M32))
            return out
        with stream:
            for fn, grid, block in kernels:
                fn(grid, block, (W, x, out, ws, counters, M32))
        return torch_out
