"""Issue 37 on the GPU (marked gpu; skipped with the reason where no CUDA device answers): FP8 weights (W8A16). Every
layout and input dtype verified on edge shapes (M and d off the 128-column blocks, n = 1 to 16, FP32 and 16-bit
outputs with a bias) against the float64 product of the exactly dequantised W and x (``runners.fp8data``), with
configs that cover every value of every parameter; and planted faults caught: a dropped scale (either layout) and
a wrong scale index (row: the next row's; block128: the next column block's, or the next row block's)."""

import pytest
from cover import fp8_configs, verify_failures

from gemvtune.build.render import render
from gemvtune.kernels.epilogue import Epilogue
from gemvtune.kernels.fp8gemv import DOMAINS, SEED, Fp8GemvConfig
from gemvtune.kernels.shapes import Shape
from gemvtune.runners.base import Status

pytestmark = pytest.mark.gpu

ROW, B128 = "e4m3-row", "e4m3-b128"
CONFIGS = fp8_configs()
# (M, d, n): one row, a row block and a bit, three ragged row blocks, a long row; d off 128 (ragged column blocks)
EDGES = ((1, 136, 1), (129, 72, 3), (300, 8208, 16), (1000, 4104, 8), (4096, 4096, 2))


def test_the_configs_cover_every_value():
    for key, values in DOMAINS.items():
        assert {getattr(c, key) for c in CONFIGS} == set(values), key


def _verify_all(runner, cfgs, shape):
    """Every config verifies on ``shape`` with the default epilogue, and the first three with a bias and an output of
    the input dtype."""
    assert cfgs, shape
    failed = verify_failures(runner, cfgs, shape)
    failed += verify_failures(runner, cfgs[:3], shape, Epilogue(shape.dtype, bias=True))
    assert not failed, failed[:5]


@pytest.mark.parametrize("weights", [ROW, B128])
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("edge", EDGES, ids=lambda e: "x".join(map(str, e)))
def test_fp8_variants_verify(runner, edge, dtype, weights):
    shape = Shape(*edge, dtype, weights)
    cfgs = [c for c in CONFIGS if c.is_valid(shape, runner.arch)]
    _verify_all(runner, cfgs, shape)


# (layout, what the source says, what the fault makes it say)
FAULTS = {
    "row-scale-dropped": (ROW, "epilogue(sum[c] * sc, bias, row)", "epilogue(sum[c], bias, row)"),
    "row-index": (ROW, "__ldg(scales + row)", "__ldg(scales + (row + 1) % M)"),
    "block-scale-dropped": (B128, "fmaf(p, sc, ", "fmaf(p, 1.f, "),
    "block-column-index": (B128, "__ldg(srow + col / SB)", "__ldg(srow + (col / SB + 1) % SCOLS)"),
    "block-row-index": (B128, "scales + (size_t)(row / SB) * SCOLS",
                        "scales + (size_t)((row / SB + 1) % ((M + SB - 1) / SB)) * SCOLS"),
}


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("fault", FAULTS)
def test_planted_fp8_faults_are_caught(runner, fault, dtype):
    weights, good, bad = FAULTS[fault]
    shape = Shape(300, 8208, 3, dtype, weights)
    for c in (SEED, Fp8GemvConfig(block=64, tpr=8, vec=4, unroll=1)):
        src = render(c, shape, arch=runner.arch)
        assert good in src, (fault, c.label)
        m = runner.measure(c, shape, timed=False, source=src.replace(good, bad), name=f"planted_{fault}_{c.label}")
        assert m.status == Status.WRONG, (fault, c.label, m.status, m.error)
        assert runner.measure(c, shape, timed=False).ok   # (the config itself verifies)
    runner.release()


def test_fp8_variants_time(runner):
    """A timed measurement of each layout (rotating copies of codes and scales)."""
    for weights in (ROW, B128):
        m = runner.measure(SEED, Shape(4096, 4096, 1, "bf16", weights))
        assert m.ok and m.us_median > 0 and m.copies >= 2, (m.status, m.error)
    runner.release()


# ---- the FP8 tensor-core family (fp8mma) ----------------------------------------------------------------------------
# d a multiple of 16 (its rule), off the 128-column blocks where it can be; M off the 128-row blocks; n across the n8 tiles
MMA_EDGES = ((1, 144, 1), (129, 80, 3), (300, 8720, 16), (1000, 4112, 8), (4096, 4096, 2))


@pytest.mark.parametrize("weights", [ROW, B128])
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("edge", MMA_EDGES, ids=lambda e: "x".join(map(str, e)))
def test_fp8mma_variants_verify(runner, edge, dtype, weights):
    from cover import fp8mma_configs

    shape = Shape(*edge, dtype, weights)
    cfgs = [c for c in fp8mma_configs() + fp8mma_configs(Shape(300, 8720, 16, "fp16", ROW))
            if c.is_valid(shape, runner.arch)]
    if not cfgs:
        from gemvtune.kernels.fp8mma import valid_configs

        cfgs = valid_configs(shape)[:4]
    _verify_all(runner, cfgs, shape)


MMA_FAULTS = {
    "row-scale-dropped": (ROW, "#define SCALED(r, v) ((v) * __ldg(scales + (r)))", "#define SCALED(r, v) (v)"),
    "row-index": (ROW, "__ldg(scales + (r))", "__ldg(scales + ((r) + 1) % M)"),
    "block-scale-dropped": (B128, "fmaf(part[t][j][e], sc, acc[t][j][e])", "fmaf(part[t][j][e], 1.f, acc[t][j][e])"),
    "block-column-index": (B128, "__ldg(srow[t] + chunk * KCHUNK / SB)", "__ldg(srow[t] + (chunk * KCHUNK / SB + 1) % SCOLS)"),
    "widen-order": (ROW, "widen2(c.x & 0xffffu), widen2(c.x >> 16)", "widen2(c.x >> 16), widen2(c.x & 0xffffu)"),
}


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("fault", MMA_FAULTS)
def test_planted_fp8mma_faults_are_caught(runner, fault, dtype):
    from gemvtune.kernels.fp8mma import SEED as MMA_SEED

    weights, good, bad = MMA_FAULTS[fault]
    shape = Shape(300, 8720, 3, dtype, weights)
    src = render(MMA_SEED, shape, arch=runner.arch)
    assert good in src, fault
    m = runner.measure(MMA_SEED, shape, timed=False, source=src.replace(good, bad), name=f"planted_mma_{fault}")
    assert m.status == Status.WRONG, (fault, m.status, m.error)
    assert runner.measure(MMA_SEED, shape, timed=False).ok
    runner.release()
