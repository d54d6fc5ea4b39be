"""FP8 weights for W8A16 GEMV, pure numpy: OCP FP8 E4M3 (the ``fn`` variant) codes and their FP32 scales.

**E4M3 fn.** One byte ``S.EEEE.MMM``, exponent bias 7, no infinities; ``S.1111.111`` (0x7F, 0xFF) is NaN, the
largest finite value is ``S.1111.110`` = 448; normals ``(8 + M)·2^(E-10)`` for E ≥ 1, subnormals ``M·2^-9``
(the smallest 2^-9, the smallest normal 2^-6). Every code is exactly a float32, so ``decode_e4m3`` is a table.

``encode_e4m3`` rounds to nearest, ties to even (the even code of the two: the one whose mantissa ends in 0),
subnormals exactly, and **saturates**: a finite value beyond ±448 and ±inf become ±448, not NaN (what a
quantiser wants: a NaN poisons every sum it enters). NaN becomes NaN (0x7F, or 0xFF with its sign bit); a zero
keeps its sign (-0.0 is 0x80). Rounding is done once, from the input's own precision (float16, 32 or 64).
PyTorch's ``x.to(torch.float8_e4m3fn)`` agrees with this code for code after clamping to ±448; without the clamp
it agrees too from the release with PyTorch PR #178817 (2026-04, "Properly saturate E4M3 on finite-overflow on
CPU/C++ conversion code": the installed 2.13 saturates finite overflow and ±inf to ±448); earlier releases gave NaN
for finite values that round past 448 (|x| > 464) and for ±inf (so ``tests/test_fp8.py`` compares after a clamp).

**Scales** (``dequant = decode(code) × scale``, a float32 product; ``quantize`` computes
``code = encode(float32(w / scale))``):

- ``row``: one scale per output row, float32 ``[M]``: ``scale[m] = amax(|W[m, :]|) / 448``.
- ``block128``: one scale per 128×128 block, float32 ``[ceil(M/128), ceil(d/128)]``, edge blocks ragged when M or d
  is not a multiple of 128 (the last block holds what is left; no padding is stored). This is the fine-grained FP8
  layout of DeepSeek-V3 and of transformers' ``FineGrainedFP8Config`` (``weight_block_size=(128, 128)``), whose
  ``weight_scale_inv`` *multiplies* the codes: transformers ``integrations/finegrained_fp8.py`` (``FP8Linear``
  allocates ``weight_scale_inv`` float32 ``[ceil(out/128), ceil(in/128)]``; ``Fp8Dequantize`` returns
  ``codes * scales``; ``Fp8Quantize`` stores ``1 / (448 / amax)``), vLLM ``model_executor/layers/quantization/fp8.py``
  (``Fp8LinearMethod.create_weights`` registers ``weight_scale_inv`` of shape ``[ceil(N/block_n), ceil(K/block_k)]``,
  "the weight_scale_inv name is intentional for deepseekv3"; its block GEMM multiplies by it) and DeepSeek-V3
  ``inference/kernel.py`` (``weight_dequant``: ``y = x * s``, edge blocks masked). "inv" names the inverse of the
  quantiser's multiplier 448/amax: the number stored is amax/448, our ``scales``. (We divide by amax/448 where
  transformers multiplies by 448/amax: a scale or a code may differ from its converter's in the last place.)
  128 is the only block size; any M and d are accepted (ragged edges), so no block size "fails to divide".

A row or block of zeros gets scale 1, never 0 (dividing by it would make NaN). A scale is never below 2^-126 (the
smallest normal float32): a block whose amax/448 would be smaller takes 2^-126, so the quotient w/scale and the
product code×scale stay exact or correctly rounded. ``Fp8Weight`` refuses scales of the wrong shape or dtype, scales
that are NaN, inf, zero or negative, and NaN codes, each with one ``UsageError`` line.

**The per-element error bound** (``elementwise_error_bound``). For an element w of a row or block with scale s,
``y = fl32(w/s)`` has |y| ≤ 448·(1 + 2^-22). Rounding y to E4M3 (``c``) errs by at most half the spacing at y:
``|c − y| ≤ 2^-4·|y|`` when |y| ≥ 2^-6 (a normal: half an ulp 2^(E-4) with 2^E ≤ |y|; saturation of |y| ≤ 448·(1+2^-22)
errs by less), ``|c − y| ≤ 2^-10`` when |y| < 2^-6 (half the subnormal spacing 2^-9). So, with the two float32
roundings (of w/s and of c·s, relative 2^-24 each, their underflow below 2^-24·s since s ≥ 2^-126):

    |w − dequant| ≤ max(2^-4·|w|, 2^-10·s) + 2^-22·(|w| + s)

i.e. relative 2^-4 of |w| for |w| ≥ 2^-6·s (|w| at least amax/28672), absolute 2^-10·s (amax/458752) below it. Over a
row or block (|w| ≤ amax = 448·s) the largest error is half the top binade's ulp, 16·s = amax/28 ≤ 2^-4·amax.

Round trips: ``quantize(dequantize(q))`` returns q's codes and scales (a scale fl32(a/448) satisfies
fl32(fl32(448·s)/448) = s, checked over every float32 significand; the codes move by at most 2^-22 relative, far
from a rounding midpoint); quantising ``codes × scale`` that is exact in float32 returns the same codes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from ..errors import UsageError

__all__ = ["BLOCK", "E4M3_MAX", "LAYOUTS", "MIN_SCALE", "Fp8Weight", "decode_e4m3", "dequantize",
           "elementwise_error_bound", "encode_e4m3", "expand_scales", "quantize", "relative_quantisation_error",
           "scales_shape"]

E4M3_MAX: Final = 448.0
BLOCK: Final = 128
LAYOUTS: Final = ("row", "block128")
MIN_SCALE: Final = 2.0**-126            # the smallest normal float32: the floor of a nonzero row's or block's scale
_MIN_NORMAL: Final = 2.0**-6            # the smallest normal E4M3
_NAN_CODE: Final = 0x7F

Codes = npt.NDArray[np.uint8]
F32 = npt.NDArray[np.float32]


def _decode_table() -> F32:
    c = np.arange(256)
    e, m = (c >> 3) & 0xF, c & 7
    mag = np.where(e == 0, m * 2.0**-9, (8 + m) * np.exp2(e - 10.0))
    mag[(c & 0x7F) == _NAN_CODE] = np.nan
    table = np.where(c & 0x80, -mag, mag).astype(np.float32)   # -0.0 at 0x80, a negative NaN at 0xFF
    table.flags.writeable = False
    return table


_DECODE: Final = _decode_table()


def encode_e4m3(x: npt.ArrayLike) -> Codes:
    """E4M3 fn codes (uint8, x's shape) of a float16, float32 or float64 array: round to nearest, ties to even,
    saturating to ±448 (finite overflow and ±inf), NaN to 0x7F/0xFF, signed zeros kept."""
    a = np.asarray(x)
    if a.dtype.kind != "f":
        raise UsageError(f"encode_e4m3 takes a float16, float32 or float64 array, got dtype {a.dtype}")
    v = a.astype(np.float64)                      # exact; every step below is exact in float64
    nan = np.isnan(v)
    mag = np.minimum(np.abs(np.where(nan, 0.0, v)), E4M3_MAX)    # saturation: 448 is a code, rounding is monotone
    e = np.where(mag < _MIN_NORMAL, -6, np.frexp(mag)[1] - 1)    # the binade, or -6 for subnormals and zero
    q = np.rint(np.ldexp(mag, 3 - e))             # 8..16 for a normal, 0..8 below: rint ties to even
    code = (8 * (e + 6) + q).astype(np.int64)     # q's carry to 16 (or 8) is the next binade's code: no special case
    code = np.where(nan, _NAN_CODE, code) | (np.signbit(v).astype(np.int64) << 7)
    return code.astype(np.uint8)


def decode_e4m3(codes: npt.ArrayLike) -> F32:
    """The float32 value of each E4M3 fn code (exact; 0x7F and 0xFF are NaN)."""
    c = np.asarray(codes)
    if c.dtype != np.uint8:
        raise UsageError(f"decode_e4m3 takes uint8 codes, got dtype {c.dtype}")
    return _DECODE[c]


def _check_layout(layout: object) -> str:
    if not isinstance(layout, str) or layout not in LAYOUTS:
        raise UsageError(f"unknown FP8 scale layout {layout!r}: one of {', '.join(LAYOUTS)}")
    return layout


def scales_shape(M: int, d: int, layout: str) -> tuple[int, ...]:
    """The shape of the scales of an [M, d] weight: ``(M,)`` for ``row``, ``(ceil(M/128), ceil(d/128))`` for
    ``block128``."""
    if _check_layout(layout) == "row":
        return (M,)
    return (-(-M // BLOCK), -(-d // BLOCK))


def expand_scales(scales: F32, layout: str, shape: tuple[int, int], xp: Any = np) -> F32:
    """Each element's scale, ``shape`` = [M, d] (a view for ``row``; edge blocks cut to size); ``xp``: numpy, or cupy
    for device arrays."""
    M, d = shape
    if _check_layout(layout) == "row":
        return xp.broadcast_to(scales[:, None], (M, d))
    return xp.repeat(xp.repeat(scales, BLOCK, axis=0), BLOCK, axis=1)[:M, :d]


def _where(mask: np.ndarray) -> str:
    return str(tuple(int(i) for i in np.argwhere(mask)[0]))


@dataclass(frozen=True, eq=False)
class Fp8Weight:
    """An FP8 weight: ``codes`` uint8 [M, d] (E4M3 fn, row-major), ``scales`` float32 (``scales_shape``), ``layout``.
    W ≈ ``dequantize(self)``. Checked on construction; the arrays are stored as read-only copies."""

    codes: Codes
    scales: F32
    layout: str

    def __post_init__(self) -> None:
        layout = _check_layout(self.layout)
        codes, scales = np.asarray(self.codes), np.asarray(self.scales)
        if codes.dtype != np.uint8 or codes.ndim != 2 or 0 in codes.shape:
            raise UsageError(f"FP8 codes must be a non-empty 2-D uint8 array [M, d], got {codes.dtype} "
                             f"of shape {codes.shape}")
        if (nan := (codes & 0x7F) == _NAN_CODE).any():
            raise UsageError(f"FP8 codes hold NaN (0x7F/0xFF) at {_where(nan)}: a weight has no NaN")
        M, d = codes.shape
        if scales.shape != (want := scales_shape(M, d, layout)):
            raise UsageError(f"FP8 {layout} scales of the {M}x{d} weight have shape {want}, got {scales.shape}")
        if scales.dtype != np.float32:
            raise UsageError(f"FP8 scales must be float32, got {scales.dtype}")
        for bad, what in ((np.isnan(scales), "NaN"), (np.isinf(scales), "inf"), (scales == 0, "zero"),
                          (scales < 0, "negative")):
            if bad.any():
                raise UsageError(f"FP8 scale at {_where(bad)} is {what}: a scale is finite and positive")
        for name, given in (("codes", codes), ("scales", scales)):
            kept = np.array(given, copy=True, order="C")
            kept.flags.writeable = False
            object.__setattr__(self, name, kept)

    @property
    def shape(self) -> tuple[int, int]:
        """[M, d]."""
        M, d = self.codes.shape
        return int(M), int(d)


def _as_weight(W: npt.ArrayLike) -> F32:
    """W as a checked float32 [M, d]: 2-D, non-empty, floating, finite."""
    w = np.asarray(W)
    if w.ndim != 2 or 0 in w.shape:
        raise UsageError(f"an FP8 weight is a non-empty 2-D [M, d] array, got shape {w.shape}")
    if w.dtype.kind != "f":
        raise UsageError(f"an FP8 weight is quantised from float16, float32 or float64, got dtype {w.dtype}")
    if (bad := ~np.isfinite(w)).any():
        what = "NaN" if np.isnan(w).any() else "inf"
        raise UsageError(f"the weight holds {what} (first non-finite at {_where(bad)}): it cannot be quantised")
    with np.errstate(over="ignore"):
        w32 = w.astype(np.float32)
    if (bad := np.isinf(w32)).any():
        raise UsageError(f"the weight holds values beyond float32's range (first at {_where(bad)}): it cannot be quantised")
    return w32


def _amax(w: F32, layout: str) -> F32:
    a = np.abs(w)
    if layout == "row":
        return a.max(axis=1)
    M, d = w.shape
    mb, db = scales_shape(M, d, layout)
    padded = np.zeros((mb * BLOCK, db * BLOCK), np.float32)   # zeros leave a ragged block's amax as it is
    padded[:M, :d] = a
    return padded.reshape(mb, BLOCK, db, BLOCK).max(axis=(1, 3))


def quantize(W: npt.ArrayLike, layout: str) -> Fp8Weight:
    """W [M, d] (float16, float32, or float64 rounded to float32 first) as E4M3 codes with ``layout`` scales
    (``row`` or ``block128``): scale = max(amax/448, 2^-126) per row or block (1 for a zero one, never 0),
    code = encode(float32(w / scale)). Refuses W that is not 2-D, empty, not floating, or holds NaN or inf."""
    w = _as_weight(W)
    amax = _amax(w, _check_layout(layout))
    scaled = np.maximum(amax / np.float32(E4M3_MAX), np.float32(MIN_SCALE))
    scales = np.where(amax > 0, scaled, np.float32(1.0)).astype(np.float32)
    codes = encode_e4m3(w / expand_scales(scales, layout, w.shape))
    return Fp8Weight(codes, scales, layout)


def dequantize(q: Fp8Weight) -> F32:
    """float32 [M, d]: decode(code) × scale, one float32 product per element (what an FP32-accumulating kernel
    reads)."""
    return (_DECODE[q.codes] * expand_scales(q.scales, q.layout, q.shape)).astype(np.float32)


def _paired(W: npt.ArrayLike, q: Fp8Weight) -> np.ndarray:
    w = _as_weight(W)
    if w.shape != q.shape:
        raise UsageError(f"the weight is {w.shape[0]}x{w.shape[1]} but the FP8 weight is {q.shape[0]}x{q.shape[1]}")
    return w.astype(np.float64)


def elementwise_error_bound(W: npt.ArrayLike, q: Fp8Weight) -> npt.NDArray[np.float64]:
    """The bound on |w − dequant| of each element of ``q = quantize(W, ...)`` (module docstring):
    max(2^-4·|w|, 2^-10·s) + 2^-22·(|w| + s), s the element's scale; float64 [M, d]."""
    w = np.abs(_paired(W, q))
    s = expand_scales(q.scales, q.layout, q.shape).astype(np.float64)
    return np.maximum(2.0**-4 * w, 2.0**-10 * s) + 2.0**-22 * (w + s)


def relative_quantisation_error(W: npt.ArrayLike, q: Fp8Weight) -> float:
    """‖W − dequantize(q)‖_F / ‖W‖_F in float64 (0.0 for a zero W that q reproduces, inf if it does not)."""
    w = _paired(W, q)
    err = float(np.linalg.norm(w - dequantize(q).astype(np.float64)))
    ref = float(np.linalg.norm(w))
    if ref == 0.0:
        return 0.0 if err == 0.0 else float("inf")
    return err / ref
