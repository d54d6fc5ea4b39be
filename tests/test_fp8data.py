"""The CUDA runner's FP8 weights and bound, on the CPU (``gemvtune.runners.fp8data``): the random weight's scales
differ per block, a tall weight repeats whole tiles, the float64 reference is the exact dequantisation, and a NumPy
emulation of the fp8gemv kernel's arithmetic (FP32 partial sums per vector, the scale per row or per block) passes
the bound while a dropped scale or a wrong block index fails it by far."""

import numpy as np
import pytest

from gemvtune.kernels.fp8 import decode_e4m3, dequantize, expand_scales
from gemvtune.kernels.shapes import Shape
from gemvtune.runners.fp8data import TILE_ROWS, dequantized64, fp8_error_bound, fp8_weight

ROW, B128 = "e4m3-row", "e4m3-b128"


@pytest.mark.parametrize("weights", [ROW, B128])
def test_the_random_weight(weights):
    s = Shape(300, 8208, 1, "fp16", weights)
    q = fp8_weight(s, 3)
    assert q.shape == (300, 8208) and q.layout == s.fp8_layout and ((q.codes & 0x7F) != 0x7F).all()
    assert (q.codes == fp8_weight(s, 3).codes).all() and not (q.codes == fp8_weight(s, 4).codes).all()
    assert q.scales.max() / q.scales.min() >= 8   # blocks of 2^-3 .. 2^3: the scales differ by far
    ref = dequantized64(q.codes, q.scales, q.layout)
    assert (ref == decode_e4m3(q.codes).astype(np.float64) * expand_scales(q.scales, q.layout, q.shape)).all()
    assert np.abs(ref - dequantize(q)).max() <= 2.0**-24 * np.abs(ref).max()


@pytest.mark.parametrize("weights", [ROW, B128])
def test_a_tall_weight_repeats_whole_tiles(weights):
    q = fp8_weight(Shape(2 * TILE_ROWS + 300, 136, 1, "fp16", weights), 1)
    assert (q.codes[:300] == q.codes[2 * TILE_ROWS:]).all() and (q.codes[:TILE_ROWS] == q.codes[TILE_ROWS:2 * TILE_ROWS]).all()
    full = expand_scales(q.scales, q.layout, q.shape)
    assert (full[:300] == full[2 * TILE_ROWS:]).all()


def _kernel(q, x, vec=16, fault=""):
    """The fp8gemv kernel's arithmetic in float32 (one thread per row, its vectors in order)."""
    vals = decode_e4m3(q.codes).astype(np.float32)
    M, d = q.shape
    parts = (vals * x.astype(np.float32)).reshape(M, d // vec, vec).sum(axis=2, dtype=np.float32)   # per vector
    if q.layout == "row":
        return parts.sum(axis=1, dtype=np.float32) * (np.float32(1) if fault == "drop" else q.scales)
    cols = np.arange(d // vec) * vec // 128
    if fault == "column":
        cols = (cols + 1) % q.scales.shape[1]
    sc = q.scales[np.arange(M)[:, None] // 128, cols[None, :]] if fault != "drop" else np.float32(1)
    return (parts * sc).sum(axis=1, dtype=np.float32)


@pytest.mark.parametrize("weights", [ROW, B128])
def test_the_kernel_s_arithmetic_passes_the_bound_and_its_faults_do_not(weights):
    s = Shape(300, 8208, 1, "bf16", weights)
    q = fp8_weight(s, 7)
    x = np.random.default_rng(1).uniform(-1, 1, s.d).astype(np.float32)   # (any x: BF16 values are FP32 ones)
    W64 = dequantized64(q.codes, q.scales, q.layout)
    ref, scale = W64 @ x.astype(np.float64), np.sqrt((W64 * W64) @ (x.astype(np.float64) ** 2))

    def relerr(y):
        return float(np.linalg.norm(y.astype(np.float64) - ref) / np.linalg.norm(scale))

    bound = fp8_error_bound(s.d)
    assert relerr(_kernel(q, x)) < bound / 4
    assert relerr(_kernel(q, x, fault="drop")) > 100 * bound
    if weights == B128:
        assert relerr(_kernel(q, x, fault="column")) > 100 * bound
