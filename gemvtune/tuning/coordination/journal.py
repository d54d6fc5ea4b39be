"""Optuna's journal file, kept readable whatever happens to a write.

Optuna appends one JSON record per line. A process killed mid-append, or a write that hits a full
disk, leaves a partial last record; the next run would append after it, and every later read of the
study fails (JSONDecodeError). Here:

- before Optuna opens it, the journal must be a regular file of records with op codes this Optuna
  knows, its lock files regular files (gemvtune.tuning.coordination.journalcheck): anything else is one line and
  the file is left as it is;
- before the journal is read (at open) and before every append, under the journal's lock, a partial
  last record is detected; the damaged file is backed up beside it (``<journal>.damaged-<UTC>``) and
  the journal repaired to its last complete record, with a one-line warning. A record that an older
  gemvtune appended after a torn one is salvaged; anything else unreadable is cut off there (the
  backup keeps it);
- a failed append (ENOSPC, EDQUOT, EFBIG, or any other OSError) is cut back to the last complete
  record at once, and the backend refuses every later write of this process: the search ends with
  one line (:class:`StorageWriteError`), every completed trial stays readable, and a rerun resumes.
  Ctrl-C during an append (and while its lock is held) takes effect when the append is done, so it
  leaves neither a partial record nor a lock file behind;
- the lock taken around an append (:class:`JournalLock`, a file created beside the journal) fails
  with the folder's OSError when the folder cannot be written, at once: Optuna's own lock turned a
  folder made read-only mid-run into an endless loop (its lock file could be neither removed nor
  broken), and, interrupted while it waited, removed a lock file another process held.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import json
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock

from ...errors import GemvtuneError
from ...safefile import atomic_write

DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
_OP = b'{"op_code":'


class WriteError(GemvtuneError):
    """A search could not write its storage or an output (a full disk, a quota, a size limit, a folder
    turned read-only): it stops; what was complete before it stays (exit 1)."""

    exit_code = 1


class StorageWriteError(WriteError):
    """An append to the journal failed; it was cut back to its last complete record."""


def why_oserror(e: OSError) -> str:
    """A short reason for an OSError, naming a full disk as such."""
    name = errno.errorcode.get(e.errno or 0, "")
    what = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded",
            errno.EFBIG: "file size limit reached"}.get(e.errno or 0, e.strerror or str(e))
    return f"{what}{f' ({name})' if name else ''}"


def remedy(e: OSError) -> str:
    """What the user does before running again."""
    return {errno.ENOSPC: "free some space, then ", errno.EDQUOT: "free some of your disk quota, then ",
            errno.EFBIG: "raise the file size limit, then ", errno.EACCES: "make it writable again, then ",
            errno.EPERM: "make it writable again, then ", errno.EROFS: "mount it read-write again, then "
            }.get(e.errno or 0, "")


def append_failure(path: str, e: OSError) -> StorageWriteError:
    """The one-line error of a journal append that failed with ``e`` (naming the lock file when it
    was the lock beside the journal that could not be made or removed)."""
    what = f" (its lock file {e.filename})" if e.filename and str(e.filename) != str(path) else ""
    return StorageWriteError(
        f"cannot write the journal {path}{what}: {why_oserror(e)}; the search stops here and every "
        f"trial completed so far is kept: {remedy(e)}run the same command again to resume")


def _warn(msg: str) -> None:
    import logging

    log = logging.getLogger("gemvtune")
    if log.hasHandlers():
        log.warning(msg)
    else:
        print(f"gemvtune: warning: {msg}", file=sys.stderr, flush=True)


def _record_ok(line: bytes) -> bool:
    try:
        rec = json.loads(line)
    except ValueError:   # JSONDecodeError, or bytes that are not UTF-8
        return False
    return isinstance(rec, dict) and "op_code" in rec


def _salvage(line: bytes) -> bytes | None:
    """The complete record at the end of a line that begins with a torn one (an older gemvtune
    appended after a torn record), or None."""
    at = line.rfind(_OP)
    while at > 0:
        if _record_ok(line[at:]):
            return line[at:]
        at = line.rfind(_OP, 0, at)
    return None


def scan(data: bytes) -> tuple[bytes, str]:
    """(the journal's bytes repaired, what was wrong: '' if nothing). Complete records are kept; a
    torn last record is dropped; a torn record followed by a complete one on its line keeps the
    complete one; any other unreadable line is cut off with everything after it (Optuna numbers
    trials by their order, so records after a lost one cannot be trusted)."""
    lines = data.split(b"\n")
    tail = lines.pop()   # the bytes after the last newline: a torn record, or b""
    keep: list[bytes] = []
    notes: list[str] = []
    for i, line in enumerate(lines):
        if _record_ok(line):
            keep.append(line)
            continue
        fixed = _salvage(line)
        if fixed is not None:
            keep.append(fixed)
            notes.append(f"a torn record on line {i + 1} (the record after it kept)")
            continue
        cut = len(lines) - i + (1 if tail else 0)
        notes.append(f"an unreadable record on line {i + 1}" + (f" ({cut - 1} records after it cut off)" if cut > 1 else ""))
        tail = b""
        break
    if tail:
        notes.append(f"a torn last record ({len(tail)} bytes)")
    if not notes:
        return data, ""
    return b"".join(line + b"\n" for line in keep), "; ".join(notes)


def _backup(path: str, data: bytes, fixed: bytes) -> str:
    """Write the damaged journal beside it; if the disk is too full for that, at least the bytes that
    the repair drops. Returns where, or why there is no backup."""
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    dest = f"{path}.damaged-{stamp}"
    if os.path.lexists(dest):
        dest += f"-{os.getpid()}"
    common = len(os.path.commonprefix([data, fixed]))
    for what, blob in (("", data), (" (the dropped bytes only)", data[common:])):
        try:
            with open(dest, "wb") as f:
                f.write(blob)
                f.flush()
                os.fsync(f.fileno())
            return f"backed up to {dest}{what}"
        except OSError as e:
            err = e
            try:
                os.unlink(dest)
            except OSError:
                pass
    return f"no backup written ({why_oserror(err)})"


def repair(path: str) -> str:
    """Repair the journal at ``path`` in place (the caller holds its lock). Returns the one-line
    report, or '' if it was whole. Raises OSError if the repair cannot be written."""
    with open(path, "rb") as f:
        data = f.read()
    fixed, what = scan(data)
    if not what:
        return ""
    saved = _backup(path, data, fixed)
    if data.startswith(fixed):   # only cut at the end: no new space needed
        os.truncate(path, len(fixed))
    else:                        # a salvaged line: rewrite, atomically, keeping the file's mode
        atomic_write(Path(path), lambda f: f.write(fixed), binary=True)
    n = fixed.count(b"\n")
    return f"journal {path} was damaged by an interrupted write: {what}; {saved}; repaired to its last " \
           f"complete record ({n} records kept)"


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.fsync(fd)


@contextlib.contextmanager
def ctrl_c_deferred() -> Iterator[list[Any]]:
    """A Ctrl-C (SIGINT) that arrives in the block takes effect when the block ends (the interrupt is
    raised there); the list it yields is non-empty once one arrived. Only where Python handles
    signals (its main thread, a Python-level handler); elsewhere the block runs as it is."""
    pending: list[Any] = []
    old = signal.getsignal(signal.SIGINT) if threading.current_thread() is threading.main_thread() else None
    if old is None:
        yield pending
        return
    try:
        signal.signal(signal.SIGINT, lambda signum, frame: pending.append(frame))
    except (ValueError, OSError):
        yield pending
        return
    try:
        yield pending
    finally:
        signal.signal(signal.SIGINT, old)
        if pending:
            if callable(old):
                old(signal.SIGINT, pending[0])   # (Python's default handler: raises KeyboardInterrupt)
            elif old == signal.SIG_DFL:
                os.kill(os.getpid(), signal.SIGINT)


class JournalLock(JournalFileOpenLock):
    """Optuna's lock file (``<journal>.lock``, created with O_EXCL: NFS-safe), but a folder that cannot
    be written is an OSError at once, whether the lock is taken, broken or released, never a retry
    loop; an interrupt while waiting leaves alone the lock another process holds; a lock broken by
    another process (ours held past the grace period) is not an error on release."""

    WARN_S = 10.0

    def __init__(self, filepath: str, grace_period: int | None = 30) -> None:
        # (not Optuna's __init__: its signature changed across the pinned range; the lock file is the same)
        self.lock_file = filepath + ".lock"
        self.grace_period = grace_period

    def acquire(self, give_up: Callable[[], bool] = lambda: False) -> bool:
        """Take the lock (True), waiting while another process holds it; False, not taken, as soon as
        ``give_up()`` says so while waiting."""
        sleep_s, mtime, since = 0.001, None, time.monotonic()
        warned = since
        while True:
            try:
                fd = os.open(self.lock_file, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                pass   # (any other OSError, e.g. EACCES or EROFS from a read-only folder, is raised)
            else:
                os.close(fd)
                return True
            if give_up():
                return False
            try:
                current = os.stat(self.lock_file).st_mtime
            except FileNotFoundError:
                continue   # released meanwhile
            if current != mtime:
                mtime, since = current, time.monotonic()
            elif self.grace_period is not None and time.monotonic() - since > self.grace_period:
                _warn(f"the journal lock {self.lock_file} was held for more than {self.grace_period} s (left by "
                      "a process that was killed, or that could not remove it): removed")
                self._remove()
                sleep_s = 0.001
                continue
            if time.monotonic() - warned > self.WARN_S:
                _warn(f"waiting more than {self.WARN_S:.0f} s for the journal lock {self.lock_file}")
                warned = time.monotonic()
            time.sleep(sleep_s)
            sleep_s = min(sleep_s * 2, 1.0)

    def release(self) -> None:
        self._remove()

    def _remove(self) -> None:
        """Remove the lock file (renamed first, so that of two processes breaking the same stale lock
        only one removes it). Already gone: nothing to do. Any other OSError is raised."""
        moved = f"{self.lock_file}{uuid.uuid4()}.rename"
        try:
            os.rename(self.lock_file, moved)
        except FileNotFoundError:
            return
        os.unlink(moved)


class SafeJournalFileBackend(JournalFileBackend):
    """JournalFileBackend that repairs a torn journal before reading or appending and never leaves a
    partial record of its own (see the module doc)."""

    def __init__(self, path: str, grace_period: int = 5) -> None:
        # The lock is held only while a few lines are appended: one older than grace_period was left
        # by a killed process (SIGKILL), and is broken instead of stalling the next run.
        from .journalcheck import check_journal

        data = check_journal(path)   # before Optuna's open(): a FIFO, not a journal, unknown op codes: one line
        self.path = path
        self.lock = JournalLock(path, grace_period=grace_period)   # (its acquire takes give_up)
        super().__init__(path, lock_obj=self.lock)
        self.failed: StorageWriteError | None = None
        damaged = scan(data)[1]
        if damaged:   # (looked at without the lock: a writer may be mid-append; repair looks again under it)
            try:
                self._locked(self._repair)
            except OSError as e:   # e.g. a read-only journal: it can still be read; appends will say why not
                _warn(f"journal {path} is damaged ({damaged}) and could not be repaired now: {why_oserror(e)}")

    def _locked(self, fn: Any) -> Any:
        """fn() under the journal's lock. A Ctrl-C meanwhile takes effect once the lock is released (or,
        while waiting for the lock, at once, without it)."""
        with ctrl_c_deferred() as interrupted:
            if not self.lock.acquire(give_up=lambda: bool(interrupted)):
                return None   # (not reached: leaving the block raises the KeyboardInterrupt)
            try:
                out = fn()
            except BaseException:
                try:
                    self.lock.release()
                except OSError:
                    pass   # (the error that matters is fn's)
                raise
            self.lock.release()
            return out

    def _repair(self) -> None:
        note = repair(self.path)
        if note:
            _warn(note)

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        if self.failed is not None:   # after a failed write: nothing more from this process
            raise StorageWriteError(str(self.failed))
        data = ("\n".join(json.dumps(log, separators=(",", ":")) for log in logs) + "\n").encode("utf-8")
        try:
            self._locked(lambda: self._append(data))
        except OSError as e:   # the append, or its lock (a folder turned read-only): nothing more from here
            self.failed = append_failure(self.path, e)
            raise self.failed from None

    def _append(self, data: bytes) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":   # a writer died mid-append since the last look
                self._repair()
                size = os.fstat(fd).st_size
            try:
                _write_all(fd, data)
            except BaseException:            # a failed write, or an interrupt (Ctrl-C) in the middle of it
                try:
                    os.ftruncate(fd, size)   # back to the last complete record (frees space; needs none)
                except OSError:
                    pass                     # the next open or append repairs it
                raise
        finally:
            os.close(fd)
