"""The environment knobs gemvtune reads, in one typed place. Read when asked (never cached at import),
so a process that sets one before its first use is honoured; a malformed value is one clear error.

    GEMVTUNE_CACHE_DIR   compiled kernels (cubins) go under <dir>/cubin (default ~/.cache/gemvtune)
    GEMVTUNE_NO_POOL     1: every array the CUDA runner makes is its own cudaMalloc (compute-sanitizer sees
                         exact bounds); scoped to the runner's work, CuPy's allocator is left as it was
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .errors import UsageError

_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"", "0", "false", "no", "off"}


def _flag(name: str) -> bool:
    raw = os.environ.get(name, "").strip().lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise UsageError(f"{name}={raw!r:.40} is not a flag: use 1 or 0")


@dataclass(frozen=True)
class Settings:
    cache_dir: Path
    no_pool: bool


def settings() -> Settings:
    """The knobs as the environment sets them now."""
    cache = os.environ.get("GEMVTUNE_CACHE_DIR") or str(Path.home() / ".cache" / "gemvtune")
    return Settings(cache_dir=Path(cache).expanduser(), no_pool=_flag("GEMVTUNE_NO_POOL"))
