"""gemvtune transition on the CPU: the batch list, the roofline arithmetic (ridge point), the report
from a synthetic frame (CSV columns, PNG, log axes), the series loop with fake series (skipped, failed,
wrong rows, never a crash) and the command's bad input (one line, before any GPU work)."""

from __future__ import annotations

import json
import math

import pytest

from gemvtune.errors import NoDeviceError, UsageError
from gemvtune.kernels.shapes import MAX_BATCH, Shape
from gemvtune.runners.base import Measurement
from gemvtune.transition import measure as tr
from gemvtune.transition import report as rt


# ---- the batch list -------------------------------------------------------------------------------
@pytest.mark.parametrize("text,want", [
    ("1..256", [1, 2, 4, 8, 16, 32, 64, 128, 256]),
    ("1,2,3,8,64", [1, 2, 3, 8, 64]),
    ("4..4", [4]),
    ("16..64", [16, 32, 64]),
    (" 1..16 , 24,3", [1, 2, 3, 4, 8, 16, 24]),
    ("8,8,1", [1, 8]),
    ("4096", [4096]),
    ("1..4096", [2**k for k in range(13)]),
])
def test_batch_list_parses(text, want):
    assert tr.parse_batch_list(text) == want


@pytest.mark.parametrize("text,words", [
    ("0", "outside 1..4096"),
    ("4097", "outside 1..4096"),
    ("1..8192", "outside 1..4096"),
    ("0..4", "powers of two"),
    ("3..64", "powers of two"),
    ("8..2", "empty"),
    ("a", "malformed"),
    ("", "malformed"),
    ("1,,2", "malformed"),
    ("-1", "malformed"),
    ("1.5", "malformed"),
    ("1...4", "malformed"),
])
def test_batch_list_refuses_bad_input_in_one_line(text, words):
    with pytest.raises(UsageError) as e:
        tr.parse_batch_list(text)
    assert words in str(e.value) and "\n" not in str(e.value)


# ---- roofline arithmetic ------------------------------------------------------------------------------
def test_ridge_point_is_where_the_intensity_meets_the_ceilings():
    M = d = 4096
    peak, read = 700.0, 4800.0                     # TFLOP/s, GB/s
    r = peak * 1e12 / (read * 1e9)                 # FLOP per byte at the ridge
    n = rt.ridge_n(M, d, peak, read)
    assert n == pytest.approx(r * 4096 / (4096 - 3 * r), rel=1e-12)   # M = d: n* = r d / (d - 3r)
    assert 160 < n < 170
    assert rt.intensity(M, d, n) == pytest.approx(r, rel=1e-12)
    assert rt.intensity(M, d, math.floor(n)) < r < rt.intensity(M, d, math.ceil(n))
    # a shape whose intensity tends to M d / (d + 2M) below r is never compute-bound
    assert rt.ridge_n(256, 256, peak, read) == math.inf
    assert math.isnan(rt.ridge_n(M, d, 0.0, read)) and math.isnan(rt.ridge_n(M, d, peak, math.nan))


def test_bytes_and_flops_match_the_shape_convention():
    for M, d, n in ((4096, 4096, 1), (14336, 4096, 16), (1024, 16384, 7)):
        assert rt.bytes_moved(M, d, n) == Shape(M, d, n).bytes_moved
        assert rt.flops(M, d, n) == 2 * M * d * n
    assert rt.bytes_moved(4096, 4096, 256) == 2 * 4096 * 4096 + 2 * 256 * 4096 + 4 * 256 * 4096


# ---- the report from a synthetic frame ------------------------------------------------------------------
NS = [1, 2, 4, 8, 16, 32, 64, 128, 256]
READ, PEAK = 4500.0, 650.0


def _rows(M=1024, d=1024):
    rows = []
    for n in NS:
        floor = rt.bytes_moved(M, d, n) / (READ * 1e3)
        comp = rt.flops(M, d, n) / (PEAK * 1e6)
        t = max(floor, comp) * 1.3 + 1.0
        base = {"M": M, "d": d, "n": n, "reason": "", "samples": 15, "verified": "verified", "detail": "x"}
        if n <= MAX_BATCH:
            rows.append({**base, "series": "tuned", "status": "ok", "us_median": t * 0.9, "us_min": t * 0.88,
                         "us_max": t * 0.95})
        else:
            rows.append({**base, "series": "tuned", "status": "skipped", "reason": tr.TUNED_REASON,
                         "us_median": math.nan, "us_min": math.nan, "us_max": math.nan, "samples": 0, "verified": ""})
        if n == 64:
            rows.append({**base, "series": "cublas", "status": "failed", "reason": "RuntimeError: boom",
                         "us_median": math.nan, "us_min": math.nan, "us_max": math.nan, "samples": 0})
        else:
            rows.append({**base, "series": "cublas", "status": "ok", "us_median": t, "us_min": t * 0.97,
                         "us_max": t * 1.05})
    return rows


def test_frame_has_every_column_and_the_derived_rates():
    df = rt.transition_frame(_rows(), READ, PEAK)
    assert list(df.columns) == rt.COLUMNS
    assert len(df) == 2 * len(NS)
    r = df[(df.series == "cublas") & (df.n == 8)].iloc[0]
    assert r.tflops == pytest.approx(2 * 1024 * 1024 * 8 / (r.us_median * 1e-6) / 1e12)
    assert r.gbps == pytest.approx(rt.bytes_moved(1024, 1024, 8) / (r.us_median * 1e-6) / 1e9)
    assert r.pct_read_ceiling == pytest.approx(100 * r.gbps / READ)
    assert r.read_floor_us == pytest.approx(rt.bytes_moved(1024, 1024, 8) / (READ * 1e3))
    assert r.spread == pytest.approx((r.us_max - r.us_min) / r.us_median)
    assert r.ridge_n == pytest.approx(rt.ridge_n(1024, 1024, PEAK, READ))
    skipped = df[df.status == "skipped"]
    assert set(skipped.n) == {32, 64, 128, 256} and set(skipped.series) == {"tuned"}
    assert skipped.tflops.isna().all() and (skipped.reason == tr.TUNED_REASON).all()


def test_report_writes_csv_json_png_with_log_axes(tmp_path):
    import pandas as pd

    df = rt.transition_frame(_rows(), READ, PEAK)
    csv = rt.write_transition_csv(df, tmp_path / f"{rt.file_stem(1024, 1024, 'STAMP')}.csv", {"command": "gemvtune x"})
    assert csv.name == "transition-1024x1024-STAMP.csv"
    back = pd.read_csv(csv)
    assert list(back.columns) == rt.COLUMNS and len(back) == len(df)
    assert json.loads(csv.with_suffix(".json").read_text())["command"] == "gemvtune x"
    png = tmp_path / "t.png"
    fig = rt.plot_transition(df, png, "a GPU")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    axes = fig.get_axes()
    assert len(axes) == 3
    for ax in axes:
        assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
        assert ax.xaxis.get_transform().base == 2
        labels = [ln.get_label() for ln in ax.get_lines()]
        assert "tuned" in labels and "cublas" in labels
        assert any(lb.startswith("ridge n* = ") for lb in labels)
    ax_t, ax_f, ax_b = axes
    tuned = next(ln for ln in ax_t.get_lines() if ln.get_label() == "tuned")
    assert list(tuned.get_xdata()) == [1, 2, 4, 8, 16]              # only the measured points
    ceiling = next(ln for ln in ax_b.get_lines() if ln.get_label().startswith("read ceiling"))
    assert set(ceiling.get_ydata()) == {READ}
    assert any(ln.get_label().startswith("read floor") for ln in ax_t.get_lines())
    peak = next(ln for ln in ax_f.get_lines() if ln.get_label().startswith("compute ceiling"))
    assert set(peak.get_ydata()) == {PEAK}


def test_plot_refuses_two_shapes(tmp_path):
    df = rt.transition_frame(_rows(1024, 1024) + _rows(2048, 1024), READ, PEAK)
    with pytest.raises(ValueError, match="one"):
        rt.plot_transition(df, tmp_path / "x.png")


def test_markdown_names_each_series_and_why_rows_are_missing():
    md = rt.transition_markdown(rt.transition_frame(_rows(), READ, PEAK))
    assert "| n | read floor µs | cublas | tuned |" in md or "| n | read floor µs | tuned | cublas |" in md
    assert f"- tuned skipped at n=32,64,128,256: {tr.TUNED_REASON}" in md
    assert "- cublas failed at n=64: RuntimeError: boom" in md
    assert "ridge n* = " in md


# ---- the series loop ---------------------------------------------------------------------------------------
def _timing(n):
    return tr.Timing.from_samples([10.0 + n, 11.0 + n, 12.0 + n])


def test_series_loop_records_skipped_failed_and_wrong_rows_without_raising():
    def boom(n):
        if n == 4:
            raise RuntimeError("boom\nsecond line")
        return _timing(n)

    def bad_reason(n):
        raise ValueError("no reason")

    series = [tr.FnSeries("narrow", lambda n: tr.TUNED_REASON if n > MAX_BATCH else None, _timing),
              tr.FnSeries("flaky", lambda n: None, boom),
              tr.FnSeries("wrong", lambda n: None, lambda n: tr.Timing.wrong("relerr 1 above 1e-3", "algo 7")),
              tr.FnSeries("noreason", bad_reason, _timing),
              tr.FnSeries("notime", lambda n: None, lambda n: tr.Timing(math.nan, math.nan, math.nan, 0))]
    lines: list[str] = []
    rows = tr.measure_series(series, [1, 4, 32], 1024, 512, echo=lines.append)
    assert [(r["n"], r["series"]) for r in rows] == [(n, s.name) for n in (1, 4, 32) for s in series]  # interleaved
    by = {(r["series"], r["n"]): r for r in rows}
    assert by["narrow", 1]["status"] == "ok" and by["narrow", 1]["us_median"] == 12.0
    assert by["narrow", 1]["us_min"] == 11.0 and by["narrow", 1]["us_max"] == 13.0 and by["narrow", 1]["samples"] == 3
    assert by["narrow", 32]["status"] == "skipped" and by["narrow", 32]["reason"] == tr.TUNED_REASON
    assert by["flaky", 4]["status"] == "failed" and by["flaky", 4]["reason"] == "RuntimeError: boom"
    assert by["flaky", 32]["status"] == "ok"
    assert by["wrong", 1]["status"] == "wrong" and by["wrong", 1]["reason"] == "relerr 1 above 1e-3"
    assert by["wrong", 1]["detail"] == "algo 7"
    assert by["noreason", 1]["status"] == "failed" and "ValueError: no reason" == by["noreason", 1]["reason"]
    assert by["notime", 1]["status"] == "failed"
    assert len(lines) == len(rows) and any("skipped: n outside 1..16" in ln for ln in lines)
    df = rt.transition_frame(rows, READ, PEAK)          # the loop's rows make a frame as they are
    assert list(df.columns) == rt.COLUMNS


def test_series_loop_lets_ctrl_c_through():
    def stop(n):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        tr.measure_series([tr.FnSeries("s", lambda n: None, stop)], [1], 8, 8)


class _Table:
    def lookup(self, shape):
        return "CFG", "tuned"


class _Runner:
    def __init__(self, status="ok", error=""):
        self.status, self.error, self.asked = status, error, []

    def measure(self, cfg, shape, kind="variant"):
        self.asked.append((cfg, shape, kind))
        m = Measurement("cfg-label", kind, shape.M, shape.d, shape.n, self.status, error=self.error)
        if self.status == "ok":
            m.us_median, m.us_min, m.us_max, m.samples, m.method = 9.0, 8.5, 9.5, 15, "graph"
        return m


def _ctx(runner, table=None, no_table=False):
    table = None if no_table else (table or _Table())
    return tr.SeriesContext(runner, table, 4096, 4096, READ, PEAK)


def test_tuned_series_measures_the_tables_kernel_and_refuses_wide_batches():
    runner = _Runner()
    rows = tr.measure_series([tr.tuned_series(_ctx(runner))], [1, 16, 17, 256], 4096, 4096)
    assert [r["status"] for r in rows] == ["ok", "ok", "skipped", "skipped"]
    assert rows[2]["reason"] == "n outside 1..16 for a tuned kernel"
    assert [(c, s, k) for c, s, k in runner.asked] == [("CFG", Shape(4096, 4096, 1), "tuned"),
                                                      ("CFG", Shape(4096, 4096, 16), "tuned")]
    assert rows[0]["us_median"] == 9.0 and rows[0]["detail"].startswith("cfg-label (tuned)")
    with pytest.raises(UsageError):          # the refusal stays where it is
        Shape(4096, 4096, MAX_BATCH + 1)


@pytest.mark.parametrize("status,want", [("wrong", "wrong"), ("compile_error", "failed"), ("launch_error", "failed")])
def test_tuned_series_failures_are_rows(status, want):
    rows = tr.measure_series([tr.tuned_series(_ctx(_Runner(status, "it broke")))], [2], 4096, 4096)
    assert rows[0]["status"] == want and "it broke" in rows[0]["reason"]


def test_tuned_series_without_a_table_skips():
    rows = tr.measure_series([tr.tuned_series(_ctx(_Runner(), no_table=True))], [1], 4096, 4096)
    assert rows[0]["status"] == "skipped" and rows[0]["reason"] == "no table loaded"


def test_est_us_is_the_larger_floor():
    ctx = _ctx(_Runner())
    assert ctx.est_us(1) == pytest.approx(rt.bytes_moved(4096, 4096, 1) / (READ * 1e3) + 1.0)
    assert ctx.est_us(4096) == pytest.approx(rt.flops(4096, 4096, 4096) / (PEAK * 1e6) + 1.0)


def test_check_linear_catches_a_wrong_row():
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(0)
    W = (torch.rand((300, 256), generator=g) * 2 - 1).half()
    x = (torch.rand((5, 256), generator=g) * 2 - 1).half()
    y = (x.float() @ W.float().T).half()
    assert tr.check_linear(torch, W, x, y) == (True, "")
    y[:, 0] += 1.0
    ok, why = tr.check_linear(torch, W, x, y)
    assert not ok and "relerr" in why and "bound" in why


# ---- the command's bad input -------------------------------------------------------------------------------
def _run(monkeypatch, capsys, *args, gpu=None):
    from gemvtune.cli import main as climain
    from gemvtune.cli import transition_cmd as cmd

    monkeypatch.setitem(climain.cli.commands, "transition", cmd.transition)   # registered by main.py or not
    called: list[bool] = []

    def no_gpu():
        called.append(True)
        raise NoDeviceError("no CUDA device answers (test)")

    monkeypatch.setattr(cmd, "_gpu_check", no_gpu)
    with pytest.raises(SystemExit) as e:
        climain.main(["transition", *args])
    err = capsys.readouterr().err
    return e.value.code, err, bool(called)


@pytest.mark.parametrize("args,words", [
    (["--shape", "4096x4096", "--batch", "0"], "outside 1..4096"),
    (["--shape", "4096x4096", "--batch", "1..5000"], "powers of two"),
    (["--shape", "4096x4096", "--batch", "two"], "malformed batch list"),
    (["--batch", "1..8"], "needs --shape or --suite"),
    (["--shape", "4096"], "malformed shape"),
    (["--shape", "4096x4096", "--table", "/nonexistent/table.json"], "table"),
    (["--suite", "prefill"], "prefill"),
    (["--shape", "64x64", "--peak-size", "12"], "peak-size"),
])
def test_bad_input_is_one_line_before_the_gpu(monkeypatch, capsys, args, words):
    code, err, gpu = _run(monkeypatch, capsys, *args)
    assert code == 2 and not gpu
    assert len(err.strip().splitlines()) == 1 and words in err and "Traceback" not in err


def test_without_torch_one_line_before_the_gpu(monkeypatch, capsys):
    import sys

    monkeypatch.setitem(sys.modules, "torch", None)      # import torch raises ImportError
    code, err, gpu = _run(monkeypatch, capsys, "--shape", "1024x1024")
    assert code == 2 and not gpu and "needs torch" in err and len(err.strip().splitlines()) == 1


def test_good_input_reaches_the_gpu_check(monkeypatch, capsys, tmp_path):
    code, err, gpu = _run(monkeypatch, capsys, "--shape", "1024x1024", "--suite", "decode", "--batch", "32..64",
                          "--table", str(tmp_path / "absent.json"), "--out", str(tmp_path / "o"))
    assert gpu and code == 3 and "no CUDA device answers (test)" in err   # no table needed for n > 16
    assert (tmp_path / "o").is_dir()


# ---- the driver, with a fake runner and fake series ------------------------------------------------------------
class _FakeCudaRunner:
    released = 0

    def device_info(self):
        return {"name": "NVIDIA H200", "driver": "580.0", "compute_capability": "9.0", "sm_count": 132}

    def ceiling(self):
        return {"read_gbps": READ, "launch_floor_us": 0.5}

    def release(self):
        _FakeCudaRunner.released += 1


def test_run_transition_writes_one_csv_png_md_per_shape(monkeypatch, tmp_path):
    import pandas as pd
    from conftest import ROOT

    import gemvtune.runners.cuda as rc

    monkeypatch.setattr(rc, "CudaRunner", _FakeCudaRunner)
    monkeypatch.setattr(tr, "measure_peak_tflops", lambda runner, size: {"peak_tflops": PEAK, "peak_gemm": "fake"})
    seen: list = []

    def fake_maker(ctx):
        seen.append((ctx.M, ctx.d, ctx.table is not None, ctx.read_gbps, ctx.peak_tflops))
        return tr.FnSeries("fake", lambda n: None, lambda n: tr.Timing.from_samples([ctx.est_us(n)] * 3))

    monkeypatch.setattr(tr, "SERIES", [tr.tuned_series, fake_maker])
    lines: list[str] = []
    table = ROOT / "results" / "nvidia-h200" / "table.json"
    paths = tr.run_transition([(1024, 1024), (2048, 512)], [32, 64], str(table), str(tmp_path), echo=lines.append)
    assert [p.name.rsplit("-", 2)[0] for p in paths] == ["transition-1024x1024", "transition-2048x512"]
    assert seen == [(1024, 1024, False, READ, PEAK), (2048, 512, False, READ, PEAK)]   # no n <= 16: no table
    for p in paths:
        df = pd.read_csv(p)
        assert list(df.columns) == rt.COLUMNS and len(df) == 4
        assert set(df[df.series == "tuned"].status) == {"skipped"} and set(df[df.series == "fake"].status) == {"ok"}
        assert p.with_suffix(".png").read_bytes()[:4] == b"\x89PNG" and p.with_suffix(".md").exists()
        meta = json.loads(p.with_suffix(".json").read_text())
        assert meta["compute_ceiling"]["peak_tflops"] == PEAK and meta["table"] is None
        assert meta["device"]["driver"] == "580.0" and "date" in meta and "command" in meta
    assert _FakeCudaRunner.released == 2
    assert any("ridge n* = " in ln for ln in lines) and any("| n | read floor µs |" in ln for ln in lines)


def test_run_transition_loads_the_default_table_for_small_batches(monkeypatch, tmp_path):
    import pandas as pd
    from conftest import ROOT

    import gemvtune.runners.cuda as rc

    class Runner(_FakeCudaRunner, _Runner):
        def __init__(self):
            _Runner.__init__(self)

    monkeypatch.setattr(rc, "CudaRunner", Runner)
    monkeypatch.setattr(tr, "measure_peak_tflops", lambda runner, size: {"peak_tflops": PEAK, "peak_gemm": "fake"})
    monkeypatch.setattr(tr, "SERIES", [tr.tuned_series])
    monkeypatch.chdir(ROOT)
    [p] = tr.run_transition([(4096, 4096)], [1, 32], None, str(tmp_path), echo=lambda s: None)
    df = pd.read_csv(p)
    assert list(df.status) == ["ok", "skipped"] and df.detail[0].startswith("cfg-label (tuned)")
    assert json.loads(p.with_suffix(".json").read_text())["table"] == "results/nvidia-h200/table.json"


def test_cublaslt_series_is_skipped_with_the_reason_without_the_bindings(monkeypatch):
    """Without nvmath-python's cuBLASLt bindings the series refuses every n with the library's one line
    (a skipped row), never an exception; WideShape names a batch past 16 like Shape does."""
    from gemvtune.device import ltplan
    from gemvtune.errors import GemvtuneError
    from gemvtune.transition import measure as tr
    from gemvtune.transition.lt import WideShape

    def missing():
        raise GemvtuneError("nvmath-python is not installed: pip install 'gemvtune[blas]'")

    monkeypatch.setattr(ltplan, "bindings", missing)
    s = tr.cublaslt_series(tr.SeriesContext(None, None, 64, 128, 1000.0, 100.0))
    assert s.name == "cublaslt" and tr.cublaslt_series in tr.SERIES
    rows = tr.measure_series([s], [1, 32], 64, 128, echo=lambda m: None)
    assert [r["status"] for r in rows] == ["skipped", "skipped"]
    assert all("nvmath-python is not installed" in r["reason"] for r in rows)
    assert str(WideShape(4096, 4096, 64)) == "4096x4096@n64" and str(WideShape(8, 16, 1)) == "8x16"


def test_wide_shape_carries_every_attribute_the_cublaslt_plans_read_of_a_shape():
    """transition's cuBLASLt series passes a WideShape where LtProblem/LtPlan take a Shape: every attribute they
    (and the config's domain check) read of it must exist, with the value a Shape of the same (M, d, n) has. The
    series once failed on the GPU with "'WideShape' object has no attribute 'dtype'" after Shape gained dtype."""
    import re

    from gemvtune.device import ltplan
    from gemvtune.kernels import cublaslt
    from gemvtune.transition.lt import WideShape

    read = set()
    for mod in (ltplan, cublaslt):
        src = open(mod.__file__).read()
        read |= set(re.findall(r"\bshape\.([A-Za-z_]\w*)", src))
    assert {"M", "d", "n", "dtype"} <= read, read   # (the scan itself finds the reads)
    wide, narrow = WideShape(4096, 4096, 8), Shape(4096, 4096, 8)
    for attr in sorted(read):
        assert hasattr(wide, attr), f"WideShape lacks {attr!r}, which ltplan/cublaslt read of a shape"
        if not callable(getattr(narrow, attr)):
            assert getattr(wide, attr) == getattr(narrow, attr), attr
    assert str(wide) == str(narrow) and str(WideShape(64, 64, 1)) == str(Shape(64, 64, 1))
    assert cublaslt.CublasLtConfig().invalid_reasons(wide) == cublaslt.CublasLtConfig().invalid_reasons(narrow)
