"""A search ends: on its trial budget, when every config of its space (or of a replayed sweep) is
measured, or after a bounded run of proposals that measure nothing new, saying which (CPU only)."""

import logging
import subprocess
import sys

import optuna
import pytest
from conftest import ROOT, run_cli
from fakes import FakeRunner

from gemvtune.kernels.families import FAMILIES
from gemvtune.kernels.shapes import Shape
from gemvtune.runners.base import Measurement
from gemvtune.runners.replay import NOT_IN_SWEEP, ReplayRunner
from gemvtune.tuning.samplers import SAMPLERS
from gemvtune.tuning.search import SearchOptions, enqueue_seed, optimize, quiet_optuna
from gemvtune.tuning.search_options import BY_FLAG, MAX_TRIALS
from gemvtune.tuning.spacebound import STALL_PROPOSALS, candidates

SWEEPS = ROOT / "results" / "nvidia-h200" / "measurements"


def _study(name="s"):
    return optuna.create_study(study_name=name, direction="minimize",
                               sampler=optuna.samplers.RandomSampler(seed=0))


def test_cli_bounds_match_the_library():
    trials, sampler = BY_FLAG["--trials"].type, BY_FLAG["--sampler"].type
    assert trials.max == MAX_TRIALS and trials.min == 1
    assert tuple(sampler.choices) == SAMPLERS


def test_candidates_enumerate_small_spaces_only():
    s = Shape(4096, 4096)
    split = candidates(FakeRunner(), s, "splitk", FAMILIES["splitk"].domains)
    assert split is not None and 0 < len(split) < 1728
    assert candidates(FakeRunner(), s, "gemv", FAMILIES["gemv"].domains) is None   # 345,600 points: not listed
    small = {"tpr": (32, 64), "vec": ("half2", "half8")}
    assert len(candidates(FakeRunner(), s, "gemv", small)) == 4


def test_search_stops_when_its_space_is_measured():
    shape = Shape(4096, 4096)
    domains = {"tpr": (32, 64, 128), "vec": ("half2", "half8")}
    opts = SearchOptions(trials=50, sampler="random", progress=False, domains={"gemv": domains})
    study = _study()
    enqueue_seed(study, "gemv", domains)
    said = []
    done = optimize(study, FakeRunner(), shape, opts, echo=said.append)
    assert done == 6
    assert len(said) == 1 and "stopped at 6 of 50 measured trials" in said[0] and "all 6 valid configs" in said[0]
    assert len(study.trials) <= 6 + STALL_PROPOSALS   # it stopped on exhaustion, well before the stall bound


def test_replayed_search_stops_when_the_sweep_is_spent():
    runner = ReplayRunner(SWEEPS)
    shape = Shape(4096, 14336)
    sweep = runner.sweep(shape)
    rec = runner.recorded(shape)
    assert 0 < len(rec) <= len(sweep.rows) and runner.recorded(shape, "splitk") == frozenset()
    grid = {**sweep.grid, "block": [256], "unroll": [2], "hint": ["nc"]}   # a part of the sweep's grid
    opts = SearchOptions(trials=MAX_TRIALS, sampler="exhaustive", progress=False, domains={"gemv": grid})
    space = candidates(runner, shape, "gemv", grid)
    assert space and set(space) <= rec
    study = _study()
    enqueue_seed(study, "gemv", grid)
    said = []
    done = optimize(study, runner, shape, opts, echo=said.append)
    assert done == len(space)
    assert len(said) == 1 and f"all {len(space)} valid configs of the sweep are measured" in said[0]


class _NothingRecorded(FakeRunner):
    """Answers every proposal 'not recorded' (a sweep of other configs): nothing is ever measured."""

    replayed = True

    def measure(self, config, shape, kind="variant", verify=True, timed=True, **_):
        return Measurement(config.label, kind, shape.M, shape.d, shape.n, NOT_IN_SWEEP, error="not recorded")


def test_a_run_of_fruitless_proposals_ends_the_search():
    opts = SearchOptions(trials=MAX_TRIALS, sampler="random", progress=False)
    study = _study()
    said = []
    done = optimize(study, _NothingRecorded(), Shape(4096, 4096), opts, echo=said.append)
    assert done == 0
    assert STALL_PROPOSALS <= len(study.trials) <= STALL_PROPOSALS + 5
    assert said and f"{STALL_PROPOSALS} proposals in a row measured nothing new" in said[0]


def test_optuna_logging_is_left_as_found():
    code = ("import optuna, logging; optuna.logging.set_verbosity(optuna.logging.INFO); "
            "import gemvtune.tuning.search, gemvtune.tuning.study, gemvtune.reports.studyplots, gemvtune.cli.search_cmd; "
            "print(logging.getLogger('optuna').level)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.stdout.strip() == str(logging.INFO), r.stderr   # importing does not change it
    logger = logging.getLogger("optuna")
    logger.setLevel(logging.INFO)
    with quiet_optuna():
        assert logger.level >= logging.WARNING   # a search runs quietly
    assert logger.level == logging.INFO          # and restores it


@pytest.mark.slow  # a CLI search that spends a whole sweep
def test_cli_replay_search_with_a_huge_budget_ends(tmp_path):
    """A sweep holding fewer configs than the budget (here 120 of one shape's): the search measures
    each once and says it stopped, instead of proposing on without end."""
    import pandas as pd

    from gemvtune.kernels.gemv import LLAMA_CPP

    src = SWEEPS / "sweep-4096x14336x1.csv.gz"
    df = pd.read_csv(src)
    part = pd.concat([df[df.name == LLAMA_CPP.label], df[df.name != LLAMA_CPP.label].head(119)])
    sweeps = tmp_path / "sweeps"
    sweeps.mkdir()
    part.to_csv(sweeps / src.name, index=False)
    (sweeps / "sweep-4096x14336x1.json").write_bytes((SWEEPS / "sweep-4096x14336x1.json").read_bytes())
    r = run_cli("search", "--shape", "4096x14336", "--replay", str(sweeps), "--trials", "10000",
                "--results", str(tmp_path / "res"), "--top-k", "1", "--rounds", "1")
    assert r.returncode == 0, r.stderr
    out = r.stdout + r.stderr
    assert "stopped at 120 of 10000 measured trials: all 120 valid configs of the sweep are measured" in out, out


def test_a_budget_covering_the_space_measures_each_config_once():
    shape = Shape(4096, 4096)
    domains = {"tpr": (32, 64, 128, 256), "vec": ("half2", "half4", "half8"), "unroll": (1, 2)}
    opts = SearchOptions(trials=100, sampler="tpe", progress=False, domains={"gemv": domains})
    study = _study()
    enqueue_seed(study, "gemv", domains)
    runner = FakeRunner()
    said = []
    done = optimize(study, runner, shape, opts, echo=said.append)
    space = candidates(runner, shape, "gemv", domains)
    assert done == len(space) == len({c.label for c in runner.calls}) == len(runner.calls)   # each once
    assert f"all {len(space)} valid configs of the space are measured" in said[0]
    assert len(study.trials) <= len(space) + 2
    assert study.user_attrs["space_measured"] == len(space)    # the table's search record says so (check --stale-only)
