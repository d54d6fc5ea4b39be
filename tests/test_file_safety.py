"""Issue 17, data safety 4: table.json keeps its mode (a new one gets the umask's default), the
temporary files of killed table writers are removed, and a table reached through a symbolic link is
written through it. Issue 18, item 5: every file written whole goes through safefile.atomic_write with
the mode it had before (header 0644, CSV as a table, cubin cache 0600), and the locks are filelock's
(CPU only)."""

import json
import os
import signal
import stat
import subprocess
import sys
import time

import pytest
from conftest import ROOT, flock_free, run_cli

from gemvtune import LLAMA_CPP, Shape
from gemvtune.runtime.table import load_table, record
from gemvtune.safefile import STALE_TMP_S, atomic_write, locked, umask

SWEEPS = str(ROOT / "results" / "nvidia-h200" / "measurements")
DEV = {"name": "NVIDIA H200", "compute_capability": "9.0"}


def _entry():
    c = LLAMA_CPP
    return {"winner": {"family": "gemv", "config": c.to_dict(), "label": c.label, "us": 10.0, "us_min": 10.0,
                       "us_max": 10.0, "gbps": 1.0, "pct_ceiling": 90.0, "spread": 0.01},
            "baselines": {"llama.cpp": {"us": 12.0}}, "search": {"sampler": "tpe", "seed": 0}}


def _mode(p):
    return stat.S_IMODE(p.stat().st_mode)


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_umask_is_read_without_changing_it(umask_022):
    assert umask() == 0o022 and umask() == 0o022


def test_new_table_gets_the_umask_default_and_keeps_its_mode(tmp_path, umask_022):
    p = tmp_path / "table.json"
    record(p, Shape(64, 64), _entry(), DEV)
    assert _mode(p) == 0o644                        # not mkstemp's 0600
    os.chmod(p, 0o664)
    record(p, Shape(64, 128), _entry(), DEV)
    assert _mode(p) == 0o664
    os.chmod(p, 0o600)                              # a private table stays private
    record(p, Shape(64, 256), _entry(), DEV)
    assert _mode(p) == 0o600 and len(load_table(p).shapes) == 3


def test_search_keeps_the_table_mode(tmp_path, umask_022):
    out = tmp_path / "res"
    r = run_cli("search", "--shape", "4096x4096", "--replay", SWEEPS, "--trials", "5", "--results", str(out))
    assert r.returncode == 0, r.stderr
    assert _mode(out / "table.json") == 0o644
    os.chmod(out / "table.json", 0o640)
    r = run_cli("search", "--shape", "6144x4096", "--replay", SWEEPS, "--trials", "5", "--results", str(out))
    assert r.returncode == 0, r.stderr
    assert _mode(out / "table.json") == 0o640


KILLED_WRITER = """
import os, signal, sys
from gemvtune import LLAMA_CPP, Shape
from gemvtune.runtime.table import record
c = LLAMA_CPP
entry = {"winner": {"family": "gemv", "config": c.to_dict(), "label": c.label, "us": 9.0, "us_min": 9.0,
                    "us_max": 9.0, "gbps": 1.0, "pct_ceiling": 90.0, "spread": 0.01},
         "baselines": {"llama.cpp": {"us": 12.0}}, "search": {}}
os.replace = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)   # killed between write and rename
record(sys.argv[1], Shape(64, 512), entry, {"name": "NVIDIA H200"})
"""


def test_tmp_files_of_killed_writers_are_removed(tmp_path):
    p = tmp_path / "table.json"
    record(p, Shape(64, 64), _entry(), DEV)
    for _ in range(3):   # writers SIGKILLed mid-write: each leaves its tmp, the next one removes it
        r = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(p)], cwd=ROOT, timeout=120)
        assert r.returncode == -signal.SIGKILL
        assert len(list(tmp_path.glob("table.json.*.tmp"))) == 1
    assert json.loads(p.read_text())["entries"].keys() == {"64x64x1"}
    old = tmp_path / "table.json.abc123xy.tmp"      # an older gemvtune's name (no pid), long ago
    old.write_text("{")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    fresh = tmp_path / "table.json.zz9zz9zz.tmp"    # no pid and new: it may be a writer's right now
    fresh.write_text("{")
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        busy = tmp_path / f"table.json.{live.pid}.k2j3h4g5.tmp"   # a live writer's, new
        busy.write_text("{")
        other = tmp_path / "other.json.1.abcdefgh.tmp"            # not the table's
        other.write_text("{")
        record(p, Shape(64, 128), _entry(), DEV)
        assert sorted(tmp_path.glob("*.tmp")) == sorted([fresh, busy, other])
        assert json.loads(p.read_text())["entries"].keys() == {"64x64x1", "64x128x1"}
        os.utime(busy, (time.time() - 2 * STALE_TMP_S, time.time() - 2 * STALE_TMP_S))
        record(p, Shape(64, 256), _entry(), DEV)    # under the lock, old enough: stale whoever wrote it
        assert sorted(tmp_path.glob("*.tmp")) == sorted([fresh, other])
    finally:
        live.kill()
        live.wait()


def test_table_through_a_symlink_stays_a_link(tmp_path):
    real = tmp_path / "store" / "table.json"
    real.parent.mkdir()
    record(real, Shape(64, 64), _entry(), DEV)
    link = tmp_path / "table.json"
    link.symlink_to(real)
    record(link, Shape(64, 128), _entry(), DEV)
    assert link.is_symlink() and len(load_table(real).shapes) == 2


# ---- Issue 18, item 5: one atomic write, one lock ------------------------------------------------------
def test_export_header_is_0644_whatever_the_umask(tmp_path):
    from gemvtune.runtime.export import write_header

    old = os.umask(0o077)
    try:
        p = write_header("// h\n", tmp_path / "g.cuh")
        assert _mode(p) == 0o644 and p.read_text() == "// h\n"
        os.chmod(p, 0o600)
        write_header("// h2\n", p)
        assert _mode(p) == 0o644 and p.read_text() == "// h2\n"
    finally:
        os.umask(old)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["g.cuh"]


def test_csv_gets_the_umask_default_and_keeps_its_mode(tmp_path, umask_022):
    from gemvtune.reports.runcsv import write_csv
    from gemvtune.runners.base import Measurement, Status

    rows = [Measurement("v", "variant", 64, 64, 1, Status.OK)]
    p = write_csv(rows, tmp_path / "s.csv", {"k": 1})
    assert _mode(p) == 0o644 and p.read_text().splitlines()[0].startswith("name,")
    os.chmod(p, 0o640)
    write_csv(rows, p, {"k": 1})
    assert _mode(p) == 0o640
    assert sorted(x.name for x in tmp_path.iterdir()) == ["s.csv", "s.json"]   # no temporary left


def test_cubin_cache_files_stay_private(tmp_path, umask_022):
    from gemvtune.build.compile import _atomic_write

    p = tmp_path / "k.cubin"
    _atomic_write(p, b"\x7fELF\x00\xff")
    assert p.read_bytes() == b"\x7fELF\x00\xff" and _mode(p) == 0o600
    assert sorted(x.name for x in tmp_path.iterdir()) == ["k.cubin"]


def test_atomic_write_leaves_the_old_file_when_the_write_fails(tmp_path):
    p = tmp_path / "t.json"
    p.write_text("old")

    def boom(f):
        f.write("half")
        raise RuntimeError("killed")
    with pytest.raises(RuntimeError):
        atomic_write(p, boom)
    assert p.read_text() == "old" and sorted(x.name for x in tmp_path.iterdir()) == ["t.json"]


def test_table_lock_is_a_flock_beside_the_file(tmp_path):
    p = tmp_path / "table.json"
    with locked(p):
        assert not flock_free(tmp_path / "table.json.lock")
    assert flock_free(tmp_path / "table.json.lock")   # released; the lock file stays


def test_table_lock_through_a_read_only_lock_file(tmp_path, monkeypatch):
    """Another user's lock file (not writable here, simulated: root writes anyway): a read-only descriptor
    locks it as well, as before filelock."""
    import filelock

    class NotWritable(filelock.FileLock):
        def acquire(self, *a, **k):
            raise PermissionError(13, "Permission denied", str(self.lock_file))

    monkeypatch.setattr(filelock, "FileLock", NotWritable)
    p = tmp_path / "table.json"
    (tmp_path / "table.json.lock").touch()
    with locked(p):
        assert not flock_free(tmp_path / "table.json.lock")
    assert flock_free(tmp_path / "table.json.lock")


def test_plots_are_written_as_256_colour_pngs(tmp_path):
    """safefile.savefig: a PNG in palette mode, the same size in pixels, at most a third of the RGBA bytes."""
    import io

    import pytest

    mpl = pytest.importorskip("matplotlib")
    mpl.use("Agg")
    import matplotlib.pyplot as plt
    from PIL import Image

    from gemvtune.safefile import savefig

    fig, ax = plt.subplots(figsize=(6, 4))
    for k in range(6):
        ax.plot(range(50), [((i * (k + 1)) % 17) / (k + 1) for i in range(50)], label=f"s{k}")
    ax.legend()
    rgba = io.BytesIO()
    fig.savefig(rgba, format="png", dpi=110)
    savefig(fig, tmp_path / "p.png")
    plt.close(fig)
    with Image.open(tmp_path / "p.png") as im, Image.open(io.BytesIO(rgba.getvalue())) as ref:
        assert im.mode == "P" and im.size == ref.size
    assert (tmp_path / "p.png").stat().st_size * 2 < len(rgba.getvalue())
