"""FP8 weights as torch tensors: ``gemvtune.kernels.fp8``'s format (E4M3 fn codes, FP32 scales, layouts ``row`` and
``block128``) computed with torch ops on the weight's own device, in chunks of rows.

``quantize(w, layout)`` is bit-identical to ``gemvtune.kernels.fp8.quantize`` (the numpy reference, whose docstring
holds the rules) for FP16, BF16, FP32 and FP64 weights. The reference converts W to float32 first (exact for FP16
and BF16: numpy sees a BF16 weight as the float32 ``w.float()``), takes amax in float32, scale =
max(fl32(amax / 448), 2^-126) (1 for a zero row or block), and encodes the float32 quotient fl32(w / scale) once,
round to nearest even, saturating at ±448. Here: ``w.float()``, the same float32 divisions (a tensor divisor, never
a Python scalar: CUDA turns division by a CPU scalar into a product with its rounded reciprocal), clamp to ±448,
``.to(torch.float8_e4m3fn)`` (round to nearest even from float32, signed zeros kept), ``.view(torch.uint8)``.
NaN, inf and (FP64) values beyond float32's range are refused with the reference's own ``UsageError`` line.

Chunks: at most ``_CHUNK_ELEMENTS`` weight elements (a multiple of 128 rows for ``block128``) are in flight as
float32 at once, so a 128256x4096 embedding-sized weight needs its codes plus ~64 MiB temporaries, not several
full-size float32 copies.

``dequantize(codes, scales, layout, dtype)``: decode(code) × scale as one float32 product (exact code, float32
scale), then one cast to ``dtype``: what a model without a tuned kernel runs (dequantise + ``F.linear``).

``check(codes, scales, layout)``: "" when the pair meets the CUDA kernel's contract (codes ``const unsigned char*``
contiguous, 16-byte aligned, rows of d % 16 == 0 bytes; ``const float*`` scales of the layout's shape, finite and
positive, on the codes' device), else one reason line. It does not look for NaN codes (0x7F/0xFF: a full pass over
the weight) nor ask for CUDA: the caller routes a CPU tensor to the fallback anyway.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
import torch.nn.functional as F

from ..errors import UsageError
from ..kernels.fp8 import BLOCK, E4M3_MAX, LAYOUTS, MIN_SCALE, scales_shape

__all__ = ["check", "check_once", "dequantize", "quantize", "scales_shape"]

_CHUNK_ELEMENTS = 1 << 24          # weight elements per chunk (64 MiB as float32); tests lower it
_ALIGN = 16                         # bytes: the kernel's vector loads of codes
_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_CODE_DTYPES = (torch.uint8, torch.float8_e4m3fn)
_PASSED: dict[tuple[int, int], tuple[Any, Any, tuple[Any, ...]]] = {}   # check_once's pairs that passed
_PASSED_MAX = 1024


def _layout(layout: object) -> str:
    if not isinstance(layout, str) or layout not in LAYOUTS:
        raise UsageError(f"unknown FP8 scale layout {layout!r}: one of {', '.join(LAYOUTS)}")
    return layout


def _chunk_rows(M: int, d: int, layout: str) -> int:
    rows = max(1, _CHUNK_ELEMENTS // max(d, 1))
    if layout == "block128":
        rows = max(BLOCK, rows // BLOCK * BLOCK)
    return min(rows, M)


def _nonfinite_message(w: torch.Tensor) -> str:
    """The reference's refusal (``kernels.fp8._as_weight``) for a weight with a non-finite value, or one that
    overflows float32: the first such element in row-major order, found chunk by chunk."""
    M, d = w.shape
    step = _chunk_rows(M, d, "row")
    nan = any(bool(torch.isnan(w[r:r + step]).any()) for r in range(0, M, step))
    for r in range(0, M, step):
        bad = ~torch.isfinite(w[r:r + step])
        if bool(bad.any()):
            i, j = (int(v) for v in torch.nonzero(bad)[0])
            return (f"the weight holds {'NaN' if nan else 'inf'} (first non-finite at {(r + i, j)}): "
                    "it cannot be quantised")
    for r in range(0, M, step):
        bad = torch.isinf(w[r:r + step].float())
        if bool(bad.any()):
            i, j = (int(v) for v in torch.nonzero(bad)[0])
            return (f"the weight holds values beyond float32's range (first at {(r + i, j)}): "
                    "it cannot be quantised")
    return "the weight holds a value that cannot be quantised"     # pragma: no cover - called only when one does


def quantize(w: torch.Tensor, layout: str = "row") -> tuple[torch.Tensor, torch.Tensor]:
    """(codes uint8 [M, d] contiguous, scales float32 ``scales_shape(M, d, layout)``) of w [M, d] (FP16, BF16, FP32,
    or FP64 rounded to FP32 first), on w's device, bit-identical to ``gemvtune.kernels.fp8.quantize``. Refuses
    (``UsageError``) what it refuses: not 2-D, empty, not floating, NaN or inf."""
    if not isinstance(w, torch.Tensor):
        raise TypeError(f"fp8torch.quantize takes a torch.Tensor, got {type(w).__name__}")
    layout = _layout(layout)
    if w.ndim != 2 or 0 in w.shape:
        raise UsageError(f"an FP8 weight is a non-empty 2-D [M, d] array, got shape {tuple(w.shape)}")
    if w.dtype not in _FLOATS:
        raise UsageError(f"an FP8 weight is quantised from float16, bfloat16, float32 or float64, got dtype {w.dtype}")
    M, d = w.shape
    codes = torch.empty((M, d), dtype=torch.uint8, device=w.device)
    scales = torch.empty(scales_shape(M, d, layout), dtype=torch.float32, device=w.device)
    step = _chunk_rows(M, d, layout)
    with torch.no_grad():
        for r in range(0, M, step):
            w32 = w[r:r + step].to(torch.float32)          # exact, except FP64 (one rounding, as numpy's astype)
            if not bool(torch.isfinite(w32).all()):
                raise UsageError(_nonfinite_message(w))
            R = w32.shape[0]
            if layout == "row":
                amax = w32.abs().amax(dim=1)
                s = _scales(amax)
                q = w32 / s[:, None]
                scales[r:r + R] = s
            else:
                mb, db = -(-R // BLOCK), -(-d // BLOCK)
                padded = F.pad(w32, (0, db * BLOCK - d, 0, mb * BLOCK - R))     # zeros: a ragged block's amax stays
                blocks = padded.view(mb, BLOCK, db, BLOCK)
                s = _scales(blocks.abs().amax(dim=(1, 3)))
                q = (blocks / s[:, None, :, None]).view(mb * BLOCK, db * BLOCK)[:R, :d]
                scales[r // BLOCK:r // BLOCK + mb] = s
            codes[r:r + R] = q.clamp_(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).view(torch.uint8)
    return codes, scales


def _scales(amax: torch.Tensor) -> torch.Tensor:
    """max(fl32(amax / 448), 2^-126) where amax > 0, else 1: float32 division by a tensor (correctly rounded)."""
    scaled = torch.clamp_min(amax / torch.full_like(amax, E4M3_MAX), MIN_SCALE)
    return torch.where(amax > 0, scaled, torch.ones_like(scaled))


def expand_scales(scales: torch.Tensor, layout: str, r: int, R: int, d: int) -> torch.Tensor:
    """The float32 scale of each element of rows r..r+R (r a multiple of 128 for block128), [R, 1] or [R, d]."""
    if layout == "row":
        return scales[r:r + R, None]
    s = scales[r // BLOCK:-(-(r + R) // BLOCK)]
    return s.repeat_interleave(BLOCK, dim=0)[r % BLOCK:r % BLOCK + R].repeat_interleave(BLOCK, dim=1)[:, :d]


def dequantize(codes: torch.Tensor, scales: torch.Tensor, layout: str,
               dtype: torch.dtype = torch.float16) -> torch.Tensor:
    """[M, d] of ``dtype``: decode(code) × scale as one float32 product per element, then cast to ``dtype``
    (codes uint8 or float8_e4m3fn [M, d], scales float32 of the layout's shape, same device). Refuses, with a
    ``UsageError`` line, codes or scales that do not pair (alignment and contiguity do not matter here)."""
    if not isinstance(codes, torch.Tensor) or not isinstance(scales, torch.Tensor):
        raise TypeError(f"fp8torch.dequantize takes tensors, got {type(codes).__name__} and {type(scales).__name__}")
    reason = _pair_reason(codes, scales, _layout(layout))
    if reason:
        raise UsageError(reason)
    M, d = codes.shape
    c8 = codes.view(torch.float8_e4m3fn) if codes.dtype == torch.uint8 else codes
    out = torch.empty((M, d), dtype=dtype, device=codes.device)
    step = _chunk_rows(M, d, layout)
    with torch.no_grad():
        for r in range(0, M, step):
            R = min(step, M - r)
            out[r:r + R] = (c8[r:r + R].to(torch.float32) * expand_scales(scales, layout, r, R, d)).to(dtype)
    return out


def _pair_reason(codes: torch.Tensor, scales: torch.Tensor, layout: str) -> str:
    """Why codes and scales do not form an FP8 weight of ``layout`` (dtype, rank, shape, device), or ""."""
    if codes.dtype not in _CODE_DTYPES:
        return f"FP8 codes must be uint8 or float8_e4m3fn, got {codes.dtype}"
    if codes.ndim != 2 or 0 in codes.shape:
        return f"FP8 codes must be a non-empty 2-D [M, d] tensor, got shape {tuple(codes.shape)}"
    if scales.dtype != torch.float32:
        return f"FP8 scales must be float32, got {scales.dtype}"
    M, d = codes.shape
    if tuple(scales.shape) != (want := scales_shape(M, d, layout)):
        return f"FP8 {layout} scales of the {M}x{d} weight must have shape {want}, got {tuple(scales.shape)}"
    if scales.device != codes.device:
        return f"FP8 scales are on {scales.device} but the codes on {codes.device}"
    return ""


def check(codes: torch.Tensor, scales: torch.Tensor, layout: str, M: int | None = None, d: int | None = None) -> str:
    """"" when (codes, scales) can run the CUDA kernel, else one short reason line: codes not uint8/float8_e4m3fn,
    not 2-D [M, d] (M and d when given), not contiguous, not 16-byte aligned, d not a multiple of 16; scales not
    float32, of the wrong shape, not contiguous, on another device, or any NaN, inf, zero or negative; an unknown
    layout. Never raises for bad tensors (TypeError for arguments that are not tensors)."""
    if not isinstance(codes, torch.Tensor) or not isinstance(scales, torch.Tensor):
        raise TypeError(f"fp8torch.check takes tensors, got {type(codes).__name__} and {type(scales).__name__}")
    if not isinstance(layout, str) or layout not in LAYOUTS:
        return f"unknown FP8 scale layout {layout!r}: one of {', '.join(LAYOUTS)}"
    if reason := _pair_reason(codes, scales, layout):
        return reason
    rows, cols = codes.shape
    if (M is not None and rows != M) or (d is not None and cols != d):
        return f"FP8 codes are {rows}x{cols}, the layer is {M if M is not None else rows}x{d if d is not None else cols}"
    if codes.device.type == "meta":
        return "FP8 codes are on the meta device: no data"
    if not codes.is_contiguous():
        return f"FP8 codes are not contiguous (strides {tuple(codes.stride())})"
    if codes.data_ptr() % _ALIGN:
        return f"FP8 codes are not {_ALIGN}-byte aligned (address % {_ALIGN} = {codes.data_ptr() % _ALIGN})"
    if cols % _ALIGN:
        return f"d = {cols} is not a multiple of {_ALIGN} (each row of codes must start {_ALIGN}-byte aligned)"
    if not scales.is_contiguous():
        return f"FP8 scales are not contiguous (strides {tuple(scales.stride())})"
    for bad, what in ((torch.isnan(scales), "NaN"), (torch.isinf(scales), "inf"), (scales == 0, "zero"),
                      (scales < 0, "negative")):
        if bool(bad.any()):
            at = tuple(int(i) for i in torch.nonzero(bad)[0])
            return f"FP8 scale at {at} is {what}: a scale is finite and positive"
    return ""


def _state(codes: torch.Tensor, scales: torch.Tensor, layout: str, M: int | None, d: int | None) -> tuple[Any, ...]:
    """What check() reads of a pair, but the scales' values: those change only with the version counter torch bumps
    on every in-place write (to the tensor or a view of it)."""
    return (codes._version, scales._version, codes.data_ptr(), scales.data_ptr(), tuple(codes.shape),
            tuple(codes.stride()), tuple(scales.shape), tuple(scales.stride()), codes.dtype, scales.dtype,
            codes.device, scales.device, layout, M, d)


def check_once(codes: torch.Tensor, scales: torch.Tensor, layout: str, M: int | None = None, d: int | None = None,
               checked: torch.Tensor | None = None) -> str:
    """``check`` of (codes, ``checked`` or scales), remembered while both tensors live unchanged: a loop calling
    ``Table.gemv`` with the same weights pays check's scan of the scales (four reductions, each read back to the
    host, each waiting for the GPU) once, not per call. ``checked``: the view of ``scales`` that
    is checked (e.g. its flat [M] view, a new tensor each call); the memory is keyed on the caller's ``scales``,
    whose version counter the view shares. A pair that failed is checked again on every call."""
    target = scales if checked is None else checked
    key = (id(codes), id(scales))
    state = _state(codes, target, layout, M, d) + (scales._version,)
    hit = _PASSED.get(key)
    if hit is not None and hit[0]() is codes and hit[1]() is scales and hit[2] == state:
        return ""
    why = check(codes, target, layout, M, d)
    if not why:
        if len(_PASSED) >= _PASSED_MAX:
            _PASSED.clear()

        def forget(_: Any, key: tuple[int, int] = key) -> None:
            _PASSED.pop(key, None)

        _PASSED[key] = (weakref.ref(codes, forget), weakref.ref(scales, forget), state)
    return why
