"""The benchmark's new baselines on the GPU (marked gpu): the seed kernel as written (llama.cpp's, d at run
time) against a float64 reference on odd shapes and refusing odd d, and Inductor max-autotune compiled once
per shape, verified and timed in the torch harness."""

import math

import numpy as np
import pytest

from gemvtune import Shape
from gemvtune.runners.base import Status
from gemvtune.runners.timing import error_bound

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def runner():
    from gemvtune.runners.cuda import CudaRunner

    return CudaRunner(replays=5)


ODD = [Shape(37, 4098, 3), Shape(1, 2, 16), Shape(37, 130, 8), Shape(5, 514, 1), Shape(300, 6, 16),
       Shape(1023, 4096, 1), Shape(4099, 2050, 8)]


@pytest.mark.parametrize("shape", ODD, ids=str)
def test_seed_kernel_matches_the_float64_reference(runner, shape):
    """One launch on random inputs, checked here against NumPy's float64 product (not the runner's verifier),
    then the runner's own measurement of it: verified and timed."""
    import cupy as cp

    from gemvtune.runners.cuda.seed import SEED_KERNEL, compile_seed, seed_launch

    rng = np.random.default_rng(shape.M * 7 + shape.d + shape.n)
    W = (rng.random((shape.M, shape.d)) * 2 - 1).astype(np.float16)
    x = (rng.random((shape.n, shape.d)) * 2 - 1).astype(np.float16)
    with runner.on_stream():
        Wd, xd = cp.asarray(W), cp.asarray(x)
        y = cp.full((shape.n, shape.M), cp.nan, dtype=cp.float32)
        kernel = runner.function(compile_seed(shape.n, runner.arch).cubin_path, SEED_KERNEL)
        grid, block, tail = seed_launch(shape)
        kernel(grid, block, (Wd, xd, y, *tail))
        runner.stream.synchronize()
        got = cp.asnumpy(y).astype(np.float64)
    W64, x64 = W.astype(np.float64), x.astype(np.float64)
    ref, scale = x64 @ W64.T, np.sqrt((x64 * x64) @ (W64 * W64).T)
    assert np.isfinite(got).all()                                        # every row and column written
    rel = np.linalg.norm(got - ref) / np.linalg.norm(scale)
    assert rel < error_bound("fp32", shape.d), rel
    m = runner.measure_seed(shape)
    assert m.ok and m.kind == "seed" and m.relerr < m.bound and m.us_median > 0, (m.status, m.error)
    assert m.method.startswith("graph") and m.registers > 0


def test_seed_kernel_refuses_odd_d(runner):
    m = runner.measure_seed(Shape(37, 4097, 3))
    assert m.status == Status.INVALID and "odd" in m.error and math.isnan(m.us_median)


@pytest.mark.parametrize("shape", [Shape(1024, 4096), Shape(1000, 4098, 3)], ids=str)
def test_inductor_baseline_compiles_once_verifies_and_times(runner, shape):
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    m = runner.measure_inductor(shape)
    assert m.ok and m.kind == "inductor" and m.name == "inductor (max-autotune-no-cudagraphs)", (m.status, m.error)
    assert m.relerr < m.bound == error_bound("fp16", shape.d) and m.us_median > 0 and m.method.startswith("graph")
    assert m.compile_s > 0 and not m.params["kernel"].startswith("unknown"), m.params
    again = runner.measure_inductor(shape, verify=False)                 # the next round: the same compile
    assert again.ok and again.compile_s == m.compile_s and again.params == m.params
    t = runner.measure_torch_linear(shape)
    assert t is not None and t.ok and (t.copies, t.method) == (m.copies, m.method)   # the same harness, same copies
