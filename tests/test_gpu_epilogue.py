"""GPU (marked gpu): every epilogue (FP16/FP32 out, with and without bias) of both families verified
against the float64 reference on edge shapes; planted epilogue faults are caught."""

import pytest

from gemvtune import GemvConfig, Shape, SplitKConfig
from gemvtune.build.render import render
from gemvtune.kernels.epilogue import EPILOGUES, Epilogue

pytestmark = pytest.mark.gpu

SHAPES = [Shape(7, 72), Shape(129, 4104, 3), Shape(33, 4096, 8), Shape(1024, 4096, 16)]
CONFIGS = [GemvConfig(), GemvConfig(vec="half8", tpr=32, block=128, split_k=4),
           GemvConfig(vec="half2", tpr=8, block=64, acc="fp16", unroll=2, x_load="smem"),
           SplitKConfig(split=1), SplitKConfig(split=4, combine="pass2"), SplitKConfig(split=4, combine="atomic"),
           SplitKConfig(mt=1, warps=2, split=2, combine="pass2", w_load="cpasync", x_load="smem")]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_every_epilogue_of_both_families_verifies(runner, shape):
    from gemvtune.build.compile import compile_variants

    pairs = [(cfg, e) for cfg in CONFIGS for e in EPILOGUES if not (cfg.invalid_reasons(shape) or e.invalid_reasons(cfg))]
    compile_variants([(cfg, shape, e) for cfg, e in pairs], arch=runner.arch)   # in parallel: measure() hits the cache
    failed = [(cfg.label + e.label, m.status, m.error) for cfg, e in pairs
              for m in [runner.measure(cfg, shape, timed=False, epilogue=e)] if not m.ok]
    runner.release()
    assert len(pairs) >= 12 and not failed, failed[:5]


@pytest.mark.parametrize("cfg", [GemvConfig(vec="half8", tpr=32, block=128, split_k=4),
                                 SplitKConfig(split=4, combine="pass2"), SplitKConfig(split=1)], ids=lambda c: c.label)
def test_planted_epilogue_faults_are_caught(runner, cfg):
    """A kernel that ignores the bias, and one that stores FP32 into an FP16 output, must fail."""
    shape = Shape(129, 4104, 3)
    for out in ("fp32", "fp16"):
        m = runner.measure(cfg, shape, timed=False, epilogue=Epilogue(out, True),
                           source=render(cfg, shape, Epilogue(out, False)), name="planted-no-bias")
        assert m.status == "wrong", (out, m.status, m.error)
    m = runner.measure(cfg, shape, timed=False, epilogue=Epilogue("fp16", False),
                       source=render(cfg, shape, Epilogue("fp32", False)), name="planted-fp32-store")
    assert m.status == "wrong", (m.status, m.error)
    runner.release()


def test_timed_epilogue_variant_costs_about_the_same(runner):
    """The fused epilogue is in the final store only: timing it works and gives a sane time."""
    shape = Shape(4096, 4096)
    a = runner.measure(GemvConfig(vec="half8", tpr=128, block=256), shape)
    b = runner.measure(GemvConfig(vec="half8", tpr=128, block=256), shape, epilogue=Epilogue("fp16", True))
    runner.release()
    assert a.ok and b.ok and b.us_median > 0 and a.us_median > 0
