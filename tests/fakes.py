"""A fake runner with a known optimum, for testing the search without a GPU."""

import math

from gemvtune.kernels.gemv import GemvConfig
from gemvtune.runners.base import Measurement, RunnerBase, Status

TPR_BEST, VEC_BEST = 64, "half8"


def fake_us(c: GemvConfig) -> float:
    """Fastest at vec=half8, tpr=64; every other lever is flat, so many configs tie at the optimum.
    Split-K GEMM configs: best 11.0 at split=4 with register loads (so the gemv family wins at 10.0); mma configs
    best 11.5; ring configs best 11.25 at 4 stages without a split; FP8 weights: fp8gemv best 5.0, fp8mma 5.5."""
    if c.family == "splitk":
        return 11.0 + 0.5 * abs(math.log2(c.split / 4)) + 0.5 * (c.w_load != "reg")
    if c.family == "mma":   # best 11.5 at depth 4 without a split (slower than both others)
        return 11.5 + 0.5 * abs(math.log2(c.depth / 4)) + 0.5 * (c.split > 1)
    if c.family == "ring":   # best 11.25 at 4 stages without a split
        return 11.25 + 0.5 * abs(math.log2(c.stages / 4)) + 0.5 * (c.split > 1)
    if c.family == "fp8mma":   # FP8 weights: best 5.5 at depth 4 without a split (the FP8 GEMV's best is 5.0)
        return 5.5 + 0.5 * abs(math.log2(c.depth / 4)) + 0.5 * (c.split > 1)
    if c.family == "fp8gemv":   # best 5.0 at 16-byte loads of 32 threads per row
        return 5.0 + 1.0 * (c.vec != 16) + abs(math.log2(c.tpr / 32))
    return 10.0 + 3.0 * (c.vec != VEC_BEST) + abs(math.log2(c.tpr / TPR_BEST))


class FakeRunner(RunnerBase):
    """The runner contract (gemvtune.runners.base.Runner) with made-up times; RunnerBase's defaults
    (not replayed, compile_jobs 1, no precompile: one trial in flight, any config)."""

    replayed = False

    def __init__(self):
        self.calls: list[GemvConfig] = []

    def device_info(self):
        return {"name": "Fake GPU", "compute_capability": "9.0", "sm_count": 132, "l2_bytes": 60 << 20,
                "driver": "0", "cuda_runtime": 0, "cuda_driver_api": 0}

    def ceiling(self):
        return {"read_gbps": 4000.0, "launch_floor_us": 0.5}

    def release(self):
        pass

    def measure(self, config, shape, kind="variant", verify=True, timed=True, **_):
        assert config.is_valid(shape), f"invalid config reached the runner: {config.label}"
        self.calls.append(config)
        m = Measurement(config.label, kind, shape.M, shape.d, shape.n, Status.OK, params=config.to_dict())
        if config.family == "gemv" and config.x_load == "smem" and config.acc == "fp16":
            m.status, m.error = Status.WRONG, "planted: relative error 1 above the bound"
            return m
        us = fake_us(config)
        m.us_median, m.us_min, m.us_max = us, us, us
        m.gbps, m.pct_ceiling = 1.0, 50.0
        return m

    def baselines(self, shape):
        m = Measurement("cublas (fake)", "cublas", shape.M, shape.d, shape.n, Status.OK, us_median=15.0,
                        us_min=15.0, us_max=15.0, gbps=1.0, pct_ceiling=40.0)
        return [m]


class HangRunner(FakeRunner):
    """Hangs (sleeps for good) on every config with unroll=8, as a kernel stuck in a loop would."""

    def measure(self, config, shape, kind="variant", verify=True, timed=True, **kw):
        if getattr(config, "unroll", 1) == 8:
            import time

            time.sleep(3600)
        return super().measure(config, shape, kind=kind, verify=verify, timed=timed, **kw)


class Fp8Runner(FakeRunner):
    """The fake runner's times for every family, with FP8 shapes' baselines as the CUDA runner gives them:
    dequantize + F.linear, and cuBLAS on the 16-bit twin (reported only)."""

    def __init__(self, dequant_us=30.0):
        super().__init__()
        self.dequant_us = dequant_us

    def baselines(self, shape):
        if not shape.weights:
            return super().baselines(shape)
        us = self.dequant_us
        return [Measurement("dequantize + F.linear", "dequant-torch", shape.M, shape.d, shape.n, Status.OK,
                            us_median=us, us_min=us, us_max=us, gbps=1.0, pct_ceiling=10.0),
                Measurement("cublas on 16-bit weights", "cublas-16bit", shape.M, shape.d, shape.n, Status.OK,
                            us_median=15.0, us_min=15.0, us_max=15.0, gbps=1.0, pct_ceiling=40.0)]
