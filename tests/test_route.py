"""Dispatch choice from a table's own measurements (gemvtune.runtime.route): when cuBLAS is faster, cuBLAS
runs; a shape the table lacks goes to cuBLAS unless the table holds a measured reason."""

import pytest
from conftest import ROOT

from gemvtune.runtime.route import MARGIN, choose
from gemvtune.runtime.table import Table, load_table

GEMV = {"block": 256, "vec": "half8", "acc": "fp32", "tpr": 128, "unroll": 1, "split_k": 1, "hint": "nc",
        "x_load": "ldg", "pdl": "off", "occ": "auto"}
ATOMIC = {"mt": 2, "warps": 4, "split": 8, "combine": "atomic", "w_load": "reg", "depth": 1, "x_load": "ldg"}


def _entry(M, d, n, tuned_us, cublas_us, winner="gemv", gemv_us=None):
    cfg = GEMV if winner == "gemv" else ATOMIC
    e = {"M": M, "d": d, "n": n, "winner": {"family": winner, "config": cfg, "us": tuned_us},
         "baselines": {"cublas-torch": {"us": cublas_us, "status": "ok"}, "cublas": {"us": cublas_us * 1.05, "status": "ok"}}}
    if winner == "splitk":
        e["splitk"] = {"family": "splitk", "config": ATOMIC, "us": tuned_us}
        if gemv_us is not None:
            e["gemv"] = {"family": "gemv", "config": GEMV, "us": gemv_us}
    return e


def _table(*entries, policy="fastest"):
    return Table({"schema": 1, "gpu": {"name": "X"}, "entries": {f"{e['M']}x{e['d']}x{e['n']}": e for e in entries}},
                 policy=policy)


def test_exact_entry_runs_the_faster_of_tuned_and_cublas():
    t = _table(_entry(4096, 4096, 1, 9.5, 13.8), _entry(4096, 4096, 16, 15.6, 13.7))
    r = t.route(4096, 4096, 1, "torch")
    assert r.tuned and r.config.vec == "half8" and (r.tuned_us, r.cublas_us) == (9.5, 13.8)
    r16 = t.route(4096, 4096, 16, "torch")
    assert r16.kind == "cublas" and r16.config is None and "cuBLAS 13.70" in r16.why


def test_margin_ties_go_to_cublas():
    c = 10.0
    assert _table(_entry(64, 64, 1, c * (1 - MARGIN) - 0.01, c)).route(64, 64, 1).tuned
    assert not _table(_entry(64, 64, 1, c * (1 - MARGIN / 2), c)).route(64, 64, 1).tuned


def test_framework_picks_its_own_baseline():
    t = _table(_entry(64, 64, 1, 10.1, 10.0))          # cupy.matmul measured 10.5 there
    assert not t.route(64, 64, 1, "torch").tuned and t.route(64, 64, 1, "cupy").tuned


def test_missing_shape_and_one_sided_batches_go_to_cublas():
    t = _table(_entry(1024, 4096, 1, 3.4, 7.8))
    assert "not in the table" in t.route(512, 512, 1).why and not t.route(512, 512, 1).tuned
    r = t.route(1024, 4096, 2)
    assert not r.tuned and "tuned at n=1 only" in r.why


def test_bracketed_batch_runs_the_nearer_winner_only_when_tuned_won_on_both_sides():
    t = _table(_entry(64, 4096, 2, 9.0, 13.0), _entry(64, 4096, 8, 12.0, 13.0))
    r = t.route(64, 4096, 3)
    assert r.tuned and "n=2 kernel" in r.why and r.tuned_us == 9.0
    assert "n=8 kernel" in t.route(64, 4096, 7).why
    lost = _table(_entry(64, 4096, 2, 9.0, 13.0), _entry(64, 4096, 8, 14.0, 13.0))
    assert not lost.route(64, 4096, 3).tuned


def test_fp16_output_skips_an_atomic_split_k_winner():
    t = _table(_entry(4096, 14336, 8, 33.7, 35.4, winner="splitk", gemv_us=30.0))
    assert t.route(4096, 14336, 8, "torch", "fp32").config.family == "splitk"
    r = t.route(4096, 14336, 8, "torch", "fp16")
    assert r.tuned and r.config.family == "gemv" and r.tuned_us == 30.0
    slow = _table(_entry(4096, 14336, 8, 33.7, 35.4, winner="splitk", gemv_us=60.0))
    assert not slow.route(4096, 14336, 8, "torch", "fp16").tuned


def test_policy_tuned_always_runs_a_gemvtune_kernel():
    t = _table(_entry(4096, 4096, 16, 15.6, 13.7), policy="tuned")
    assert t.route(4096, 4096, 16).tuned and t.route(512, 512, 1).tuned      # nearest / llama.cpp fallback
    with pytest.raises(ValueError):
        choose(t, 64, 64, 1, policy="bogus")


def test_committed_table_never_picks_a_kernel_cublas_beat():
    """The issue's example was 14336x4096 at n = 16 (38.17 µs tuned against cuBLAS's 31.27 µs). Every entry whose
    best measured kernel is not faster than cuBLAS by the margin routes to cuBLAS (the committed table has such
    entries, e.g. cuBLASLt algorithms within 1% of cuBLAS), and every tuned route beats its cuBLAS time."""
    from gemvtune import Shape
    from gemvtune.runtime.route import measured

    t = load_table(ROOT / "results" / "nvidia-h200" / "table.json")
    beaten = []
    for M, d, n, dtype in t.keys():
        s = Shape(M, d, n, dtype)
        tuned, cublas, _ = measured(t.entry(s), "torch", s, dtype)
        if tuned is not None and cublas is not None and tuned >= cublas * (1 - MARGIN):
            beaten.append(s)
    assert beaten and not any(t.route(s.M, s.d, s.n, "torch", s.dtype, s.dtype).tuned for s in beaten)
    for M, d, n, dtype in t.keys():
        r = t.route(M, d, n, "torch", dtype, dtype)
        if r.tuned:
            assert r.cublas_us is None or r.tuned_us < r.cublas_us
