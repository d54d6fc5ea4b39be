"""Progress bars for the long commands (compile-check, sweep, study), in search's style: tqdm on
stderr, only where stderr is a terminal (never in a pipe or a CI log), cleared when done (leave=False)."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, TextIO, TypeVar

T = TypeVar("T")


def _tty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):   # no isatty, a closed stream
        return False


def progress_bar(total: int | None, desc: str = "", unit: str = "it", enabled: bool = True,
                 file: TextIO | None = None) -> Any | None:
    """A tqdm bar to update by hand, or None where it would not show (``enabled`` false, not a TTY)."""
    stream = sys.stderr if file is None else file
    if not enabled or not _tty(stream):
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, file=stream, leave=False)


def progress(iterable: Iterable[T], total: int | None = None, desc: str = "", unit: str = "it",
             enabled: bool = True, file: TextIO | None = None) -> Iterable[T]:
    """``iterable`` itself where no bar would show; else the same items through a tqdm bar that
    counts them (stderr, or ``file``)."""
    stream = sys.stderr if file is None else file
    if not enabled or not _tty(stream):
        return iterable
    from tqdm import tqdm

    return tqdm(iterable, total=total, desc=desc, unit=unit, file=stream, leave=False)
