"""The GPU suite in one device call: ``pytest --shard I/K`` runs the I-th of K parts of the selected tests, whole test
files, balanced by what each file took on the GPU last time (``tests/data/gpu_seconds.json``), so that
``scripts/gpu-check.sh suite`` runs K pytest processes at once on one GPU (they compile with NVRTC on the host's cores,
mostly, and each keeps its own CUDA context). Registered by ``tests/conftest.py``; also a command:

    python3 tests/shard.py --seconds shard-0.xml shard-1.xml ... > gpu_seconds.json

writes the seconds per test file from the JUnit XML files of such a run (the next run's weights)."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

SECONDS = Path(__file__).resolve().parent / "data" / "gpu_seconds.json"
DEFAULT_S = 2.0          # a test of a file with no recorded seconds ...
DEFAULT_SLOW_S = 30.0    # ... and one marked slow (a whole benchmark, a search, a compile of a space)
_SPEC = re.compile(r"^(\d+)/(\d+)$")


def parse(spec: str) -> tuple[int, int]:
    """``"I/K"`` -> (I, K), 0 <= I < K; anything else is a ValueError with the form it wants."""
    m = _SPEC.match(spec.strip())
    if m is None or not 0 <= int(m[1]) < int(m[2]):
        raise ValueError(f"--shard {spec!r}: expected I/K with 0 <= I < K, e.g. 0/4")
    return int(m[1]), int(m[2])


def recorded(path: Path = SECONDS) -> dict[str, float]:
    """The seconds per test file of the last GPU run (file name -> seconds); {} where there is none or it is not
    such a file (the shards then weigh tests by count)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): float(v) for k, v in data.items() if isinstance(v, (int, float)) and v >= 0}


def costs(tests: Iterable[tuple[str, bool]], seconds: Mapping[str, float]) -> dict[str, float]:
    """Per file, its expected seconds: the recorded ones, else ``DEFAULT_S`` per test (``DEFAULT_SLOW_S`` per slow
    one). ``tests``: (file name, marked slow) of each selected test."""
    guess: dict[str, float] = {}
    for name, slow in tests:
        guess[name] = guess.get(name, 0.0) + (DEFAULT_SLOW_S if slow else DEFAULT_S)
    return {name: float(seconds.get(name, g)) for name, g in guess.items()}


def assign(cost: Mapping[str, float], k: int) -> list[list[str]]:
    """The files in ``k`` parts, longest first to the part with the least so far (ties: the lower part, then the
    name): deterministic, so K processes that each compute it agree on who runs what."""
    parts: list[list[str]] = [[] for _ in range(k)]
    load = [0.0] * k
    for name in sorted(cost, key=lambda n: (-cost[n], n)):
        i = min(range(k), key=lambda j: (load[j], j))
        parts[i].append(name)
        load[i] += cost[name]
    return parts


def seconds_from_junit(paths: Iterable[Path]) -> dict[str, float]:
    """Seconds per test file, summed over the test cases of JUnit XML files (pytest ``--junitxml``); the file is
    the test case's ``file`` attribute, else the module of its ``classname``."""
    import xml.etree.ElementTree as ET

    out: dict[str, float] = {}
    for p in paths:
        for case in ET.parse(p).getroot().iter("testcase"):
            name = case.get("file") or (case.get("classname", "").split(".")[-1] + ".py")
            name = Path(name).name
            out[name] = round(out.get(name, 0.0) + float(case.get("time") or 0.0), 2)
    return dict(sorted(out.items()))


class ShardPlugin:
    """Keeps the I-th part of the tests that survive every other selection (-m, -k, the files named)."""

    def __init__(self, spec: str):
        self.index, self.k = parse(spec)

    @pytest.hookimpl(trylast=True)   # after -m, -k and conftest's own selection
    def pytest_collection_modifyitems(self, config, items):
        names = [(Path(str(it.fspath)).name, "slow" in it.keywords) for it in items]
        mine = set(assign(costs(names, recorded()), self.k)[self.index])
        keep = [it for it, (name, _) in zip(items, names) if name in mine]
        gone = [it for it, (name, _) in zip(items, names) if name not in mine]
        if gone:
            config.hook.pytest_deselected(items=gone)
            items[:] = keep


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] != "--seconds":
        print("usage: python3 tests/shard.py --seconds JUNIT.xml [JUNIT.xml ...] > gpu_seconds.json", file=sys.stderr)
        return 2
    json.dump(seconds_from_junit(Path(a) for a in argv[1:]), sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
