"""bench guard on the GPU: one small shape (1024x4096: the table routes n = 1 to a tuned kernel and n = 4 to cuBLAS)
at n = 1 and 4 in both dtypes, 2 rounds, into a temporary folder: its three files, every row's contenders verified
(eagerly and in their graphs), a route per row. Timing verdicts are the benchmark's business, not this test's."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT, on_committed_gpu, run_cli

pytestmark = pytest.mark.gpu

TABLE = ROOT / "results" / "nvidia-h200" / "table.json"


def test_bench_guard_small_shape(tmp_path):
    import pandas as pd

    r = run_cli("bench", "guard", "--shape", "1024x4096", "--batch", "1,4", "--rounds", "2", "--replays", "3",
                "--table", str(TABLE), "--out", str(tmp_path))
    assert r.returncode in (0, 1), r.stderr[-3000:]           # 1: a FAIL row (timing), never an ERROR row (below)
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    csvs = list(tmp_path.glob("guard-*.csv"))
    assert len(csvs) == 1, sorted(p.name for p in tmp_path.iterdir())
    csv = csvs[0]
    assert csv.with_suffix(".json").is_file() and (tmp_path / f"{csv.stem}-summary.md").is_file()
    df = pd.read_csv(csv)
    assert len(df) == 4 and sorted(zip(df.dtype, df.n)) == [("bf16", 1), ("bf16", 4), ("fp16", 1), ("fp16", 4)]
    assert df.verified.all() and not (df.verdict == "ERROR").any(), df.to_string()
    for c in ("stock", "gemvtune"):
        assert (df[f"{c}_relerr"] <= df.bound).all() and (df[f"{c}_graph_relerr"] <= df.bound).all()
        assert (df[f"{c}_us"] > 0).all()
    assert set(df.route) <= {"tuned", "cublas"}
    tuned = df[df.route == "tuned"]
    assert (tuned.launches == "tuned kernel").all() and tuned.config.notna().all()
    prov = json.loads(csv.with_suffix(".json").read_text())
    l2 = prov["device"]["l2_bytes"]
    assert ((df.copies * 1024 * 4096 * 2 >= 3 * l2) | df.copies_capped).all()
    assert (df.calls_per_graph % df.copies == 0).all()
    assert prov["device"]["name"] and prov["device"]["torch"] and prov["rounds"] == 2 and len(prov["rows"]) == 4
    if r.returncode == 1:
        assert "failed the never-slower check" in r.stderr and (df.verdict == "FAIL").any()
    else:
        assert not (df.verdict == "FAIL").any()


def test_bench_guard_fp8_weights(tmp_path):
    """--weights e4m3-row on 1024x4096 (the table's FP8 entries are at n = 1 and 8: n = 3 runs the n = 1 winner,
    fp8route): the FP8 layers against dequantize + F.linear of the same codes and scales, both verified against
    float64 of the dequantised weights, eagerly and in their graphs; the tuned rows launched the FP8 kernel, and it
    beat dequantize + F.linear at the measured n and the unmeasured one alike."""
    import pandas as pd

    r = run_cli("bench", "guard", "--shape", "1024x4096", "--batch", "1,3", "--dtype", "fp16", "--weights", "e4m3-row",
                "--rounds", "2", "--replays", "3", "--table", str(TABLE), "--out", str(tmp_path))
    assert r.returncode in (0, 1), r.stderr[-3000:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    csvs = list(tmp_path.glob("guard-e4m3-row-*.csv"))
    assert len(csvs) == 1, sorted(p.name for p in tmp_path.iterdir())
    df = pd.read_csv(csvs[0], keep_default_na=False)
    assert sorted(df.n) == [1, 3] and set(df.weights) == {"e4m3-row"}
    assert df.verified.all() and not (df.verdict == "ERROR").any(), df.to_string()
    if not on_committed_gpu():   # another GPU model: the table's FP8 kernels never run; both sides dequantize
        assert set(df.route) == {"dequant"} and df.route_why.str.contains("its kernels never run here").all(), \
            df.to_string()
        return
    assert set(df.route) == {"tuned"}, df.to_string()
    tuned = df[df.route == "tuned"]
    assert (tuned.launches == "tuned kernel").all() and (tuned.config != "").all()
    assert (tuned.ratio < 0.5).all(), tuned.to_string()   # it reads half the bytes, once: far below dequantize
