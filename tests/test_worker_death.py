"""Issue 17, data safety 4: workers started with --workers end with their parent (SIGKILL or SIGTERM
to it), and the trials they held are failed and retried by the next run, which completes the budget
with nothing left RUNNING (replay runner: CPU only)."""

import os
import signal
import subprocess
import sys
import time
from collections import Counter

import optuna
import pytest
from conftest import ROOT, run_cli
from slowreplay import slow_replay_env

from gemvtune import Shape
from gemvtune.safefile import pid_alive
from gemvtune.tuning.coordination.coord import Coordinator, Worker
from gemvtune.tuning.coordination.storage import CREATED_BY, make_storage, open_store
from gemvtune.tuning.search import study_name

SWEEPS = str(ROOT / "results" / "nvidia-h200" / "measurements")
BASE = study_name(Shape(4096, 4096), "nvidia-h200")


def _study(storage):
    """The replay search's study (named BASE, or BASE-replay where replayed studies are kept apart)."""
    names = {s.study_name for s in optuna.get_all_study_summaries(storage, include_best_trial=False)}
    (name,) = names & {BASE, BASE + "-replay"}
    return optuna.load_study(study_name=name, storage=storage)
BUDGET = 200   # at 0.1 s a measurement, two workers need 10 s: far longer than the 5 s they may outlive their parent


def _args(out, *extra):
    return ["search", "--shape", "4096x4096", "--replay", SWEEPS, "--trials", str(BUDGET), "--results", str(out),
            "--heartbeat", "0.5", *extra]


def _start_workers(out):
    env = slow_replay_env(0.1)
    p = subprocess.Popen([sys.executable, "-m", "gemvtune", *_args(out, "--workers", "2")], cwd=ROOT, env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    journal = out / "optuna-journal.log"
    deadline = time.time() + 120
    kids: list[int] = []
    while time.time() < deadline and p.poll() is None:
        try:
            with open(f"/proc/{p.pid}/task/{p.pid}/children") as f:
                kids = [int(x) for x in f.read().split()]
            measured = journal.read_text().count('"measured":true')
        except (OSError, ValueError):
            measured = 0
        if len(kids) == 2 and measured >= 6:
            return p, kids
        time.sleep(0.05)
    raise AssertionError(f"the workers did not get going: {p.poll()} {kids}")


def _gone_within(pids, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if not any(pid_alive(k) for k in pids):
            return True
        time.sleep(0.05)
    return False


def _check_rerun(out):
    r = run_cli(*_args(out))
    assert r.returncode == 0, r.stderr
    trials = _study(make_storage(f"journal:{out / 'optuna-journal.log'}")).trials
    measured = [t for t in trials if t.user_attrs.get("measured") and t.state.name in ("COMPLETE", "PRUNED")]
    labels = Counter(t.user_attrs["label"] for t in measured)
    assert len(measured) == BUDGET and labels.most_common(1)[0][1] == 1, (len(measured), labels.most_common(2), r.stderr)
    assert not [t.number for t in trials if t.state.name == "RUNNING"], r.stderr
    return trials


@pytest.mark.slow  # worker processes killed mid-search, then the rerun
def test_workers_die_with_a_sigkilled_parent_and_their_trials_are_retried(tmp_path):
    out = tmp_path / "res"
    p, kids = _start_workers(out)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert _gone_within(kids, 5.0), f"workers {kids} outlived their parent"
    trials = _check_rerun(out)
    failed = [t for t in trials if t.state.name == "FAIL" and "is gone" in t.system_attrs.get("gemvtune_failed", "")]
    assert failed, "the dead workers' trials were not failed"
    retried = {t.system_attrs.get("failed_trial") for t in trials} - {None}
    assert {t.number for t in failed} <= retried


@pytest.mark.slow  # worker processes stopped mid-search
def test_sigterm_to_the_parent_stops_its_workers(tmp_path):
    out = tmp_path / "res"
    p, kids = _start_workers(out)
    os.kill(p.pid, signal.SIGTERM)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 130 and "interrupted" in err and "Traceback" not in err, err
    assert _gone_within(kids, 5.0), f"workers {kids} outlived their parent"
    _check_rerun(out)


KILLED_AFTER_ASK = """
import os, sys
import optuna
from gemvtune.tuning.coordination.storage import open_store
st = open_store("journal:" + sys.argv[1]).storage
study = optuna.load_study(study_name="s", storage=st)
trial = study.ask()  # the trial is created RUNNING; the process dies before its worker attributes are all written
if sys.argv[2] == "pid":
    trial.set_user_attr("pid", os.getpid())
os._exit(9)
"""


@pytest.mark.parametrize("written", ["nothing", "pid"])
def test_a_trial_killed_before_its_attributes_is_failed_at_once(tmp_path, written):
    url = f"journal:{tmp_path / 'j.log'}"
    store = open_store(url)
    study = optuna.create_study(study_name="s", storage=store.storage)
    r = subprocess.run([sys.executable, "-c", KILLED_AFTER_ASK, str(tmp_path / "j.log"), written], cwd=ROOT,
                       timeout=120)
    assert r.returncode == 9
    (t,) = study.get_trials(deepcopy=False)
    assert t.state.name == "RUNNING" and "host" not in t.user_attrs and t.system_attrs[CREATED_BY]["pid"] > 0
    coord = Coordinator(store, Worker(t.system_attrs[CREATED_BY]["host"], os.getpid()))
    assert coord.fail_stale(study) == [t.number]          # its creator is dead: no 60 s wait
    retry = [x for x in study.get_trials(deepcopy=False) if x.state.name == "WAITING"]
    assert len(retry) == 1 and CREATED_BY not in retry[0].system_attrs and "pid" not in retry[0].user_attrs
    # taken from the queue, the retried trial names its new runner at once
    popped = study.ask()
    assert study._storage.get_trial(popped._trial_id).system_attrs[CREATED_BY]["pid"] == os.getpid()
    assert coord.fail_stale(study) == []
