import json
import math

import pytest

from gemvtune.bench.summary import summarize_bench
from gemvtune.reports.runcsv import provenance, shape_table, write_csv
from gemvtune.runners.base import Measurement
from gemvtune.runners.timing import (
    MAX_COPIES,
    copies_for,
    error_bound,
    flushes_l2,
    gbps,
    launch_bound,
    launches_for,
    summarize,
)
from gemvtune.workspace import gpu_slug

L2 = 60 * 2**20


def test_copies_make_working_set_3x_l2():
    for wb in (2 * 4096 * 4096, 2 * 1024 * 16384, 2 * 14336 * 4096, 2 * 128256 * 4096, 2 * 1024 * 1024):
        c = copies_for(wb, L2)
        assert c >= 2 and c * wb >= 3 * L2 and not flushes_l2(wb, c, L2)
        assert (c - 1) * wb < 3 * L2 or c == 2


def test_tiny_weights_get_bounded_copies_and_a_flush():
    """1x4096 asked for ~23,000 copies of an 8 KB weight before (the harness hung); now at most
    MAX_COPIES, and the L2 is kept cold by a flush instead."""
    for M, d in ((1, 4096), (8, 4096), (16, 4096), (64, 4096), (33, 8200)):
        wb = 2 * M * d
        c = copies_for(wb, L2)
        assert c == MAX_COPIES and flushes_l2(wb, c, L2)
    wb = 2 * 256 * 7168   # a 3.6 MB router weight still rotates (52 copies > 3x L2), no flush
    assert copies_for(wb, L2) == 52 and not flushes_l2(wb, 52, L2)
    assert launch_bound(2 * 8 * 4096, 4300.0, 1.5)          # 64 KB streams in 0.015 us: the launch is the time
    assert not launch_bound(2 * 4096 * 4096, 4300.0, 1.5)   # 32 MB: 7.8 us of reading


def test_launches_are_whole_passes():
    assert launches_for(10.0, 6) % 6 == 0 and launches_for(10.0, 6) == 198
    assert launches_for(300.0, 2) == 6
    assert launches_for(5000.0, 3) == 3
    assert launches_for(0.01, 4, cap=400) == 400


def test_summarize_and_gbps():
    s = summarize([3.0, 1.0, 2.0, 10.0, 2.5])
    assert (s.median, s.min, s.max, s.n) == (2.5, 1.0, 10.0, 5)
    assert s.spread == pytest.approx(9.0 / 2.5)
    assert gbps(1_000_000, 1.0) == pytest.approx(1000.0)
    with pytest.raises(ValueError):
        summarize([])


def test_error_bounds():
    assert error_bound("fp32", 4096) == pytest.approx(8 * 2**-24 * 64)
    assert error_bound("fp16", 3072) == pytest.approx(4 * 2**-11 * math.sqrt(2))
    assert error_bound("fp16", 14336) > error_bound("fp16", 4096) > error_bound("fp32", 4096)
    # One dropped row of 128256 (~1/sqrt(M) = 2.8e-3 relative) is far above the fp32 bound.
    assert error_bound("fp32", 4096) < 0.1 / math.sqrt(128256)
    with pytest.raises(ValueError):
        error_bound("bf16", 8)


def _m(name, kind, us, status="ok", M=4096, d=4096):
    m = Measurement(name, kind, M, d, 1, status, us_median=us, us_min=us * 0.99, us_max=us * 1.01,
                    gbps=M * d * 2 / us / 1e3, pct_ceiling=50.0, params={"block": 256} if kind == "variant" else {})
    return m


def test_csv_summary_roundtrip(tmp_path):
    rows = [_m("llama", "llama.cpp", 11.0), _m("llama", "spin-check", 12.5), _m("cublas (cupy.matmul)", "cublas", 13.8),
            _m("cublas (torch F.linear)", "cublas-torch", 13.7), _m("fast", "variant", 9.5),
            _m("slow", "variant", 20.0), _m("bad", "variant", math.nan, status="wrong")]
    p = write_csv(rows, tmp_path / "b.csv", provenance({"name": "NVIDIA H200", "driver": "580"},
                                                        ceiling={"read_gbps": 4600.0}))
    meta = json.loads(p.with_suffix(".json").read_text())
    assert meta["device"]["name"] == "NVIDIA H200" and "command" in meta and "date" in meta
    md = summarize_bench(p)
    # ×best ×cuBLAS ×Inductor ×llama ×seed: 13.7/9.5 and 11/9.5; no Inductor or seed row, so those are empty
    assert "`fast` | 9.50" in md and "| - | 1.442 | - | 1.158 | - | 2/3 |" in md
    assert "| 4096×4096 | 1 | 11.00 | 12.50 | +1.50 | 1.136 |" in md
    t = shape_table(rows)
    assert "fast" in t and "wrong 1" in t and "ok 2" in t
    assert gpu_slug("NVIDIA H200") == "nvidia-h200"
