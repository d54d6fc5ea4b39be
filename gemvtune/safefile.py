"""Files written whole or not at all, by writers that may be killed at any moment: an exclusive lock
beside the file, a temporary file renamed over it (with the mode the file had, or the umask's default
for a new one, never mkstemp's 0600), and the temporary files of killed writers removed under the lock."""

from __future__ import annotations

import contextlib
import glob
import io
import os
import stat
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .errors import GemvtuneError, OutputError, UsageError

STALE_TMP_S = 5.0   # a temporary file this old, found under the lock, was left by a killed writer


def umask() -> int:
    """This process's umask, read without changing it where the OS allows."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)   # (elsewhere: set and restore)
    os.umask(old)
    return old


def _tmp_prefix(path: Path) -> str:
    return f"{path.name}.{os.getpid()}."


def clean_tmp(path: Path) -> list[Path]:
    """Remove ``<path>.<pid>.<random>.tmp`` files (and the ``<path>.<random>.tmp`` of older gemvtunes)
    whose writer is dead or that are older than STALE_TMP_S; the caller holds the file's lock, so no
    live writer is between its write and its rename. Returns what was removed."""

    gone = []
    for tmp in path.parent.glob(glob.escape(path.name) + ".*.tmp"):
        parts = tmp.name[len(path.name) + 1:].split(".")
        pid = int(parts[0]) if len(parts) == 3 and parts[0].isdigit() else None
        try:
            if (pid is not None and pid != os.getpid() and not pid_alive(pid)) \
                    or time.time() - tmp.lstat().st_mtime > STALE_TMP_S:
                tmp.unlink()
                gone.append(tmp)
        except OSError:   # gone meanwhile, or not ours to remove
            pass
    return gone


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive advisory lock beside ``path`` (``<path>.lock``, a ``filelock.FileLock``: flock, gone
    with its process), so concurrent writers serialize their read-merge-write; stale temporary files of
    killed writers are removed under it."""
    from filelock import FileLock, lock_descriptor, unlock_descriptor

    from .userfile import check_lock

    path.parent.mkdir(parents=True, exist_ok=True)
    lock = path.with_name(path.name + ".lock")
    check_lock(lock, f"the lock of {path.name}")   # a FIFO or device there would hang or be truncated
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(FileLock(str(lock)))
        except PermissionError:   # another user's lock file: a read-only descriptor locks as well
            fd = held.enter_context(open(lock)).fileno()
            lock_descriptor(fd)
            held.callback(unlock_descriptor, fd)
        clean_tmp(path)
        yield


def output_target(path: str | Path, what: str = "output") -> Path:
    """Where a write of an output to ``path`` goes: through a symbolic link to its target (the link stays a
    link), and only onto a regular file or a new name. One UsageError for an empty path, a folder, a device
    (``/dev/null`` is never replaced), a FIFO, a socket or a looping link."""
    from .userfile import kind, os_reason

    if not str(path):
        raise UsageError(f"{what}: the path is empty")
    p = target(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        return p
    except OSError as e:
        raise UsageError(f"cannot write {what} {path}: {os_reason(e)}") from None
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"cannot write {what} {path}: it is {kind(st.st_mode)}; gemvtune writes only regular files")
    return p


def atomic_write(path: Path, write: Callable[[Any], None], *, binary: bool = False, mode: int | None = None,
                 what: str = "output") -> None:
    """Write ``path`` through ``write(file)`` (a text file in UTF-8, or a binary one with ``binary``) into a
    temporary file beside it, fsynced and renamed over it: readers see the old file or the new one, never
    part of one; a failed write (a full disk, text that cannot be encoded) leaves the old file byte-identical.
    A symbolic link is followed (the link stays a link) and a target that is not a regular file is refused
    (output_target). The file keeps its mode (and its group, where this process may set it); a new file gets
    0666 less the umask. With ``mode``, the file gets exactly that mode (and this process's group), new or not."""
    path = output_target(path, what)
    if mode is None:
        try:
            st = os.stat(path)
            mode, gid = stat.S_IMODE(st.st_mode), st.st_gid
        except FileNotFoundError:
            mode, gid = 0o666 & ~umask(), None
    else:
        gid = None
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=_tmp_prefix(path), suffix=".tmp")
    try:
        with (os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8")) as f:
            os.fchmod(f.fileno(), mode)
            if gid is not None and gid != os.getegid():
                with contextlib.suppress(OSError):
                    os.fchown(f.fileno(), -1, gid)
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def target(path: str | Path) -> Path:
    """Where a write to ``path`` must go: through a symbolic link to its target (the link stays). A link
    that leads nowhere (a loop) is a UsageError."""
    path = Path(path)
    if not path.is_symlink():
        return path
    try:
        real = Path(os.path.realpath(path, strict=True))
    except FileNotFoundError:   # a dangling link: the write creates its target
        real = Path(os.path.realpath(path))
    except OSError:
        raise UsageError(f"{path} is a symbolic link that leads nowhere (a loop)") from None
    if os.path.lexists(real) and not os.path.exists(real):
        raise UsageError(f"{path} is a symbolic link that leads nowhere (a loop)")
    return real


def write_failure(what: str, path: str | Path, e: BaseException) -> GemvtuneError:
    """The one-line error of a failed output write: the user's path (missing folder, permission) is a UsageError
    (exit 2); a full disk, a quota or an I/O error an OutputError (exit 1)."""
    import errno

    from .userfile import os_reason

    if isinstance(e, UnicodeEncodeError):
        why = "text that cannot be written as UTF-8"
    else:
        why = os_reason(e) if isinstance(e, OSError) else str(e)
    msg = f"cannot write {what} {path}: {why}; the previous file, if any, is unchanged"
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO):
        return OutputError(msg)
    return UsageError(msg)


def write_with(path: str | Path, write: Callable[[Any], None], what: str = "output", *, binary: bool = False) -> None:
    """An output written by ``write(file)`` (text, or bytes with ``binary``) whole or not at all; one line if not."""
    if not str(path):   # (Path("") is ".", the current folder)
        raise UsageError(f"{what}: the path is empty")
    try:
        atomic_write(Path(path), write, binary=binary, what=what)
    except (OSError, UnicodeEncodeError) as e:
        raise write_failure(what, path, e) from None


def write_text(path: str | Path, text: str, what: str = "output") -> None:
    """An output text file written whole or not at all (atomic_write); an OSError is one UsageError naming it."""
    write_with(path, lambda f: f.write(text), what)


def palette_png(raw: bytes) -> bytes:
    """A plot's PNG in 256 colours (Pillow, matplotlib's own dependency): a line plot's few colours and their
    antialiasing look the same, in a third of the bytes (the H200's 35 committed plots: 1.87 MB -> 0.65 MB)."""
    from PIL import Image

    out = io.BytesIO()
    with Image.open(io.BytesIO(raw)) as im:
        im.convert("RGB").quantize(256).save(out, "PNG", optimize=True)
    return out.getvalue()


def savefig(fig: Any, path: str | Path, dpi: int = 110, what: str = "plot") -> None:
    """A matplotlib figure saved as a 256-colour PNG (``palette_png``), whole or not at all."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    png = palette_png(buf.getvalue())
    write_with(path, lambda f: f.write(png), what, binary=True)


def probe_folder(folder: Path, what: str) -> None:
    """Make sure files can be created in ``folder`` (made if missing): one UsageError naming ``what`` if not."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".gemvtune-write-test-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        up = folder
        while not os.path.lexists(up) and up != up.parent:
            up = up.parent
        if os.path.lexists(up) and not up.is_dir():
            raise UsageError(f"{what} {folder} cannot be made: {up} is not a folder") from None
        raise UsageError(f"{what} {folder} is not writable: {e.strerror or e}") from None


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` of this host still runs (a zombie, dead but not yet reaped, does not)."""
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError, TypeError):
        return True
    try:
        with open(f"/proc/{int(pid)}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return True
