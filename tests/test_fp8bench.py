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
    assert math.isclose(r["pct_ceiling"], 100 * S.bytes_moved / 4000e3 / 16.0)
    assert r["weight_mb_16bit"] == S.M * S.d * 2 / 1e6 and r["errors"] == "gemlite-fp8: planted"


def test_markdown_states_the_targets_and_a_missing_contender():
    ms = [m("fp8", 16.0), m("tuned-16bit", 30.0), m("cublas-16bit", 31.0), m("dequant-torch", 80.0)]
    df = pd.DataFrame([summary_row(S, ms, 4000.0, "a", "b")])
    md = fp8_markdown(df)
    assert "FP8/16-bit tuned 0.533 at worst" in md and "(target <= 0.55)" in md
    assert "x gemlite: not measured" in md and "x dequantize + F.linear: 5.000 at worst" in md
    assert "| 14336x4096 | 1 | fp16 | 16.00 |" in md
