"""The private Optuna hooks gemvtune relies on (gemvtune.tuning.coordination.optuna_adapter), checked on the
installed Optuna and, slow, on the lowest version of pyproject's pin, installed apart with pip and run in a
process of its own. Each check fails on an Optuna without its hook (or where the hook does something else).

The checks are plain functions (``CHECKS``; ``python tests/test_optuna_adapter.py`` runs them all), so that the
same code runs against either Optuna; this module imports nothing of the test suite's."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest

ROOT = Path(__file__).resolve().parents[1]
ADAPTER = ROOT / "gemvtune" / "tuning" / "coordination" / "optuna_adapter.py"


def pinned_optuna() -> str:
    """pyproject's requirement on optuna (the specifier, e.g. ``>=4.2,<6``)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    m = re.search(r'^\s*"optuna\s*([<>=!~][^"]*)"', text, re.M)
    assert m, "pyproject.toml requires no optuna"
    return m.group(1).replace(" ", "")


def lowest_pinned() -> str:
    from packaging.specifiers import SpecifierSet

    lows = [s.version for s in SpecifierSet(pinned_optuna()) if s.operator in (">=", "==", "~=")]
    assert lows, f"optuna{pinned_optuna()} has no lower bound"
    return lows[0]


def _study(storage: object = None, **kw: object) -> optuna.Study:
    return optuna.create_study(storage=storage or optuna.storages.InMemoryStorage(), **kw)   # type: ignore[arg-type]


# ---- the checks (each takes a scratch folder) -----------------------------------------------------

def check_study_storage(tmp: Path) -> None:
    from gemvtune.tuning.coordination.optuna_adapter import study_storage

    storage = optuna.storages.InMemoryStorage()
    study = _study(storage)
    assert study_storage(study) is storage
    journal = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(tmp / "j.log")))
    js = _study(journal, study_name="s")
    got = study_storage(js)
    assert isinstance(got, optuna.storages.BaseStorage)
    got.set_study_user_attr(got.get_study_id_from_name("s"), "k", 1)   # (what the study reads and writes)
    assert js.user_attrs == {"k": 1}


def check_trial_id(tmp: Path) -> None:
    from gemvtune.tuning.coordination.optuna_adapter import study_storage, trial_id

    storage = optuna.storages.InMemoryStorage()
    a, b = _study(storage, study_name="a"), _study(storage, study_name="b")
    ta, tb = a.ask(), b.ask()
    assert ta.number == tb.number == 0 and trial_id(ta) != trial_id(tb)   # (unique across the storage's studies)
    for study, t in ((a, ta), (b, tb)):
        assert study_storage(study).get_trial(trial_id(t)).number == t.number
        frozen = study.get_trials(deepcopy=False)[0]
        assert trial_id(frozen) == trial_id(t)
        study_storage(study).set_trial_user_attr(trial_id(frozen), "k", 1)
        assert study.get_trials(deepcopy=False)[0].user_attrs == {"k": 1}


def check_fixed_params(tmp: Path) -> None:
    from gemvtune.tuning.coordination.optuna_adapter import fixed_params

    study = _study()
    study.enqueue_trial({"x": 3, "y": "a"})
    waiting, = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
    assert fixed_params(waiting) == {"x": 3, "y": "a"}
    study.optimize(lambda t: t.suggest_int("x", 0, 9) + 0.0, n_trials=2)
    done = study.get_trials(deepcopy=False)
    assert fixed_params(done[0]) == {"x": 3, "y": "a"} and done[0].params == {"x": 3}
    assert fixed_params(done[1]) == {}


def check_journal_op_codes(tmp: Path) -> None:
    import json

    from gemvtune.tuning.coordination.optuna_adapter import journal_op_codes

    ops = journal_op_codes()
    assert ops is not None, "JournalOperation not found in any of Optuna's modules"
    path = tmp / "ops.log"
    study = _study(optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(path))))
    study.set_user_attr("u", 1)
    study.enqueue_trial({"x": 1})
    study.optimize(lambda t: t.suggest_int("x", 0, 3) + 0.0, n_trials=2)
    written = {json.loads(line)["op_code"] for line in path.read_text().splitlines()}
    assert len(written) >= 5 and written <= ops, (written, ops)


def check_record_hook(tmp: Path) -> None:
    from gemvtune.tuning.coordination.optuna_adapter import RecordHookJournalStorage

    class Counting(RecordHookJournalStorage):
        calls = 0
        refuse = False

        def write_record(self, write: Callable[[], None]) -> None:
            type(self).calls += 1
            if self.refuse:
                raise OSError("refused")
            write()

    path = tmp / "hook.log"
    st = Counting(optuna.storages.journal.JournalFileBackend(str(path)))
    study = _study(st)
    study.optimize(lambda t: t.suggest_int("x", 0, 3) + 0.0, n_trials=2)
    lines = path.read_text().splitlines()
    assert Counting.calls == len(lines) > 0   # every record, and only through the hook
    Counting.refuse = True
    try:
        study.set_user_attr("lost", 1)
    except OSError:
        pass
    else:
        raise AssertionError("the hook's error did not reach the caller")
    assert path.read_text().splitlines() == lines   # nothing appended past the hook


def check_brute_force_tree(tmp: Path) -> None:
    from gemvtune.tuning.coordination.optuna_adapter import TreeFilteredBruteForceSampler
    from gemvtune.tuning.samplers import make_sampler

    seen: list[type] = []

    class Recording(TreeFilteredBruteForceSampler):
        @staticmethod
        def tree_trials(trials):
            seen.append(type(trials))
            return trials

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        study = _study(sampler=Recording(seed=0))
        study.optimize(lambda t: t.suggest_categorical("x", [0, 1, 2]) + 0.0, n_trials=10)
    assert sorted(t.params["x"] for t in study.trials) == [0, 1, 2]   # each once, then the sampler stops
    assert seen and set(seen) == {list}, seen
    # gemvtune's exhaustive sampler: a finished trial missing a parameter (a worker killed while it sampled) is
    # left out of the tree, and the grid is still walked whole
    dists = {"x": optuna.distributions.CategoricalDistribution([0, 1]),
             "y": optuna.distributions.CategoricalDistribution([0, 1])}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        study = _study(sampler=make_sampler("exhaustive", 0))
    study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL, params={"x": 0},
                                              distributions={"x": dists["x"]}))
    study.optimize(lambda t: t.suggest_categorical("x", [0, 1]) + 10.0 * t.suggest_categorical("y", [0, 1]),
                   n_trials=10)
    done = sorted((t.params["x"], t.params["y"]) for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE)
    assert done == [(0, 0), (0, 1), (1, 0), (1, 1)], done


def check_optimize_logger(tmp: Path) -> None:
    from gemvtune.tuning.coordination.optuna_adapter import optimize_logger

    got: list[str] = []

    class Grab(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            got.append(record.getMessage())
            return False

    def fails(t: optuna.Trial) -> float:
        raise ValueError("boom")

    log, grab = optimize_logger(), Grab()
    log.addFilter(grab)
    try:
        _study().optimize(fails, n_trials=1, catch=(ValueError,))
    finally:
        log.removeFilter(grab)
    assert any("Trial 0 failed" in m and "boom" in m for m in got), got


def check_journal_store_end_to_end(tmp: Path) -> None:
    """The coordination on a journal, as a search uses it: gemvtune's journal backend and lock, the creator of
    each trial, a claim, a dead worker's trial failed and retried."""
    from gemvtune.tuning.coordination.coord import Coordinator, Worker
    from gemvtune.tuning.coordination.storage import CREATED_BY, open_store

    store = open_store(f"journal:{tmp / 'e2e.log'}")
    study = _study(store.storage, study_name="e2e")
    trial = study.ask()
    me = Coordinator(store)
    gone = Coordinator(store, Worker(me.worker.host, 2 ** 22 + 12345))   # (above any pid_max: a dead worker)
    gone.start_trial(trial)
    try:
        assert gone.claim(study, trial, "cfg", budget=5) == ("go", 0)
        gone.end_trial(trial)
    finally:
        gone.close()
    assert me.fail_stale(study) == [0]
    states = [t.state for t in study.get_trials(deepcopy=False)]
    assert states == [optuna.trial.TrialState.FAIL, optuna.trial.TrialState.WAITING], states
    retry = study.ask()
    assert retry.number == 1 and study.get_trials(deepcopy=False)[1].system_attrs[CREATED_BY]["pid"] == os.getpid()


CHECKS: dict[str, Callable[[Path], None]] = {f.__name__: f for f in (
    check_study_storage, check_trial_id, check_fixed_params, check_journal_op_codes, check_record_hook,
    check_brute_force_tree, check_optimize_logger, check_journal_store_end_to_end)}


def run_checks() -> int:
    """Every check on the Optuna this process imports; one line each; 0 if all pass."""
    print(f"optuna {optuna.__version__} from {Path(optuna.__file__).parent}")
    optuna.logging.set_verbosity(optuna.logging.WARNING)   # (this process only)
    bad = 0
    for name, check in CHECKS.items():
        with tempfile.TemporaryDirectory() as tmp:
            try:
                check(Path(tmp))
            except Exception as e:
                bad += 1
                print(f"FAIL {name}: {type(e).__name__}: {e}")
            else:
                print(f"ok {name}")
    return 1 if bad else 0


# ---- the tests --------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(CHECKS))
def test_hook_on_the_installed_optuna(name, tmp_path):
    CHECKS[name](tmp_path)


def test_the_adapter_states_the_range_it_supports_and_it_is_pyprojects_pin():
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    from gemvtune.tuning.coordination import optuna_adapter

    assert SpecifierSet(optuna_adapter.SUPPORTED_OPTUNA) == SpecifierSet(pinned_optuna())
    assert "SUPPORTED_OPTUNA" in (optuna_adapter.__doc__ or "")
    assert Version(optuna.__version__) in SpecifierSet(optuna_adapter.SUPPORTED_OPTUNA), optuna.__version__


def test_every_hook_of_the_adapter_is_checked():
    """A function or class added to the adapter needs its check here."""
    import inspect

    from gemvtune.tuning.coordination import optuna_adapter as ad

    public = {n for n, v in vars(ad).items() if not n.startswith("_") and (inspect.isfunction(v) or inspect.isclass(v))
              and getattr(v, "__module__", "") == ad.__name__}
    covered = {"study_storage", "trial_id", "fixed_params", "journal_op_codes", "RecordHookJournalStorage",
               "TreeFilteredBruteForceSampler", "optimize_logger"}
    assert public == covered, public ^ covered


_NO_INDEX = ("from versions: none", "No matching distribution", "Could not fetch URL", "ConnectionError",
             "Failed to establish", "Name or service not known", "Temporary failure in name resolution",
             "Network is unreachable", "ProxyError", "Max retries exceeded")


@pytest.fixture(scope="module")
def lowest_optuna(tmp_path_factory) -> Path:
    """The lowest pinned Optuna, installed (without its dependencies: the environment's serve) into a folder."""
    version = lowest_pinned()
    target = tmp_path_factory.mktemp("optuna-lowest")
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-input", "--disable-pip-version-check",
                        "--retries", "1", "--timeout", "20", "--target", str(target), f"optuna=={version}"],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        out = r.stdout + r.stderr
        if any(s in out for s in _NO_INDEX):
            pytest.skip(f"pip cannot reach a package index to install optuna=={version}: "
                        f"{out.strip().splitlines()[-1] if out.strip() else 'no output'}")
        raise AssertionError(f"pip install optuna=={version} failed:\n{out}")
    return target


@pytest.mark.slow  # installs an Optuna with pip, then runs every check against it in a process of its own
def test_hooks_on_the_lowest_pinned_optuna(lowest_optuna):
    version = lowest_pinned()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(lowest_optuna), str(ROOT)]))
    code = ("import sys, optuna, gemvtune; from pathlib import Path\n"
            f"assert Path(optuna.__file__).is_relative_to({str(lowest_optuna)!r}), optuna.__file__\n"
            f"assert Path(gemvtune.__file__).is_relative_to({str(ROOT)!r}), gemvtune.__file__\n"
            f"sys.path.insert(0, {str(ROOT / 'tests')!r})\n"
            "import test_optuna_adapter as t\nsys.exit(t.run_checks())\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=str(ROOT), env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    from packaging.version import Version

    first = r.stdout.splitlines()[0]
    assert Version(first.split()[1]) == Version(version), first
    for name in CHECKS:
        assert f"ok {name}" in r.stdout, r.stdout


if __name__ == "__main__":
    sys.exit(run_checks())
