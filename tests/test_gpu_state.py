"""The CUDA runner leaves the caller's CuPy state as it found it (marked gpu): the current device,
the current stream and the allocator, with and without GEMVTUNE_NO_POOL (which used to swap CuPy's
global allocator; now only the runner's own arrays bypass the pool, in a thread-local scope)."""

import pytest

from gemvtune import LLAMA_CPP, Shape

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("no_pool", ["0", "1"])
def test_runner_leaves_device_stream_and_allocator_alone(monkeypatch, no_pool):
    import cupy as cp

    from gemvtune.runners.cuda import CudaRunner

    monkeypatch.setenv("GEMVTUNE_NO_POOL", no_pool)
    mine = cp.cuda.Stream(non_blocking=True)
    with mine:
        before = (cp.cuda.Device().id, cp.cuda.get_current_stream().ptr, cp.cuda.get_allocator())
        r = CudaRunner(replays=3)
        r.ceiling()
        m = r.measure(LLAMA_CPP, Shape(256, 4096))
        assert m.ok, (m.status, m.error)
        base = r.baselines(Shape(256, 4096))
        # without the pool every CuPy allocation is a synchronizing cudaMalloc, so cupy.matmul's
        # spin timing cannot run ahead of the GPU: recorded as a failure, not raised
        assert all(b.ok for b in base) if no_pool == "0" else all(b.ok or b.error for b in base)
        r.release()
        after = (cp.cuda.Device().id, cp.cuda.get_current_stream().ptr, cp.cuda.get_allocator())
    assert after == before
    assert before[1] == mine.ptr
