"""gemvtune.kernels.fp8: E4M3 fn encode/decode against PyTorch's float8_e4m3fn and a brute-force nearest-value
reference, the row and block128 scales against a PyTorch reference of the DeepSeek-V3 / transformers convention
(dequant = code × weight_scale_inv), the per-element error bound over several distributions, round trips, and the
one-line refusals."""

from __future__ import annotations

import numpy as np
import pytest

from gemvtune.errors import UsageError
from gemvtune.kernels.fp8 import (
    BLOCK,
    MIN_SCALE,
    Fp8Weight,
    decode_e4m3,
    dequantize,
    elementwise_error_bound,
    encode_e4m3,
    expand_scales,
    quantize,
    relative_quantisation_error,
    scales_shape,
)

ALL = np.arange(256, dtype=np.uint8)
FINITE = ALL[(ALL & 0x7F) != 0x7F]
POS = np.arange(0x7F, dtype=np.uint8)          # 0 .. 448, increasing
LAYOUTS = ("row", "block128")


def torch_fp8():
    torch = pytest.importorskip("torch", reason="the PyTorch comparisons need torch")
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip(f"torch {torch.__version__} has no float8_e4m3fn")
    return torch


def torch_encode(x: np.ndarray) -> np.ndarray:
    """PyTorch's cast after clamping to ±448 (the clamp makes it independent of the release's overflow rule)."""
    torch = torch_fp8()
    t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).clamp(-448.0, 448.0)
    return t.to(torch.float8_e4m3fn).view(torch.uint8).numpy()


def midpoints() -> np.ndarray:
    """Every midpoint between adjacent non-negative E4M3 values (448's upper one, 464, included), float32-exact."""
    v = decode_e4m3(POS).astype(np.float64)
    mids = np.append((v[:-1] + v[1:]) / 2, 464.0).astype(np.float32)
    assert np.array_equal(mids.astype(np.float64), np.append((v[:-1] + v[1:]) / 2, 464.0))
    return mids


# ---- decode and encode ------------------------------------------------------------------------------------------

def test_decode_matches_torch_on_all_256_codes():
    torch = torch_fp8()
    ref = torch.from_numpy(ALL.copy()).view(torch.float8_e4m3fn).float().numpy()
    ours = decode_e4m3(ALL)
    assert ours.dtype == np.float32
    assert np.array_equal(np.isnan(ours), np.isnan(ref))
    assert np.array_equal(ours.view(np.uint32)[FINITE], ref.view(np.uint32)[FINITE])   # bitwise: -0.0 included


def test_decode_landmarks_without_torch():
    v = decode_e4m3(ALL)
    assert [float(v[c]) for c in (0x01, 0x07, 0x08, 0x38, 0x7E)] == [2.0**-9, 7 * 2.0**-9, 2.0**-6, 1.0, 448.0]
    assert np.flatnonzero(np.isnan(v)).tolist() == [0x7F, 0xFF]
    assert v[0x80] == 0 and np.signbit(v[0x80]) and not np.signbit(v[0x00])
    assert np.all(np.diff(v[POS]) > 0) and np.array_equal(v[0x80:0xFF], -v[POS])


def test_encode_inverts_decode_on_every_code():
    assert np.array_equal(encode_e4m3(decode_e4m3(ALL)), ALL)          # NaN codes keep their sign bit, -0.0 is 0x80


def test_encode_matches_torch_on_a_dense_sweep_midpoints_and_overflow():
    # every 1021st float32 bit pattern from 0 to 1024 (both signs): each binade, float32 subnormals included
    pats = np.arange(0, np.float32(1024.0).view(np.uint32), 1021, dtype=np.uint32).view(np.float32)
    mids = midpoints()
    near = np.concatenate([np.nextafter(mids, np.float32(0)), mids, np.nextafter(mids, np.float32(np.inf))])
    beyond = np.array([448.5, 463.99997, 464.00003, 479, 480, 1e4, 3e38, np.finfo(np.float32).max, np.inf,
                       np.nan], np.float32)
    x = np.concatenate([pats, near, beyond])
    x = np.concatenate([x, -x])
    got, want = encode_e4m3(x), torch_encode(x)
    assert np.array_equal(got, want), (x[got != want][:5], got[got != want][:5], want[got != want][:5])
    # the midpoints themselves are ties, rounded both down and up (to the even code)
    lo = encode_e4m3(mids[:-1]).astype(int) - POS[:-1]
    assert set(lo.tolist()) == {0, 1}


def test_ties_go_to_the_even_code_and_saturate_at_the_top():
    mids = midpoints()
    even = np.where(POS[:-1] % 2 == 0, POS[:-1], POS[:-1] + 1)
    assert np.array_equal(encode_e4m3(mids[:-1]), even)
    assert np.array_equal(encode_e4m3(-mids[:-1]), even | 0x80)
    assert encode_e4m3(np.float32(464.0)) == 0x7E                      # the tie above 448 rounds to even: 448
    assert encode_e4m3(np.float32(2.0**-10)) == 0x00                   # half the smallest subnormal: to 0
    assert encode_e4m3(np.nextafter(np.float32(2.0**-10), np.float32(1))) == 0x01


def test_encode_matches_brute_force_nearest_without_torch():
    """The nearest finite E4M3 value by exhaustive search (ties to the even code), saturating, on log-spread
    magnitudes from far below 2^-9 to beyond 448."""
    rng = np.random.default_rng(1)
    x = (np.exp2(rng.uniform(-13, 10, 20_000)) * rng.choice([-1, 1], 20_000)).astype(np.float32)
    x = np.concatenate([x, midpoints(), -midpoints()])
    v = decode_e4m3(FINITE).astype(np.float64)
    dist = np.abs(np.clip(x.astype(np.float64), -448, 448)[:, None] - v[None, :])
    best = dist == dist.min(axis=1, keepdims=True)
    cand = np.where(best, FINITE[None, :].astype(int), 10_000)
    even = np.where(best & (FINITE[None, :] % 2 == 0), FINITE[None, :].astype(int), 10_000).min(axis=1)
    want = np.where(even < 10_000, even, cand.min(axis=1))
    got = encode_e4m3(x).astype(int)
    zero = decode_e4m3(got.astype(np.uint8)) == 0                      # ±0 are one value: compare the value there
    assert np.array_equal(got[~zero], want[~zero]) and np.all(v[np.searchsorted(FINITE, want[zero])] == 0)


def test_specials_and_input_dtypes():
    big = np.array([449, 465, 480, 1e30, np.inf], np.float32)
    assert encode_e4m3(big).tolist() == [0x7E] * 5 and encode_e4m3(-big).tolist() == [0xFE] * 5
    assert encode_e4m3(np.array([np.nan, -np.nan, 0.0, -0.0], np.float32)).tolist() == [0x7F, 0xFF, 0x00, 0x80]
    assert encode_e4m3(np.array([65504, 2.0**-24], np.float16)).tolist() == [0x7E, 0x00]
    # float64 rounds once, from its own precision: just above the 1.0/1.125 midpoint rounds up
    assert encode_e4m3(np.array([1.0625 + 2.0**-40, 1.0625])).tolist() == [0x39, 0x38]
    with pytest.raises(UsageError, match="float16, float32 or float64"):
        encode_e4m3(np.array([1, 2]))
    with pytest.raises(UsageError, match="uint8 codes"):
        decode_e4m3(np.array([1, 2], np.int16))


# ---- scales -----------------------------------------------------------------------------------------------------

def test_row_scales_and_codes_match_torch():
    torch = torch_fp8()
    W = np.random.default_rng(2).standard_normal((37, 300)).astype(np.float32)
    q = quantize(W, "row")
    s = np.abs(W).max(axis=1) / np.float32(448)
    assert q.scales.dtype == np.float32 and np.array_equal(q.scales, s)
    assert np.array_equal(q.codes, torch_encode(W / s[:, None]))
    ref = torch.from_numpy(q.codes.copy()).view(torch.float8_e4m3fn).float() * torch.from_numpy(s)[:, None]
    assert np.array_equal(dequantize(q), ref.numpy())


def torch_block_reference(W: np.ndarray):
    """DeepSeek-V3's weight_dequant convention in PyTorch, block by block, ragged edges cut: scale_inv = amax/448,
    codes = (block / scale_inv) to float8_e4m3fn, dequant = codes × scale_inv."""
    torch = torch_fp8()
    t = torch.from_numpy(W)
    M, d = W.shape
    inv = torch.ones((-(-M // 128), -(-d // 128)), dtype=torch.float32)
    codes = torch.empty((M, d), dtype=torch.float8_e4m3fn)
    for i in range(inv.shape[0]):
        for j in range(inv.shape[1]):
            blk = t[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128]
            amax = blk.abs().max()
            if amax > 0:
                inv[i, j] = amax / 448
            codes[i * 128:(i + 1) * 128, j * 128:(j + 1) * 128] = (blk / inv[i, j]).clamp(-448, 448).to(codes.dtype)
    deq = codes.float() * torch.repeat_interleave(torch.repeat_interleave(inv, 128, 0), 128, 1)[:M, :d]
    return codes.view(torch.uint8).numpy(), inv.numpy(), deq.numpy()


@pytest.mark.parametrize("shape", [(300, 200), (128, 256), (1, 129), (129, 1), (257, 384)])
def test_block128_matches_the_deepseek_convention_on_ragged_shapes(shape):
    rng = np.random.default_rng(3)
    W = (rng.standard_normal(shape) * np.exp(rng.uniform(-3, 3, (shape[0], 1)))).astype(np.float32)
    W[:, :5] = 0.0                                                   # with d = 1: all zero, every scale 1
    q = quantize(W, "block128")
    codes, inv, deq = torch_block_reference(W)
    assert q.scales.shape == scales_shape(*shape, "block128") == inv.shape
    assert np.array_equal(q.scales, inv) and np.array_equal(q.codes, codes) and np.array_equal(dequantize(q), deq)


def test_zero_rows_and_blocks_get_scale_one_and_tiny_ones_the_floor():
    W = np.zeros((200, 260), np.float32)
    W[0, 0] = -0.0
    W[150:, 130:] = 1e-40                                             # float32 subnormals: amax/448 underflows
    W[5, 140] = 3.0
    r, b = quantize(W, "row"), quantize(W, "block128")
    assert r.scales[0] == 1 and r.scales[150] == MIN_SCALE and r.scales[5] == np.float32(3) / np.float32(448)
    assert b.scales.tolist() == [[1, np.float32(3) / np.float32(448), 1], [1, MIN_SCALE, MIN_SCALE]]
    assert r.codes[0, 0] == 0x80 and np.all(dequantize(b)[150:, 130:] > 0)     # 1e-40 is not lost to the floor
    for q in (r, b):
        assert np.all(np.abs(W - dequantize(q)) <= elementwise_error_bound(W, q))


# ---- the error bound --------------------------------------------------------------------------------------------

def weights(kind: str, rng: np.random.Generator) -> np.ndarray:
    shape = (260, 390)
    if kind == "normal":
        return rng.standard_normal(shape).astype(np.float32) * np.float32(0.02)
    if kind == "heavy":                                               # Student t, 1.5 degrees of freedom
        return rng.standard_t(1.5, shape).astype(np.float32)
    if kind == "outlier_rows":
        w = rng.standard_normal(shape)
        w[rng.choice(shape[0], 7, replace=False)] *= 1e4
        w[:, rng.choice(shape[1], 3, replace=False)] *= 300            # outlier columns cross every block row
        return w.astype(np.float32)
    if kind == "zero_rows":
        w = rng.standard_normal(shape)
        w[::3] = 0.0
        return w.astype(np.float32)
    if kind == "subnormal":                                          # quotients below 2^-6: E4M3's subnormals
        w = rng.standard_normal(shape) * 10.0 ** rng.uniform(-8, -3, shape)
        w[::128, ::128] = 1.0                                         # one large value per block (and per few rows)
        return w.astype(np.float32)
    raise AssertionError(kind)


KINDS = ("normal", "heavy", "outlier_rows", "zero_rows", "subnormal")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind", KINDS)
def test_the_per_element_bound_holds_and_is_tight(kind, layout):
    W = weights(kind, np.random.default_rng(KINDS.index(kind)))
    q = quantize(W, layout)
    err = np.abs(W.astype(np.float64) - dequantize(q))
    bound = elementwise_error_bound(W, q)
    assert np.all(err <= bound), float((err / bound).max())
    assert (err / bound).max() > 0.9                                  # a half-ulp case is reached: not a vacuous bound
    if kind == "subnormal":                                           # the absolute 2^-10·s branch is exercised
        s = expand_scales(q.scales, layout, q.shape)
        assert np.any((np.abs(W) < 2.0**-6 * s) & (err > 0.5 * 2.0**-10 * s))


def test_the_bound_catches_a_one_step_error():
    W = weights("normal", np.random.default_rng(9))
    q = quantize(W, "block128")
    # the element quantised most exactly among normal quotients below 448, one code up in magnitude: off by an ulp
    # of its binade, more than 2^-4 of it
    normal = (np.abs(W) > 2.0**-6 * expand_scales(q.scales, q.layout, q.shape)) & ((q.codes & 0x7F) < 0x7E)
    ratio = np.where(normal, np.abs(W - dequantize(q)) / elementwise_error_bound(W, q), np.inf)
    i, j = np.unravel_index(np.argmin(ratio), W.shape)
    codes = q.codes.copy()
    codes[i, j] += 1
    off = Fp8Weight(codes, q.scales, q.layout)
    assert np.argwhere(np.abs(W - dequantize(off)) > elementwise_error_bound(W, off)).tolist() == [[i, j]]


def test_relative_quantisation_error():
    W = weights("normal", np.random.default_rng(4))
    for layout in LAYOUTS:
        rel = relative_quantisation_error(W, quantize(W, layout))
        assert 2.0**-7 < rel < 2.0**-4                                # E4M3 of a normal matrix: about 2-3%
    Z = np.zeros((3, 4), np.float32)
    assert relative_quantisation_error(Z, quantize(Z, "row")) == 0.0
    assert relative_quantisation_error(Z, quantize(Z + 1, "row")) == float("inf")
    with pytest.raises(UsageError, match="3x4 but the FP8 weight is 4x3"):
        relative_quantisation_error(Z, quantize(Z.T, "row"))


# ---- round trips ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind", KINDS)
def test_quantising_a_dequantised_weight_changes_nothing(kind, layout):
    q = quantize(weights(kind, np.random.default_rng(5 + KINDS.index(kind))), layout)
    again = quantize(dequantize(q), layout)
    assert np.array_equal(again.codes, q.codes) and np.array_equal(again.scales, q.scales)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_an_exactly_representable_weight_keeps_its_codes(layout):
    rng = np.random.default_rng(6)
    M, d = 259, 300
    codes = rng.choice(FINITE, (M, d)).astype(np.uint8)
    shape = scales_shape(M, d, layout)
    # scales of at most 20 significant bits: every code × scale is exact in float32
    scales = (rng.integers(1, 2**20, shape) * np.exp2(rng.integers(-40, -10, shape))).astype(np.float32)
    top = np.zeros((M, d), bool)                                      # one ±448 per row or block: amax = 448·scale
    if layout == "row":
        top[np.arange(M), rng.integers(0, d, M)] = True
    else:
        top[::BLOCK, ::BLOCK] = True
    codes[top] = rng.choice([0x7E, 0xFE], int(top.sum()))
    W = decode_e4m3(codes) * expand_scales(scales, layout, (M, d))
    assert np.array_equal(W.astype(np.float64), decode_e4m3(codes).astype(np.float64) * expand_scales(
        scales, layout, (M, d)))                                     # exact, as claimed
    q = quantize(W, layout)
    assert np.array_equal(q.scales, scales) and np.array_equal(q.codes, codes)


# ---- refusals ---------------------------------------------------------------------------------------------------

GOOD_CODES = np.ones((130, 260), np.uint8)
GOOD_ROW = np.ones(130, np.float32)


@pytest.mark.parametrize("make, match", [
    (lambda: Fp8Weight(GOOD_CODES, np.ones(131, np.float32), "row"), r"have shape \(130,\), got \(131,\)"),
    (lambda: Fp8Weight(GOOD_CODES, np.ones((1, 2), np.float32), "block128"), r"have shape \(2, 3\), got \(1, 2\)"),
    (lambda: Fp8Weight(GOOD_CODES, GOOD_ROW.astype(np.float64), "row"), "must be float32, got float64"),
    (lambda: Fp8Weight(GOOD_CODES, np.where(np.arange(130) == 7, np.nan, GOOD_ROW).astype(np.float32), "row"),
     r"scale at \(7,\) is NaN"),
    (lambda: Fp8Weight(GOOD_CODES, np.where(np.arange(130) == 8, np.inf, GOOD_ROW).astype(np.float32), "row"),
     r"scale at \(8,\) is inf"),
    (lambda: Fp8Weight(GOOD_CODES, np.where(np.arange(130) == 9, 0, GOOD_ROW).astype(np.float32), "row"),
     r"scale at \(9,\) is zero"),
    (lambda: Fp8Weight(GOOD_CODES, -GOOD_ROW, "row"), r"scale at \(0,\) is negative"),
    (lambda: Fp8Weight(np.where(np.eye(130, 260) > 0, 0xFF, 1).astype(np.uint8), GOOD_ROW, "row"),
     r"NaN \(0x7F/0xFF\) at \(0, 0\)"),
    (lambda: Fp8Weight(GOOD_CODES.astype(np.int8), GOOD_ROW, "row"), "non-empty 2-D uint8"),
    (lambda: Fp8Weight(GOOD_CODES, GOOD_ROW, "tensor"), "unknown FP8 scale layout 'tensor': one of row, block128"),
    (lambda: quantize(np.ones(5, np.float32), "row"), r"2-D \[M, d\] array, got shape \(5,\)"),
    (lambda: quantize(np.ones((2, 2, 2), np.float32), "row"), r"got shape \(2, 2, 2\)"),
    (lambda: quantize(np.ones((0, 4), np.float32), "row"), r"got shape \(0, 4\)"),
    (lambda: quantize(np.ones((2, 4), np.int32), "row"), "got dtype int32"),
    (lambda: quantize(np.where(np.eye(3) > 0, np.nan, 1.0), "row"), r"holds NaN \(first non-finite at \(0, 0\)\)"),
    (lambda: quantize(np.array([[1, 2], [3, -np.inf]], np.float32), "block128"), r"holds inf .*\(1, 1\)"),
    (lambda: quantize(np.array([[1, -1e39]]), "row"), r"beyond float32's range \(first at \(0, 1\)\)"),
    (lambda: quantize(np.ones((2, 2), np.float32), "block64"), "unknown FP8 scale layout 'block64'"),
])
def test_refusals_are_one_clear_line(make, match):
    with pytest.raises(UsageError, match=match) as e:
        make()
    assert "\n" not in str(e.value)


def test_a_weight_is_a_read_only_copy():
    codes, scales = GOOD_CODES.copy(), GOOD_ROW.copy()
    q = Fp8Weight(codes, scales, "row")
    codes[0, 0], scales[0] = 0xFF, -1.0                               # the caller's arrays change; q does not
    assert q.codes[0, 0] == 1 and q.scales[0] == 1 and q.shape == (130, 260)
    with pytest.raises(ValueError, match="read-only"):
        q.codes[0, 0] = 2
