"""Amending one entry of a table file in place: the re-confirmation of an entry (``tuning.reconfirm``) is written
into it as ``record`` writes a search's entry, under the table's lock, the whole table read again there (so what
another writer merged meanwhile is kept), the amended entry checked by the table's schema, and the file replaced
atomically: a writer killed half-way leaves the table as it was, and every entry amended before stays."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import UsageError
from .entry import Entry
from .table import _atomic_write_json, _check_same_gpu, _locked, _read, table_json
from .tableschema import check_entry, printable


def set_reconfirmed(path: str | Path, key: str, reconfirmed: dict[str, Any], device: dict[str, Any],
                    updated: str | None) -> tuple[Entry | None, str]:
    """Write ``reconfirmed`` (the JSON object of ``Entry.reconfirmed``) into entry ``key`` of the table at
    ``path``, made on ``device``'s GPU model (else one UsageError). The entry must still be the one that was
    re-measured: its ``updated`` stamp ``updated`` (a search of it since replaced the kernels it holds).
    Returns (the entry as the table now holds it, "") or (None, why nothing was written)."""
    from ..safefile import target

    path = target(path)
    with _locked(path):
        if not path.exists():
            raise UsageError(f"table {path} is gone: the re-confirmation of {printable(key, 60)} was not written")
        data, entries = _read(path)
        _check_same_gpu(path, data, device)
        old = entries.get(key)
        if old is None:
            return None, f"entry {printable(key, 60)} is no longer in the table"
        if old.updated != updated:
            return None, (f"entry {printable(key, 60)} was searched again since ({printable(old.updated, 40)}): its "
                          "re-confirmation measured the kernels it held before")
        new = check_entry(key, {**old.to_json(), "reconfirmed": reconfirmed}, path)
        entries[key] = new
        _atomic_write_json(path, table_json(data, entries))
        return new, ""
