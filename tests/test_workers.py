"""Several worker processes sharing one study (issue 9), on the replay runner so they run on CI: through
the embedded journal file and through a real PostgreSQL server (GEMVTUNE_TEST_PG_URL, which .ci/run
starts on loopback). Each measurement takes 30 ms (tests/hooks: slow_replay_env) so the workers overlap.

Checked: no config measured twice, the total budget exact, the measured trials spread over workers, a
worker SIGKILLed mid-trial leaves no trial RUNNING (failed, retried, measured by another), one
confirmation, and the winner equal to a single worker's on the same sweep (an exhaustive search of a
64-point sub-grid cut from the recorded 14336x4096 sweep, so both must find its optimum)."""

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import optuna
import pandas as pd
import pytest
from conftest import ROOT, run_cli
from slowreplay import slow_replay_env

from gemvtune import LLAMA_CPP, GemvConfig, Shape
from gemvtune.runners.replay import STUDY_SUFFIX
from gemvtune.tuning.coordination.storage import make_storage, open_store, storage_lock
from gemvtune.tuning.search import study_name

SWEEP = ROOT / "results" / "nvidia-h200" / "measurements" / "sweep-14336x4096x1.csv.gz"
SUB = {"block": [128, 256], "vec": ["half2", "half8"], "acc": ["fp32"], "tpr": [64, 256], "unroll": [1, 2],
       "split_k": [1, 2], "hint": ["default", "evict_first"], "x_load": ["ldg"]}
NAME = study_name(Shape(14336, 4096), "nvidia-h200") + STUDY_SUFFIX   # replayed searches: their own studies
PG_URL = os.environ.get("GEMVTUNE_TEST_PG_URL")


@pytest.fixture(scope="module")
def subsweep(tmp_path_factory):
    """A real sweep cut down to a sub-grid (rows and sidecar), and how many of its configs are valid."""
    d = tmp_path_factory.mktemp("subsweep")
    df = pd.read_csv(SWEEP)
    keep = set()
    import itertools

    for vals in itertools.product(*SUB.values()):
        c = GemvConfig(**dict(zip(SUB, vals)))
        if c.is_valid(Shape(14336, 4096)):
            keep.add(c.label)
    assert LLAMA_CPP.label in keep
    sub = df[df.name.isin(keep)]
    assert len(sub) == len(keep) >= 30
    with gzip.open(d / "sweep-14336x4096x1.csv.gz", "wt") as f:
        sub.to_csv(f, index=False)
    meta = json.loads(SWEEP.with_name("sweep-14336x4096x1.json").read_text())
    meta["grid"] = SUB
    (d / "sweep-14336x4096x1.json").write_text(json.dumps(meta))
    best = sub[sub.status == "ok"].sort_values("us_median").name.iloc[0]
    return d, len(keep), best


def _search(sweep_dir, out, budget, *extra, env=None, wait=True):
    args = [sys.executable, "-m", "gemvtune", "search", "--shape", "14336x4096", "--replay", str(sweep_dir),
            "--sampler", "exhaustive", "--trials", str(budget), "--results", str(out), "--top-k", "2",
            "--rounds", "1", "--heartbeat", "0.5", *extra]
    e = slow_replay_env(0.03, env)
    p = subprocess.Popen(args, cwd=ROOT, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if not wait:
        return p
    out_text, _ = p.communicate(timeout=600)
    return p.returncode, out_text


def _trials(storage, name=NAME):
    storage = storage() if callable(storage) else storage   # (a journal opens once its folder exists)
    return optuna.load_study(study_name=name, storage=storage).get_trials(deepcopy=False)


def _check_shared(trials, budget):
    measured = [t for t in trials if t.user_attrs.get("measured") and t.state.name in ("COMPLETE", "PRUNED")]
    labels = [t.user_attrs["label"] for t in measured]
    assert len(measured) == budget, (len(measured), budget)               # the global budget, exactly
    assert len(labels) == len(set(labels)), Counter(labels).most_common(3)  # nothing measured twice
    assert not [t.number for t in trials if t.state.name == "RUNNING"]    # nothing stuck
    return Counter(t.user_attrs["worker"] for t in measured)


def _single_winner(subsweep, tmp_path):
    d, budget, best = subsweep
    rc, text = _search(d, tmp_path / "single", budget)
    assert rc == 0, text
    w = json.loads((tmp_path / "single" / "table.json").read_text())["entries"]["14336x4096x1"]["winner"]["label"]
    assert w == best
    return w


def _run_shared(subsweep, tmp_path, storage_args, storage):
    d, budget, best = subsweep
    out = tmp_path / "multi"
    rc, text = _search(d, out, budget, "--workers", "3", *storage_args)
    assert rc == 0, text
    per_worker = _check_shared(_trials(storage), budget)
    assert len(per_worker) >= 2, per_worker                               # they really shared the work
    assert text.count("the confirmation is by worker") == 2, text           # one confirmation, two deferred
    entry = json.loads((out / "table.json").read_text())["entries"]["14336x4096x1"]
    assert entry["winner"]["label"] == _single_winner(subsweep, tmp_path) == best
    return text


def _kill_one(subsweep, tmp_path, storage_args, storage):
    """Three workers; SIGKILL one of them while it measures; the others finish the budget."""
    d, budget, _ = subsweep
    out = tmp_path / "kill"
    p = _search(d, out, budget, "--workers", "3", *storage_args, wait=False)
    victim = None
    deadline = time.time() + 120
    while victim is None and time.time() < deadline and p.poll() is None:
        try:
            trials = _trials(storage)
        except Exception:   # the study (or the journal's folder) is not there yet
            trials = []
        running = [t for t in trials if t.state.name == "RUNNING" and t.user_attrs.get("claim")]
        if sum(1 for t in trials if t.user_attrs.get("measured")) >= 8 and running:
            pid, num = running[0].user_attrs["pid"], running[0].number
            os.kill(pid, signal.SIGSTOP)          # freeze it, then make sure it is still inside that trial
            if any(t.number == num and t.state.name == "RUNNING" for t in _trials(storage)):
                victim = pid
                os.kill(pid, signal.SIGKILL)      # killed mid-measurement, its slot claimed
            else:
                os.kill(pid, signal.SIGCONT)
        time.sleep(0.01)
    assert victim is not None, "no worker could be caught mid-trial"
    text, _ = p.communicate(timeout=600)
    pids = sorted({t.user_attrs.get("pid") for t in _trials(storage)} - {None})
    assert p.returncode == 1 and "exit -9" in text, f"victim {victim}, worker pids {pids}\n{text}"  # the parent names it
    trials = _trials(storage)
    try:
        _check_shared(trials, budget)
    except AssertionError as e:
        raise AssertionError(f"{e}\n{text}") from None
    failed = [t for t in trials if t.state.name == "FAIL"]
    assert failed, "the killed worker's trial was not failed"
    retried = [t for t in trials if t.system_attrs.get("failed_trial") in {f.number for f in failed}]
    assert retried and all(t.state.name != "RUNNING" for t in retried)
    assert "14336x4096x1" in json.loads((out / "table.json").read_text())["entries"]


@pytest.mark.slow  # worker processes searching one study
def test_workers_share_a_journal_study(subsweep, tmp_path):
    _run_shared(subsweep, tmp_path, [], lambda: make_storage(f"journal:{tmp_path / 'multi' / 'optuna-journal.log'}"))


@pytest.mark.slow  # worker processes, one killed mid-search
def test_killed_worker_journal(subsweep, tmp_path):
    _kill_one(subsweep, tmp_path, [], lambda: make_storage(f"journal:{tmp_path / 'kill' / 'optuna-journal.log'}"))


@pytest.fixture
def pg():
    if not PG_URL:
        pytest.skip("GEMVTUNE_TEST_PG_URL is not set (.ci/run starts PostgreSQL and sets it)")
    storage = make_storage(PG_URL)
    for s in optuna.get_all_study_summaries(storage, include_best_trial=False):
        optuna.delete_study(study_name=s.study_name, storage=storage)
    return storage


def test_workers_share_a_postgresql_study(subsweep, tmp_path, pg):
    _run_shared(subsweep, tmp_path, ["--storage", PG_URL], pg)


def test_killed_worker_postgresql(subsweep, tmp_path, pg):
    _kill_one(subsweep, tmp_path, ["--storage", PG_URL], pg)


def test_worker_joins_by_study_name(subsweep, tmp_path):
    """`gemvtune worker --storage … --study NAME` joins a study a search started, with its settings."""
    d, budget, best = subsweep
    out = tmp_path / "join"
    first = _search(d, out, budget, "--timeout", "0.5", wait=True)   # starts the study, stops early
    assert first[0] == 0, first[1]
    url = f"journal:{out / 'optuna-journal.log'}"
    before = sum(1 for t in _trials(make_storage(url)) if t.user_attrs.get("measured"))
    assert before < budget
    r = run_cli("worker", "--storage", url, "--study", NAME, "--replay", str(d), "--results", str(out),
                "--heartbeat", "0.5")
    assert r.returncode == 0, r.stderr
    _check_shared(_trials(make_storage(url)), budget)
    assert json.loads((out / "table.json").read_text())["entries"]["14336x4096x1"]["winner"]["label"] == best


@pytest.mark.parametrize("args, needle", [
    (["--study", "nope"], "no study 'nope'"),
    (["--study", NAME + "-splitk"], "no study"),
])
def test_worker_bad_input(tmp_path, args, needle):
    r = run_cli("worker", "--storage", f"journal:{tmp_path / 'j.log'}", *args, "--replay", str(SWEEP))
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_devices_and_workers_bad_input(tmp_path):
    r = run_cli("search", "--shape", "14336x4096", "--replay", str(SWEEP), "--devices", "0,0")
    assert r.returncode == 2 and "--devices" in r.stderr
    r = run_cli("search", "--shape", "14336x4096", "--replay", str(SWEEP), "--devices", "0", "--workers", "2")
    assert r.returncode == 2 and "not both" in r.stderr
    r = run_cli("search", "--shape", "14336x4096", "--replay", str(SWEEP), "--workers", "2", "--storage", "memory:")
    assert r.returncode == 2 and "shared storage" in r.stderr


def test_storage_lock_excludes_across_processes(tmp_path):
    """The journal's lock is a file lock: a second process cannot take it while this one holds it."""
    store = open_store(f"journal:{tmp_path / 'j.log'}")
    code = ("import sys, time; from gemvtune.tuning.coordination.storage import open_store, storage_lock; "
            f"s = open_store('journal:{tmp_path / 'j.log'}'); print(time.time(), flush=True)\n"
            "with storage_lock(s, 'x'): print(time.time(), flush=True)")
    with storage_lock(store, "x"):
        p = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
        tried = float(p.stdout.readline())   # the child is about to take the lock (its imports done, however slow)
        time.sleep(0.3)
        released = time.time()               # the lock is released after this instant
    got = float(p.communicate(timeout=60)[0])
    assert tried < released <= got          # ordering, not a duration: the child waited for the release


def test_gpu_lock_serializes_timing_across_processes():
    """Workers sharing one GPU time one at a time (the lock is per PCI bus id, host-wide, reentrant)."""
    from gemvtune.runners.cuda.gpulock import GpuLock

    bus = f"TEST:{os.getpid()}:00.0"
    lock = GpuLock(bus)
    code = ("import time; from gemvtune.runners.cuda.gpulock import GpuLock\n"
            f"lk = GpuLock({bus!r}); print(time.time(), flush=True)\n"
            "with lk.held(): print(time.time(), flush=True)")
    with lock.held():
        with lock.held():   # reentrant: a measurement that reads the ceiling inside it
            p = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True)
            tried = float(p.stdout.readline())   # the child is about to wait for the lock
            time.sleep(0.2)
            last_held = time.time()              # the lock is released after this instant
    got = float(p.communicate(timeout=60)[0])
    assert tried < last_held <= got            # ordering, not a duration: the child waited for the release
    os.unlink(lock.path)


def test_exhaustive_sampler_survives_a_trial_killed_while_sampling():
    """A worker killed between two suggest calls leaves a FAIL trial with some parameters only; the
    exhaustive sampler must keep proposing (Optuna's stock one raises 'param_name mismatch')."""
    from optuna.distributions import CategoricalDistribution

    from gemvtune.tuning.samplers import make_sampler

    study = optuna.create_study(sampler=make_sampler("exhaustive", 0))
    study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL, params={"a": 1},
                                              distributions={"a": CategoricalDistribution([1, 2])}))
    study.optimize(lambda t: t.suggest_categorical("a", [1, 2]) + t.suggest_categorical("b", [10, 20]), n_trials=4)
    done = [t.params for t in study.trials if t.state.name == "COMPLETE"]
    assert sorted((p["a"], p["b"]) for p in done) == [(1, 10), (1, 20), (2, 10), (2, 20)]


def test_pid_alive_counts_a_zombie_as_dead():
    """A killed worker that its parent has not reaped yet is a zombie: its trials must still be failed."""
    from gemvtune.safefile import pid_alive

    p = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.time() + 30
    while time.time() < deadline:
        with open(f"/proc/{p.pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                break
        time.sleep(0.05)
    assert not pid_alive(p.pid)      # exited, not reaped
    p.wait()
    assert not pid_alive(p.pid) and pid_alive(os.getpid())
