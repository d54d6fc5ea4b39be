"""Files that are not what they seem, outputs written in place, cells that become formulas, unbounded integers
(docs/troubleshooting.md, "Hostile files"). Each class is one mechanism used everywhere: gemvtune.userfile reads,
gemvtune.safefile writes, gemvtune.cells neutralizes, gemvtune.intparse parses. Every CLI case: one line on
stderr, the exit code, no traceback, every file that was there byte-identical; a FIFO never hangs (the
subprocess has a short timeout, so a regression fails instead of blocking the suite)."""

import csv
import gzip
import io
import json
import os
import resource
import signal
import subprocess
import sys

import pytest
from conftest import ROOT

from gemvtune import UsageError
from gemvtune.runtime.table import load_table

TABLE = ROOT / "results" / "nvidia-h200" / "table.json"
SWEEPS = ROOT / "results" / "nvidia-h200" / "measurements"
SWEEP = SWEEPS / "sweep-4096x4096x1.csv.gz"


def write_text(*a, **k):
    from gemvtune.safefile import write_text as f
    return f(*a, **k)


def write_csv(*a, **k):
    from gemvtune.cells import write_csv as f
    return f(*a, **k)


def read_bytes(*a, **k):
    from gemvtune.userfile import read_bytes as f
    return f(*a, **k)


def decode_json(*a, **k):
    from gemvtune.userfile import decode_json as f
    return f(*a, **k)


def parse_int(*a, **k):
    from gemvtune.intparse import parse_int as f
    return f(*a, **k)


def cli(*args, timeout=60, limit_fsize=None, cwd=ROOT):
    """The CLI in a subprocess; ``limit_fsize`` caps the size of any file it writes (RLIMIT_FSIZE: a write past
    it fails with EFBIG, the way a full disk fails with ENOSPC)."""
    def pre():
        if limit_fsize is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_fsize, limit_fsize))
    return subprocess.run([sys.executable, "-m", "gemvtune", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, preexec_fn=pre)


def one_line(r, code, needle):
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == code, (r.returncode, r.stderr)
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in r.stderr, r.stderr


def snapshot(folder):
    return {p: p.read_bytes() for p in folder.rglob("*") if p.is_file() and not p.is_symlink()}


@pytest.fixture(scope="module")
def odd(tmp_path_factory):
    """Files that are not regular files, in the places gemvtune reads."""
    d = tmp_path_factory.mktemp("odd")
    os.mkfifo(d / "fifo.json")
    (d / "zero.json").symlink_to("/dev/zero")
    (d / "dangling.json").symlink_to(d / "nothing-here.json")
    (d / "loop.json").symlink_to(d / "loop.json")
    (d / "folder.json").mkdir()
    (d / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (d / "bigint.json").write_text('{"schema": ' + "9" * 5000 + ', "entries": {}}')
    (d / "latin1.json").write_bytes(b'{"a": "\xe9"}')
    # a sweep whose CSV is a FIFO, and one whose sidecar is a link to /dev/zero
    (d / "sw1").mkdir()
    (d / "sw1" / "sweep-4096x4096x1.json").write_bytes(SWEEP.with_name("sweep-4096x4096x1.json").read_bytes())
    os.mkfifo(d / "sw1" / "sweep-4096x4096x1.csv.gz")
    (d / "sw2").mkdir()
    (d / "sw2" / "sweep-4096x4096x1.csv.gz").write_bytes(SWEEP.read_bytes())
    (d / "sw2" / "sweep-4096x4096x1.json").symlink_to("/dev/zero")
    # a table folder whose lock is a FIFO
    (d / "locked").mkdir()
    (d / "locked" / "table.json").write_bytes(TABLE.read_bytes())
    os.mkfifo(d / "locked" / "table.json.lock")
    return d


READ_CASES = [
    ("table a FIFO", ["report", "--table", "{d}/fifo.json"], "is a FIFO (named pipe), not a regular file", 2),
    ("table a link to /dev/zero", ["report", "--table", "{d}/zero.json"], "is a character device", 2),
    ("table a dangling link", ["report", "--table", "{d}/dangling.json"], "symbolic link to nothing", 2),
    ("table a link loop", ["report", "--table", "{d}/loop.json"], "a loop of symbolic links", 2),
    ("table a folder", ["report", "--table", "{d}/folder.json"], "is a folder, not a regular file", 2),
    ("table nested too deeply", ["report", "--table", "{d}/deep.json"], "nested too deeply", 2),
    ("table with a 5000-digit integer", ["report", "--table", "{d}/bigint.json"], "not valid JSON for gemvtune", 2),
    ("table not UTF-8", ["report", "--table", "{d}/latin1.json"], "not UTF-8", 2),
    ("table name too long", ["report", "--table", "{d}/" + "x" * 5000 + ".json"], "the name is too long", 2),
    ("config file a FIFO", ["compile-check", "--shape", "64x64", "--configs", "{d}/fifo.json"], "is a FIFO", 2),
    ("config file a link to /dev/zero", ["compile-check", "--shape", "64x64", "--configs", "{d}/zero.json"],
     "is a character device", 2),
    ("config file nested too deeply", ["compile-check", "--shape", "64x64", "--configs", "{d}/deep.json"],
     "nested too deeply", 2),
    ("sweep CSV a FIFO", ["search", "--shape", "4096x4096", "--replay", "{d}/sw1", "--trials", "2", "--results",
                          "{d}/r1"], "is a FIFO", 2),
    ("sweep sidecar a link to /dev/zero", ["search", "--shape", "4096x4096", "--replay", "{d}/sw2", "--trials", "2",
                                           "--results", "{d}/r2"], "is a character device", 2),
    ("the table's lock a FIFO", ["search", "--shape", "4096x4096", "--replay", str(SWEEPS), "--trials", "2",
                                 "--results", "{d}/locked"], "lock", 2),
    ("inline config nested too deeply", ["render", "--shape", "64x64", "--config", "{" * 3000 + "}" * 3000],
     "", 2),
]


@pytest.mark.parametrize("what,args,needle,code", READ_CASES, ids=[c[0] for c in READ_CASES])
def test_reading_a_file_that_is_not_what_it_seems(odd, what, args, needle, code):
    before = snapshot(odd)
    r = cli(*[a.replace("{d}", str(odd)) for a in args])
    one_line(r, code, needle)
    assert snapshot(odd) == before
    assert os.path.exists(odd / "fifo.json") and not (odd / "fifo.json").is_file()   # the FIFO is still a FIFO


def test_reading_caps_a_file_that_lies_about_its_size(tmp_path):
    """A sparse file past the cap is refused by its size; /proc files (size 0) are read to the cap plus one byte."""
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(65 << 20)
    with pytest.raises(UsageError, match="more than the"):
        load_table(big)
    assert len(read_bytes("/proc/self/status", "status", 1 << 20)) > 0
    with pytest.raises(UsageError, match="more than the 10 bytes"):
        read_bytes("/proc/self/status", "status", 10)


@pytest.mark.parametrize("text,needle", [
    ("[" * 50_000, "nested too deeply"), ("1" * 5000, "not valid JSON for gemvtune"), ("", "is empty"),
    ('{"a": 1', "not valid JSON (truncated?)"), (b"\xff\xfe{", "not UTF-8"),
])
def test_every_json_decoder_error_is_one_line(text, needle):
    with pytest.raises(UsageError, match=needle.replace("(", r"\(").replace(")", r"\)").replace("?", r"\?")) as e:
        decode_json(text, "thing")
    assert "\n" not in str(e.value)


# ---- writing: outputs replaced whole or not at all, and only regular files --------------------------------

def _prev(path, text="previous,good\n1,2\n"):
    path.write_text(text)
    return path.read_bytes()


def test_report_csv_on_a_full_disk_keeps_the_previous_file(tmp_path):
    out = tmp_path / "t.csv"
    prev = _prev(out)
    r = cli("report", "--table", str(TABLE), "--csv", str(out), limit_fsize=4096)
    one_line(r, 1, "cannot write")
    assert out.read_bytes() == prev and not list(tmp_path.glob("*.tmp"))


def test_report_crossover_on_a_full_disk_keeps_the_previous_files(tmp_path):
    out = tmp_path / "x"
    out.mkdir()
    prev = _prev(out / "crossover.csv")
    r = cli("report", "--table", str(TABLE), "--crossover", str(out), limit_fsize=2048)
    one_line(r, 1, "cannot write")
    assert (out / "crossover.csv").read_bytes() == prev and not list(out.glob("*.tmp"))


def test_summarize_md_on_a_full_disk_keeps_the_previous_file(tmp_path):
    csv_path, _ = _bench_csv(tmp_path, name="x")
    md = tmp_path / "s.md"
    prev = _prev(md, "# the previous summary\n")
    r = cli("summarize", str(csv_path), "--md", str(md), limit_fsize=300)
    one_line(r, 1, "cannot write")
    assert md.read_bytes() == prev


def _special_targets(tmp_path):
    fifo = tmp_path / "fifo.out"
    os.mkfifo(fifo)
    targets = {"a FIFO": fifo, "a link to a FIFO": tmp_path / "to-fifo"}
    targets["a link to a FIFO"].symlink_to(fifo)
    try:   # a /dev/null of our own (root in a container may make one): never replaced
        os.mknod(tmp_path / "null", 0o666 | 0o020000, os.makedev(1, 3))
        targets["a character device"] = tmp_path / "null"
    except (PermissionError, OSError):
        pass
    return targets


@pytest.mark.parametrize("command", [
    ["report", "--table", str(TABLE), "--csv"],
    ["export", "--table", str(TABLE), "--out"],
    ["summarize", "{bench}", "--md"],
])
def test_an_output_that_is_not_a_regular_file_is_refused(tmp_path, command):
    bench, _ = _bench_csv(tmp_path, name="b")
    for what, target in _special_targets(tmp_path).items():
        kind = os.stat(target).st_mode
        r = cli(*[a.replace("{bench}", str(bench)) for a in command], str(target), timeout=30)
        one_line(r, 2, "regular file")
        assert os.stat(target).st_mode == kind, what   # still a FIFO / device: nothing renamed over it


def test_costmodel_fit_out_onto_a_fifo_or_device_is_refused_before_the_fit(tmp_path):
    for what, target in _special_targets(tmp_path).items():
        kind = os.stat(target).st_mode
        r = cli("costmodel", "fit", "--results", str(ROOT / "results" / "nvidia-h200"), "--out", str(target),
                timeout=30)
        one_line(r, 2, "regular file")
        assert os.stat(target).st_mode == kind and "fitted" not in r.stdout, what


def test_an_output_through_a_link_updates_its_target_and_keeps_the_link(tmp_path):
    real = tmp_path / "real.csv"
    _prev(real)
    link = tmp_path / "link.csv"
    link.symlink_to(real)
    r = cli("report", "--table", str(TABLE), "--csv", str(link))
    assert r.returncode == 0, r.stderr
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text().startswith("M,d,n,")


def test_an_empty_output_path_is_one_line(tmp_path):
    with pytest.raises(UsageError, match="the path is empty"):
        write_text("", "x")
    r = cli("report", "--table", str(TABLE), "--csv", "")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr


# ---- cells: nothing becomes a formula, markdown stays one cell -----------------------------------------

PAYLOADS = ["=HYPERLINK(\"http://x\",\"y\")", "@SUM(A1:A9)", "+cmd|' /C calc'!A0", "-2+3", "\tTAB", "\rCR"]


def _hostile_table(tmp_path):
    data = json.loads(TABLE.read_text())
    for i, e in enumerate(data["entries"].values()):
        e["updated"] = PAYLOADS[i % len(PAYLOADS)]
        e.setdefault("search", {})["sampler"] = PAYLOADS[(i + 1) % len(PAYLOADS)]
        e["winner"]["label"] = "=HYPERLINK(\"http://evil\")"
    p = tmp_path / "table.json"
    p.write_text(json.dumps(data))
    return p


def _cells(path):
    with open(path, newline="", encoding="utf-8") as f:
        return [c for row in csv.reader(f) for c in row]


def _formula(c):
    return c[:1] in ("=", "+", "-", "@", "\t", "\r") and not _is_number(c)


def _is_number(c):
    try:
        float(c)
        return True
    except ValueError:
        return False


def test_report_csv_and_crossover_write_no_formula(tmp_path):
    t = _hostile_table(tmp_path)
    r = cli("report", "--table", str(t), "--csv", str(tmp_path / "t.csv"), "--crossover", str(tmp_path / "x"))
    assert r.returncode == 0, r.stderr
    for f in (tmp_path / "t.csv", tmp_path / "x" / "crossover.csv"):
        cells = _cells(f)
        assert not [c for c in cells if _formula(c)], f
        assert not [c for c in cells if "HYPERLINK" in c or "SUM(" in c], f   # validated: never copied at all


def test_write_csv_neutralizes_every_string_cell(tmp_path):
    import pandas as pd

    df = pd.DataFrame({"error": PAYLOADS, "us": [1.0, -2.5, 3.0, 4.0, 5.0, 6.0], "neg": ["-1.5", "+3", "-x", "=1",
                                                                                          "@", "ok"]})
    write_csv(df, tmp_path / "o.csv")
    cells = _cells(tmp_path / "o.csv")
    assert not [c for c in cells if _formula(c)]
    assert "-1.5" in cells and "+3" in cells and "-2.5" in cells          # numbers stay numbers
    assert "'=HYPERLINK(\"http://x\",\"y\")" in cells and "'-x" in cells  # shown as text, not dropped


def _bench_csv(tmp_path, name="hostile", command="gemvtune bench | <script>alert(1)</script> `rm`"):
    rows = [{"kind": k, "name": n, "M": 64, "d": 64, "n": 1, "status": "ok", "us_median": u, "spread": 0.01,
             "pct_ceiling": 50.0} for k, n, u in (("llama.cpp", "llama", 2.0), ("cublas-torch", "cublas", 2.5),
                                                  ("variant", "a|b|c<img src=x>`x`", 1.5))]
    p = tmp_path / f"{name}.csv"
    import pandas as pd

    pd.DataFrame(rows).to_csv(p, index=False)
    meta = {"date": "2026-12-02 | extra | cells", "command": command,
            "device": {"name": "<b>GPU</b>|x", "compute_capability": "9.0", "sm_count": 132, "l2_bytes": 1 << 20},
            "ceiling": {"read_gbps": 4500.0}}
    p.with_suffix(".json").write_text(json.dumps(meta))
    return p, meta


def test_summarize_markdown_rows_keep_their_cells(tmp_path):
    csv_path, _ = _bench_csv(tmp_path)
    r = cli("summarize", str(csv_path))
    assert r.returncode == 0, r.stderr
    assert "<img" not in r.stdout and "<b>" not in r.stdout and "<script" not in r.stdout
    table = [ln for ln in r.stdout.splitlines() if ln.startswith("| 64×64")]
    header = [ln for ln in r.stdout.splitlines() if ln.startswith("| M×d | n | MB")][0]
    assert table and all(row.count(" | ") == header.count(" | ") for row in table[:1]), (header, table)


def test_markdown_cells():
    from gemvtune.cells import csv_cell, md_cell, md_row

    assert md_cell("a|b") == "a&#124;b" and md_cell("<x>") == "&lt;x>" and md_cell("`c`") == "&#96;c&#96;"
    assert md_cell("two\nlines") == "two lines" and md_row(["a|b", 1]) == "| a&#124;b | 1 |"
    assert csv_cell("=1+1") == "'=1+1" and csv_cell("-3.5") == "-3.5" and csv_cell(7) == 7


def test_the_schema_refuses_a_string_that_cannot_be_utf8(tmp_path):
    data = json.loads(TABLE.read_text())
    next(iter(data["entries"].values()))["updated"] = "\ud800"
    p = tmp_path / "t.json"
    p.write_text(json.dumps(data))     # ASCII JSON with a \\ud800 escape: valid JSON, not valid Unicode
    with pytest.raises(UsageError, match="lone surrogate"):
        load_table(p)


# ---- integers: ASCII digits, at most 12, bounded ------------------------------------------------------

INT_CASES = [
    ("a superscript digit in a shape", ["space", "--shape", "³x4096"], "malformed shape", 2),
    ("Arabic-Indic digits in a shape", ["space", "--shape", "٤٠٩٦x4096"], "malformed shape", 2),
    ("a 5000-digit shape", ["space", "--shape", "9" * 5000 + "x4096"], "malformed shape", 2),
    ("a superscript batch", ["space", "--shape", "64x64", "--batch", "¹"], "malformed batch list", 2),
    ("a 5000-digit batch", ["space", "--shape", "64x64", "--batch", "1" * 5000], "malformed batch list", 2),
    ("sample of 30 digits", ["compile-check", "--shape", "64x64", "--configs", "sample:" + "9" * 30], "sample:N", 2),
    ("sample of a superscript", ["compile-check", "--shape", "64x64", "--configs", "sample:³"], "sample:N", 2),
    ("inline config of 5000 digits", ["render", "--shape", "64x64", "--config", "block=" + "1" * 5000],
     "block=", 2),
    ("--layers three hundred million", ["bench", "hf", str(ROOT / "gemvtune" / "kernels" / "hf_configs" /
                                                               "llama-3-8b.json"), "--layers", "300000000"],
     "--layers must be an integer >= 1 and <= 1024", 2),
    ("--tokens of 20 digits", ["bench", "hf", str(ROOT / "gemvtune" / "kernels" / "hf_configs" /
                                                      "llama-3-8b.json"), "--tokens", "9" * 20],
     "--tokens must be an integer >= 1 and <= 65536", 2),
    ("--layers of a model preset, huge", ["bench", "step", "--model", "llama-3-8b", "--layers", "300000000"],
     "--layers must be an integer >= 1 and <= 1024", 2),
    ("transition batch of 5000 digits", ["transition", "--shape", "64x64", "--batch", "1" * 5000],
     "malformed batch list", 2),
]


@pytest.mark.parametrize("what,args,needle,code", INT_CASES, ids=[c[0] for c in INT_CASES])
def test_integers_are_bounded(what, args, needle, code):
    one_line(cli(*args, timeout=60), code, needle)


@pytest.mark.parametrize("text,ok", [("12", 12), (" 7 ", 7), ("-3", -3), ("+4", 4), ("³", None), ("٣", None),
                                     ("1" * 13, None), ("1e3", None), ("0x10", None), ("", None), ("1_000", None)])
def test_parse_int(text, ok):
    if ok is None:
        with pytest.raises(UsageError):
            parse_int(text, "n")
    else:
        assert parse_int(text, "n") == ok
    with pytest.raises(UsageError, match="outside 1..10"):
        parse_int("11", "n", 1, 10)


# ---- the readers and writers under random input (a seeded generator: the same cases on every run) -------

def _garbage(rng, valid: bytes):
    k = rng.randrange(5)
    if k == 0:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
    if k == 1:
        return valid[:rng.randrange(1, len(valid))]
    if k == 2:
        b = bytearray(valid)
        for _ in range(rng.randrange(1, 8)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b)
    if k == 3:
        return (b"[" * rng.randrange(1000, 20000)) + valid[:50]
    return b'{"schema": 1, "gpu": {}, "entries": {"k": ' + b"9" * rng.randrange(4300, 9000) + b"}}"


def _readers(root):
    from gemvtune.kernels.families import load_configs
    from gemvtune.kernels.hfconfig import read_hf_config
    from gemvtune.model import costmodel
    from gemvtune.runners.replay import Sweep

    return {"table": load_table, "configs": load_configs, "hf config": read_hf_config,
            "cost model": costmodel.load, "sweep sidecar": lambda p: Sweep(_sweep_with_sidecar(root, p))}


def _sweep_with_sidecar(root, side):
    d = root / f"sw-{side.stem}"
    d.mkdir(exist_ok=True)
    (d / "sweep-4096x4096x1.csv.gz").write_bytes(SWEEP.read_bytes())
    (d / "sweep-4096x4096x1.json").write_bytes(side.read_bytes()) if side.is_file() and not side.is_symlink() else None
    if not (d / "sweep-4096x4096x1.json").exists():
        (d / "sweep-4096x4096x1.json").symlink_to(side)
    return d / "sweep-4096x4096x1.csv.gz"


def _alarm(seconds):
    def boom(*_):
        raise TimeoutError("a reader hung")
    signal.signal(signal.SIGALRM, boom)
    signal.alarm(seconds)


def test_readers_under_random_truncated_and_odd_files(tmp_path):
    import random

    valid = {"table": TABLE.read_bytes(), "configs": b'[{"vec": "half8"}]',
             "hf config": (ROOT / "gemvtune" / "kernels" / "hf_configs" / "llama-3-8b.json").read_bytes(),
             "cost model": gzip.decompress((ROOT / "results" / "nvidia-h200" / "costmodel.json.gz").read_bytes()),
             "sweep sidecar": SWEEP.with_name("sweep-4096x4096x1.json").read_bytes()}
    readers = _readers(tmp_path)
    rng = random.Random(20261202)
    specials = []
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "zero").symlink_to("/dev/zero")
    (tmp_path / "dir").mkdir()
    specials = [tmp_path / "fifo", tmp_path / "zero", tmp_path / "dir"]
    try:
        for i in range(60):
            name = rng.choice(sorted(readers))
            p = tmp_path / f"case-{i}.json"
            p.write_bytes(_garbage(rng, valid[name]))
            before = p.read_bytes()
            _alarm(20)
            try:
                readers[name](p)
            except UsageError as e:
                assert "\n" not in str(e), (name, i, str(e)[:300])
            finally:
                signal.alarm(0)
            assert p.read_bytes() == before
        for name in sorted(readers):
            for s in specials:
                _alarm(20)
                try:
                    with pytest.raises(UsageError) as e:
                        readers[name](s)
                    assert "\n" not in str(e.value)
                finally:
                    signal.alarm(0)
    finally:
        signal.signal(signal.SIGALRM, signal.SIG_DFL)


def test_writers_under_random_failures_keep_the_previous_file(tmp_path):
    """A write that fails at a random point (an OSError of the disk, text that cannot be UTF-8) leaves the previous
    file byte-identical and no temporary file; a write that succeeds replaces it whole."""
    import errno
    import random

    from gemvtune.safefile import write_with

    rng = random.Random(7)
    out = tmp_path / "out.txt"
    prev = _prev(out, "the previous output\n" * 50)
    for i in range(40):
        cut = rng.randrange(1, 2000)
        fault = rng.choice(["enospc", "eio", "surrogate"])

        def write(f, cut=cut, fault=fault):
            f.write("x" * cut)
            if fault == "surrogate":
                f.write("\ud800")
                f.flush()
            raise OSError(errno.ENOSPC if fault == "enospc" else errno.EIO, os.strerror(errno.ENOSPC))
        with pytest.raises(Exception) as e:
            write_with(out, write, "output")
        assert "\n" not in str(e.value) and "cannot write output" in str(e.value)
        assert out.read_bytes() == prev, i
        assert not list(tmp_path.glob("*.tmp"))
    write_text(out, "new\n")
    assert out.read_text() == "new\n"


def test_no_reader_opens_a_users_file_without_userfile():
    """The readers of files a user hands gemvtune go through gemvtune.userfile: no json.load of an open file, no
    read_text/read_bytes followed by json.loads, in the modules that read tables, configs, sweeps, models."""
    import re

    mods = ["runtime/table.py", "kernels/families.py", "runners/replay.py", "model/costmodel.py",
            "model/dataset.py", "bench/summary.py", "kernels/hfconfig.py", "tuning/search_run.py"]
    bad = {}
    for m in mods:
        src = (ROOT / "gemvtune" / m).read_text()
        hits = re.findall(r"json\.load\(|json\.loads\([^)]*read_(?:text|bytes)\(", src)
        if hits:
            bad[m] = hits
    assert not bad, bad


def test_csv_reader_reads_back_what_write_csv_wrote(tmp_path):
    import pandas as pd

    df = pd.DataFrame({"a": ["x,y", "q\"uote", "line\nbreak"], "b": [1, 2, 3]})
    write_csv(df, tmp_path / "r.csv")
    back = pd.read_csv(io.StringIO((tmp_path / "r.csv").read_text()))
    assert list(back.a) == list(df.a) and list(back.b) == [1, 2, 3]


def test_troubleshooting_lists_the_hostile_catalogue():
    text = (ROOT / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
    section = text[text.index("## Hostile files"):]
    missing = [what for what, *_ in READ_CASES + INT_CASES if f"| {what} |" not in section]
    assert not missing, missing


def test_the_cli_under_random_files_is_one_line_and_a_non_zero_exit(tmp_path):
    """The same generator through the command line: each damaged table, config list or HF config is one line on
    stderr, exit 2, and the file unchanged."""
    import random

    rng = random.Random(33)
    valid = {"table": TABLE.read_bytes(), "configs": b'[{"vec": "half8"}, {"block": 256}]',
             "hf": (ROOT / "gemvtune" / "kernels" / "hf_configs" / "llama-3-8b.json").read_bytes()}
    commands = {"table": lambda p: ["report", "--table", str(p)],
                "configs": lambda p: ["compile-check", "--shape", "64x64", "--configs", str(p)],
                "hf": lambda p: ["search", "--hf-config", str(p), "--results", str(tmp_path / "r")]}
    for i in range(9):
        kind = sorted(valid)[i % 3]
        p = tmp_path / f"c{i}.json"
        p.write_bytes(_garbage(rng, valid[kind]))
        before = p.read_bytes()
        r = cli(*commands[kind](p))
        if r.returncode == 0:   # a mutation that left a valid file (a changed digit in a time): fine, if unchanged
            assert p.read_bytes() == before
            continue
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert r.returncode in (2, 3) and len(lines) == 1 and "Traceback" not in r.stderr, (kind, i, r.stderr[-400:])
        assert p.read_bytes() == before
