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
from gemvtune.compile import DEFAULT_ARCH
from gemvtune.runners.base import (CompilesAhead, DeviceRunner, Runner, RunnerBase, contract_members,
                                   missing_members)
from gemvtune.runners.isolated import IsolatedRunner
from gemvtune.runners.replay import STUDY_SUFFIX, ReplayRunner
from gemvtune.search import SearchOptions, trials_in_flight
from gemvtune.spacebound import candidates
from gemvtune.space import DOMAINS

SWEEPS = ROOT / "results" / "nvidia-h200" / "sweeps"
S = Shape(4096, 4096)


def test_the_contract_lists_what_callers_use():
    assert contract_members(Runner) == ["arch", "baselines", "ceiling", "compile_jobs", "device_info", "measure",
                                        "recorded", "release", "replayed", "study_suffix"]
    assert set(contract_members(CompilesAhead)) == set(contract_members(Runner)) | {"precompile"}
    gpu = set(contract_members(DeviceRunner))
    assert set(contract_members(CompilesAhead)) < gpu
    assert {"launcher", "verify", "reference", "check", "buffers", "time_graph", "replay_times", "time_spin",
            "read_stream", "on_stream", "stream", "rng", "l2_bytes", "sm_count", "ceiling_gbps", "measure_cublas",
            "measure_torch_linear", "measure_spin", "replays", "warmup", "target_us"} <= gpu


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
    from gemvtune.runners.cuda.baselines import Harness
    from gemvtune.runners.cuda.runner import CudaRunner
    from gemvtune.runners.cuda.verify import Verifier

    assert issubclass(CudaRunner, RunnerBase)
    assert missing_members(CudaRunner, DeviceRunner) == []
    assert missing_members(CudaRunner, Harness) == []          # what its Baselines part uses of it
    assert Verifier not in CudaRunner.__mro__                    # parts it owns, not mixins
    for name in ("measure_cublas", "baselines", "measure_torch_linear", "verify", "reference", "check"):
        assert name in vars(CudaRunner), name                   # thin delegations to its parts


@pytest.mark.parametrize("module", ["runner", "verify", "baselines", "decode", "dispatch"])
def test_the_cuda_runner_never_changes_the_callers_device_or_stream(module):
    """No ``.use()`` (it makes a device or stream current for the thread, for good): the runner's work
    runs inside ``with`` blocks that restore the caller's."""
    src = (ROOT / "gemvtune" / "runners" / "cuda" / f"{module}.py").read_text()
    calls = [n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and n.func.attr == "use"]
    assert not calls, f"{module}.py calls .use() at line {calls[0].lineno}"


def test_cuda_runner_enqueues_inside_on_stream():
    """Each CudaRunner method that allocates or launches with CuPy enters its device and stream."""
    from gemvtune.runners.cuda.runner import CudaRunner

    for name in ("time_graph", "replay_times", "flush_l2", "time_spin", "buffers", "ceiling", "measure", "check"):
        assert "self.on_stream()" in inspect.getsource(getattr(CudaRunner, name)), name


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
    from gemvtune.runners.cuda import _cupy, verify
    from gemvtune.timing import error_bound

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
