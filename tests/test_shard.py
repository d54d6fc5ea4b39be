"""The GPU suite's shards (tests/shard.py, pytest --shard I/K): every selected test in exactly one part, whole files,
the same split in every process, balanced by recorded seconds; the seconds read back from JUnit XML; a bad spec is
pytest's usage error."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT
from shard import assign, costs, parse, recorded, seconds_from_junit

FILES = ["tests/test_guard_gpu.py", "tests/test_gpu.py", "tests/test_mma.py", "tests/test_ring.py",
         "tests/test_tune_gpu.py"]


def _collect(*args: str) -> tuple[int, list[str], str]:
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
    ids = [ln for ln in r.stdout.splitlines() if "::" in ln]
    return r.returncode, ids, r.stdout + r.stderr


@pytest.mark.parametrize("spec,want", [("0/4", (0, 4)), ("3/4", (3, 4)), (" 0/1 ", (0, 1))])
def test_parse(spec, want):
    assert parse(spec) == want


@pytest.mark.parametrize("spec", ["4/4", "1", "-1/2", "a/b", "0/0", ""])
def test_parse_refuses(spec):
    with pytest.raises(ValueError, match="expected I/K"):
        parse(spec)


def test_assign_puts_each_file_in_one_part_longest_first():
    cost = {"a.py": 100.0, "b.py": 60.0, "c.py": 50.0, "d.py": 40.0, "e.py": 10.0, "f.py": 10.0}
    parts = assign(cost, 3)
    assert sorted(f for p in parts for f in p) == sorted(cost)
    assert parts == [["a.py"], ["b.py", "e.py", "f.py"], ["c.py", "d.py"]]   # loads 100, 80, 90
    assert assign(cost, 3) == parts and assign(dict(reversed(cost.items())), 3) == parts   # order-free
    assert assign(cost, 1) == [sorted(cost, key=lambda n: (-cost[n], n))]
    assert assign({"a.py": 1.0}, 4) == [["a.py"], [], [], []]


def test_costs_prefer_the_recorded_seconds():
    tests = [("a.py", False), ("a.py", True), ("b.py", False), ("c.py", False)]
    assert costs(tests, {"b.py": 123.0}) == {"a.py": 32.0, "b.py": 123.0, "c.py": 2.0}


def test_recorded_seconds_file(tmp_path):
    assert recorded(tmp_path / "none.json") == {}
    (tmp_path / "bad.json").write_text("[1, 2]")
    assert recorded(tmp_path / "bad.json") == {}
    (tmp_path / "ok.json").write_text(json.dumps({"a.py": 3, "b.py": "x", "c.py": -1, "d.py": 2.5}))
    assert recorded(tmp_path / "ok.json") == {"a.py": 3.0, "d.py": 2.5}


def test_the_shards_split_the_selection_exactly(tmp_path):
    rc, whole, out = _collect("-m", "gpu", *FILES)
    assert rc == 0 and len(whole) > 20, out
    got: list[str] = []
    for i in range(3):
        rc, ids, out = _collect("-m", "gpu", "--shard", f"{i}/3", *FILES)
        assert rc == 0, out
        files = {x.split("::")[0] for x in ids}
        assert not files & {x.split("::")[0] for x in got}                  # whole files, in one part only
        got += ids
    assert sorted(got) == sorted(whole)


def test_a_bad_shard_is_a_usage_error():
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--shard", "3/3",
                        "tests/test_shard.py"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 4 and "expected I/K with 0 <= I < K" in r.stderr, (r.returncode, r.stderr)


def test_seconds_from_junit_per_file(tmp_path):
    xml = tmp_path / "s.xml"
    xml.write_text('<?xml version="1.0"?><testsuites><testsuite name="pytest">'
                   '<testcase classname="tests.test_gpu" name="a" time="1.25"/>'
                   '<testcase classname="tests.test_gpu" name="b" time="2.5"/>'
                   '<testcase classname="tests.test_mma" file="tests/test_mma.py" name="c" time="4"/>'
                   '</testsuite></testsuites>')
    assert seconds_from_junit([xml]) == {"test_gpu.py": 3.75, "test_mma.py": 4.0}
    r = subprocess.run([sys.executable, "tests/shard.py", "--seconds", str(xml)], cwd=ROOT, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and json.loads(r.stdout) == {"test_gpu.py": 3.75, "test_mma.py": 4.0}


def test_the_compile_cache_is_the_sessions_own_unless_a_run_shares_one(tmp_path_factory):
    """conftest's cache: under this session's base temp, never the user's; GEMVTUNE_TEST_CACHE_DIR (gpu-check.sh
    suite: the shards of one run) names one that sessions share."""
    import os

    shared = os.environ.get("GEMVTUNE_TEST_CACHE_DIR", "").strip()
    got = os.environ["GEMVTUNE_CACHE_DIR"]
    assert got == (shared or str(tmp_path_factory.getbasetemp() / "cache"))


def test_a_run_shares_its_cache_across_sessions(tmp_path):
    import os

    env = {**os.environ, "GEMVTUNE_TEST_CACHE_DIR": str(tmp_path / "shared")}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "tests/test_shard.py::test_the_compile_cache_is_the_sessions_own_unless_a_run_shares_one"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "1 passed" in r.stdout, r.stdout + r.stderr
