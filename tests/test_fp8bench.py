"""The FP8 benchmark's summary (pure: measurements in, rows and markdown out): medians over rounds, ratios against
the 16-bit kernel, dequantize + F.linear and gemlite, the targets' lines; failures carried with their reasons."""

import math

import pandas as pd

from gemvtune.bench.fp8bench import fp8_markdown, summary_row
from gemvtune.kernels.shapes import Shape
from gemvtune.runners.base import Measurement, Status

S = Shape(14336, 4096, 1, "fp16", "e4m3-row")


def m(kind, us, status=Status.OK, error=""):
    return Measurement(kind, kind, S.M, S.d, S.n, status, us_median=us, error=error)


def test_summary_row_takes_medians_and_ratios():
    ms = [m("fp8", 16.0), m("fp8", 15.0), m("fp8", 17.0), m("tuned-16bit", 30.0), m("cublas-16bit", 31.0),
          m("dequant-torch", 80.0), m("gemlite-fp8", 20.0), m("gemlite-fp8", 0.0, Status.WRONG, "planted")]
    r = summary_row(S, ms, 4000.0, "b128 (tuned)", "b256 (tuned)")
    assert r["fp8_us"] == 16.0 and r["fp8_over_16bit"] == 16.0 / 30.0 and r["x_dequant"] == 5.0
    assert r["x_gemlite"] == 1.25 and math.isclose(r["fp8_spread"], 2 / 16)
    assert math.isclose(r["x_gemlite_cap"], 20.0 / (S.bytes_moved / 4000e3))   # gemlite / the read floor
    assert math.isclose(r["pct_ceiling"], 100 * S.bytes_moved / 4000e3 / 16.0)
    assert r["weight_mb_16bit"] == S.M * S.d * 2 / 1e6 and r["errors"] == "gemlite-fp8: planted"


def test_markdown_states_the_targets_and_a_missing_contender():
    ms = [m("fp8", 16.0), m("tuned-16bit", 30.0), m("cublas-16bit", 31.0), m("dequant-torch", 80.0)]
    df = pd.DataFrame([summary_row(S, ms, 4000.0, "a", "b")])
    md = fp8_markdown(df)
    assert "FP8/16-bit tuned 0.533 at worst" in md and "(target <= 0.55)" in md
    assert "x gemlite: not measured" in md and "x dequantize + F.linear: 5.000 at worst" in md
    assert "| 14336x4096 | 1 | fp16 | 16.00 |" in md and "at the read ceiling" not in md


def test_markdown_counts_the_rows_where_1_2x_gemlite_is_beyond_the_read_ceiling():
    """The H100 of 2026-12-06: gemlite ran 128256x4096 n = 1 at 173.3 µs against a read floor of 165.0 µs, so no kernel
    can run it 1.2x faster than gemlite; the summary counts such rows from each row's gemlite time and floor."""
    floor = S.bytes_moved / 4000e3
    rows = [summary_row(S, [m("fp8", floor * 1.1), m("gemlite-fp8", g * floor), m("tuned-16bit", 30.0),
                            m("cublas-16bit", 31.0), m("dequant-torch", 80.0)], 4000.0, "a", "b") for g in (1.05, 1.5)]
    md = fp8_markdown(pd.DataFrame(rows))
    assert "1 of 2 rows below 1.2" in md and f"{math.sqrt(1.05 * 1.5):.3f} geomean" in md


def test_a_run_cut_short_keeps_the_rows_it_measured(tmp_path, monkeypatch):
    """The benchmark writes its CSVs and summary after every shape: a run stopped by its time limit half-way (the H100
    run of 2026-12-05 was cut after 21 of 25 rows and wrote nothing) keeps what it measured."""
    import pytest
    from fakes import Fp8Runner

    import gemvtune.runtime.table as table_mod
    from gemvtune.bench import fp8bench
    from gemvtune.kernels.families import FAMILIES
    from gemvtune.kernels.gemv import LLAMA_CPP

    class Cut(Fp8Runner):
        arch = "sm_90"

        def measure(self, config, shape, **kw):
            if shape.M == 1024:
                raise KeyboardInterrupt   # (the time limit's signal, as the shell's timeout sends it)
            return super().measure(config, shape, **kw)

    class Table:
        def _check_gpu(self, name):
            pass

        def lookup(self, s):
            return (FAMILIES["fp8gemv"].config_cls(), "fp8 default fallback") if s.weights else (LLAMA_CPP, "llama.cpp")

    runner = Cut()
    monkeypatch.setattr(fp8bench, "_start", lambda echo: (runner, runner.device_info(), runner.ceiling()))
    monkeypatch.setattr(fp8bench, "compile_variants", lambda *a, **k: None)
    monkeypatch.setattr(table_mod, "load_table", lambda *a, **k: Table())
    shapes = [Shape(4096, 4096, 1, "fp16", "e4m3-row"), Shape(1024, 4096, 1, "fp16", "e4m3-row")]
    with pytest.raises(KeyboardInterrupt):
        fp8bench.run_fp8_bench(shapes, "t.json", str(tmp_path), echo=lambda s: None, rounds=2, gemlite=False)
    md = next(tmp_path.glob("bench-fp8-*-summary.md")).read_text()
    assert "| 4096x4096 | 1 | fp16 |" in md and "1024x4096" not in md
    csv = pd.read_csv(next(p for p in tmp_path.glob("bench-fp8-*.csv") if "summary" not in p.name), comment="#")
    assert set(csv["kind"]) >= {"fp8", "tuned-16bit", "dequant-torch"} and (csv["M"] == 4096).all()
