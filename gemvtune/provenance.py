"""What every file gemvtune writes records about where it came from: the date (UTC), the command that made it,
the device, and what the caller adds (the read ceiling, the table, the shapes)."""

from __future__ import annotations

import datetime as _dt
import shlex
import sys
from typing import Any

VERSION = "0.1.0"   # gemvtune's version (pyproject's, checked by tests/test_package.py); gemvtune.__version__


def provenance(device: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": " ".join(shlex.quote(a) for a in ["gemvtune", *sys.argv[1:]]),
        "device": device or {},
        **extra,
    }


def source_commit() -> str:
    """``git describe --always --dirty`` of the checkout gemvtune runs from; "" where it is not a git checkout (an
    installed wheel, a copied tree) or git does not answer."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return ""
    try:
        r = subprocess.run(["git", "-C", str(root), "describe", "--always", "--dirty"], capture_output=True,
                           text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return ""
    return r.stdout.strip() if r.returncode == 0 else ""
