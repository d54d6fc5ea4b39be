"""Run-time dispatch of ``Table.gemv`` on CuPy arrays (torch tensors go through ``gemvtune.runtime.torch_op``):
the table's route per (M, d, n), then the variant's ``LaunchPlan`` (or, for a cuBLASLt algorithm, its
``LtPlan``: ``gemvtune.device.ltplan.route_plan``) with raw pointers on CuPy's current stream, or
``cupy.matmul`` where the table measured cuBLAS faster, lacks the shape, or the library refuses the algorithm."""

from __future__ import annotations

from typing import Any, Literal

from ..errors import NoDeviceError, UsageError
from ..kernels.epilogue import Epilogue
from ..kernels.shapes import MAX_BATCH, Shape
from ._cupy import cp, cuda_available
from .ltplan import route_plan
from .plan import LaunchPlan

_OUT = {"fp32": "f", "fp16": "e"}


def check_arrays(W: Any, x: Any, out: Any = None, bias: Any = None) -> None:
    """W, x (and out, bias if given) are CuPy arrays (device memory): one UsageError if not. Needs no device:
    ``Table.gemv`` calls it before it asks for one or checks the table's GPU, so a NumPy array (host memory)
    is one error, never a warning or a missing-device error first."""
    nd = cp.ndarray if cp is not None else ()
    for name, t in (("W", W), ("x", x), ("out", out), ("bias", bias)):
        if t is not None and not isinstance(t, nd):
            where = " (host memory)" if type(t).__module__.split(".")[0] == "numpy" else ""
            raise UsageError(f"{name} must be a CUDA array (a CuPy array" + (" like W" if name != "W" else
                                                                           ", or a CUDA torch tensor")
                             + f"), got {type(t).__module__.split('.')[0]}.{type(t).__name__}{where}")


class Dispatcher:
    """The hot path is a dict lookup, a few attribute checks and ``LaunchPlan.launch``."""

    def __init__(self) -> None:
        why = cuda_available()
        if why:
            raise NoDeviceError(why)
        self._plans: dict[tuple, LaunchPlan | None] = {}   # None: the route is cuBLAS (LtPlans alike: same interface)

    def device_name(self) -> str:
        p = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
        return p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])

    def device_capability(self) -> tuple[int, int]:
        """(major, minor) compute capability of CuPy's current device (``Table.check_device``: its arch)."""
        p = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
        return int(p["major"]), int(p["minor"])

    def plan(self, table: Any, M: int, d: int, n: int, bias: bool, out_dtype: str, dev: int, stream: int) -> LaunchPlan | None:
        """The plan of an (M, d, n) call, or None when the table's route is cuBLAS."""
        key = (M, d, n, bias, out_dtype, dev)
        plan: LaunchPlan | None | Literal[False] = self._plans.get(key, False)   # False: not decided yet
        if plan is False:
            # (Table.gemv checked CuPy's current device first: a table of another GPU model routes every call to
            # cupy.matmul, and a config this device's arch cannot run is never its route: gemvtune.runtime.tablegpu)
            route = table.route(M, d, n, "cupy", out_dtype)
            plan = route_plan(route.config, Shape(M, d, n), Epilogue(out_dtype, bias), dev, stream) if route.tuned else None
            self._plans[key] = plan
        return plan

    def gemv(self, table: Any, W: Any, x: Any, out: Any = None, bias: Any = None, out_dtype: str = "fp32") -> Any:
        # The per-call hot path: exact type tests, cached attributes (dtype char, the contiguity bit,
        # the pointer's device) and one dict lookup; the slow, explaining checks run only on failure.
        nd = cp.ndarray
        if (type(W) is not nd or type(x) is not nd or (out is not None and type(out) is not nd)
                or (bias is not None and type(bias) is not nd)):
            self._explain_types(W, x, out, bias)
        want = _OUT.get(out_dtype)
        if want is None:
            raise UsageError(f"out_dtype must be fp32 or fp16, got {out_dtype!r}")
        ws_ = W.shape
        xs = x.shape
        if len(xs) == 2 and xs[0] == 1:
            x = x.reshape(-1)
            xs = x.shape
        n = 1 if len(xs) == 1 else xs[0]
        if (len(ws_) != 2 or len(xs) > 2 or xs[-1] != ws_[1] or not 1 <= n <= MAX_BATCH or W.dtype.char != "e"
                or x.dtype.char != "e" or not (_contiguous(W) and _contiguous(x))
                or (bias is not None and (bias.dtype.char != "e" or bias.shape != (ws_[0],) or not _contiguous(bias)))):
            self._explain_arrays(W, x, bias)
        M, d = ws_
        wd, xd = W.data, x.data
        dev = wd.device_id
        if xd.device_id != dev or (out is not None and out.data.device_id != dev) or (bias is not None and bias.data.device_id != dev):
            raise UsageError(f"W, x, bias and out must be on one device (W on {dev}, x on {xd.device_id})")
        if out is not None and (out.dtype.char != want or out.size != n * M or not _contiguous(out)):
            raise UsageError(f"out must be a contiguous {'float32' if out_dtype == 'fp32' else 'float16'} array of "
                             f"{n * M} elements")
        stream = cp.cuda.get_current_stream().ptr
        key = (M, d, n, bias is not None, out_dtype, dev)
        plan: LaunchPlan | None | Literal[False] = self._plans.get(key, False)   # False: not decided yet
        if plan is False:
            plan = self.plan(table, M, d, n, bias is not None, out_dtype, dev, stream)
        if plan is None:  # cuBLAS measured faster, or the table lacks the shape: FP16 result, then cast
            y = cp.matmul(x, W.T)
            if bias is not None:
                y += bias
            if out is None:
                return y.astype(cp.float32 if out_dtype == "fp32" else cp.float16, copy=False)
            out[...] = y.reshape(out.shape)
            return out
        wp, xp = wd.ptr, xd.ptr
        if wp % plan.align or xp % plan.align:
            raise UsageError(f"W and x must be {plan.align}-byte aligned for the tuned kernel (is W an offset view?)")
        if out is None:
            out = cp.empty((M,) if n == 1 else (n, M), dtype=cp.float32 if out_dtype == "fp32" else cp.float16)
        plan.launch(wp, xp, out.data.ptr, bias.data.ptr if bias is not None else 0, stream)
        return out

    @staticmethod
    def _explain_types(W: Any, x: Any, out: Any, bias: Any) -> None:
        check_arrays(W, x, out, bias)

    @staticmethod
    def _explain_arrays(W: Any, x: Any, bias: Any) -> None:
        """The one-line reason a call's W, x or bias cannot run (called only when a check failed)."""
        if W.dtype.char != "e" or x.dtype.char != "e" or (bias is not None and bias.dtype.char != "e"):
            raise UsageError(f"W, x and bias must be float16 (CuPy has no bfloat16: BF16 runs on torch tensors), got "
                             f"{W.dtype} and {x.dtype}" + (f" and {bias.dtype}" if bias is not None else ""))
        if W.ndim != 2:
            raise UsageError(f"W must be 2-D [M, d], got shape {W.shape}")
        M, d = W.shape
        xs = x.shape if not (x.ndim == 2 and x.shape[0] == 1) else x.shape[1:]
        if len(xs) not in (1, 2) or xs[-1] != d or not 1 <= (1 if len(xs) == 1 else xs[0]) <= MAX_BATCH:
            raise UsageError(f"x must have shape [{d}] or [n, {d}] with n <= {MAX_BATCH} to match W {tuple(W.shape)}, "
                             f"got {tuple(x.shape)}")
        if not (_contiguous(W) and _contiguous(x)) or (bias is not None and not _contiguous(bias)):
            raise UsageError("W, x and bias must be C-contiguous (row-major, no strided views)")
        raise UsageError(f"bias must have shape [{M}], got {tuple(bias.shape)}")


def _contiguous(a) -> bool:
    """C-contiguity from CuPy's cached bit where it is exposed, else through ``flags``."""
    try:
        return a._c_contiguous
    except AttributeError:
        return a.flags.c_contiguous
