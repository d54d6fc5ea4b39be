"""Issue 17, item 8 ("one clear line, never a traceback"), for the storage of a search (replay runner:
CPU only):

1. a journal (or the lock file beside it, or its folder) that cannot be written is refused before
   anything is measured: one line naming it, exit 2, nothing written;
2. a journal whose writes start failing mid-search (a folder turned read-only, whatever the backend
   raises) ends the search with one line and exit 1, never Optuna's ``AssertionError: Should not
   reach.`` (its trial loop raises it when the record finishing a trial is lost) nor an endless wait
   on a lock file that can no longer be removed; every completed trial stays readable, a rerun resumes;
3. Ctrl-C prints gemvtune's one line (exit 130), not Optuna's report of the interrupted trial.

Root writes through read-only permissions, so the permission cases are simulated in-process; the
real chmod cases run only as another user."""

import errno
import logging
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import ROOT, run_cli
from journals import SHAPE, SWEEPS, journal_study
from journals import measured as _measured
from journals import whole as _whole
from slowreplay import slow_replay_env

import gemvtune.runners.replay as rp
import gemvtune.tuning.coordination.journal as jm
import gemvtune.tuning.search_run as sc
from gemvtune.cli.main import main

ROOT_USER = os.geteuid() == 0
FINISHED = (1, 2, 3)   # TrialState COMPLETE, PRUNED, FAIL as the journal records them


def _args(out, trials, *extra):
    return ["search", "--shape", SHAPE, "--replay", SWEEPS, "--trials", str(trials), "--results", str(out), *extra]


def _lines(text):
    return [ln for ln in text.splitlines() if ln.strip()]


def _files(folder):
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.fixture(autouse=True)
def _gemvtune_logger():
    """main() sets the gemvtune logger up once, on the stderr of the test that calls it first: undone
    after each test (a later test's warnings must reach its own captured stderr)."""
    log = logging.getLogger("gemvtune")
    saved = (list(log.handlers), log.level, log.propagate)
    yield
    log.handlers[:], log.level, log.propagate = saved


@pytest.fixture
def searched(tmp_path):
    """A results folder holding a finished 10-trial search."""
    out = tmp_path / "res"
    r = run_cli(*_args(out, 10))
    assert r.returncode == 0, r.stderr
    return out


@pytest.fixture
def measures(monkeypatch):
    """Counts the replay runner's measurements."""
    calls = [0]
    real = rp.ReplayRunner.measure

    def measure(self, *a, **k):
        calls[0] += 1
        return real(self, *a, **k)

    monkeypatch.setattr(rp.ReplayRunner, "measure", measure)
    return calls


def _resumes(out, before, trials=40):
    """A rerun (its own process) resumes: the budget reached, every trial kept from before unchanged."""
    journal = out / "optuna-journal.log"
    r = run_cli(*_args(out, trials))
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    after = _measured(journal)
    assert len(after) == trials and all(after[k] == v for k, v in before.items())
    assert not [t.number for t in journal_study(journal).get_trials(deepcopy=False) if t.state.name == "RUNNING"]
    _whole(journal)
    return r


# ---- 1. a storage that cannot be written: refused before any measuring ------------------------------

def _deny_access(monkeypatch, target):
    real = os.access

    def access(path, mode, *a, **k):
        if os.fspath(path) == str(target) and mode & os.W_OK:
            return False
        return real(path, mode, *a, **k)

    monkeypatch.setattr(os, "access", access)


def _deny_open(monkeypatch, target):
    def fake_open(path, mode="r", *a, **k):
        if os.fspath(path) == str(target) and set(mode) & set("aw+"):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return open(path, mode, *a, **k)

    monkeypatch.setattr(sc, "open", fake_open, raising=False)   # (the preflight's open only)


def _deny_rofs(monkeypatch, target):
    def fake_open(path, mode="r", *a, **k):
        if os.fspath(path) == str(target) and set(mode) & set("aw+"):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return open(path, mode, *a, **k)

    monkeypatch.setattr(sc, "open", fake_open, raising=False)


@pytest.mark.parametrize("which", ["optuna-journal.log", "optuna-journal.log.gemvtune.lock"],
                         ids=["journal", "its lock file"])
@pytest.mark.parametrize("deny", [_deny_access, _deny_open, _deny_rofs], ids=["access", "open", "read-only fs"])
@pytest.mark.slow  # each case starts from a real search (the searched fixture)
def test_unwritable_journal_is_refused_before_measuring(searched, monkeypatch, capsys, measures, which, deny):
    target = searched / which
    assert target.exists()
    before = _files(searched)
    deny(monkeypatch, target)
    with pytest.raises(SystemExit) as e:
        main(_args(searched, 20))
    cap = capsys.readouterr()
    lines = _lines(cap.err)
    assert e.value.code == 2, cap.err
    assert len(lines) == 1 and lines[0].startswith("gemvtune: error: ") and "Traceback" not in cap.err, cap.err
    assert str(target) in lines[0] and "cannot be written" in lines[0], lines[0]
    assert measures[0] == 0 and "ceiling" not in cap.out          # checked before any measuring
    assert _files(searched) == before                             # nothing written, nothing made
    monkeypatch.undo()
    _resumes(searched, _measured(searched / "optuna-journal.log"), trials=20)


@pytest.mark.slow  # starts from a real search (the searched fixture)
def test_unwritable_journal_with_workers_is_refused_by_the_parent(searched, monkeypatch, capsys):
    target = searched / "optuna-journal.log"
    before = _files(searched)
    _deny_access(monkeypatch, target)
    with pytest.raises(SystemExit) as e:
        main(_args(searched, 20, "--workers", "2"))
    cap = capsys.readouterr()
    lines = _lines(cap.err)
    assert e.value.code == 2 and len(lines) == 1 and str(target) in lines[0] and "cannot be written" in lines[0], cap.err
    assert _files(searched) == before


@pytest.mark.skipif(ROOT_USER, reason="root writes through read-only permissions")
@pytest.mark.parametrize("what", ["journal", "lock file", "folder"])
@pytest.mark.slow  # starts from a real search (the searched fixture)
def test_read_only_journal_real_permissions(searched, what):
    target = {"journal": searched / "optuna-journal.log", "lock file": searched / "optuna-journal.log.gemvtune.lock",
              "folder": searched}[what]
    mode = target.stat().st_mode & 0o777
    before = _files(searched)
    os.chmod(target, 0o555 if what == "folder" else 0o444)
    try:
        r = run_cli(*_args(searched, 20))
    finally:
        os.chmod(target, mode)
    lines = _lines(r.stderr)
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert str(target) in lines[0] and ("cannot be written" in lines[0] or "not writable" in lines[0]), lines[0]
    assert "ceiling" not in r.stdout
    assert _files(searched) == before


# ---- 2. writes that start failing mid-search -----------------------------------------------------

def _fail_appends(monkeypatch, when, exc):
    """The journal backend's appends raise ``exc(path)`` from the first batch of records for which
    ``when(records, calls)`` holds, and on every append after it. Returns the injection's state:
    ``after`` lists the appends tried after the first failure (none: nothing lands after a lost record)."""
    real = jm.SafeJournalFileBackend.append_logs
    state = {"calls": 0, "failed": False, "after": []}

    def append_logs(self, logs):
        state["calls"] += 1
        if state["failed"]:
            state["after"].append(logs)
            raise exc(self._file_path)
        if when(logs, state["calls"]):
            state["failed"] = True
            raise exc(self._file_path)
        return real(self, logs)

    monkeypatch.setattr(jm.SafeJournalFileBackend, "append_logs", append_logs)
    return state


def _nth(op, n, finished=False):
    """The n-th append (counted from the first) of a record of op code ``op`` (a finished state only)."""
    seen = [0]

    def when(logs, calls):
        rec = logs[0]
        if rec["op_code"] == op and (not finished or rec.get("state") in FINISHED):
            seen[0] += 1
            return seen[0] == n
        return False

    return when


ERRORS = {
    "EACCES": lambda path: PermissionError(errno.EACCES, os.strerror(errno.EACCES), path),
    "EROFS": lambda path: OSError(errno.EROFS, os.strerror(errno.EROFS), path),
    "no errno": lambda path: OSError("the backend could not append"),
}
WHEN = {
    # the record that finishes a trial (Optuna's tell): the trial stays RUNNING, and Optuna's trial loop
    # replaces the error with "AssertionError: Should not reach."
    "finishing a trial": (6, 12, True),
    "inside a trial": (8, 60, False),       # a trial attribute, written by the objective
    "creating a trial": (4, 15, False),     # Optuna's ask
}


@pytest.mark.parametrize("err", list(ERRORS), ids=list(ERRORS))
@pytest.mark.parametrize("when", list(WHEN), ids=list(WHEN))
@pytest.mark.slow  # each case starts from a real search (the searched fixture)
def test_writes_failing_mid_search_end_with_one_line(searched, monkeypatch, capsys, err, when):
    """In this process (the failure as Optuna meets it); the rerun is the next test's (a trial left
    RUNNING by this process, still alive, is rightly not taken for a dead worker's)."""
    journal = searched / "optuna-journal.log"
    before = _measured(journal)
    state = _fail_appends(monkeypatch, _nth(*WHEN[when]), ERRORS[err])
    with pytest.raises(SystemExit) as e:
        main(_args(searched, 40))
    cap = capsys.readouterr()
    lines = _lines(cap.err)
    assert state["failed"], "the injected failure was never reached"
    assert e.value.code == 1, cap.err
    assert len(lines) == 1 and "Traceback" not in cap.err and "Should not reach" not in cap.err, cap.err
    assert lines[0].startswith("gemvtune: error: cannot write the journal ") and str(journal) in lines[0]
    assert "run the same command again to resume" in lines[0]
    assert state["after"] == []                                   # nothing appended after the lost record
    monkeypatch.undo()
    _whole(journal)
    mid = _measured(journal)                                      # every completed trial readable
    assert len(mid) > len(before) and all(mid[k] == v for k, v in before.items())


# The same injection in a search process of its own, then a rerun.
FAIL_APPENDS = """
import errno, os, sys
import gemvtune.tuning.coordination.journal as jm
op, nth, finished, err = (int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4])
real, seen, failed = jm.SafeJournalFileBackend.append_logs, [0], [False]
def append_logs(self, logs):
    rec = logs[0]
    if not failed[0] and rec["op_code"] == op and (not finished or rec.get("state") in (1, 2, 3)):
        seen[0] += 1
        failed[0] = seen[0] == nth
    if failed[0]:
        if err == "EACCES":
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), self._file_path)
        raise OSError("the backend could not append")
    return real(self, logs)
jm.SafeJournalFileBackend.append_logs = append_logs
from gemvtune.cli.main import main
main(sys.argv[5:])
"""


@pytest.mark.parametrize("when,err", [("finishing a trial", "EACCES"), ("inside a trial", "no errno")])
@pytest.mark.slow  # a real search, a failing one, then its rerun
def test_writes_failing_mid_search_then_a_rerun_resumes(searched, when, err):
    journal = searched / "optuna-journal.log"
    before = _measured(journal)
    op, nth, finished = WHEN[when]
    r = subprocess.run([sys.executable, "-c", FAIL_APPENDS, str(op), str(nth), str(int(finished)), err,
                        *_args(searched, 40)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    lines = _lines(r.stderr)
    assert r.returncode == 1 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"cannot write the journal {journal}" in lines[0] and "run the same command again" in lines[0]
    _whole(journal)
    mid = _measured(journal)
    assert len(mid) > len(before) and all(mid[k] == v for k, v in before.items())
    _resumes(searched, mid)


# A search whose folder turns read-only in the middle of an append, while it holds the journal's lock
# (a file beside the journal): the lock can be neither removed nor, at the next append, made. Before,
# this was an endless loop (Optuna's lock kept trying to break its own lock file); now one line.
READ_ONLY_IN_LOCK = """
import errno, os, sys
import gemvtune.tuning.coordination.journal as jm
N, real, calls, ro = int(sys.argv[1]), jm.SafeJournalFileBackend._append, [0], [False]
def append(self, data):
    real(self, data)
    calls[0] += 1
    ro[0] = ro[0] or calls[0] == N
jm.SafeJournalFileBackend._append = append
real_open, real_rename = os.open, os.rename
def denied(path):
    return ro[0] and os.fspath(path).endswith("optuna-journal.log.lock")
def fake_open(path, flags, *a, **k):
    if denied(path) and flags & os.O_CREAT and not os.path.lexists(path):   # (an existing one: EEXIST)
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
    return real_open(path, flags, *a, **k)
def fake_rename(src, dst, *a, **k):
    if denied(src):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), src, None, dst)
    return real_rename(src, dst, *a, **k)
jm.os.open, jm.os.rename = fake_open, fake_rename   # (os itself: Optuna's lock uses it too)
from gemvtune.cli.main import main
main(sys.argv[2:])
"""

# The same with real permissions (not as root): the folder is made read-only inside the lock window.
READ_ONLY_FOLDER = """
import os, sys
import gemvtune.tuning.coordination.journal as jm
N, real, calls = int(sys.argv[1]), jm.SafeJournalFileBackend._append, [0]
def append(self, data):
    real(self, data)
    calls[0] += 1
    if calls[0] == N:
        os.chmod(os.path.dirname(self._file_path), 0o555)
jm.SafeJournalFileBackend._append = append
from gemvtune.cli.main import main
main(sys.argv[2:])
"""


@pytest.mark.parametrize("script", [
    READ_ONLY_IN_LOCK,
    pytest.param(READ_ONLY_FOLDER, marks=pytest.mark.skipif(ROOT_USER, reason="root writes through read-only permissions")),
], ids=["simulated", "chmod"])
@pytest.mark.parametrize("n", [3, 40, 101])
@pytest.mark.slow  # each case starts from a real search (the searched fixture)
def test_folder_turned_read_only_mid_append_is_one_line(searched, script, n):
    journal = searched / "optuna-journal.log"
    before = _measured(journal)
    mode = searched.stat().st_mode & 0o777
    try:
        r = subprocess.run([sys.executable, "-c", script, str(n), *_args(searched, 40)], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
    finally:
        os.chmod(searched, mode)
    lines = _lines(r.stderr)
    assert r.returncode == 1, r.stderr
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"cannot write the journal {journal}" in lines[0] and "optuna-journal.log.lock" in lines[0], lines[0]
    _whole(journal)
    mid = _measured(journal)
    assert all(mid[k] == v for k, v in before.items())
    r = _resumes(searched, mid)            # the lock file left behind is broken after its grace period
    assert len(_lines(r.stderr)) <= 1 and all("journal lock" in ln for ln in _lines(r.stderr)), r.stderr


def test_lock_in_a_read_only_folder_fails_at_once(tmp_path, monkeypatch):
    lock = jm.JournalLock(str(tmp_path / "j.log"), grace_period=5)
    real = os.open

    def fake_open(path, flags, *a, **k):
        if os.fspath(path).endswith("j.log.lock"):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)
        return real(path, flags, *a, **k)

    monkeypatch.setattr(jm.os, "open", fake_open)
    t0 = time.monotonic()
    with pytest.raises(PermissionError):
        lock.acquire()
    assert time.monotonic() - t0 < 1


def test_interrupted_lock_wait_leaves_the_holders_lock(tmp_path, monkeypatch):
    """Ctrl-C while another process holds the lock: the interrupt goes on, the other's lock file stays
    (Optuna's lock removed it, or replaced the interrupt with RuntimeError('did not possess lock'))."""
    held = tmp_path / "j.log.lock"
    held.write_bytes(b"")
    lock = jm.JournalLock(str(tmp_path / "j.log"), grace_period=5)

    def sleep(s):
        raise KeyboardInterrupt

    monkeypatch.setattr(jm.time, "sleep", sleep)
    with pytest.raises(KeyboardInterrupt):
        lock.acquire()
    assert held.exists()


def test_ctrl_c_during_an_append_takes_effect_after_it():
    done = []
    with pytest.raises(KeyboardInterrupt):
        with jm.ctrl_c_deferred() as interrupted:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)                 # (the handler has run by now)
            assert interrupted
            done.append(1)                   # the block goes on to its end
    assert done == [1] and signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_lock_broken_by_another_process_is_released_quietly(tmp_path):
    lock = jm.JournalLock(str(tmp_path / "j.log"), grace_period=5)
    assert lock.acquire()
    os.unlink(tmp_path / "j.log.lock")      # another process broke it (held past the grace period)
    lock.release()
    assert lock.acquire()
    lock.release()
    assert not (tmp_path / "j.log.lock").exists()


# ---- 3. Ctrl-C --------------------------------------------------------------------------------------

class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record)


@pytest.fixture
def optuna_records():
    h = _Records()
    logger = logging.getLogger("optuna")
    logger.addHandler(h)
    yield h.records
    logger.removeHandler(h)


def _interrupt_measure(monkeypatch, on_call=3):
    real, calls = rp.ReplayRunner.measure, [0]

    def measure(self, *a, **k):
        calls[0] += 1
        if calls[0] == on_call:
            raise KeyboardInterrupt
        return real(self, *a, **k)

    monkeypatch.setattr(rp.ReplayRunner, "measure", measure)
    return calls


def _assert_interrupted(e, capfd, records):
    cap = capfd.readouterr()
    lines = _lines(cap.err)
    assert e.value.code == 130, cap.err
    assert lines == ["gemvtune: interrupted"], cap.err
    assert "Traceback" not in cap.err and "KeyboardInterrupt" not in cap.err
    assert not [r.getMessage() for r in records if "failed" in r.getMessage()]   # Optuna's report: dropped


@pytest.mark.slow  # starts from a real search (the searched fixture)
def test_ctrl_c_in_a_measurement_is_one_line(searched, monkeypatch, capfd, optuna_records):
    journal = searched / "optuna-journal.log"
    before = _measured(journal)
    calls = _interrupt_measure(monkeypatch)
    with pytest.raises(SystemExit) as e:
        main(_args(searched, 40))
    assert calls[0] == 3
    _assert_interrupted(e, capfd, optuna_records)
    monkeypatch.undo()
    _whole(journal)
    mid = _measured(journal)
    assert len(mid) == len(before) + 2 and all(mid[k] == v for k, v in before.items())
    _resumes(searched, mid)


# Ctrl-C in a measurement, then again while Optuna records the interrupted trial failed (its clean-up
# then raises an error of its own, an UnboundLocalError, from the interrupt); or Ctrl-C in the middle
# of a journal append (half the record written). In a process of their own: the trial the second
# interrupt leaves RUNNING is failed by the rerun, its process being gone.
CTRL_C = """
import os, sys
import gemvtune.tuning.coordination.journal as jm
import gemvtune.runners.replay as rp
how = sys.argv[1]
real_measure, measured = rp.ReplayRunner.measure, [0]
def measure(self, *a, **k):
    measured[0] += 1
    if how == "twice" and measured[0] == 3:
        raise KeyboardInterrupt
    return real_measure(self, *a, **k)
rp.ReplayRunner.measure = measure
real_append, again = jm.SafeJournalFileBackend.append_logs, [False]
def append_logs(self, logs):
    if how == "twice" and measured[0] >= 3 and not again[0] and logs[0]["op_code"] == 6 and logs[0].get("state") == 3:
        again[0] = True
        raise KeyboardInterrupt
    return real_append(self, logs)
jm.SafeJournalFileBackend.append_logs = append_logs
real_write, writes = jm._write_all, [0]
def write_all(fd, data):
    writes[0] += 1
    if how == "mid-append" and writes[0] == 30:
        os.write(fd, data[: len(data) // 2])
        raise KeyboardInterrupt
    real_write(fd, data)
jm._write_all = write_all
from gemvtune.cli.main import main
try:
    main(sys.argv[2:])
finally:
    assert how != "twice" or again[0], "the second interrupt was never reached"
"""


@pytest.mark.parametrize("how", ["twice", "mid-append"])
@pytest.mark.slow  # searches in a subprocess interrupted
def test_ctrl_c_in_optunas_bookkeeping_is_one_line(searched, how):
    journal = searched / "optuna-journal.log"
    before = _measured(journal)
    r = subprocess.run([sys.executable, "-c", CTRL_C, how, *_args(searched, 40)], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 130, r.stderr
    assert _lines(r.stderr) == ["gemvtune: interrupted"], r.stderr
    _whole(journal)                                    # (mid-append: cut back at once, nothing to repair)
    mid = _measured(journal)
    assert all(mid[k] == v for k, v in before.items())
    r = _resumes(searched, mid)
    assert "damaged" not in r.stderr, r.stderr


@pytest.mark.slow  # a search in a subprocess, SIGINT, then its rerun
def test_sigint_mid_search_is_one_line_then_a_rerun_resumes(searched):
    """A real Ctrl-C (SIGINT) once the search has measured a trial of its own: wherever it lands, one
    line and exit 130."""
    journal = searched / "optuna-journal.log"
    base = journal.read_text().count('"measured":true')
    before = _measured(journal)
    env = slow_replay_env(0.2)
    p = subprocess.Popen([sys.executable, "-m", "gemvtune", *_args(searched, 40)], cwd=ROOT, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and p.poll() is None and journal.read_text().count('"measured":true') <= base:
        time.sleep(0.01)
    assert p.poll() is None, "the search ended before it could be interrupted"
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    assert _lines(err) == ["gemvtune: interrupted"], err
    _whole(journal)
    mid = _measured(journal)
    assert all(mid[k] == v for k, v in before.items())
    _resumes(searched, mid)
