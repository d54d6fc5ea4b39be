"""gemvtune.runtime.fp8torch on the CPU: quantize bit-identical (codes and scale bits) to the numpy reference
gemvtune.kernels.fp8.quantize for FP16, BF16, FP32 and FP64 weights with planted edge cases (signed zeros, zero rows
and blocks, subnormals, scales at the 2^-126 floor, ties between E4M3 values, quotients that round past 448), ragged
shapes, and chunks small enough that every shape takes several; the same refusals as the reference; dequantize
equal to the reference's float32 product and within its error bound; check's reason for each input the CUDA kernel
cannot take."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (fp8torch needs it)")

from gemvtune.errors import UsageError  # noqa: E402
from gemvtune.kernels import fp8  # noqa: E402
from gemvtune.runtime import fp8torch  # noqa: E402

LAYOUTS = ("row", "block128")
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
SHAPES = ((129, 144), (1, 16), (300, 700), (256, 128), (130, 257))


def reference(w: torch.Tensor, layout: str) -> fp8.Fp8Weight:
    """The numpy reference on what numpy can hold of w: FP16/FP32/FP64 as they are, BF16 as its exact float32."""
    return fp8.quantize(w.float().numpy() if w.dtype == torch.bfloat16 else w.numpy(), layout)


def assert_same(w: torch.Tensor, layout: str) -> tuple[torch.Tensor, torch.Tensor]:
    codes, scales = fp8torch.quantize(w, layout)
    ref = reference(w, layout)
    assert codes.dtype == torch.uint8 and codes.is_contiguous() and scales.dtype == torch.float32
    assert tuple(scales.shape) == fp8.scales_shape(*w.shape, layout)
    assert np.array_equal(scales.numpy().view(np.uint32), ref.scales.view(np.uint32))
    mism = np.argwhere(codes.numpy() != ref.codes)
    assert mism.size == 0, f"{len(mism)} codes differ, first at {tuple(mism[0])}"
    return codes, scales


def overflow_values(rng: np.random.Generator) -> np.ndarray:
    """float32 amaxes a whose scale fl32(a/448) makes fl32(a/scale) > 448: the quotient the clamp saturates."""
    a = rng.uniform(1.0, 2.0, 200_000).astype(np.float32)
    hit = a[(a / (a / np.float32(448.0))) > np.float32(448.0)]
    assert hit.size > 0
    return hit[:8]


def planted(M: int, d: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Random weights over ~12 binades, with edge cases planted in the first rows and a zero row and block."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((M, d)) * np.exp2(rng.integers(-6, 6, (M, d)))).astype(np.float32)
    w[0, : min(d, 8)] = [0.0, -0.0, 448.0, -448.0, 464.0, 465.0, -464.0, 1e-3][: min(d, 8)]
    if M > 1:       # scale 1 exactly (amax 448): every E4M3 midpoint is a tie, rounded to even
        v = fp8.decode_e4m3(np.arange(0x7F, dtype=np.uint8)).astype(np.float64)     # 0 .. 448
        mids = (v[:-1] + v[1:]) / 2
        row = np.resize(np.append(448.0, mids), d).astype(np.float32)
        w[1] = row * np.where(np.arange(d) % 2, -1, 1)
    if M > 2:       # subnormal range: an amax so small the scale is the 2^-126 floor
        tiny = 1e-40 if dtype != torch.float16 else 2.0**-24
        w[2] = tiny * rng.integers(-3, 4, d)
    if M > 3:       # a row whose amax's quotient rounds past 448
        w[3] = rng.uniform(-1, 1, d)
        w[3, 0] = overflow_values(rng)[0]
    if M > 4:
        w[-1] = 0.0
    w[min(M - 1, 140):, : min(d, 130)] = 0.0       # a zero (or partly zero) block
    return torch.from_numpy(w).to(dtype)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_quantize_is_bit_identical_to_the_numpy_reference_in_small_chunks(monkeypatch, shape, dtype, layout):
    monkeypatch.setattr(fp8torch, "_CHUNK_ELEMENTS", 3000)
    M, d = shape
    w = planted(M, d, dtype, seed=M * 1000 + d)
    assert fp8torch._chunk_rows(M, d, layout) < M or M == 1 or (layout == "block128" and M <= 128)
    assert_same(w, layout)


def test_the_planted_edges_are_exercised():
    codes, scales = assert_same(planted(129, 144, torch.float32, 1), "row")
    assert scales[1] == 1.0 and scales[2] == fp8.MIN_SCALE and scales[-1] == 1.0
    c = codes.numpy()
    assert c[0, 1] == 0x80 and c[0, 0] == 0x00                          # signed zeros kept
    assert (c[1, 1:] & 1).tolist().count(0) == 143                      # every tie went to the even code
    w3 = planted(129, 144, torch.float32, 1)[3].numpy()
    assert w3[0] / scales[3].numpy() > 448 and c[3, 0] == 0x7E          # a quotient past 448 saturated
    assert (((c[2] & 0x78) == 0) & ((c[2] & 7) != 0)).any()             # subnormal codes, at the scale floor


@pytest.mark.parametrize("layout", LAYOUTS)
def test_default_chunks_and_a_float64_weight(layout):
    w = planted(300, 272, torch.float32, 7).double() * (1 + 2.0**-30)   # not float32: rounded once, as numpy does
    assert_same(w, layout)
    assert_same(planted(300, 272, torch.bfloat16, 8), layout)


def test_round_trip_reproduces_codes_and_scales():
    for layout in LAYOUTS:
        codes, scales = fp8torch.quantize(planted(260, 200, torch.float32, 3), layout)
        again = fp8torch.quantize(fp8torch.dequantize(codes, scales, layout, torch.float32), layout)
        assert torch.equal(again[0], codes) and torch.equal(again[1], scales)


@pytest.mark.parametrize("bad, what", [(float("nan"), "NaN"), (float("inf"), "inf"), (-float("inf"), "inf")])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_non_finite_weights_are_refused_with_the_reference_line(monkeypatch, bad, what, dtype):
    monkeypatch.setattr(fp8torch, "_CHUNK_ELEMENTS", 1000)
    w = planted(200, 64, dtype, 2)
    w[150, 7] = bad
    w[190, 3] = float("nan") if what == "inf" else 1.0        # a NaN in a later chunk still makes the line say NaN
    with pytest.raises(UsageError) as ours:
        fp8torch.quantize(w, "row")
    with pytest.raises(UsageError) as ref:
        reference(w, "row")
    assert str(ours.value) == str(ref.value) and "(150, 7)" in str(ours.value)


def test_other_refusals():
    big = torch.ones(4, 16, dtype=torch.float64)
    big[2, 5] = 1e300
    with pytest.raises(UsageError) as ours:
        fp8torch.quantize(big)
    with pytest.raises(UsageError) as ref:
        fp8.quantize(big.numpy(), "row")
    assert str(ours.value) == str(ref.value)
    for w in (torch.ones(16), torch.ones(0, 16), torch.ones(2, 2, 16), torch.ones(4, 16, dtype=torch.int32)):
        with pytest.raises(UsageError):
            fp8torch.quantize(w)
    with pytest.raises(UsageError, match="layout"):
        fp8torch.quantize(torch.ones(4, 16), "block64")
    with pytest.raises(TypeError):
        fp8torch.quantize(np.ones((4, 16), np.float32))  # type: ignore[arg-type]


# ---- dequantize -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", LAYOUTS)
def test_dequantize_is_the_float32_product_then_one_cast(monkeypatch, layout):
    monkeypatch.setattr(fp8torch, "_CHUNK_ELEMENTS", 2000)
    w = planted(300, 144, torch.float32, 5)
    codes, scales = fp8torch.quantize(w, layout)
    ref = reference(w, layout)
    f32 = fp8torch.dequantize(codes, scales, layout, torch.float32)
    assert np.array_equal(f32.numpy().view(np.uint32), fp8.dequantize(ref).view(np.uint32))
    assert np.all(np.abs(w.double().numpy() - f32.double().numpy()) <= fp8.elementwise_error_bound(w.numpy(), ref))
    for dtype in (torch.float16, torch.bfloat16):
        out = fp8torch.dequantize(codes.view(torch.float8_e4m3fn), scales, layout, dtype)
        assert out.dtype == dtype and torch.equal(out, torch.from_numpy(fp8.dequantize(ref)).to(dtype))
    assert fp8torch.dequantize(codes, scales, layout).dtype == torch.float16


def test_dequantize_refuses_a_mismatched_pair():
    codes, scales = fp8torch.quantize(torch.ones(130, 256), "block128")
    with pytest.raises(UsageError, match=r"\(2, 2\), got \(130,\)"):
        fp8torch.dequantize(codes, torch.ones(130), "block128")
    with pytest.raises(UsageError, match="uint8 or float8_e4m3fn"):
        fp8torch.dequantize(codes.view(torch.int8), scales, "block128")
    with pytest.raises(UsageError, match="float32"):
        fp8torch.dequantize(codes, scales.double(), "block128")


# ---- check ------------------------------------------------------------------------------------------------------

def good(M=256, d=160, layout="block128"):
    return fp8torch.quantize(planted(M, d, torch.float32, 9), layout)


def test_check_accepts_a_quantized_pair():
    for layout in LAYOUTS:
        codes, scales = good(layout=layout)
        assert fp8torch.check(codes, scales, layout) == ""
        assert fp8torch.check(codes.view(torch.float8_e4m3fn), scales, layout, M=256, d=160) == ""


def _unaligned(codes: torch.Tensor) -> torch.Tensor:
    buf = torch.empty(codes.numel() + 32, dtype=torch.uint8)
    off = (-buf.data_ptr()) % 16 + 1                         # one byte past a 16-byte boundary
    view = buf[off:off + codes.numel()].view(codes.shape)
    view.copy_(codes)
    assert view.is_contiguous() and view.data_ptr() % 16 == 1
    return view


def _scale(scales: torch.Tensor, value: float) -> torch.Tensor:
    s = scales.clone()
    s.view(-1)[3] = value
    return s


@pytest.mark.parametrize("case, expect", [
    (lambda c, s: (c.view(torch.int8), s), "uint8 or float8_e4m3fn, got torch.int8"),
    (lambda c, s: (c[None], s), "2-D"),
    (lambda c, s: (_unaligned(c), s), "not 16-byte aligned"),
    (lambda c, s: (c.t().contiguous().t(), s), "not contiguous"),
    (lambda c, s: (c[:, :152].contiguous(), s[:, :2]), "d = 152 is not a multiple of 16"),
    (lambda c, s: (c, s.double()), "must be float32, got torch.float64"),
    (lambda c, s: (c, s.half()), "must be float32"),
    (lambda c, s: (c, s.view(-1)), "must have shape (2, 2), got (4,)"),
    (lambda c, s: (c, s.t().contiguous().t()), "scales are not contiguous"),
    (lambda c, s: (c, s.to("meta")), "scales are on meta"),
    (lambda c, s: (c.to("meta"), s.to("meta")), "meta device"),
    (lambda c, s: (c, _scale(s, 0.0)), "(1, 1) is zero"),
    (lambda c, s: (c, _scale(s, -1.0)), "(1, 1) is negative"),
    (lambda c, s: (c, _scale(s, float("nan"))), "(1, 1) is NaN"),
    (lambda c, s: (c, _scale(s, float("inf"))), "(1, 1) is inf"),
], ids=["int8", "3d", "unaligned", "transposed", "d152", "f64scales", "f16scales", "shape", "scales-strided",
        "scales-device", "meta", "zero", "negative", "nan", "inf"])
def test_check_gives_the_reason(case, expect):
    codes, scales = good(M=256, d=160, layout="block128")
    args = case(codes, scales)
    reason = fp8torch.check(*args, "block128")
    assert expect in reason and "\n" not in reason


def test_check_layout_sizes_and_types():
    codes, scales = good(M=256, d=160, layout="row")
    assert fp8torch.check(codes, scales, "row") == ""
    assert "unknown FP8 scale layout 'block64'" in fp8torch.check(codes, scales, "block64")
    assert "must have shape (2, 2), got (256,)" in fp8torch.check(codes, scales, "block128")
    assert "the layer is 256x128" in fp8torch.check(codes, scales, "row", M=256, d=128)
    with pytest.raises(TypeError):
        fp8torch.check(codes.numpy(), scales, "row")  # type: ignore[arg-type]


def test_check_once_scans_a_pair_once_until_its_scales_change(monkeypatch):
    """Table.gemv's per-call check: the scan of the scales runs once per live, unchanged pair of tensors; an in-place
    write to the scales (or a view of them), another tensor, or another shape or layout asks check again."""
    calls = []
    real = fp8torch.check
    monkeypatch.setattr(fp8torch, "check", lambda *a, **k: calls.append(a) or real(*a, **k))
    codes, scales = good(M=256, d=160, layout="row")
    for _ in range(3):   # as Table.gemv passes it: the flat view, a new tensor each call, checked
        assert fp8torch.check_once(codes, scales, "row", 256, 160, checked=scales.reshape(-1)) == ""
    assert len(calls) == 1
    assert "the layer is 256x128" in fp8torch.check_once(codes, scales, "row", 256, 128)   # another shape: checked
    assert len(calls) == 2
    scales.view(-1)[7] = float("nan")   # in place, through a view: the version counter moves
    assert "(7,) is NaN" in fp8torch.check_once(codes, scales, "row", 256, 160)
    assert "(7,) is NaN" in fp8torch.check_once(codes, scales, "row", 256, 160)   # a failure is never remembered
    assert len(calls) == 4
    scales.view(-1)[7] = 1.0
    other = scales.clone()
    other.view(-1)[0] = 0.0   # another scales tensor: checked on its own
    assert "(0,) is zero" in fp8torch.check_once(codes, other, "row", 256, 160)
    assert fp8torch.check_once(codes, scales, "row", 256, 160) == ""
    assert fp8torch.check_once(codes, scales, "row", 256, 160) == ""
    assert len(calls) == 6


def test_check_once_forgets_a_pair_when_a_tensor_dies():
    codes, scales = good(M=256, d=160, layout="row")
    assert fp8torch.check_once(codes, scales, "row") == ""
    key = (id(codes), id(scales))
    assert key in fp8torch._PASSED
    del scales
    assert key not in fp8torch._PASSED
