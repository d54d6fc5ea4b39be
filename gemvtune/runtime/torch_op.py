"""The tuned GEMV as a PyTorch operator, ``torch.ops.gemvtune.linear``, and the lean eager launch path
behind it and behind ``Table.gemv`` on torch tensors.

``gemvtune::linear(Tensor x, Tensor weight, Tensor? bias, int table) -> Tensor`` computes
``F.linear(x, weight, bias)`` (FP16 or BF16 in and out, like ``nn.Linear``) with the route the table chose for
(M, d, n, dtype): the tuned kernel, bias and cast fused into its final store, launched through its
``LaunchPlan`` with raw pointers on torch's current stream (a cuBLASLt algorithm through its ``LtPlan``,
bias in the library's epilogue), or cuBLAS (``F.linear``) where the table measured cuBLAS faster. It is a ``torch.library.custom_op`` with a fake implementation, so
``torch.compile(fullgraph=True)`` traces it as one opaque op and Inductor's CUDA graphs capture its
kernels. ``table`` is the id ``register_table`` gave the table (tables are not tensors).

Eager callers (``GemvLinear`` outside ``torch.compile``) call ``run_linear`` directly: a Python-defined
custom op costs about 15 µs per call in eager mode on the H200 host (``docs/design-notes.md``),
more than a bare launch, so the eager path skips the dispatcher; both paths run the same function.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch
import torch.nn.functional as F

from ..device.ltplan import route_plan
from ..errors import UsageError
from ..kernels.epilogue import Epilogue
from ..kernels.shapes import FP8_LAYOUTS, MAX_BATCH, Shape
from .fp8linear import fallback_linear

_ALIGN = 16          # bytes: the widest load of any kernel (half8 / 16-byte W and x loads)
_TABLES: dict[int, Any] = {}
_IDS: dict[int, int] = {}
_NEXT = itertools.count(1)
# Plans by (table id, M, d, n, bias, out dtype, device, input dtype): the hot path's one dict lookup (a cuBLASLt
# algorithm's ``LtPlan`` has the same interface; a key whose algorithm the library refused is absent).
_FAST: dict[tuple, Any] = {}
# The element types the tuned kernels take, by torch dtype (anything else runs F.linear).
DTYPES = {torch.float16: "fp16", torch.bfloat16: "bf16"}
_TORCH = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# torch's current CUDA stream of a device as a raw pointer (0.1 µs; ``current_stream().cuda_stream``
# costs 8 µs on the H200 host). CPU-only builds lack it: there is no CUDA call to make there.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
    lambda dev: torch.cuda.current_stream(dev).cuda_stream)


def register_table(table: Any) -> int:
    """A small integer naming ``table`` in ``torch.ops.gemvtune.linear`` calls (kept for the process)."""
    tid = _IDS.get(id(table))
    if tid is None or _TABLES.get(tid) is not table:
        tid = next(_NEXT)
        _TABLES[tid], _IDS[id(table)] = table, tid
    return tid


def device_allows(table: Any, dev: int | None = None) -> bool:
    """Whether ``table``'s kernels may run on CUDA device ``dev`` (None: torch's current one): ``Table.check_device``
    with its name and compute capability (``gemvtune.runtime.tablegpu``: another GPU model makes every route cuBLAS).
    True where there is nothing to check (no CUDA device, or a table object without the check)."""
    check = getattr(table, "check_device", None)
    if check is None or not torch.cuda.is_available():
        return True
    if dev is None:
        dev = torch.cuda.current_device()
    return bool(check(torch.cuda.get_device_name(dev), tuple(torch.cuda.get_device_capability(dev))))


def route_flags(table: Any, M: int, d: int, max_batch: int, framework: str, weights: str = "",
                empty: bool = False) -> dict[torch.dtype, tuple[bool, ...]]:
    """Per torch dtype of x, whether an n-row call (index n, 1..max_batch; index 0 unused) of an [M, d] layer (W of
    ``weights``) runs the tuned kernel under ``table``'s route for ``framework``: constants a layer decides once and
    torch.compile reads without tracing the table. ``empty``: a zero-sized layer, never a kernel."""
    fmt = (weights,) if weights else ()   # (16-bit W: the route's arguments as before FP8, for table-like objects)
    return {tdt: (False,) + tuple(not empty and table.route(M, d, n, framework, dt, dt, *fmt).tuned
                                  for n in range(1, max_batch + 1))
            for tdt, dt in DTYPES.items()}


def plan_key(tid: int, M: int, d: int, n: int, bias: bool, out: str, dev: int, dtype: str, weights: str = "") -> tuple:
    """The key of a call's plan in ``_FAST`` (the hot paths of ``run_linear`` and ``run_fp8_linear`` spell it inline):
    16-bit W has no 9th field."""
    return (tid, M, d, n, bias, out, dev, dtype) + ((weights,) if weights else ())


def _plan(tid: int, table: Any, config: Any, M: int, d: int, n: int, bias: bool, out: str, dev: int,
          stream: int, dtype: str = "fp16", weights: str = "") -> Any:
    """The route's plan (kept in _FAST): a kernel's ``LaunchPlan`` or a cuBLASLt algorithm's ``LtPlan``
    (same launch interface), or None where the library refuses its algorithm or the table's kernels may not run on
    ``dev`` (``device_allows``): cuBLAS runs. ``weights``: W's FP8 format ("" for 16-bit W: the key has no 9th
    field then)."""
    key = plan_key(tid, M, d, n, bias, out, dev, dtype, weights)
    plan = _FAST.get(key)
    if plan is None:
        if not device_allows(table, dev):
            return None
        plan = route_plan(config, Shape(M, d, n, dtype, weights), Epilogue(out, bias), dev, stream)
        if plan is not None:
            _FAST[key] = plan
    return plan


def run_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, table: Any,
               tid: int | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` through the table's route. The caller has checked what does not
    change between calls (FP16 CUDA tensors on one device, weight contiguous [M, d], bias contiguous);
    this checks the rest and falls back to ``F.linear`` for anything the tuned kernels cannot take."""
    M, d = weight.shape
    n = x.numel() // d if d else 0
    if not 1 <= n <= MAX_BATCH:
        return F.linear(x, weight, bias)
    if tid is None:
        tid = register_table(table)
    dev = x.get_device()
    has_bias = bias is not None
    dt = DTYPES[weight.dtype]
    plan = _FAST.get((tid, M, d, n, has_bias, dt, dev, dt))     # the hot path: one lookup
    stream = _raw_stream(dev)
    if plan is None:
        route = table.route(M, d, n, "torch", dt, dt)
        if route.kind != "tuned":
            return F.linear(x, weight, bias)
        plan = _plan(tid, table, route.config, M, d, n, has_bias, dt, dev, stream, dt)
        if plan is None:
            return F.linear(x, weight, bias)
    if not x.is_contiguous():
        x = x.contiguous()
    wp, xp = weight.data_ptr(), x.data_ptr()
    if wp % _ALIGN:
        return F.linear(x, weight, bias)
    if xp % _ALIGN:
        x = x.clone()
        xp = x.data_ptr()
    y = torch.empty(x.shape[:-1] + (M,), dtype=x.dtype, device=x.device)
    plan.launch(wp, xp, y.data_ptr(), bias.data_ptr() if bias is not None else 0, stream)
    return y


@torch.library.custom_op("gemvtune::linear", mutates_args=())
def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, table: int) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` through the route of table ``table`` (an id from ``register_table``)."""
    if table not in _TABLES:
        raise UsageError(f"gemvtune::linear: no table registered under id {table}")
    if weight.dim() != 2 or x.shape[-1] != weight.shape[1]:
        raise UsageError(f"gemvtune::linear: x {tuple(x.shape)} does not match weight {tuple(weight.shape)}")
    ok = (x.is_cuda and x.dtype in DTYPES and weight.dtype == x.dtype and weight.device == x.device
          and weight.is_contiguous() and (bias is None or (bias.dtype == x.dtype and bias.is_contiguous()
                                                           and bias.device == x.device)))
    if not ok:
        return F.linear(x, weight, bias)
    return run_linear(x, weight, bias, _TABLES[table], table)


def run_fp8_linear(x: torch.Tensor, codes: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None,
                   weights: str, table: Any, tid: int | None = None) -> torch.Tensor:
    """``F.linear(x, codes x scales, bias)`` for FP8 weights of format ``weights`` ("e4m3-row", "e4m3-b128") through
    the table's route: the tuned FP8 kernel, or dequantize + F.linear (``fp8linear.fallback_linear``) where the table
    measured that faster, lacks the shape, or anything here cannot take the call. The caller has checked what does not
    change between calls (``fp8torch.check``: codes uint8 or float8_e4m3fn, contiguous [M, d], 16-byte aligned;
    scales float32, contiguous, of the layout's shape, finite and positive; all on x's device); x is FP16 or BF16."""
    layout = FP8_LAYOUTS[weights]
    M, d = codes.shape
    n = x.numel() // d if d else 0
    dt = DTYPES.get(x.dtype)
    if dt is None or not 1 <= n <= MAX_BATCH or (bias is not None and bias.dtype != x.dtype):
        return fallback_linear(x, codes, scales, layout, bias)
    if tid is None:
        tid = register_table(table)
    dev = x.get_device()
    has_bias = bias is not None
    plan = _FAST.get((tid, M, d, n, has_bias, dt, dev, dt, weights))     # the hot path: one lookup
    stream = _raw_stream(dev)
    if plan is None:
        route = table.route(M, d, n, "torch", dt, dt, weights)
        if route.kind != "tuned":
            return fallback_linear(x, codes, scales, layout, bias)
        plan = _plan(tid, table, route.config, M, d, n, has_bias, dt, dev, stream, dt, weights)
        if plan is None:
            return fallback_linear(x, codes, scales, layout, bias)
    if not x.is_contiguous():
        x = x.contiguous()
    if bias is not None and not bias.is_contiguous():
        bias = bias.contiguous()
    xp = x.data_ptr()
    if xp % _ALIGN:
        x = x.clone()
        xp = x.data_ptr()
    y = torch.empty(x.shape[:-1] + (M,), dtype=x.dtype, device=x.device)
    plan.launch(codes.data_ptr(), xp, y.data_ptr(), bias.data_ptr() if bias is not None else 0, stream,
                scales.data_ptr())
    return y


@torch.library.custom_op("gemvtune::linear_fp8", mutates_args=())
def linear_fp8(x: torch.Tensor, codes: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None, weights: str,
               table: int) -> torch.Tensor:
    """``run_fp8_linear`` through table ``table`` (an id from ``register_table``): what ``torch.compile`` traces for
    an FP8 layer whose route is a tuned kernel (``GemvFp8Linear``)."""
    if table not in _TABLES:
        raise UsageError(f"gemvtune::linear_fp8: no table registered under id {table}")
    if codes.dim() != 2 or x.shape[-1] != codes.shape[1]:
        raise UsageError(f"gemvtune::linear_fp8: x {tuple(x.shape)} does not match the weight {tuple(codes.shape)}")
    return run_fp8_linear(x, codes, scales, bias, weights, _TABLES[table], table)


@linear_fp8.register_fake
def _linear_fp8_fake(x: torch.Tensor, codes: torch.Tensor, scales: torch.Tensor, bias: torch.Tensor | None,
                     weights: str, table: int) -> torch.Tensor:
    torch._check(codes.dim() == 2, lambda: f"gemvtune::linear_fp8: the weight must be 2-D, got {codes.dim()}-D")
    torch._check(x.dim() >= 1 and x.shape[-1] == codes.shape[1],
                 lambda: f"gemvtune::linear_fp8: x {tuple(x.shape)} does not match the weight {tuple(codes.shape)}")
    return x.new_empty((*x.shape[:-1], codes.shape[0]))


@linear.register_fake
def _linear_fake(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, table: int) -> torch.Tensor:
    torch._check(weight.dim() == 2, lambda: f"gemvtune::linear: weight must be 2-D, got {weight.dim()}-D")
    torch._check(x.dim() >= 1 and x.shape[-1] == weight.shape[1],
                 lambda: f"gemvtune::linear: x {tuple(x.shape)} does not match weight {tuple(weight.shape)}")
    if bias is not None:
        torch._check(bias.dim() == 1 and bias.shape[0] == weight.shape[0],
                     lambda: f"gemvtune::linear: bias {tuple(bias.shape)} does not match weight {tuple(weight.shape)}")
    return x.new_empty((*x.shape[:-1], weight.shape[0]))


def _dtype_name(dt: Any) -> str:
    return str(dt).replace("torch.", "")


def check_cuda_tensors(W: Any, x: Any, out: Any, bias: Any) -> None:
    """W, x (and out, bias if given) are torch tensors on a CUDA device: one UsageError if not. ``Table.gemv``
    calls it before anything else (its check of the table's GPU among them), so a CPU tensor is one error and
    never a warning first."""
    for name, t in (("W", W), ("x", x), ("out", out), ("bias", bias)):
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise UsageError(f"{name} must be a torch tensor" + (" like W" if name != "W" else "")
                             + f", got {type(t).__name__}")
        if not t.is_cuda:
            raise UsageError(f"{name} must be a CUDA tensor, got one on {t.device} (gemv runs tuned GPU kernels: "
                             "move it with .cuda(), or use torch.nn.functional.linear on the CPU)")


def table_gemv(table: Any, W: torch.Tensor, x: torch.Tensor, out: torch.Tensor | None, bias: torch.Tensor | None,
               out_dtype: str) -> torch.Tensor:
    """``Table.gemv`` on torch tensors: y [M] (x [d]) or [n, M] (x [n, d]) of ``out_dtype`` (fp32, or the
    inputs' dtype); W, x and bias all FP16 or all BF16."""
    check_cuda_tensors(W, x, out, bias)
    dt = DTYPES.get(W.dtype)
    if dt is None:
        raise UsageError(f"W must be float16 or bfloat16, got {_dtype_name(W.dtype)}")
    if out_dtype not in ("fp32", dt):
        raise UsageError(f"out_dtype must be fp32 or {dt} (W's dtype), got {out_dtype!r}")
    want_out, want_in = _TORCH[out_dtype], _TORCH[dt]
    for name, t, want in (("x", x, want_in), ("bias", bias, want_in), ("out", out, want_out)):
        if t is not None and t.dtype != want:
            raise UsageError(f"{name} must be {_dtype_name(want)}, got {_dtype_name(t.dtype)}")
    if W.dim() != 2:
        raise UsageError(f"W must be 2-D [M, d], got shape {tuple(W.shape)}")
    M, d = W.shape
    if x.dim() == 2 and x.shape[0] == 1:
        x = x.reshape(-1)
    n = 1 if x.dim() == 1 else x.shape[0]
    if x.dim() not in (1, 2) or x.shape[-1] != d or not 1 <= n <= MAX_BATCH:
        raise UsageError(f"x must have shape [{d}] or [n, {d}] with n <= {MAX_BATCH} to match W {tuple(W.shape)}, "
                         f"got {tuple(x.shape)}")
    if not (W.is_contiguous() and x.is_contiguous()):
        raise UsageError("W and x must be C-contiguous (row-major, no strided views)")
    if x.device != W.device or (out is not None and out.device != W.device) or (bias is not None and bias.device != W.device):
        raise UsageError(f"W, x, bias and out must be on one device (W on {W.device}, x on {x.device})")
    if bias is not None and (bias.shape != (M,) or not bias.is_contiguous()):
        raise UsageError(f"bias must be a contiguous [{M}] tensor, got {tuple(bias.shape)}")
    ysh = (M,) if n == 1 else (n, M)
    if out is not None and (out.numel() != n * M or not out.is_contiguous()):
        raise UsageError(f"out must be a contiguous {_dtype_name(want_out)} tensor of {n * M} elements")
    W, x = W.detach(), x.detach()
    route = table.route(M, d, n, "torch", out_dtype, dt)
    if route.kind != "tuned":
        y = F.linear(x, W, bias)
        if out is None:
            return y.to(want_out)
        out.view(ysh).copy_(y)
        return out
    if W.data_ptr() % _ALIGN or x.data_ptr() % _ALIGN:
        raise UsageError(f"W and x must be {_ALIGN}-byte aligned for the tuned kernel (is W an offset view?)")
    dev = W.get_device()
    stream = _raw_stream(dev)
    plan = _plan(register_table(table), table, route.config, M, d, n, bias is not None, out_dtype, dev, stream, dt)
    if plan is None:   # the library refused the table's cuBLASLt algorithm for this call (warned once)
        y = F.linear(x, W, bias)
        if out is None:
            return y.to(want_out)
        out.view(ysh).copy_(y)
        return out
    if out is None:
        out = torch.empty(ysh, dtype=want_out, device=W.device)
    plan.launch(W.data_ptr(), x.data_ptr(), out.data_ptr(), bias.data_ptr() if bias is not None else 0, stream)
    return out


def fp8_layout_of(scales: torch.Tensor, M: int, d: int) -> str:
    """The FP8 format (``Shape.weights``) whose scales have ``scales``' shape for W [M, d] ("" if none has)."""
    if tuple(scales.shape) in ((M,), (M, 1)):
        return "e4m3-row"
    if tuple(scales.shape) == (-(-M // 128), -(-d // 128)):
        return "e4m3-b128"
    return ""


def table_gemv_fp8(table: Any, W: torch.Tensor, scales: torch.Tensor, x: torch.Tensor, out: torch.Tensor | None,
                   bias: torch.Tensor | None, out_dtype: str) -> torch.Tensor:
    """``Table.gemv`` of FP8 weights on torch tensors: codes W [M, d] (float8_e4m3fn or uint8) and their float32
    ``scales`` ([M] or [M, 1]: per row; [ceil(M/128), ceil(d/128)]: per 128x128 block); x [d] or [n, d] FP16 or BF16;
    y of ``out_dtype`` (the inputs' dtype, or fp32: computed in x's dtype, then cast). Every input is checked: one
    UsageError naming what is wrong (``fp8torch.check``), never a wrong answer."""
    from .fp8torch import check_once

    check_cuda_tensors(scales, x, out, bias)
    if W.dim() != 2:
        raise UsageError(f"W must be 2-D [M, d] E4M3 codes, got shape {tuple(W.shape)}")
    M, d = W.shape
    weights = fp8_layout_of(scales, M, d)
    if not weights:
        raise UsageError(f"scales of shape {tuple(scales.shape)} fit neither layout of W {tuple(W.shape)}: [{M}] per "
                         f"row or [{-(-M // 128)}, {-(-d // 128)}] per 128x128 block")
    from ..kernels.shapes import FP8_LAYOUTS

    flat = scales.reshape(-1) if weights == "e4m3-row" else scales
    why = check_once(W, scales, FP8_LAYOUTS[weights], M, d, checked=flat)   # per pair of tensors, not per call
    if why:
        raise UsageError(f"FP8 weights: {why}")
    dt = DTYPES.get(x.dtype)
    if dt is None:
        raise UsageError(f"x must be float16 or bfloat16 with FP8 weights, got {_dtype_name(x.dtype)}")
    if out_dtype not in ("fp32", dt):
        raise UsageError(f"out_dtype must be fp32 or {dt} (x's dtype), got {out_dtype!r}")
    if bias is not None and (bias.dtype != x.dtype or bias.shape != (M,) or bias.device != W.device):
        raise UsageError(f"bias must be a [{M}] tensor of x's dtype on W's device")
    if x.dim() == 2 and x.shape[0] == 1:
        x = x.reshape(-1)
    n = 1 if x.dim() == 1 else x.shape[0]
    if x.dim() not in (1, 2) or x.shape[-1] != d or not 1 <= n <= MAX_BATCH or x.device != W.device:
        raise UsageError(f"x must have shape [{d}] or [n, {d}] with n <= {MAX_BATCH} on W's device to match W "
                         f"{tuple(W.shape)}, got {tuple(x.shape)} on {x.device}")
    ysh = (M,) if n == 1 else (n, M)
    want = _TORCH[out_dtype]
    if out is not None and (out.numel() != n * M or not out.is_contiguous() or out.dtype != want):
        raise UsageError(f"out must be a contiguous {_dtype_name(want)} tensor of {n * M} elements")
    y = run_fp8_linear(x.detach().reshape(n, d), W.detach(), flat.detach(), bias, weights, table).view(ysh)
    if out is None:
        return y.to(want)
    out.view(ysh).copy_(y)
    return out


def torch_device(t: Any) -> tuple[str, tuple[int, int] | None]:
    """(name, compute capability) of a tensor's CUDA device (``Table.gemv``'s check of the table's GPU)."""
    if not t.is_cuda:
        return "cpu", None
    major, minor = torch.cuda.get_device_capability(t.device)
    return torch.cuda.get_device_name(t.device), (int(major), int(minor))
