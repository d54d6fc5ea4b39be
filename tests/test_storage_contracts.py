"""The study storages' contracts (docs/troubleshooting.md, "Hostile files"): a journal a newer Optuna wrote, a file
that was never a journal, a FIFO as the journal or its lock, in-memory SQLite, Redis without its package. Each is
one line and exit 2, with the file byte-identical and no backup or repair made; the subprocess has a short timeout,
so a FIFO that hangs fails the test instead of blocking the suite."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT

SWEEPS = str(ROOT / "results" / "nvidia-h200" / "measurements")


def _search(storage, results, *extra, timeout=120):
    try:
        return subprocess.run([sys.executable, "-m", "gemvtune", "search", "--shape", "4096x4096", "--replay", SWEEPS,
                               "--trials", "2", "--storage", storage, "--results", str(results), *extra],
                              capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        pytest.fail("the search hung (opening a FIFO?)")


def _one_line(r, needle, code=2):
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == code, (r.returncode, r.stderr[-800:])
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in r.stderr, r.stderr[-800:]


@pytest.fixture(scope="module")
def journal(tmp_path_factory):
    """A journal a real (replayed) search wrote."""
    d = tmp_path_factory.mktemp("journal")
    j = d / "j.log"
    r = _search(f"journal:{j}", d / "res")
    assert r.returncode == 0, r.stderr[-800:]
    return j.read_bytes()


def _unchanged(folder, before):
    assert {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()} == before


def test_a_journal_with_an_op_code_this_optuna_does_not_know_is_refused_untouched(tmp_path, journal):
    j = tmp_path / "j.log"
    j.write_bytes(journal + json.dumps({"op_code": 99, "worker_id": "x", "study_id": 0}).encode() + b"\n")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    r = _search(f"journal:{j}", tmp_path / "res")
    _one_line(r, "op code 99")
    assert "newer Optuna" in r.stderr
    _unchanged(tmp_path, before)


@pytest.mark.parametrize("what,data", [
    ("a PNG", b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4),
    ("a CSV", b"M,d,n,us\n4096,4096,1,9.5\n"),
    ("JSON without op codes", b'{"study": "x"}\n{"trial": 1}\n'),
])
def test_a_file_that_is_not_a_journal_is_refused_not_repaired(tmp_path, what, data):
    j = tmp_path / "j.log"
    j.write_bytes(data)
    r = _search(f"journal:{j}", tmp_path / "res")
    _one_line(r, "is not an Optuna journal")
    assert j.read_bytes() == data, what
    assert not list(tmp_path.glob("j.log.damaged-*")), what


def test_a_journal_torn_in_its_first_record_is_still_repaired(tmp_path, journal):
    j = tmp_path / "j.log"
    j.write_bytes(journal[:journal.index(b"\n") // 2])   # killed during the very first append
    r = _search(f"journal:{j}", tmp_path / "res")
    assert r.returncode == 0, r.stderr[-800:]
    assert "damaged by an interrupted write" in r.stderr


def test_a_journal_or_its_lock_that_is_a_fifo_is_one_line(tmp_path, journal):
    fifo = tmp_path / "fifo.log"
    os.mkfifo(fifo)
    _one_line(_search(f"journal:{fifo}", tmp_path / "r1", timeout=60), "is a FIFO")
    j = tmp_path / "j.log"
    j.write_bytes(journal)
    os.mkfifo(tmp_path / "j.log.lock")
    _one_line(_search(f"journal:{j}", tmp_path / "r2", timeout=60), "lock")
    assert j.read_bytes() == journal
    dev = tmp_path / "z.log"
    dev.symlink_to("/dev/zero")
    _one_line(_search(f"journal:{dev}", tmp_path / "r3", timeout=60), "character device")


@pytest.mark.parametrize("url", ["sqlite:///", "sqlite:///:memory:"])
def test_in_memory_sqlite_is_refused_with_what_works(tmp_path, url):
    r = _search(url, tmp_path / "res")
    _one_line(r, "in-memory SQLite")
    assert "sqlite:///study.db" in r.stderr


def test_in_memory_sqlite_with_workers_is_refused(tmp_path):
    r = _search("sqlite:///:memory:", tmp_path / "res", "--workers", "2")
    _one_line(r, "in-memory SQLite")
    assert "started" not in r.stdout   # refused before any worker starts


@pytest.mark.skipif(importlib.util.find_spec("redis") is not None, reason="redis is installed here")
def test_redis_without_its_package_names_the_extra_in_one_line(tmp_path):
    _one_line(_search("redis://127.0.0.1:1", tmp_path / "res"), "gemvtune[redis]")


def test_the_redis_extra_is_declared():
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(r.startswith("redis") for r in extras["redis"])


def test_this_optunas_op_codes_are_found():
    from gemvtune.tuning.coordination.journalcheck import known_op_codes

    ops = known_op_codes()
    assert ops is not None and {0, 4, 5} <= ops   # CREATE_STUDY, CREATE_TRIAL, SET_TRIAL_PARAM in every Optuna 4/5
    assert 99 not in ops


def test_the_backend_itself_refuses_a_fifo_before_optunas_open(tmp_path):
    """SafeJournalFileBackend, however it is constructed, checks before Optuna's ``open(path, "ab")`` (which
    blocks on a FIFO); in a subprocess, so that a regression fails instead of hanging the suite."""
    fifo = tmp_path / "fifo.log"
    os.mkfifo(fifo)
    code = ("import sys\nfrom gemvtune.errors import UsageError\nfrom gemvtune.tuning.coordination.journal import SafeJournalFileBackend\n"
            "try:\n    SafeJournalFileBackend(sys.argv[1])\nexcept UsageError as e:\n    print(e)\n    sys.exit(2)\n")
    try:
        r = subprocess.run([sys.executable, "-c", code, str(fifo)], capture_output=True, text=True, timeout=60, cwd=ROOT)
    except subprocess.TimeoutExpired:
        pytest.fail("SafeJournalFileBackend hung opening a FIFO")
    assert r.returncode == 2 and "is a FIFO" in r.stdout, (r.stdout, r.stderr[-800:])


def test_a_journal_with_an_unknown_op_code_is_refused_in_process_too(tmp_path, journal):
    from gemvtune.errors import UsageError
    from gemvtune.tuning.coordination.storage import open_store

    j = tmp_path / "j.log"
    data = journal + b'{"op_code": 77, "worker_id": "w"}\n'
    j.write_bytes(data)
    n = data.count(b"\n")
    with pytest.raises(UsageError, match=f"line {n} has op code 77"):
        open_store(f"journal:{j}")
    assert j.read_bytes() == data
    assert sorted(p.name for p in tmp_path.iterdir()) == ["j.log"]   # no backup, no lock left
