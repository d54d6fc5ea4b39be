"""The runner contract (gemvtune.runners.base): every runner offers what the search, tables, reports and
benchmarks use of one, with RunnerBase's defaults where it has nothing of its own (CPU only: the CUDA
runner is checked on its class, never instantiated)."""

import ast
import inspect

import numpy as np
import pytest
from conftest import ROOT
from fakes import FakeRunner, HangRunner

from gemvtune import Shape
from gemvtune.build.compile import DEFAULT_ARCH
from gemvtune.kernels.gemv import DOMAINS
from gemvtune.runners.base import CompilesAhead, DeviceRunner, Runner, RunnerBase, contract_members, missing_members
from gemvtune.runners.isolated import IsolatedRunner
from gemvtune.runners.replay import STUDY_SUFFIX, ReplayRunner
from gemvtune.tuning.search import SearchOptions, trials_in_flight
from gemvtune.tuning.spacebound import candidates

SWEEPS = ROOT / "results" / "nvidia-h200" / "measurements"
S = Shape(4096, 4096)


def test_the_contract_lists_what_callers_use():
    assert contract_members(Runner) == ["arch", "baselines", "ceiling", "compile_jobs", "device_info", "measure",
                                        "recorded", "release", "replayed", "study_suffix"]
    assert set(contract_members(CompilesAhead)) == set(contract_members(Runner)) | {"precompile"}
    gpu = set(contract_members(DeviceRunner))
    assert set(contract_members(CompilesAhead)) < gpu
    assert {"launcher", "verify", "reference", "check", "buffers", "time_graph", "replay_times", "time_spin",
            "read_stream", "on_stream", "stream", "rng", "l2_bytes", "sm_count", "ceiling_gbps", "measure_cublas",
            "measure_torch_linear", "measure_spin", "replays", "warmup", "target_us", "flush_l2"} <= gpu


def test_replay_runner_satisfies_the_contract():
    r = ReplayRunner(SWEEPS)
    assert isinstance(r, Runner) and isinstance(r, RunnerBase) and not missing_members(ReplayRunner)
    assert r.replayed and r.study_suffix == STUDY_SUFFIX and r.arch == "replay" and r.compile_jobs == 1
    assert r.recorded(S) and r.recorded(S, "splitk") == frozenset()
    assert not isinstance(r, CompilesAhead)   # no precompile: a replayed search keeps one trial in flight
    assert trials_in_flight(SearchOptions(jobs=4), r) == 1


def test_fake_runners_satisfy_the_contract_with_the_defaults():
    for r in (FakeRunner(), HangRunner()):
        assert isinstance(r, Runner) and not isinstance(r, CompilesAhead)
        assert (r.replayed, r.study_suffix, r.arch, r.compile_jobs) == (False, "", DEFAULT_ARCH, 1)
        assert r.recorded(S) is None and r.recorded(S, "splitk") is None
        assert trials_in_flight(SearchOptions(jobs=4), r) == 1
    small = {k: v[:2] for k, v in DOMAINS.items()}
    assert candidates(FakeRunner(), S, "gemv", small)   # recorded() None: every valid config of the grid


def test_isolated_runner_satisfies_the_contract_without_a_child():
    assert not missing_members(IsolatedRunner, CompilesAhead)
    r = IsolatedRunner.__new__(IsolatedRunner)   # __init__ would start the child: the class's defaults only
    assert isinstance(r, Runner) and isinstance(r, CompilesAhead)
    assert (r.replayed, r.study_suffix, r.recorded(S)) == (False, "", None)


def test_cuda_runner_class_defines_the_device_contract():
    from gemvtune.runners.cuda.libtimers import Harness
    from gemvtune.runners.cuda.runner import CudaRunner
    from gemvtune.runners.cuda.verify import Verifier

    assert issubclass(CudaRunner, RunnerBase)
    assert missing_members(CudaRunner, DeviceRunner) == []
    assert missing_members(CudaRunner, Harness) == []          # what its Baselines part uses of it
    assert Verifier not in CudaRunner.__mro__                    # parts it owns, not mixins
    for name in ("measure_cublas", "baselines", "measure_torch_linear", "verify", "reference", "check"):
        assert name in vars(CudaRunner), name                   # thin delegations to its parts


CUDA_MODULES = sorted(p.stem for p in (ROOT / "gemvtune" / "runners" / "cuda").glob("*.py"))


@pytest.mark.parametrize("module", CUDA_MODULES)
def test_the_cuda_runner_never_changes_the_callers_device_stream_or_allocator(module):
    """No ``.use()`` (it makes a device or stream current for the thread, for good) and no
    ``set_allocator`` (CuPy's process-wide allocator): the runner's work runs inside ``with`` blocks that
    restore the caller's (GEMVTUNE_NO_POOL: ``cupy.cuda.using_allocator``, thread-local, in ``scope``)."""
    src = (ROOT / "gemvtune" / "runners" / "cuda" / f"{module}.py").read_text()
    calls = [n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and n.func.attr in ("use", "set_allocator", "set_pinned_memory_allocator")]
    assert not calls, f"{module}.py calls .{calls[0].func.attr}() at line {calls[0].lineno}"


def test_the_cuda_modules_stay_small():
    for module in CUDA_MODULES:
        lines = (ROOT / "gemvtune" / "runners" / "cuda" / f"{module}.py").read_text().count("\n")
        assert lines < 400, (module, lines)


def test_cuda_runner_enqueues_inside_on_stream():
    """Each CudaRunner method that allocates or launches with CuPy enters its device and stream, or hands
    the work to a part that enters them (the Timer, the Verifier: made with the runner's stream, device
    and no_pool)."""
    from gemvtune.runners.cuda.runner import CudaRunner
    from gemvtune.runners.cuda.timer import Timer
    from gemvtune.runners.cuda.verify import Verifier

    for name in ("flush_l2", "buffers", "ceiling", "measure", "check"):
        assert "self.on_stream()" in inspect.getsource(getattr(CudaRunner, name)), name
    for name in ("time_graph", "replay_times", "time_spin"):
        assert f"self.timer.{name}(" in inspect.getsource(getattr(CudaRunner, name)), name
        assert "with self._scope():" in inspect.getsource(getattr(Timer, name)), name
    for name in ("verify", "reference"):
        assert f"self.verifier.{name}(" in inspect.getsource(getattr(CudaRunner, name)), name
        assert "with self._scope():" in inspect.getsource(getattr(Verifier, name)), name
    init = inspect.getsource(CudaRunner.__init__)
    assert "Timer(self.stream, device, self.aux.spin, self.no_pool)" in init
    assert "Verifier(self.stream, self.rng, device, self.no_pool)" in init


class _Ctx:
    """A context manager that records entering and leaving (a CuPy device, stream or allocator stand-in)."""

    def __init__(self, log, name):
        self.log, self.name = log, name

    def __enter__(self):
        self.log.append(("enter", self.name))
        return self

    def __exit__(self, *a):
        self.log.append(("exit", self.name))
        return False


@pytest.mark.parametrize("no_pool", [False, True])
def test_scope_enters_device_stream_and_allocator_and_leaves_them(monkeypatch, no_pool):
    """The runner's scope (on_stream, the Timer's, the Verifier's): device, then stream, then (no_pool) a
    thread-local raw allocator, all left in reverse order, on the way out of an exception too; CuPy's
    global allocator is never set."""
    from types import SimpleNamespace

    from gemvtune.device import _cupy

    log = []

    def no_global(*a):
        raise AssertionError("set_allocator changes the process's allocator")

    cuda = SimpleNamespace(Device=lambda d: _Ctx(log, f"device{d}"),
                           using_allocator=lambda a=None: _Ctx(log, f"allocator{a}"), set_allocator=no_global)
    monkeypatch.setattr(_cupy, "cp", SimpleNamespace(cuda=cuda))
    with pytest.raises(KeyError):
        with _cupy.scope(1, _Ctx(log, "stream"), no_pool):
            log.append("body")
            raise KeyError
    inner = [("enter", "allocatorNone")] if no_pool else []
    assert log == [("enter", "device1"), ("enter", "stream"), *inner, "body",
                   *[("exit", n) for _, n in reversed(inner)], ("exit", "stream"), ("exit", "device1")]
    log.clear()
    with _cupy.scope(None, _Ctx(log, "stream")):   # no device: the caller's stays current
        pass
    assert log == [("enter", "stream"), ("exit", "stream")]


# ---- the Verifier part, with NumPy standing in for CuPy ---------------------------------------------
class _Stream:
    entered = 0

    def __enter__(self):
        _Stream.entered += 1
        return self

    def __exit__(self, *a):
        return False

    def synchronize(self):
        pass


def test_verifier_is_a_part_given_its_stream_and_generator(monkeypatch):
    from gemvtune.device import _cupy
    from gemvtune.runners.cuda import verify
    from gemvtune.runners.timing import error_bound

    monkeypatch.setattr(_cupy, "cp", np)
    monkeypatch.setattr(verify, "cp", np)
    v = verify.Verifier(_Stream(), np.random.default_rng(1))
    s = Shape(33, 64, 2)

    def good(W, x, y):
        y[...] = (x.astype(np.float32).reshape(-1, W.shape[1]) @ W.astype(np.float32).T).reshape(y.shape)

    before = _Stream.entered
    ok, rel, _, why = v.verify(good, s, error_bound("fp32", s.d))
    assert ok and rel < error_bound("fp32", s.d), why
    assert _Stream.entered > before                                 # on its stream
    assert not v.verify(lambda W, x, y: None, s, 1.0)[0]            # the NaN poison is caught
    assert v._vmat is not None
    v.release()
    assert v._vmat is None


def test_cuda_runner_hands_its_timing_to_the_timer_part():
    """The runner's timers are its Timer's, given the runner's warmup and replays and, with flush=True,
    the runner's L2 flush as the untimed work before each sample (CPU: a runner made without __init__)."""
    from gemvtune.runners.cuda.runner import CudaRunner

    calls = []

    class Timer:
        def __getattr__(self, name):
            return lambda *a: calls.append((name, *a)) or [1.0]

    r = CudaRunner.__new__(CudaRunner)
    r.timer, r.warmup, r.replays = Timer(), 2, 5
    launch, graph, before = object(), object(), object()
    r.time_graph(launch, 7)
    r.time_graph(launch, 7, flush=True, before=before)   # flush wins, as before the split
    r.time_graph(launch, 7, before=before)
    r.replay_times(graph, 9, 3, flush=True)
    r.replay_times(graph, 9, before=before)
    r.time_spin(launch, 4, True)
    r.time_spin(launch, 4)
    assert calls == [("time_graph", launch, 7, 2, 5, None), ("time_graph", launch, 7, 2, 5, r.flush_l2),
                     ("time_graph", launch, 7, 2, 5, before), ("replay_times", graph, 9, 3, r.flush_l2),
                     ("replay_times", graph, 9, 1, before), ("time_spin", launch, 4, 5, r.flush_l2),
                     ("time_spin", launch, 4, 5, None)]


def test_l2_flush_part_writes_three_l2s_then_discards_them(monkeypatch):
    """The L2 flush (NumPy standing in for CuPy): 3x L2 of scratch, rounded to 128-byte lines, filled and
    discarded on the stream given, x read back in when given; the scratch made once, dropped by release."""
    from gemvtune.runners.cuda import auxkernels

    monkeypatch.setattr(auxkernels, "cp", np)
    calls = []

    def kernel(name):
        return lambda grid, block, args, stream=None: calls.append((name, grid, block, args[0].nbytes,
                                                                    int(args[1]), stream))

    k = auxkernels.AuxKernels(kernel("read"), kernel("empty"), kernel("fill"), kernel("discard"), kernel("spin"))
    f = auxkernels.L2Flush(k, l2_bytes=1000, sm_count=3)
    f.flush("s")
    scratch = f.scratch
    assert scratch.nbytes == 2944 and f.sink.dtype == np.uint32
    assert calls == [("fill", (24,), (256,), 2944, 184, "s"), ("discard", (24,), (256,), 2944, 23, "s")]
    calls.clear()
    f.flush("t", x_block=np.zeros(64, np.float16))
    assert f.scratch is scratch and [c[0] for c in calls] == ["fill", "discard", "read"]
    assert calls[2] == ("read", (24,), (256,), 128, 8, "t")
    f.release()
    assert f.scratch is None
    f.flush("s")
    assert f.scratch is not None and f.scratch is not scratch


def test_cublas_torch_baseline_graph_lengths():
    """cuBLAS's torch baseline is timed at the runner's length and at about 96 calls in whole passes
    (issue 19: it runs fastest near 96 calls per graph); one flushed pass stays one length."""
    from gemvtune.runners.cuda.libtimers import SHORT_GRAPH, graph_lengths

    assert graph_lengths(240, 6, False) == [240, 96]
    assert graph_lengths(74, 2, False) == [74]            # already shorter than 96 calls
    assert graph_lengths(256, 256, True) == [256]         # a flushed pass over the copies
    assert all(k % 4 == 0 for k in graph_lengths(400, 4, False)) and SHORT_GRAPH in graph_lengths(400, 4, False)
    assert graph_lengths(500, 7, False) == [500, 91]      # whole passes over 7 copies
