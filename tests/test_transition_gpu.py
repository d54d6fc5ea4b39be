"""gemvtune transition on the GPU (marked gpu): a small shape at n = 1, 2 (tuned, cuBLAS, cuBLASLt's best) and
32 (cuBLAS and cuBLASLt; the tuned kernel skipped with its reason) writes its CSV, provenance, PNG and markdown."""

from __future__ import annotations

import importlib.util
import json
import math

import pytest
from conftest import ROOT

pytestmark = pytest.mark.gpu


@pytest.mark.slow   # the GPU suite's second tier: -m "gpu and slow" (docs/testing.md)
def test_transition_small_shape_writes_csv_and_png(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    import pandas as pd
    from click.testing import CliRunner

    from gemvtune.cli.transition_cmd import transition
    from gemvtune.runners.cuda import CudaRunner
    from gemvtune.transition.measure import TUNED_REASON
    from gemvtune.transition.report import COLUMNS
    from gemvtune.workspace import gpu_slug

    name = CudaRunner().device_info()["name"]
    table = ROOT / "results" / gpu_slug(name) / "table.json"
    if not table.exists():
        pytest.skip(f"no committed table for {name} at {table}")
    out = tmp_path / "out"
    res = CliRunner().invoke(transition, ["--shape", "1024x1024", "--batch", "1,2,32", "--table", str(table),
                                          "--out", str(out), "--peak-size", "4096"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    csvs = list(out.glob("transition-1024x1024-*.csv"))
    assert len(csvs) == 1, list(out.iterdir())
    csv = csvs[0]
    df = pd.read_csv(csv, keep_default_na=False, na_values=[""])
    assert list(df.columns) == COLUMNS
    by = {(r.series, r.n): r for r in df.itertuples(index=False)}
    assert set(by) == {(s, n) for s in ("tuned", "cublas-torch", "cublaslt") for n in (1, 2, 32)}
    assert by["tuned", 32].status == "skipped" and by["tuned", 32].reason == TUNED_REASON
    lt = ("cublaslt",) if importlib.util.find_spec("nvmath") else ()   # (without nvmath-python: skipped rows)
    for key in (("tuned", 1), ("tuned", 2), ("cublas-torch", 1), ("cublas-torch", 2), ("cublas-torch", 32)) + tuple((s, n) for s in lt for n in (1, 2, 32)):
        r = by[key]
        assert r.status == "ok", (key, r.reason)
        assert r.verified == "verified" and r.samples > 0
        assert math.isfinite(r.us_median) and r.us_min <= r.us_median <= r.us_max
        assert r.tflops > 0 and r.gbps > 0
    assert (df.read_gbps > 0).all() and (df.peak_tflops > 0).all()
    meta = json.loads(csv.with_suffix(".json").read_text())
    assert meta["device"]["name"] == name and meta["device"]["driver"]
    assert meta["date"] and meta["command"].startswith("gemvtune")
    assert meta["compute_ceiling"]["peak_tflops"] > 0 and meta["ceiling"]["read_gbps"] > 0
    assert csv.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = csv.with_suffix(".md").read_text()
    assert "ridge n*" in md and f"tuned skipped at n=32: {TUNED_REASON}" in md
    assert "| n | read floor µs |" in res.output        # the table echoed at the end
