"""The tests' own slow-replay hook (tests/hooks/sitecustomize.py): gemvtune has no delay switch of its
own; a test's subprocess started with slow_replay_env(s) takes s seconds per replayed measurement."""

import os
import subprocess
import sys

from conftest import ROOT
from slowreplay import ENV, slow_replay_env

import gemvtune.runners.replay as replay

CODE = """
import sys, time
from gemvtune import LLAMA_CPP, Shape
from gemvtune.runners.replay import ReplayRunner
r = ReplayRunner(sys.argv[1])
t = time.perf_counter()
ok = [r.measure(LLAMA_CPP, Shape(4096, 4096)).status for _ in range(3)]
print(ok, time.perf_counter() - t)
"""
SWEEPS = str(ROOT / "results" / "nvidia-h200" / "measurements")


def _three_measurements(env):
    r = subprocess.run([sys.executable, "-c", CODE, SWEEPS], capture_output=True, text=True, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stderr
    status, seconds = r.stdout.rsplit(" ", 1)
    assert status == "['ok', 'ok', 'ok']"
    return float(seconds)


def test_the_hook_slows_replayed_measurements_down():
    assert _three_measurements(slow_replay_env(0.2)) >= 0.6
    plain = dict(os.environ, **{ENV: "0.2"})   # without the hook on PYTHONPATH: nothing happens
    plain.pop("PYTHONPATH", None)
    assert _three_measurements(plain) < 0.6


def test_gemvtune_has_no_delay_switch():
    src = open(replay.__file__).read()
    assert "DELAY" not in src and "sleep" not in src
