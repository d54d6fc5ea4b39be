"""Issue 17, item 12 (command-line conventions): progress bars only on a terminal, one INFO line per
phase, shapes in numeric order, escaped sidecar strings, NVRTC's missing-extra hint, the GPU skip reason."""

import io
import json
import logging
import re
import sys
import types

import conftest
import pytest
import tomllib
from conftest import ROOT, run_cli
from tqdm import tqdm

from gemvtune.build import compile as gcompile
from gemvtune.progress import progress, progress_bar

TABLE = ROOT / "results" / "nvidia-h200" / "table.json"
SWEEP = ROOT / "results" / "nvidia-h200" / "measurements" / "sweep-4096x4096x1.csv.gz"
CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")   # every control character but the newline


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


class Records(logging.Handler):
    """The gemvtune logger's messages at INFO (pytest's logging plugin is off in the checks)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def info_log():
    log, h = logging.getLogger("gemvtune"), Records()
    level = log.level
    log.addHandler(h)
    log.setLevel(logging.INFO)
    yield h.messages
    log.removeHandler(h)
    log.setLevel(level)


# -- the progress helper ---------------------------------------------------------------------------

def test_progress_is_the_iterable_itself_off_a_terminal(monkeypatch):
    items, pipe = [1, 2, 3], io.StringIO()
    assert progress(items, total=3, desc="x", file=pipe) is items
    assert progress_bar(3, desc="x", file=pipe) is None
    monkeypatch.setattr(sys, "stderr", pipe)              # the default stream: stderr, here a pipe
    assert progress(items, total=3, desc="x") is items and progress_bar(3) is None
    assert progress(items, total=3, desc="x", file=FakeTTY(), enabled=False) is items
    assert pipe.getvalue() == ""


def test_progress_counts_on_a_terminal(monkeypatch):
    tty = FakeTTY()
    it = progress(iter("abcd"), total=4, desc="compile 4096x4096", unit="kernel", file=tty)
    assert isinstance(it, tqdm)
    assert list(it) == list("abcd") and it.n == 4 and it.total == 4
    assert "compile 4096x4096" in tty.getvalue() and "0/4" in tty.getvalue()
    monkeypatch.setattr(sys, "stderr", FakeTTY())
    bar = progress_bar(7, desc="sweep", unit="config")
    bar.update(3)
    assert bar.n == 3 and "sweep" in sys.stderr.getvalue()
    bar.close()


def test_compiles_count_on_a_terminal_only(monkeypatch):
    monkeypatch.setattr(gcompile, "compile_source", lambda src, name, arch, kernel: f"cubin of {name}")
    items = [("a", "src a"), ("b", "src b"), ("c", "src c")]
    for stream, shown in ((io.StringIO(), False), (FakeTTY(), True)):
        monkeypatch.setattr(sys, "stderr", stream)
        out = gcompile.compile_many(items, jobs=2, progress="compile 8x8")
        assert out == ["cubin of a", "cubin of b", "cubin of c"]
        assert ("compile 8x8" in stream.getvalue() and "0/3" in stream.getvalue()) is shown
    tty = FakeTTY()
    monkeypatch.setattr(sys, "stderr", tty)
    gcompile.compile_many(items, jobs=2)                     # no label: no bar (search, bench, sweep)
    assert tty.getvalue() == ""


def test_compile_check_logs_its_phases_and_draws_no_bar_in_a_pipe():
    r = run_cli("-v", "compile-check", "--shape", "64x256", "--configs", "sample:2")
    assert r.returncode == 0, r.stderr
    assert "INFO: compile-check: 2 configs selected" in r.stderr
    assert "INFO: compile-check: rendering and compiling" in r.stderr and "INFO: compile-check: compiled" in r.stderr
    assert "\r" not in r.stderr and "kernel/s" not in r.stderr and "2 compiled, 0 failed" in r.stdout


def test_sweep_runner_counts_measurements_and_clears_before_echo(monkeypatch, info_log):
    from gemvtune.cli.replay_cmd import _Ticking
    from gemvtune.kernels.shapes import Shape

    class Runner:
        arch, replays = "sm_90", 7

        def measure(self, c, shape, kind):
            return (c, kind)

    tty = FakeTTY()
    monkeypatch.setattr(sys, "stderr", tty)
    t = _Ticking(Runner(), Shape(64, 256), 3)
    assert t.arch == "sm_90" and t.replays == 7 and t.bar is None   # no bar while compiling
    assert [t.measure(i, None, kind="sweep") for i in range(3)] == [(0, "sweep"), (1, "sweep"), (2, "sweep")]
    assert t.bar.n == 3 and "sweep 64x256" in tty.getvalue()
    assert info_log == ["sweep 64x256: compiled; measuring 3 configs"]   # once, at the first measurement
    t.echo("64x256: done")
    assert t.bar is None
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    quiet = _Ticking(Runner(), Shape(64, 256), 1)
    assert quiet.measure(0, None, kind="sweep") == (0, "sweep") and quiet.bar is None


def test_study_shows_progress_on_a_terminal(monkeypatch, tmp_path, info_log):
    from gemvtune.tuning.study import run_study

    tty = FakeTTY()
    monkeypatch.setattr(sys, "stderr", tty)
    _, runs = run_study([SWEEP], ["random"], seeds=1, budget=3, jobs=1, echo=lambda s: None)
    assert len(runs) == 1 and "study" in tty.getvalue() and "0/1" in tty.getvalue()
    assert "study: running 1 simulated searches on 1 processes" in info_log


def test_study_cli_logs_phases_without_a_bar_in_a_pipe(tmp_path):
    r = run_cli("-v", "study", "--sweeps", str(SWEEP), "--samplers", "random", "--seeds", "1", "--budget", "3",
                "--jobs", "1", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert "INFO: study: running 1 simulated searches" in r.stderr and "INFO: study: summarizing 1 searches" in r.stderr
    assert "\r" not in r.stderr and "search/s" not in r.stderr


# -- report: shapes in numeric order ------------------------------------------------------------------

def _key(k: str) -> tuple:
    """(M, d, n, dtype, weights) of a table key "MxDxn", "MxDxn.bf16", "MxDxn.e4m3-row" or "MxDxn.bf16.e4m3-b128"."""
    dims, *rest = k.split(".")
    dtype = next((x for x in rest if x in ("fp16", "bf16")), "fp16")
    weights = next((x for x in rest if x.startswith("e4m3")), "")
    return (*(int(x) for x in dims.split("x")), dtype, weights)


def test_report_sorts_shapes_numerically(tmp_path):
    from gemvtune.reports.tablereport import table_frame, table_summary
    from gemvtune.runtime.table import load_table

    data = json.loads(TABLE.read_text())
    data["entries"] = dict(sorted(data["entries"].items(), reverse=True))   # stored in reverse string order
    keys = list(data["entries"])
    numeric = sorted(keys, key=_key)
    assert sorted(keys) != numeric   # (the check below could not tell the two orders apart otherwise)
    p = tmp_path / "table.json"
    p.write_text(json.dumps(data))
    t = load_table(p)
    df = table_frame(t)
    assert list(zip(df.M, df.d, df.n, df.dtype, df.weights)) == [_key(k) for k in numeric]
    lines = table_summary(t).splitlines()[1:]
    line = re.compile(r"\s*(\d+)x(\d+)\s+n=(\d+)\s+(bf16)?\s*(e4m3-\w+)?")
    assert [(int(m[1]), int(m[2]), int(m[3]), m[4] or "fp16", m[5] or "") for m in map(line.match, lines)] == \
        [_key(k) for k in numeric]
    r = run_cli("report", "--table", str(p), "--csv", str(tmp_path / "r.csv"))
    assert r.returncode == 0, r.stderr
    shown = [(int(m[1]), int(m[2]), int(m[3]), m[4] or "fp16", m[5] or "")
             for m in re.finditer(r"^\s*(\d+)x(\d+)\s+n=(\d+)\s+(bf16)?\s*(e4m3-\w+)?", r.stdout, re.M)]
    assert shown == [_key(k) for k in numeric]
    rows = (tmp_path / "r.csv").read_text().splitlines()[1:]
    assert [(*(int(x) for x in row.split(",")[:3]), *row.split(",")[3:5]) for row in rows] == \
        [_key(k) for k in numeric]


# -- summarize: sidecar and CSV strings are escaped --------------------------------------------------------

def test_summarize_escapes_sidecar_and_csv_strings(tmp_path):
    from gemvtune.bench.summary import summarize_bench
    from gemvtune.reports.runcsv import provenance, write_csv
    from gemvtune.runners.base import Measurement

    def m(name, kind, us):
        return Measurement(name, kind, 4096, 4096, 1, "ok", us_median=us, us_min=us, us_max=us, gbps=3000.0,
                           pct_ceiling=60.0, params={"block": 256} if kind == "variant" else {})

    evil = "NVIDIA H200\n# injected\x1b[31m\u202e"
    p = write_csv([m("llama", "llama.cpp", 11.0), m("cublas", "cublas-torch", 13.0),
                   m("fast\x1b]0;pwn\x07\nx", "variant", 9.5)], tmp_path / "b.csv",
                  provenance({"name": evil, "driver": "580\r\n\x1b[2J"}, ceiling={"read_gbps": 4600.0}))
    meta = json.loads(p.with_suffix(".json").read_text())
    meta["command"], meta["date"] = "gemvtune bench\x1b[31m", "2026\n-11-29"
    p.with_suffix(".json").write_text(json.dumps(meta))
    md = summarize_bench(p)
    assert not CONTROL.search(md) and "\u202e" not in md
    assert "GPU: NVIDIA H200\\n# injected\\x1b[31m\\u202e" in md and "driver 580\\r\\n\\x1b[2J" in md
    assert "`gemvtune bench\\x1b[31m`" in md and "date: 2026\\n-11-29" in md
    assert "`fast\\x1b]0;pwn\\x07\\nx` | 9.50" in md
    assert not any(ln.startswith("# injected") for ln in md.splitlines())
    r = run_cli("summarize", str(p))
    assert r.returncode == 0 and not CONTROL.search(r.stdout) and "\\x1b[31m" in r.stdout


# -- NVRTC missing: the extras to install -------------------------------------------------------------------

def test_nvrtc_missing_names_the_extras(monkeypatch):
    import cuda.bindings

    monkeypatch.delattr(cuda.bindings, "nvrtc", raising=False)
    monkeypatch.setitem(sys.modules, "cuda.bindings.nvrtc", None)   # the import fails
    with pytest.raises(gcompile.NvrtcUnavailable) as e:
        gcompile._Nvrtc()
    msg = str(e.value)
    assert "\n" not in msg and "NVRTC not found" in msg
    assert "pip install 'gemvtune[cu13]' (CUDA 13 driver" in msg and "'gemvtune[cu12]' (CUDA 12 driver)" in msg
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for name in ("cu13", "cu12"):   # the extras named exist and bring NVRTC
        assert any(d.startswith("nvidia-cuda-nvrtc") for d in extras[name]), name

    monkeypatch.setitem(sys.modules, "cuda.bindings.nvrtc", types.SimpleNamespace(
        nvrtcVersion=lambda: (_ for _ in ()).throw(RuntimeError('Failure finding "libnvrtc.so"'))))
    with pytest.raises(gcompile.NvrtcUnavailable, match=r"libnvrtc\.so.*gemvtune\[cu13\].*gemvtune\[cu12\]"):
        gcompile._Nvrtc()


# -- conftest: the GPU skip says why ---------------------------------------------------------------------

def test_gpu_skip_reason_is_gemvtune_diagnosis(monkeypatch):
    from gemvtune.device import _cupy

    monkeypatch.setattr(_cupy, "cuda_available", lambda: "no CUDA device answers: the driver is too old (test)")
    assert conftest._cuda_device_reason() == "no CUDA device answers: the driver is too old (test)"

    class Item:
        def __init__(self, gpu):
            self.keywords, self.markers = ({"gpu": True} if gpu else {}), []

        def add_marker(self, m):
            self.markers.append(m)

    items = [Item(True), Item(False)]
    monkeypatch.setattr(conftest, "_GPU_REASON", [])
    conftest.pytest_collection_modifyitems(None, items)
    assert [m.kwargs["reason"] for m in items[0].markers] == ["no CUDA device answers: the driver is too old (test)"]
    assert items[1].markers == []

    monkeypatch.setattr(_cupy, "cuda_available", lambda: None)      # a device answers: gpu tests run
    assert conftest._cuda_device_reason() is None
    items = [Item(True)]
    monkeypatch.setattr(conftest, "_GPU_REASON", [])
    conftest.pytest_collection_modifyitems(None, items)
    assert items[0].markers == []
