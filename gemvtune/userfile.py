"""One way to read a user's file: opened without blocking (a FIFO never hangs ``open()``), refused with one
line unless it is a regular file, read to at most a cap plus one byte (a link to ``/dev/zero`` or a file that
grows never exhausts memory), and JSON decoded through one helper that turns every decoder error (truncation,
nesting too deep, an integer of thousands of digits, bytes that are not UTF-8) into one line naming the file.
Every reader of a file a user hands gemvtune uses it: tables, HF configs, cost models, config files, sweeps and
their sidecars, journals and the table's lock."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import Any

from .errors import UsageError

MB = 1 << 20
# Caps, each far above what gemvtune writes: the committed 81-entry H200 table is 0.6 MB.
TABLE_BYTES = 64 * MB
JSON_BYTES = 16 * MB          # HF configs, config lists, sidecars
MODEL_BYTES = 64 * MB         # cost models
SWEEP_BYTES = 256 * MB        # a recorded sweep (CSV, gzip)
JOURNAL_BYTES = 1024 * MB     # an Optuna journal of many studies

_KINDS = {stat.S_IFDIR: "a folder", stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket"}


def kind(mode: int) -> str:
    """What a file of ``st_mode`` is, in words."""
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def os_reason(e: OSError) -> str:
    """An OSError in a few words: ELOOP, ENAMETOOLONG, EIO and the rest by their own message."""
    if e.errno == errno.ELOOP:
        return "a loop of symbolic links"
    if e.errno == errno.ENAMETOOLONG:
        return "the name is too long"
    return e.strerror or str(e)


def check_regular(path: str | Path, what: str) -> bool:
    """True if ``path`` is a regular file (links followed), False if nothing is there; one UsageError if it is
    anything else (a folder, a FIFO, a device, a socket, a dangling or looping link), so that nothing opens it."""
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        if os.path.islink(p):
            raise UsageError(f"{what} {p} is a symbolic link to nothing") from None
        return False
    except NotADirectoryError:   # a folder on its path is a file: nothing is there (the writer's probe says why)
        return False
    except OSError as e:
        raise UsageError(f"{what} {p} cannot be read: {os_reason(e)}") from None
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{what} {p} is {kind(st.st_mode)}, not a regular file")
    return True


def read_bytes(path: str | Path, what: str, cap: int) -> bytes:
    """The bytes of the regular file ``path``, at most ``cap`` of them: one UsageError naming ``what`` if it
    is missing, not a regular file, unreadable or larger than ``cap``."""
    p = Path(path)
    if not str(path):
        raise UsageError(f"{what}: the path is empty")
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        if os.path.islink(p):
            raise UsageError(f"{what} {p} is a symbolic link to nothing") from None
        raise UsageError(f"{what} {p} does not exist") from None
    except IsADirectoryError:
        raise UsageError(f"{what} {p} is a folder, not a regular file") from None
    except OSError as e:
        raise UsageError(f"{what} {p} cannot be read: {os_reason(e)}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UsageError(f"{what} {p} is {kind(st.st_mode)}, not a regular file")
        if st.st_size > cap:
            raise UsageError(f"{what} {p} is {st.st_size} bytes, more than the {cap} any such file has")
        chunks, size = [], 0
        while size <= cap:   # st_size can lie (procfs, a file still growing): read to the cap plus one byte
            chunk = os.read(fd, min(cap + 1 - size, 4 * MB))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > cap:
            raise UsageError(f"{what} {p} is more than the {cap} bytes any such file has")
        return b"".join(chunks)
    except OSError as e:
        raise UsageError(f"{what} {p} cannot be read: {os_reason(e)}") from None
    finally:
        os.close(fd)


def read_maybe_gz(path: str | Path, what: str, cap: int) -> bytes:
    """read_bytes, and for a name ending in .gz (gzip) or .xz (xz) its content, decompressed to at most ``cap``
    bytes (a decompression bomb stops at the cap): one UsageError for a file that is not what its name says or
    is truncated."""
    raw = read_bytes(path, what, cap)
    name = str(path)
    if name.endswith(".xz"):
        return _unxz(raw, path, what, cap)
    if not name.endswith(".gz"):
        return raw
    import zlib

    d = zlib.decompressobj(16 + zlib.MAX_WBITS)   # gzip framing
    try:
        out = d.decompress(raw, cap + 1)
        if len(out) > cap:
            raise UsageError(f"{what} {path} decompresses to more than the {cap} bytes any such file has")
        if not d.eof:
            raise UsageError(f"{what} {path} is a truncated gzip file")
    except zlib.error as e:
        raise UsageError(f"{what} {path} is not a gzip file ({e})") from None
    return out


def _unxz(raw: bytes, path: str | Path, what: str, cap: int) -> bytes:
    import lzma

    d = lzma.LZMADecompressor(format=lzma.FORMAT_XZ)
    try:
        out = d.decompress(raw, max_length=cap + 1)
    except lzma.LZMAError as e:
        raise UsageError(f"{what} {path} is not an xz file ({e})") from None
    if len(out) > cap:
        raise UsageError(f"{what} {path} decompresses to more than the {cap} bytes any such file has")
    if not d.eof:
        raise UsageError(f"{what} {path} is a truncated xz file")
    return out


def read_text(path: str | Path, what: str, cap: int, *, encoding: str = "utf-8") -> str:
    """The text of a regular file (see read_bytes); bytes that are not ``encoding`` are one UsageError."""
    raw = read_bytes(path, what, cap)
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError as e:
        raise UsageError(f"{what} {path} is not {encoding.upper()} text (byte {e.start})") from None


def decode_json(text: str | bytes, what: str) -> Any:
    """JSON from ``text`` (``what`` names where it came from); every decoder error is one UsageError: a syntax
    error or truncation, nesting too deep, an integer too long to convert, bytes that are not UTF-8."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8-sig")
        except UnicodeDecodeError as e:
            raise UsageError(f"{what} is not valid JSON: not UTF-8 text (byte {e.start})") from None
    if not text.strip():
        raise UsageError(f"{what} is empty")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"{what} is not valid JSON (truncated?): {e.msg} at line {e.lineno}") from None
    except RecursionError:
        raise UsageError(f"{what} is not valid JSON for gemvtune: nested too deeply") from None
    except ValueError as e:   # int() of thousands of digits (sys.int_info.str_digits_check_threshold) and the like
        raise UsageError(f"{what} is not valid JSON for gemvtune: {str(e).splitlines()[0][:120]}") from None


def read_json(path: str | Path, what: str, cap: int = JSON_BYTES) -> Any:
    """The JSON value in the regular file ``path`` (gzip-compressed where the name ends in .gz): one UsageError
    naming the file for anything else."""
    raw = read_maybe_gz(path, what, cap)
    return decode_json(raw, f"{what} {path}")


def check_lock(lock: str | Path, what: str = "lock") -> None:
    """A lock file beside a table or journal, if one is there, is a regular file (a FIFO would hang its
    ``open()``, a device would be opened for writing): one UsageError if not."""
    p = Path(lock)
    try:
        st = os.lstat(p)
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as e:
        raise UsageError(f"{what} {p} cannot be used: {os_reason(e)}") from None
    if stat.S_ISLNK(st.st_mode):
        raise UsageError(f"{what} {p} is a symbolic link; a lock must be a regular file (remove it)")
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{what} {p} is {kind(st.st_mode)}, not a regular file (remove it)")
