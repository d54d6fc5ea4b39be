"""Dispatch choice from a table's own measurements (gemvtune.runtime.route): when cuBLAS is faster, cuBLAS
runs; a tuned win inside the measured noise of both (their spreads of round medians) runs cuBLAS too; a shape the
table lacks goes to cuBLAS unless the table holds a measured reason."""

import pytest
from conftest import ROOT

from gemvtune.kernels.gemv import GemvConfig
from gemvtune.runtime.noise import Contest, spread
from gemvtune.runtime.route import MARGIN, choose, contest
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


def _table(*entries, policy="fastest", costmodel=None):
    return Table({"schema": 1, "gpu": {"name": "X"}, "entries": {f"{e['M']}x{e['d']}x{e['n']}": e for e in entries}},
                 policy=policy, costmodel=costmodel)


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


def test_an_n_between_two_tabled_n_runs_cublas():
    """A kernel runs only at a measured n: won at n = 2 and n = 8, n = 3 and 7 still run cuBLAS, and say so (carried
    from a neighbour, the H200 table's kernels ran up to 27.8% slower than cuBLAS in bench guard)."""
    t = _table(_entry(64, 4096, 2, 9.0, 13.0), _entry(64, 4096, 8, 12.0, 13.0))
    for n in (3, 7):
        r = t.route(64, 4096, n)
        assert not r.tuned and r.config is None and "tuned at n=2,8 only" in r.why and f"--batch {n}" in r.why
    assert t.route(64, 4096, 2).tuned and t.route(64, 4096, 8).tuned


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
    """The first issue's example was 14336x4096 at n = 16 (38.17 µs tuned against cuBLAS's 31.27 µs); re-tuned, the
    table holds a cuBLASLt algorithm at 30.41 µs against cuBLAS's 30.98, a win of 1.9% inside the noise of its
    rounds (spreads 7.2% + 3.0%), which an independent harness ran 5.8% slower than cuBLAS: cuBLAS runs. Every entry
    whose best measured kernel does not beat cuBLAS by more than max(MARGIN, both spreads) routes to cuBLAS (the
    committed table has such entries: cuBLAS faster, within 1%, or inside the noise), and every tuned route beats
    its cuBLAS time by more than that."""
    from gemvtune import Shape

    t = load_table(ROOT / "results" / "nvidia-h200" / "table.json")
    beaten, noisy = [], []
    for key in t.keys():
        s = Shape(*key)
        m = contest(t.entry(s), "torch", s, s.dtype)
        if m.tuned_us is not None and m.cublas_us is not None and m.tuned_us >= m.cublas_us * (1 - m.noise):
            beaten.append(s)
            if m.tuned_us < m.cublas_us * (1 - MARGIN):
                noisy.append(s)   # a win the old fixed margin took, inside the noise
    assert beaten and not any(t.route(s.M, s.d, s.n, "torch", s.dtype, s.dtype, s.weights).tuned for s in beaten)
    assert Shape(14336, 4096, 16) in noisy
    r = t.route(14336, 4096, 16, "torch", "fp16", "fp16")
    assert not r.tuned and "inside the noise 10.2% (spreads 7.2% + 3.0%): cuBLAS runs" in r.why
    for key in t.keys():
        s = Shape(*key)
        r = t.route(s.M, s.d, s.n, "torch", s.dtype, s.dtype, s.weights)
        if r.tuned:
            assert r.cublas_us is None or r.tuned_us < r.cublas_us * (1 - r.noise)


def _noisy(e, tuned_spread, cublas_spread, tuned_range=None, cublas_range=None):
    """``e`` with the winner's and cuBLAS-through-torch's spread (None: none recorded) and, optionally, their
    (us_min, us_max) as fractions of their median."""
    for rec, sp, rg in ((e["winner"], tuned_spread, tuned_range), (e["baselines"]["cublas-torch"], cublas_spread,
                                                                     cublas_range)):
        if sp is not None:
            rec["spread"] = sp
        if rg is not None:
            rec["us_min"], rec["us_max"] = rec["us"] * rg[0], rec["us"] * rg[1]
    for fam in ("gemv", "splitk"):
        if fam in e and e[fam]["config"] == e["winner"]["config"]:
            e[fam].update({k: v for k, v in e["winner"].items() if k in ("spread", "us_min", "us_max")})
    return e


def _won(win, tuned_spread=0.009, cublas_spread=0.012, n=16, **ranges):
    """An entry (4096x4096 at n) whose winner beats cuBLAS by ``win`` (relative), with these spreads."""
    c = 30.98
    return _noisy(_entry(4096, 4096, n, c * (1 - win), c), tuned_spread, cublas_spread, **ranges)


def test_a_win_inside_the_noise_of_both_runs_cublas():
    """The 14336x4096 n = 16 case: a 1.8% win with spreads 0.9% + 1.2% (2.1%) is no measured win; 5% is."""
    r = _table(_won(0.018)).route(4096, 4096, 16)
    assert not r.tuned and r.config is None and r.noise == pytest.approx(0.021)
    assert r.why == "tuned 30.42 µs beats cuBLAS 30.98 µs by 1.8%, inside the noise 2.1% (spreads 0.9% + 1.2%): cuBLAS runs"
    r = _table(_won(0.05)).route(4096, 4096, 16)
    assert r.tuned and r.config.vec == "half8" and "by 5.0%, beyond the noise 2.1% (spreads 0.9% + 1.2%)" in r.why


def test_the_noise_is_the_sum_of_both_spreads():
    """Either spread alone (1.2%) is less than the 1.8% win; their sum is more. Just past the sum: tuned."""
    assert _table(_won(0.018, 0.0, 0.012)).route(4096, 4096, 16).tuned
    assert _table(_won(0.018, 0.012, 0.0)).route(4096, 4096, 16).tuned
    assert not _table(_won(0.018, 0.012, 0.012)).route(4096, 4096, 16).tuned
    assert _table(_won(0.0215)).route(4096, 4096, 16).tuned
    assert not _table(_won(0.0205)).route(4096, 4096, 16).tuned


def test_a_record_without_a_spread_counts_its_min_max_range():
    """Older tables: no ``spread``; (us_max - us_min) / us stands in, here 3% + 2% = 5%."""
    t = dict(tuned_spread=None, cublas_spread=None, tuned_range=(0.99, 1.02), cublas_range=(0.995, 1.015))
    r = _table(_won(0.045, **t)).route(4096, 4096, 16)
    assert not r.tuned and r.noise == pytest.approx(0.05) and "inside the noise 5.0% (spreads 3.0% + 2.0%)" in r.why
    assert _table(_won(0.055, **t)).route(4096, 4096, 16).tuned
    # a recorded spread is the noise, not the wider range of single replays
    assert _table(_won(0.045, 0.009, 0.012, tuned_range=(0.9, 1.1), cublas_range=(0.9, 1.1))).route(4096, 4096, 16).tuned
    # one side without either: 0 for that side
    r = _table(_won(0.025, tuned_spread=None, cublas_spread=0.012, tuned_range=None)).route(4096, 4096, 16)
    assert r.tuned and r.noise == pytest.approx(0.012)


def test_records_without_any_noise_leave_the_margin_alone():
    t = dict(tuned_spread=None, cublas_spread=None)
    r = _table(_won(0.015, **t)).route(4096, 4096, 16)
    assert r.tuned and r.noise == MARGIN and "beyond the 1% margin (spreads 0.0% + 0.0%)" in r.why
    assert not _table(_won(0.008, **t)).route(4096, 4096, 16).tuned
    # quiet rounds do not lower the margin either
    assert not _table(_won(0.008, 0.001, 0.002)).route(4096, 4096, 16).tuned


def test_spread_and_contest_directly():
    from gemvtune import Shape
    from gemvtune.runtime.entry import Measured

    assert spread(Measured(us=10.0, spread=0.03, us_min=5.0, us_max=20.0)) == 0.03
    assert spread(Measured(us=10.0, us_min=9.9, us_max=10.3)) == pytest.approx(0.04)
    assert spread(Measured(us=10.0, us_min=9.9)) == 0.0 and spread(Measured(us=10.0)) == 0.0 and spread(None) == 0.0
    assert Contest(9.0, 10.0, None, 0.05, 0.04).noise == pytest.approx(0.09) and Contest(9.0, 10.0).noise == MARGIN
    assert Contest(9.0, 10.0, None, 0.05, 0.04).wins and not Contest(9.0, 10.0, None, 0.05, 0.06).wins
    assert Contest(9.0, None).wins and not Contest(None, 10.0).wins
    m = contest(_table(_won(0.05)).entry(Shape(4096, 4096, 16)), "torch")
    assert (m.tuned_spread, m.cublas_spread) == (0.009, 0.012) and m.config.vec == "half8"


class _Model:
    """A cost model whose pick is predicted at ``rel`` x the shape's read floor."""

    def __init__(self, rel):
        self.rel = rel

    def floor_us(self, shape):
        return shape.weight_bytes / 4500.0 * 1e-3

    def rank(self, configs, shape, k=None):
        return [(GemvConfig(), self.floor_us(shape) * self.rel)]


def _floored(M, d, rel, tuned_spread, cublas_spread):
    """An n = 1 entry whose cuBLAS time is ``rel`` x its read floor (tuned at half that)."""
    from gemvtune import Shape

    c = _Model(1).floor_us(Shape(M, d)) * rel
    return _noisy(_entry(M, d, 1, c / 2, c), tuned_spread, cublas_spread)


def test_zero_trial_needs_the_noise_of_its_neighbours_too():
    """A shape the table lacks: cuBLAS is predicted at 2x the floor from three neighbours; the model's pick at 1.7x
    (15% faster) runs while the neighbours' noise is under the 10% zero-trial margin, and not where one neighbour's
    tuned + cuBLAS spreads come to 20%."""
    def table(spreads):
        return _table(*(_floored(M, 4096, 2.0, *sp) for M, sp in zip((2048, 4096, 8192), spreads)),
                      costmodel=_Model(1.7))

    quiet = table([(0.01, 0.01)] * 3).route(6144, 4096, 1)
    assert quiet.tuned and "cost model" in quiet.why and quiet.noise == pytest.approx(0.10)
    loud = table([(0.01, 0.01), (0.12, 0.08), (0.01, 0.01)]).route(6144, 4096, 1)
    assert not loud.tuned and loud.noise == pytest.approx(0.20)
    assert "not 20.0% faster" in loud.why and "noise of the tabled neighbours it is predicted from: 20.0%" in loud.why
    assert table([(0.01, 0.01), (0.06, 0.03), (0.01, 0.01)]).route(6144, 4096, 1).tuned   # 9%: the margin rules
