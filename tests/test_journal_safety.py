"""Issue 17, data safety 1: a journal torn by a killed or failed write is repaired before the next
append (backed up, one warning line), and a full disk ends a search with one line and exit 1, every
completed trial readable, a rerun resuming (replay runner: CPU only)."""

import errno
import json
import os
import resource
import subprocess
import sys

import pytest
from conftest import ROOT, flock_free, run_cli
from journals import SHAPE, SWEEPS, journal_study, replay_study
from journals import measured as _measured
from journals import whole as _whole

from gemvtune.tuning.coordination.journal import scan
from gemvtune.tuning.coordination.storage import make_storage


def _search(out, trials, *extra, **kw):
    return run_cli("search", "--shape", SHAPE, "--replay", SWEEPS, "--trials", str(trials), "--results", str(out),
                   *extra, **kw)


def _lines(text):
    return [ln for ln in text.splitlines() if ln.strip()]


def _tear_tail(journal):
    last = journal.read_bytes().splitlines()[-1]
    with open(journal, "ab") as f:
        f.write(last[: len(last) // 2])            # a killed append: half a record, no newline


def _bad_last_line(journal):
    with open(journal, "ab") as f:
        f.write(b'{"op_code":4,"worker_id":"x","stud\n')   # newline-terminated, not JSON


def _older_gemvtune_appended(journal):
    lines = journal.read_bytes().splitlines()
    with open(journal, "ab") as f:
        f.write(lines[-1][:40])                    # torn ...
        f.write(b'{"op_code":2,"worker_id":"x","study_id":0,"user_attr":{"appended":1}}\n')   # ... and appended after


@pytest.mark.parametrize("damage", [_tear_tail, _bad_last_line, _older_gemvtune_appended],
                         ids=["torn tail", "unreadable last line", "appended after a torn record"])
@pytest.mark.slow  # a search in a subprocess, then its rerun
def test_torn_journal_is_repaired_then_the_search_resumes(tmp_path, damage):
    out = tmp_path / "res"
    r = _search(out, 10)
    assert r.returncode == 0, r.stderr
    journal = out / "optuna-journal.log"
    before = _measured(journal)
    assert len(before) == 10
    damage(journal)
    damaged = journal.read_bytes()

    r = _search(out, 20)
    assert r.returncode == 0, r.stderr
    lines = _lines(r.stderr)
    assert len(lines) == 1 and "damaged" in lines[0] and "repaired" in lines[0] and "Traceback" not in r.stderr, r.stderr
    backups = list(out.glob("optuna-journal.log.damaged-*"))
    assert len(backups) == 1 and backups[0].read_bytes() == damaged and str(backups[0]) in lines[0]
    _whole(journal)
    after = _measured(journal)
    assert len(after) == 20 and all(after[k] == v for k, v in before.items())
    assert not [t.number for t in journal_study(journal).get_trials(deepcopy=False) if t.state.name == "RUNNING"]
    assert json.loads((out / "table.json").read_text())["entries"]["4096x4096x1"]["search"]["measured_trials"] == 20
    if damage is _older_gemvtune_appended:        # the record appended after the torn one was salvaged
        assert replay_study(make_storage(f"journal:{journal}")).user_attrs["appended"] == 1

    r = _search(out, 20)                            # whole now: nothing more to say
    assert r.returncode == 0 and not _lines(r.stderr), r.stderr


def test_scan_keeps_complete_records_only():
    a, b = b'{"op_code":0,"x":1}', b'{"op_code":1,"y":2}'
    assert scan(a + b"\n" + b + b"\n") == (a + b"\n" + b + b"\n", "")
    assert scan(a + b"\n" + b[:7]) == (a + b"\n", "a torn last record (7 bytes)")
    fixed, why = scan(a + b"\n" + b[:5] + b + b"\n" + a + b"\n")      # torn, then appended after: salvaged
    assert fixed == a + b"\n" + b + b"\n" + a + b"\n" and "line 2" in why
    fixed, why = scan(a + b"\n" + b"\x00\x00garbage\n" + b + b"\n")      # unreadable mid-file: cut there
    assert fixed == a + b"\n" and "1 records after it cut off" in why
    assert scan(b"") == (b"", "")


# A search whose journal appends fail with ENOSPC after some trials, half the record written (as a
# real short write leaves it): the injection replaces the backend's write in a process of its own.
FULL_DISK = """
import errno, os, sys
import gemvtune.tuning.coordination.journal as jm
real, calls = jm._write_all, [0]
def full_disk(fd, data):
    calls[0] += 1
    if calls[0] > 150:
        os.write(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    real(fd, data)
jm._write_all = full_disk
from gemvtune.cli.main import main
main(sys.argv[1:])
"""


@pytest.mark.slow  # a search in a subprocess, then its rerun
def test_disk_full_mid_search_is_one_line_then_a_rerun_resumes(tmp_path):
    """ENOSPC in the middle of a journal append: one line, exit 1, the journal cut back to its last
    complete record, every completed trial readable, a rerun resumes."""
    out = tmp_path / "res"
    assert _search(out, 10).returncode == 0
    journal = out / "optuna-journal.log"
    before = _measured(journal)
    r = subprocess.run([sys.executable, "-c", FULL_DISK, "search", "--shape", SHAPE, "--replay", SWEEPS,
                        "--trials", "60", "--results", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    lines = _lines(r.stderr)
    assert r.returncode == 1, r.stderr
    assert len(lines) == 1 and "no space left on device" in lines[0] and "run the same command again" in lines[0], r.stderr
    _whole(journal)
    mid = _measured(journal)
    assert 10 < len(mid) < 60 and all(mid[k] == v for k, v in before.items())
    r = _search(out, 60)
    assert r.returncode == 0, r.stderr
    after = _measured(journal)
    assert len(after) == 60 and all(after[k] == v for k, v in mid.items())
    assert not [t.number for t in journal_study(journal).get_trials(deepcopy=False) if t.state.name == "RUNNING"]


@pytest.mark.parametrize("kind", ["journal", "sqlite"])
@pytest.mark.slow  # searches in a subprocess until the file-size limit (~80 s with SQLite)
def test_file_size_limit_mid_search(tmp_path, kind):
    """A real short write: the search runs under RLIMIT_FSIZE (its storage hits it after a few trials).
    The journal, and SQLite (its 'disk I/O error'): one line, exit 1, a rerun resumes."""
    out = tmp_path / "res"
    db = out / ("optuna-journal.log" if kind == "journal" else "s.db")
    extra = [] if kind == "journal" else ["--storage", f"sqlite:///{db}"]
    url = f"journal:{db}" if kind == "journal" else f"sqlite:///{db}"
    assert _search(out, 10, *extra).returncode == 0
    limit = db.stat().st_size + (60_000 if kind == "journal" else 30_000)

    def cap():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    args = [sys.executable, "-m", "gemvtune", "search", "--shape", SHAPE, "--replay", SWEEPS, "--trials", "60",
            "--results", str(out), *extra]
    r = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300, preexec_fn=cap)
    lines = _lines(r.stderr)
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    assert ("file size limit" if kind == "journal" else "SQLite") in lines[0] and "run the same command again" in lines[0]
    assert db.stat().st_size <= limit

    def measured():
        study = replay_study(make_storage(url))
        return {t.number: (t.user_attrs["label"], t.value) for t in study.get_trials(deepcopy=False)
                if t.user_attrs.get("measured") and t.state.name in ("COMPLETE", "PRUNED")}

    if kind == "journal":
        _whole(db)
    mid = measured()
    assert 10 <= len(mid) < 60
    r = _search(out, 60, *extra)
    assert r.returncode == 0, r.stderr
    after = measured()
    assert len(after) == 60 and all(after[k] == v for k, v in mid.items()) and not _lines(r.stderr)


def test_disk_full_writing_the_table_is_one_line(tmp_path, monkeypatch, capsys):
    """The class, not only the journal: an output write that fails for space is one line too."""
    import gemvtune.runtime.table as tm
    from gemvtune.cli.main import main

    def full(path, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(tm, "_atomic_write_json", full)
    out = tmp_path / "res"
    with pytest.raises(SystemExit) as e:
        main(["search", "--shape", SHAPE, "--replay", SWEEPS, "--trials", "8", "--results", str(out)])
    lines = _lines(capsys.readouterr().err)
    assert e.value.code == 1 and len(lines) == 1 and "table.json" in lines[0] and "no space left" in lines[0]
    assert len(_measured(out / "optuna-journal.log")) == 8


def test_storage_lock_is_a_filelock_beside_the_journal(tmp_path):
    """The workers' lock (gemvtune.tuning.coordination.storage.storage_lock) is a flock on ``<journal>.gemvtune.lock`` (a
    filelock.FileLock): held, another descriptor cannot take it; the threads of one process wait for each
    other; released, the file stays (waiters share its inode)."""
    import threading
    import time

    from gemvtune.tuning.coordination.storage import open_store, storage_lock

    store = open_store(f"journal:{tmp_path / 'j.log'}")
    lock = tmp_path / "j.log.gemvtune.lock"
    assert store.lock_path == str(lock)

    inside: list[int] = []

    def hold(i: int) -> None:
        with storage_lock(store, "x"):
            inside.append(i)
            time.sleep(0.05)
            inside.append(i)

    with storage_lock(store, "x"):
        assert not flock_free(lock)
        threads = [threading.Thread(target=hold, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        time.sleep(0.1)
        assert inside == []                      # they wait for this holder
    for t in threads:
        t.join(30)
    assert len(inside) == 6 and all(inside[k] == inside[k + 1] for k in range(0, 6, 2))   # one at a time
    assert lock.exists() and flock_free(lock)
