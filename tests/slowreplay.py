"""The environment of a gemvtune subprocess whose replayed measurements each take some time (GPU time
stood in for), so that worker processes overlap: tests/hooks/sitecustomize.py does it; gemvtune
itself has no such switch."""

import os
from pathlib import Path

from hooks.sitecustomize import ENV  # (in this process, the hook does nothing: ENV is not set here)

HOOKS = Path(__file__).resolve().parent / "hooks"


def slow_replay_env(seconds: float, env: dict | None = None) -> dict:
    """os.environ with ``env``, the hook on PYTHONPATH and each replayed measurement ``seconds`` long."""
    e = dict(os.environ, **(env or {}))
    e["PYTHONPATH"] = os.pathsep.join([str(HOOKS)] + ([e["PYTHONPATH"]] if e.get("PYTHONPATH") else []))
    e[ENV] = str(seconds)
    return e
