"""Interruptions lose nothing: a search killed with SIGKILL mid-way resumes with every completed trial
kept and the table intact (replay runner, so this runs on CI)."""

import json
import os
import signal
import subprocess
import sys
import time

import optuna
import pytest
from conftest import ROOT, run_cli

from gemvtune import Shape
from gemvtune.runners.replay import STUDY_SUFFIX
from gemvtune.tuning.coordination.storage import make_storage
from gemvtune.tuning.search import study_name

pytestmark = pytest.mark.slow  # searches in subprocesses: SIGKILL then resume, two at once

SWEEPS = str(ROOT / "results" / "nvidia-h200" / "measurements")


def _measured(storage, name):
    st = optuna.load_study(study_name=name, storage=storage)
    return {t.number: (t.user_attrs["label"], t.value) for t in st.get_trials(deepcopy=False)
            if t.user_attrs.get("measured") and t.state != optuna.trial.TrialState.RUNNING}


def test_sigkill_mid_search_then_resume(tmp_path):
    out = tmp_path / "res"
    r = run_cli("search", "--shape", "4096x4096", "--replay", SWEEPS, "--trials", "10", "--results", str(out))
    assert r.returncode == 0, r.stderr
    table = out / "table.json"
    first = json.loads(table.read_text())["entries"]["4096x4096x1"]

    args = [sys.executable, "-m", "gemvtune", "search", "--shape", "14336x4096", "--replay", SWEEPS,
            "--trials", "100", "--results", str(out)]
    journal = out / "optuna-journal.log"
    base = journal.read_text().count('"measured":true')
    p = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and journal.read_text().count('"measured":true') < base + 10 and p.poll() is None:
        time.sleep(0.01)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert p.returncode == -signal.SIGKILL, "the search finished before it could be killed"

    storage = make_storage(f"journal:{journal}")
    name = study_name(Shape(14336, 4096), "nvidia-h200") + STUDY_SUFFIX
    before = _measured(storage, name)
    assert 5 <= len(before) < 100                      # (the trial measured last may still be RUNNING)
    json.loads(table.read_text())                        # the table is whole (atomic replace)

    r = run_cli(*args[3:])
    assert r.returncode == 0, r.stderr
    after = _measured(make_storage(f"journal:{journal}"), name)
    assert len(after) == 100                             # the budget counts the trials kept from before
    assert all(after[k] == v for k, v in before.items())  # every completed trial kept, none re-measured
    labels = [lab for lab, _ in after.values()]
    assert len(labels) == len(set(labels))
    data = json.loads(table.read_text())["entries"]
    assert data["4096x4096x1"] == first and "14336x4096x1" in data


def test_two_searches_write_one_table_concurrently(tmp_path):
    """Two processes (replay runner) searching different shapes into the same results folder: both
    entries land in the table, the shared journal holds both studies."""
    out = tmp_path / "res"
    procs = [subprocess.Popen([sys.executable, "-m", "gemvtune", "search", "--shape", s, "--replay", SWEEPS,
                               "--trials", "15", "--results", str(out)], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for s in ("4096x4096", "6144x4096", "28672x4096")]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    entries = json.loads((out / "table.json").read_text())["entries"]
    assert {"4096x4096x1", "6144x4096x1", "28672x4096x1"} <= set(entries)
    storage = make_storage(f"journal:{out / 'optuna-journal.log'}")
    for s in (Shape(4096, 4096), Shape(6144, 4096), Shape(28672, 4096)):
        assert len(_measured(storage, study_name(s, "nvidia-h200") + STUDY_SUFFIX)) == 15
