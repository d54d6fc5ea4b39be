"""The searches a results folder keeps for the cost model, in one file: ``measurements/searches.json.xz`` holds
every search CSV and sidecar byte for byte as the search wrote them, keyed by the file's name, xz-compressed (the
H200's 466 search files: 2.1 MB in a git archive as single .gz files, 1.0 MB as this one file). ``gemvtune
costmodel pack FOLDER`` moves a folder's search files into it; ``model.dataset`` reads its members as it reads
the files themselves."""

from __future__ import annotations

import json
import lzma
import re
from pathlib import Path

from ..errors import UsageError
from ..safefile import write_with
from ..userfile import MB, check_regular, read_maybe_gz

ARCHIVE = "searches.json.xz"
ARCHIVE_BYTES = 512 * MB     # decompressed (the H200's: 14 MB)
FORMAT = "gemvtune-searches"
VERSION = 1
MEMBER = re.compile(r"^search-\d{1,7}x\d{1,7}x\d{1,2}(?:-bf16)?(?:-e4m3-row|-e4m3-b128)?(?:-\d{8}-\d{6})?"
                    r"\.(?:csv|json)$", re.ASCII)
_FILE = re.compile(r"^search-.*\.(?:csv|json)(?:\.gz)?$", re.ASCII)


def read_archive(path: str | Path) -> dict[str, bytes]:
    """The members of an archive (name -> the file's bytes): one UsageError naming the file for anything that is
    not such an archive (not xz, truncated, over the cap, not its JSON, a member name that is not a search file's)."""
    raw = read_maybe_gz(path, "measurement archive", ARCHIVE_BYTES)
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise UsageError(f"measurement archive {path} is not JSON ({str(e)[:80]})") from None
    if not (isinstance(data, dict) and data.get("format") == FORMAT and data.get("version") == VERSION
            and isinstance(data.get("files"), dict)):
        raise UsageError(f"measurement archive {path} is not a {FORMAT} archive of version {VERSION}")
    out: dict[str, bytes] = {}
    for name, text in data["files"].items():
        if not (isinstance(name, str) and MEMBER.match(name) and isinstance(text, str)):
            raise UsageError(f"measurement archive {path}: member {str(name)[:60]!r} is not a search file's text")
        out[name] = text.encode("utf-8")
    return out


def write_archive(path: str | Path, members: dict[str, bytes]) -> None:
    """Write ``members`` (name -> bytes, UTF-8 text) as an archive, whole or not at all."""
    for name in members:
        if not MEMBER.match(name):
            raise UsageError(f"{name!r} is not a search file's name "
                             f"(search-MxDxN[-bf16][-e4m3-row|-e4m3-b128][-STAMP].csv|json)")
    doc = {"format": FORMAT, "version": VERSION,
           "files": {k: members[k].decode("utf-8") for k in sorted(members)}}
    blob = lzma.compress(json.dumps(doc, ensure_ascii=False, sort_keys=True).encode("utf-8"),
                         format=lzma.FORMAT_XZ, preset=9 | lzma.PRESET_EXTREME)
    write_with(path, lambda f: f.write(blob), "measurement archive", binary=True)


def pack(folder: str | Path) -> list[str]:
    """Move the search files of ``folder`` (search-*.csv, .json, either gzipped) into its archive: the archive is
    written (merged with what it held) before any file is removed, and a name the archive holds with other bytes
    is refused, nothing changed. Returns the names packed."""
    folder = Path(folder)
    target = folder / ARCHIVE
    members = read_archive(target) if target.exists() else {}
    files = sorted(p for p in folder.iterdir() if _FILE.match(p.name) and check_regular(p, "search file"))
    new: dict[str, bytes] = {}
    for p in files:
        name = p.name.removesuffix(".gz")
        if not MEMBER.match(name):
            raise UsageError(f"{p} is not named as a search writes its files")
        data = read_maybe_gz(p, "search file", ARCHIVE_BYTES)
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            raise UsageError(f"search file {p} is not UTF-8 text") from None
        if (members.get(name) not in (None, data)) or (new.get(name) not in (None, data)):
            raise UsageError(f"{p}: the archive already holds {name} with other content; nothing was packed")
        new[name] = data
    if not new:
        return []
    write_archive(target, {**members, **new})
    for p in files:
        p.unlink()
    return sorted(new)
