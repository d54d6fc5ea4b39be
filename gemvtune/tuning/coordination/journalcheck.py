"""What a file given as ``--storage journal:PATH`` must be before Optuna reads it or gemvtune repairs it: a regular
file (a FIFO would hang ``open()``, a device would be appended to), with regular lock files beside it, holding
Optuna journal records, each with an op code this Optuna knows. A newer Optuna's op code reaches Optuna's replay as
``assert False``; a file that was never a journal (a CSV, a picture) would be "repaired" to nothing. Both are one
line, and the file is left as it is."""

from __future__ import annotations

import functools
import json
from pathlib import Path

from ...errors import UsageError
from ...userfile import JOURNAL_BYTES, check_lock, check_regular, read_bytes

_OP = b'{"op_code":'


@functools.lru_cache(maxsize=1)
def known_op_codes() -> frozenset[int] | None:
    """The op codes of the installed Optuna's journal, or None if its ``JournalOperation`` cannot be found."""
    from .optuna_adapter import journal_op_codes

    return journal_op_codes()


def check_journal(path: str | Path) -> bytes:
    """The journal's bytes (b"" if it is missing or empty); one UsageError, the file untouched, unless it is a
    regular file of journal records with known op codes (a torn last record is left to the repair) whose lock
    files, if there, are regular files. Nothing but a regular file is ever opened."""
    p = Path(path)
    for lock in (Path(f"{p}.lock"), Path(f"{p}.gemvtune.lock")):
        check_lock(lock, "the journal's lock")
    if not check_regular(p, "journal"):
        return b""
    data = read_bytes(p, "journal", JOURNAL_BYTES)
    if not data:
        return data
    known = known_op_codes()
    complete = 0
    lines = data.split(b"\n")
    for i, line in enumerate(lines[:-1], 1):   # (the bytes after the last newline: a torn record, or nothing)
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):
            continue   # a torn record: the repair's business
        if not isinstance(rec, dict) or "op_code" not in rec:
            continue
        op = rec["op_code"]
        if isinstance(op, bool) or not isinstance(op, int) or (known is not None and op not in known):
            raise UsageError(f"journal {p}: line {i} has op code {str(op)[:20]}, which this Optuna does not know "
                             f"(written by a newer Optuna?); the file is left as it is: upgrade optuna to read it")
        complete += 1
    if not complete and not data.startswith(_OP):
        raise UsageError(f"journal {p} is not an Optuna journal (no journal record in its {len(data)} bytes); "
                         "the file is left as it is: give a new path or the journal a search wrote")
    return data
