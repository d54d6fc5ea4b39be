"""bench guard on the CPU: the never-slower rule (rows that must FAIL, must PASS, and noise that must not fail),
the row statistics, copies and calls, the summary, the whole loop with a fake device, and the command's bad input
(one line, exit 2, no traceback, nothing written)."""

from __future__ import annotations

import json
import math
import os
import statistics

import pytest
from conftest import ROOT, run_cli

from gemvtune.bench.guardverdict import (
    COLUMNS,
    MAX_CALLS,
    MAX_COPIES,
    calls_per_graph,
    copies_for,
    error_bound,
    estimate_seconds,
    failure_line,
    quantile,
    row_stats,
    summary_markdown,
    verdict,
)
from gemvtune.kernels.shapes import DECODE_SUITE

TABLE = ROOT / "results" / "nvidia-h200" / "table.json"
L2 = 60 * 2**20   # the H200's


# ---- the rule ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("ratio,rounds,want", [
    (0.93, [0.92, 0.93, 0.94, 0.93, 0.92], "PASS"),                   # faster
    (1.00, [0.99, 1.01, 1.00, 1.00, 1.00], "PASS"),                   # a cuBLAS row: the same kernel
    (1.01, [1.01, 1.01, 1.01, 1.01, 1.01], "PASS"),                   # exactly 1% slower is not more than 1%
    (1.008, [0.97, 1.05, 1.00, 1.03, 0.99], "PASS"),                  # noisy, but the medians are within 1%
    (1.058, [1.05, 1.06, 1.058, 1.062, 1.055], "FAIL"),               # the 14336x4096 n=16 case: 5.8% slower
    (1.02, [1.015, 1.02, 1.025, 1.018, 1.03, 1.021, 1.019], "FAIL"),  # 2% slower in every round
    (1.03, [1.02, 1.04], "FAIL"),                                     # two rounds, both slower
    (1.012, [1.03, 0.97, 1.04, 0.99, 1.02, 0.98, 1.012], "SLOW"),     # slower by the medians, inside the noise
    (1.025, [1.00, 1.05], "FAIL"),                                    # two rounds: lower quartile 1.0125
    (1.025, [0.99, 1.06], "SLOW"),                                    # two rounds: lower quartile 1.0075
])
def test_verdict_rule(ratio, rounds, want):
    assert verdict(ratio, rounds) == want


def test_verdict_noise_boundary():
    """The lower quartile decides: three slow rounds in four fail, half of them do not."""
    assert verdict(1.03, [1.03, 1.03, 1.03, 0.99]) == "FAIL"     # q25 = 1.02
    assert verdict(1.03, [1.03, 1.03, 0.99, 0.99]) == "SLOW"     # q25 = 0.99
    assert verdict(1.03, [1.00, 1.04]) == "SLOW"                 # q25 = 1.01, not above it


@pytest.mark.parametrize("ratio,rounds,ok", [(0.9, [0.9, 0.9], False), (math.nan, [1.0, 1.0], True),
                                             (1.0, [], True), (1.0, [1.0, math.nan], True)])
def test_verdict_error(ratio, rounds, ok):
    assert verdict(ratio, rounds, verified=ok) == "ERROR"


def test_quantile_is_numpys_linear():
    import numpy as np

    for xs in ([1.0], [3.0, 1.0], [1, 2, 3, 4, 5, 6, 7], [0.97, 1.05, 1.0, 1.03, 0.99, 1.2]):
        for q in (0.0, 0.25, 0.5, 0.9, 1.0):
            assert quantile(xs, q) == pytest.approx(float(np.quantile(xs, q)))
    assert math.isnan(quantile([], 0.25))


def test_row_stats_pairs_rounds():
    stock = [[10.0, 10.2, 9.9], [10.1, 10.0, 10.3], [9.8, 10.0, 10.1]]
    gem = [[9.0, 9.1, 9.2], [9.5, 9.4, 9.6], [8.9, 9.0, 9.1]]
    r = row_stats(stock, gem)
    assert r["stock_us"] == statistics.median([v for x in stock for v in x])
    assert r["gemvtune_us"] == statistics.median([v for x in gem for v in x])
    assert r["ratio"] == pytest.approx(r["gemvtune_us"] / r["stock_us"])
    assert r["round_ratios"] == pytest.approx([9.1 / 10.0, 9.5 / 10.1, 9.0 / 10.0])
    assert r["ratio_q25"] == pytest.approx(quantile(r["round_ratios"], 0.25))
    assert r["stock_spread"] == pytest.approx(10.1 / 10.0) and r["gemvtune_spread"] == pytest.approx(9.5 / 9.0)
    with pytest.raises(ValueError):
        row_stats(stock, gem[:2])
    with pytest.raises(ValueError):
        row_stats([[]], [[1.0]])


# ---- copies, calls, bound, time ---------------------------------------------------------------------------

def test_copies_cover_three_l2s_on_the_suite():
    for M, d in DECODE_SUITE:
        wb = M * d * 2
        k, capped = copies_for(wb, L2, free_bytes=140 * 2**30)
        assert not capped and k >= 2 and k * wb >= 3 * L2
        assert (k - 1) * wb < 3 * L2 or k == 2          # no more than needed
    assert copies_for(4096 * 4096 * 2, L2)[0] == 6
    assert copies_for(128256 * 4096 * 2, L2)[0] == 2


def test_copies_capped_by_memory():
    wb = 4096 * 4096 * 2
    assert copies_for(wb, L2, free_bytes=4 * 3 * wb) == (3, True)       # a quarter of free memory: 3 copies
    assert copies_for(wb, L2, free_bytes=wb) == (1, True)               # never none
    assert copies_for(wb, L2, cap_bytes=2 * wb) == (2, True)
    assert copies_for(64, L2) == (MAX_COPIES, True)                        # a tiny weight: L2 cannot be beaten
    with pytest.raises(ValueError):
        copies_for(0, L2)


def test_calls_per_graph():
    for M, d in DECODE_SUITE + [(1024, 4096), (8, 8)]:
        wb = M * d * 2
        k = copies_for(wb, L2)[0]
        c = calls_per_graph(wb, k)
        assert c % k == 0 and c >= 2 * k and c <= MAX_CALLS
    assert calls_per_graph(4096 * 4096 * 2, 6) == 120                    # 8.4 µs a call: ~1 ms a replay
    assert calls_per_graph(128256 * 4096 * 2, 2) == 4
    assert calls_per_graph(100, 400) == 400                             # more copies than MAX_CALLS: one pass


def test_error_bound():
    assert error_bound("fp16", 4096) == pytest.approx(4 * 2**-11 * math.sqrt(1 + 4096 / 3072) + 2 * 2**-11)
    assert error_bound("bf16", 4096) > error_bound("fp16", 4096)
    assert error_bound("fp16", 16384) > error_bound("fp16", 4096)
    assert error_bound("bf16", 16384) < 0.02                             # far below a wrong kernel's ~1


def test_default_run_estimate_fits_four_minutes():
    est = estimate_seconds(DECODE_SUITE, 16, 2, 7, 10)
    assert 30 < est < 240, est


# ---- summary ---------------------------------------------------------------------------------------------

def _row(shape, n, dtype, route, ratio, rounds, **kw):
    M, d = map(int, shape.split("x"))
    r = {"shape": shape, "M": M, "d": d, "n": n, "dtype": dtype, "route": route,
         "config": "b256.half8" if route == "tuned" else "", "stock_us": 30.0, "gemvtune_us": 30.0 * ratio,
         "ratio": ratio, "round_ratios": rounds, "ratio_q25": quantile(rounds, 0.25), "verified": True, "error": "",
         **kw}
    r["verdict"] = verdict(ratio, rounds, r["verified"])
    return r


META = {"date": "2026-12-04T10:00:00Z", "command": "gemvtune bench guard", "table": "results/nvidia-h200/table.json",
        "device": {"name": "NVIDIA H200", "driver": "580.1", "torch": "2.11", "l2_bytes": L2}, "rounds": 7,
        "replays": 10, "gemvtune": "0.1.0", "commit": "abc1234"}


def test_summary_lists_failures_and_slow_rows():
    rows = [_row("14336x4096", 16, "fp16", "tuned", 1.058, [1.05, 1.06, 1.058, 1.062, 1.055]),
            _row("14336x4096", 1, "fp16", "tuned", 0.91, [0.90, 0.91, 0.92]),
            _row("4096x4096", 1, "fp16", "tuned", 0.70, [0.69, 0.70, 0.71]),
            _row("4096x4096", 16, "fp16", "cublas", 1.012, [1.03, 0.97, 1.04, 0.99, 1.02, 0.98, 1.012]),
            _row("4096x4096", 1, "bf16", "cublas", 1.001, [1.0, 1.002])]
    md = summary_markdown(rows, META)
    assert "**Verdict: FAIL** (5 rows: 3 pass, 1 slow inside the noise, 1 fail, 0 error)" in md
    assert "## fp16" in md and "## bf16" in md
    assert "3 of 4 rows routed to a tuned kernel" in md
    assert f"geomean speed-up ×{statistics.geometric_mean([1 / 1.058, 1 / 0.91, 1 / 0.70]):.3f}" in md
    assert "worst ratio 1.058 (14336x4096 n=16 fp16" in md
    assert "| 14336x4096 | 16 | tuned | b256.half8 | 30.00 | 31.74 | 1.058 |" in md and "**FAIL** |" in md
    assert "**SLOW** |" in md
    assert "none of 1 rows routed to a tuned kernel" in md and "no row slower than stock by more than 1%" in md
    assert "| 14336x4096 | **0.910** | **1.058** FAIL |" in md     # the grid: n=1, n=16
    line = failure_line(rows, "x.md")
    assert line.startswith("bench guard: 1 of 5 rows failed") and "14336x4096 n=16 fp16 FAIL ×1.058" in line
    assert line.endswith("; see x.md")


def test_summary_passes_and_names_errors():
    rows = [_row("4096x4096", n, "fp16", "tuned", 0.8, [0.8, 0.81]) for n in (1, 2)]
    md = summary_markdown(rows, {**META, "capped": ["128256x4096 fp16: 1 copies, 1002 MiB"]})
    assert "**Verdict: PASS**" in md and failure_line(rows) == ""
    assert "Copies capped by memory" in md
    fell = rows + [_row("4096x4096", 3, "fp16", "tuned", 1.0, [1.0, 1.0], launches="F.linear")]
    assert "launched F.linear (the library refused the table's algorithm): 4096x4096 n=3 fp16." in \
        summary_markdown(fell, META)
    bad = rows + [_row("1024x16384", 1, "fp16", "tuned", math.nan, [], verified=False, error="a | b")]
    md = summary_markdown(bad, META)
    assert "**Verdict: FAIL**" in md and "**ERROR**" in md and "a &#124; b" in md and "ERR" in md
    assert "1024x16384 n=1 fp16 ERROR" in failure_line(bad)


# ---- the loop on the CPU, with a fake device -------------------------------------------------------------

class FakeGraph:
    def __init__(self, fn, who):
        self.fn, self.who = fn, who

    def replay(self):
        self.fn()


class FakeBackend:
    """The CPU in place of the GPU: a "graph" runs its calls eagerly; a replay's time is what ``times`` says for the
    contender (captures alternate stock, gemvtune in measure_row's order)."""

    device = "cpu"

    def __init__(self, slower=1.0, wrong_graph=False, fail_capture=False):
        self.slower, self.wrong_graph, self.captures, self.timed = slower, wrong_graph, 0, []
        self.fail_capture = fail_capture

    def info(self):
        return {"name": "fake", "l2_bytes": 64 * 1024, "driver": "", "torch": "cpu"}

    def free_bytes(self):
        return 2**30

    def capture(self, fn, warmups=2):
        import torch

        who = ("stock", "gemvtune")[self.captures % 2]
        self.captures += 1
        if self.fail_capture and who == "gemvtune":
            raise RuntimeError("operation not permitted when stream is capturing\nmore")
        out = fn()
        if self.wrong_graph and who == "gemvtune":
            out[0] = torch.zeros_like(out[0])
        return FakeGraph(fn, who), out

    def time(self, graph, calls, replays):
        self.timed.append(graph.who)
        base = 10.0 * (self.slower if graph.who == "gemvtune" else 1.0)
        return [base + 0.01 * (i % 3) for i in range(replays)]

    def release(self):
        pass


def _run(tmp_path, backend, shapes=((64, 128), (48, 256)), batches=(1, 3), weights=""):
    from gemvtune.bench.guard import run_guard
    from gemvtune.runtime.table import load_table

    lines = []
    res = run_guard(list(shapes), list(batches), ["fp16", "bf16"], load_table(TABLE), tmp_path, rounds=3, replays=4,
                    echo=lines.append, backend=backend, command="gemvtune bench guard --test", weights=weights)
    return res, lines


def test_loop_on_the_cpu_writes_every_row(tmp_path):
    import pandas as pd

    be = FakeBackend()
    res, lines = _run(tmp_path, be)
    assert len(res.rows) == 2 * 2 * 2 and res.failure == ""
    assert be.timed[:4] == ["stock", "gemvtune", "gemvtune", "stock"]     # interleaved, the order swapped
    for r in res.rows:
        assert r["verified"] and r["verdict"] == "PASS" and r["ratio"] == pytest.approx(1.0)
        assert r["stock_relerr"] < r["bound"] and r["gemvtune_graph_relerr"] < r["bound"]
        assert r["calls_per_graph"] % r["copies"] == 0 and r["copies"] >= 2
        assert r["route"] == "F.linear" and r["launches"] == "F.linear"   # a CPU weight: what explain says
        assert len(r["round_ratios"]) == 3
    stem = res.csv.stem
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([f"{stem}.csv", f"{stem}.json", f"{stem}-summary.md"])
    assert stem.startswith("guard-")
    df = pd.read_csv(res.csv)
    assert list(df.columns) == COLUMNS and len(df) == 8
    assert set(df.verdict) == {"PASS"} and df.verified.all()
    prov = json.loads(res.csv.with_suffix(".json").read_text())
    assert prov["command"] == "gemvtune bench guard --test" and prov["rounds"] == 3 and len(prov["rows"]) == 8
    assert len(prov["rows"][0]["round_medians"]["stock"]) == 3
    assert "**Verdict: PASS**" in res.markdown
    assert any(ln.startswith("[1/4] 64x128 fp16:") for ln in lines) and any("n=3" in ln for ln in lines)


def test_loop_fails_a_slower_swap_and_a_wrong_graph(tmp_path):
    res, _ = _run(tmp_path / "slow", FakeBackend(slower=1.05), shapes=((64, 128),), batches=(1,))
    assert {r["verdict"] for r in res.rows} == {"FAIL"} and "2 of 2 rows failed" in res.failure
    res, _ = _run(tmp_path / "wrong", FakeBackend(wrong_graph=True), shapes=((64, 128),), batches=(2,))
    assert {r["verdict"] for r in res.rows} == {"ERROR"}
    assert all(r["gemvtune_graph_relerr"] == pytest.approx(1.0) and not r["verified"] for r in res.rows)
    assert all(r["error"] == "a graph's output is outside the bound" for r in res.rows)
    res, lines = _run(tmp_path / "raise", FakeBackend(fail_capture=True), shapes=((64, 128),), batches=(1, 2))
    assert len(res.rows) == 4 and {r["verdict"] for r in res.rows} == {"ERROR"}      # every row still measured
    assert res.rows[0]["error"] == "RuntimeError: operation not permitted when stream is capturing"
    assert math.isnan(res.rows[0]["ratio"]) and "ERROR" in res.failure


@pytest.mark.parametrize("weights", ["e4m3-row", "e4m3-b128"])
def test_fp8_loop_times_the_fp8_layers_against_dequantize(tmp_path, weights):
    """--weights: each copy quantised, stock the same codes and scales through dequantize + F.linear; the reference is
    the dequantised weights in float64, and both contenders are inside the bound (plus the fallback's rounding)."""
    import pandas as pd

    from gemvtune.bench.guardverdict import error_bound

    res, lines = _run(tmp_path, FakeBackend(), weights=weights)
    assert len(res.rows) == 8 and res.failure == ""
    for r in res.rows:
        assert r["weights"] == weights and r["verdict"] == "PASS" and r["verified"]
        assert r["route"] == "dequant" and r["launches"] == "dequantize + F.linear"   # a CPU weight
        assert r["bound"] > error_bound(r["dtype"], r["d"])
        assert r["stock_relerr"] < r["bound"] and r["gemvtune_graph_relerr"] < r["bound"]
        assert r["stock_relerr"] == r["gemvtune_relerr"]     # the same codes, the same fallback on the CPU
    assert res.csv.stem.startswith(f"guard-{weights}-")
    df = pd.read_csv(res.csv, keep_default_na=False)
    assert list(df.columns) == COLUMNS and set(df.weights) == {weights}
    assert "against dequantize + F.linear" in res.markdown and f"## fp16, {weights} weights" in res.markdown
    assert "rows routed to dequantize + F.linear" in res.markdown
    assert any(ln.startswith(f"[1/4] 64x128 fp16 {weights}:") for ln in lines)
    prov = json.loads(res.csv.with_suffix(".json").read_text())
    assert prov["weights"] == weights
    slow, _ = _run(tmp_path / "slow", FakeBackend(slower=1.05), shapes=((64, 128),), batches=(1,), weights=weights)
    assert {r["verdict"] for r in slow.rows} == {"FAIL"} and f"64x128 n=1 fp16 {weights} FAIL" in slow.failure


def test_fp8_layers_share_their_weights_and_a_dropped_scale_is_caught():
    """Stock and swapped FP8 layers hold the same codes and scales (nothing copied); a swapped layer whose scales
    are wrong (a planted dropped scale) is an ERROR row before anything is timed."""
    from gemvtune.bench.guard import measure_row
    from gemvtune.bench.guardlayers import build_layers
    from gemvtune.kernels.shapes import Shape
    from gemvtune.runtime.table import load_table

    table = load_table(TABLE)
    be = FakeBackend()
    layers = build_layers(be, table, Shape(64, 256, 1, "bf16", "e4m3-row"), 3, seed=1)
    assert all(s.weight is g.weight and s.scales is g.scales for s, g in zip(layers.stock, layers.swapped))
    assert layers.stock[0].table is None and layers.swapped[0].table is table
    assert layers.ref_weight.dtype.is_floating_point and layers.ref_weight.element_size() == 4
    ok = measure_row(be, layers, table, 2, rounds=2, replays=2, calls=6)
    assert ok["verdict"] == "PASS"
    scales = layers.swapped[0].scales.clone()
    layers.swapped[0]._scales = scales * 1.0                            # the swapped layer's own copy ...
    layers.swapped[0]._scales[5] = 1.0                                  # ... one row's scale dropped
    bad = measure_row(be, layers, table, 2, rounds=2, replays=2, calls=6)
    assert bad["verdict"] == "ERROR" and "outside the bound" in bad["error"] and be.timed.count("gemvtune") == 2


def test_loop_keeps_the_latest_run_only_where_asked(tmp_path):
    from gemvtune.bench.guard import _write

    old = tmp_path / "guard-20260101-000000.csv"
    old.write_text("x\n")
    _write([], {"device": {}}, tmp_path, "20270101-000000", keep_latest=False)
    assert old.exists()
    _write([], {"device": {}}, tmp_path, "20270101-000001", keep_latest=True)
    assert not old.exists() and not (tmp_path / "guard-20270101-000000.csv").exists()
    assert (tmp_path / "guard-20270101-000001-summary.md").exists()


# ---- the command's bad input ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    d = tmp_path_factory.mktemp("guard-bad")
    (d / "file").write_text("not a folder")
    (d / "ro").mkdir()
    os.chmod(d / "ro", 0o500)
    yield d
    os.chmod(d / "ro", 0o700)


BAD = [
    ("bad shape", ["--shape", "14336"], "malformed shape", 2),
    ("zero M", ["--shape", "0x4096"], ">= 1", 2),
    ("n = 0", ["--batch", "0"], "batch n=0 is outside 1..16", 2),
    ("n = 17", ["--batch", "1,17"], "batch n=17 is outside 1..16", 2),
    ("malformed batch", ["--batch", "1..16"], "malformed batch list", 2),
    ("unknown dtype", ["--dtype", "fp32"], "'fp32' is not one of 'fp16', 'bf16'", 2),
    ("one round", ["--rounds", "1"], "1 is not in the range 2<=x<=50", 2),
    ("zero replays", ["--replays", "0"], "0 is not in the range 1<=x<=1000", 2),
    ("missing table", ["--table", "{tmp}/none.json"], "does not exist", 2),
    ("unknown FP8 format", ["--weights", "e5m2-row"], "'e5m2-row' is not one of 'e4m3-row', 'e4m3-b128'", 2),
    ("--out under a file", ["--out", "{tmp}/file/x"], "is not writable", 2),
    ("--out read-only", ["--out", "{tmp}/ro/x"], "is not writable", 2),
]


@pytest.mark.parametrize("what,args,needle,code", BAD, ids=[c[0] for c in BAD])
def test_bad_input_is_one_line(tmp, what, args, needle, code):
    if what == "--out read-only" and os.geteuid() == 0:
        pytest.skip("root writes through read-only permissions")
    before = {p for p in tmp.rglob("*")}
    r = run_cli("bench", "guard", *[a.replace("{tmp}", str(tmp)) for a in args])
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == code, (r.returncode, r.stderr)
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in r.stderr, r.stderr
    assert {p for p in tmp.rglob("*")} == before


def test_precompile_fills_the_cache_the_layers_read():
    """The kernels the routed rows run are compiled ahead, in parallel, under the key a swapped layer's plan
    compiles under (its first call then finds them cached)."""
    from gemvtune.bench.guard import precompile
    from gemvtune.build.compile import compile_variant
    from gemvtune.kernels.epilogue import Epilogue
    from gemvtune.kernels.shapes import Shape
    from gemvtune.runtime.table import load_table

    table = load_table(TABLE)
    assert precompile(table, [Shape(1024, 4096, 1, "fp16")], [1, 4], "sm_90") == 1   # n=4 runs cuBLAS
    r = table.route(1024, 4096, 1, "torch", "fp16", "fp16")
    assert r.tuned
    again = compile_variant(r.config, Shape(1024, 4096, 1, "fp16"), "sm_90", epilogue=Epilogue("fp16", False))
    assert again.cached
    fp8 = Shape(14336, 4096, 1, "fp16", "e4m3-row")                 # an FP8 entry: its FP8 kernel, under its key
    assert precompile(table, [fp8], [1, 3], "sm_90") == 2           # n=3 too: the n=1 winner (fp8route)
    r = table.route(14336, 4096, 1, "torch", "fp16", "fp16", "e4m3-row")
    assert r.tuned and r.config.family == "fp8gemv"
    assert compile_variant(r.config, fp8, "sm_90", epilogue=Epilogue("fp16", False)).cached
