"""FP8 weights (``Shape.weights``: E4M3 codes and FP32 scales, ``gemvtune.kernels.fp8``) as the CUDA runner's buffers
and its verification hold them, and the error bound an FP8 kernel is held to. Pure NumPy where it is made (tested
on the CPU); ``dequantized64`` works on NumPy and CuPy arrays alike.

**The random weight.** Uniform in [-1, 1), times 2^k per 128x128 block (k uniform in -3..3) and 2^j per row (j uniform
in -2..2), the same for both layouts, then ``quantize``d: the scales of blocks and of rows differ, so a kernel that
drops a scale or reads another row's or block's is off by a factor of 2 or more somewhere, far past the bound. At most ``TILE_ROWS`` rows are drawn
and quantised (a multiple of 128: rows and blocks repeat whole); a taller weight repeats them, so a large shape costs
one tile's quantisation, and every row is still checked against its own reference.

**The bound** (``fp8_error_bound``), on ||y - ref|| / ||s|| as ``Verifier.check`` measures it, ref the float64 product
of the *exactly* dequantised W (code x scale in float64) and x. The kernel's terms: (1) cvt.rn.f16x2.e4m3x2 is exact
(every E4M3 value is an FP16 one), and a code (4 significant bits) times an FP16 or BF16 x (11 or 8) is exact in
FP32, so (2) only the FP32 additions round: ``error_bound("fp32", d, out)`` (8 u sqrt(d), u = 2^-24, which also
covers the store to a 16-bit y); (3) the scale: with row scales, one FP32 product per output, relative u of |t_i|,
so at most u ||t|| ~ u ||s|| over the rows; with block scales each vector's partial sum enters its accumulator
through one fmaf (partial x scale + sum, one rounding: an addition of (2)). The bound adds 2u for (3) (2x margin)."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..kernels.fp8 import BLOCK, Fp8Weight, decode_e4m3, expand_scales, quantize
from ..kernels.shapes import Shape
from .timing import error_bound

TILE_ROWS = 1024    # rows drawn and quantised at most (a multiple of BLOCK); a taller weight repeats them
EXPONENTS = (-3, 3)  # each 128x128 block's magnitude 2^k, k uniform in this range
ROW_EXPONENTS = (-2, 2)  # and each row's 2^j
_TABLE = decode_e4m3(np.arange(256, dtype=np.uint8))   # code -> float32 value (0x7F, 0xFF: NaN, never drawn)


def fp8_weight(shape: Shape, seed: int) -> Fp8Weight:
    """The random FP8 weight of ``shape`` (its ``fp8_layout``), from ``seed`` (module docstring)."""
    if not shape.weights:
        raise ValueError(f"{shape} has no FP8 weights")
    rng = np.random.default_rng(seed)
    rows = min(shape.M, TILE_ROWS)
    w = rng.uniform(-1.0, 1.0, (rows, shape.d)).astype(np.float32)
    mag = np.exp2(rng.integers(EXPONENTS[0], EXPONENTS[1] + 1, (-(-rows // BLOCK), -(-shape.d // BLOCK))))
    w *= np.repeat(np.repeat(mag.astype(np.float32), BLOCK, 0), BLOCK, 1)[:rows, :shape.d]
    w *= np.exp2(rng.integers(ROW_EXPONENTS[0], ROW_EXPONENTS[1] + 1, rows)).astype(np.float32)[:, None]
    return tiled(quantize(w, shape.fp8_layout), shape.M)


def tiled(q: Fp8Weight, M: int) -> Fp8Weight:
    """``q`` ([r, d], r a multiple of 128 or M itself) repeated down to M rows, its scales with it."""
    r, _ = q.shape
    if r == M:
        return q
    if r % BLOCK or r > M:
        raise ValueError(f"a tile of {r} rows cannot be repeated to {M} (a multiple of {BLOCK} rows, at most M)")
    reps = -(-M // r)
    codes = np.tile(q.codes, (reps, 1))[:M]
    if q.layout == "row":
        scales = np.tile(q.scales, reps)[:M]
    else:
        scales = np.tile(q.scales, (reps, 1))[:-(-M // BLOCK)]
    return Fp8Weight(codes, scales, q.layout)


def dequantized64(codes: Any, scales: Any, layout: str, xp: Any = np) -> Any:
    """float64 [M, d]: each code's value times its scale, exact (``xp``: numpy, or cupy for device arrays)."""
    M, d = codes.shape
    vals = xp.take(xp.asarray(_TABLE), codes).astype(xp.float64)
    return vals * expand_scales(scales.astype(xp.float64), layout, (M, d), xp)


def fp8_error_bound(d: int, out: str = "fp32") -> float:
    """The bound on a correct FP8 kernel's relative error (module docstring: FP32 additions and the store, then 2u
    for the scale products)."""
    return error_bound("fp32", d, out) + 2.0 * 2.0**-24
