"""One parser for every integer a user types or a file carries as text: ASCII digits only (``isdigit()`` also
takes ``³`` and other scripts' digits, and ``int()`` takes thousands of digits), at most MAX_DIGITS of them, an
optional sign, then a range. Anything else is one UsageError naming what the number was for."""

from __future__ import annotations

import re

from .errors import UsageError

MAX_DIGITS = 12
_INT = re.compile(r"[+-]?[0-9]+", re.ASCII)


def parse_int(text: object, what: str, lo: int | None = None, hi: int | None = None) -> int:
    """``text`` (a str of ASCII digits with an optional sign, spaces around allowed) as an int in [lo, hi]."""
    if isinstance(text, bool):
        raise UsageError(f"{what} must be an integer, got {text!r}")
    if isinstance(text, int):
        value = text
    else:
        s = str(text).strip(" \t")
        if not _INT.fullmatch(s):
            raise UsageError(f"{what} must be an integer written in ASCII digits, got {_show(text)}")
        if len(s.lstrip("+-")) > MAX_DIGITS:
            raise UsageError(f"{what} has more than {MAX_DIGITS} digits: {_show(text)}")
        value = int(s)
    if lo is not None and value < lo or hi is not None and value > hi:
        span = f"{lo}..{hi}" if lo is not None and hi is not None else (f">= {lo}" if lo is not None else f"<= {hi}")
        raise UsageError(f"{what} {value} is outside {span}")
    return value


def positive_int(value: object, option: str, hi: int) -> int:
    """An option's integer in 1..hi (``--layers``, ``--tokens``): one UsageError naming the option otherwise."""
    try:
        return parse_int(value, option, 1, hi)
    except UsageError:
        raise UsageError(f"{option} must be an integer >= 1 and <= {hi}, got {_show(value)}") from None


def is_int_text(text: str) -> bool:
    """Whether ``text`` is an integer parse_int would read (ASCII digits, optional sign, at most MAX_DIGITS)."""
    s = text.strip(" \t")
    return bool(_INT.fullmatch(s)) and len(s.lstrip("+-")) <= MAX_DIGITS


def _show(text: object) -> str:
    s = repr(text)
    return s if len(s) <= 40 else s[:37] + "..."
