"""Neutral cells: every CSV and markdown file gemvtune writes goes through here, so that a string that came from
a file (a table, a sweep, an error text) is shown as text and never becomes a spreadsheet formula, an HTML tag or
an extra markdown column.

- CSV: a string cell that begins with ``= + - @``, a tab or a carriage return gets a leading ``'`` (what
  spreadsheets read as "this is text"); a cell that is a plain number (``-1.5``, ``+3``) is left as it is.
- Markdown: ``|``, backticks and ``<`` are written as HTML entities, and line breaks become spaces, so
  a cell stays one cell of one row.
- ``write_csv`` writes a frame atomically (gemvtune.safefile) with its string cells neutralized."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"^[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?$|^[+-]?(?:inf|nan)$", re.IGNORECASE)


def csv_cell(value: Any) -> Any:
    """``value`` as a CSV cell that a spreadsheet shows as written (strings only; other values as they are)."""
    if not isinstance(value, str) or not value.startswith(_FORMULA_START) or _NUMBER.match(value):
        return value
    return "'" + value


def md_cell(value: Any) -> str:
    """``value`` as the text of one markdown table cell: no ``|`` column breaks, no code spans, no HTML."""
    text = "" if value is None else str(value)
    text = text.replace("|", "&#124;").replace("`", "&#96;").replace("<", "&lt;")
    return " ".join(text.split())


def md_row(values: list[Any]) -> str:
    """One markdown table row of neutral cells."""
    return "| " + " | ".join(md_cell(v) for v in values) + " |"


def neutral_frame(df: Any) -> Any:
    """A copy of the pandas frame ``df`` whose string cells (and column names) are neutral CSV cells."""
    import pandas as pd

    out = df.copy()
    for col in out.columns:
        dt = out[col].dtype
        if pd.api.types.is_object_dtype(dt) or pd.api.types.is_string_dtype(dt):   # pandas 2 object, pandas 3 str
            out[col] = out[col].map(csv_cell, na_action="ignore").astype(object)
    out.columns = [csv_cell(c) for c in out.columns]
    return out


def write_csv(df: Any, path: str | Path, what: str = "CSV file", **kw: Any) -> None:
    """Write ``df`` as CSV to ``path`` whole or not at all, string cells neutralized; pandas' own options in
    ``kw`` (``float_format``, ``compression`` for a ``.gz`` file). One line (safefile.write_failure) if it cannot be written."""
    from .safefile import write_with

    kw.setdefault("index", False)
    safe = neutral_frame(df)
    if kw.pop("compression", None) == "gzip":
        import gzip

        write_with(path, lambda f: f.write(gzip.compress(safe.to_csv(**kw).encode("utf-8"), mtime=0)), what,
                   binary=True)
    else:
        write_with(path, lambda f: safe.to_csv(f, **kw), what)
