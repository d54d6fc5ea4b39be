"""FP8 weights through the search and the route (CPU): a search of an FP8 shape records its entry under its own key
with dequantize + F.linear as the baseline the kernel must beat, and the route runs the tuned FP8 kernel only where
it beat that baseline beyond the noise; where not, or where the table lacks the shape, dequantize + F.linear runs.
An FP8 entry never serves a 16-bit call, nor a 16-bit entry an FP8 one."""

from pathlib import Path

from fakes import Fp8Runner

from gemvtune.baselines import cublas_of
from gemvtune.kernels.shapes import Shape
from gemvtune.runtime.table import Table, load_table
from gemvtune.tuning.search import SearchOptions
from gemvtune.tuning.search_run import run_searches

FP8 = {"block": 128, "tpr": 32, "vec": 16, "unroll": 2, "hint": "default"}


def _search(tmp_path, shape, runner):
    opts = SearchOptions(trials=12, rounds=2, warm_k=0, storage=f"journal:{tmp_path / 'j.log'}")
    return run_searches(runner, [shape], opts, str(tmp_path), None, echo=lambda s: None,
                        writable=lambda p: Path(p))


def test_a_search_of_fp8_weights_records_its_own_entry_against_dequantize(tmp_path):
    shape = Shape(4096, 4096, 1, "fp16", "e4m3-row")
    runner = Fp8Runner()
    table = load_table(_search(tmp_path, shape, runner))
    assert {c.family for c in runner.calls} == {"fp8gemv", "fp8mma"}   # only the families that read FP8 weights
    e = table.entry(shape)
    assert e is not None and e.shape == shape and set(e.baselines) == {"dequant-torch", "cublas-16bit"}
    assert table.keys() == [(4096, 4096, 1, "fp16", "e4m3-row")]
    assert cublas_of(e.baselines, "torch", ok=lambda r: r.ok_us is not None) is e.baselines["dequant-torch"]
    r = table.route(4096, 4096, 1, "torch", "fp16", "fp16", "e4m3-row")
    assert r.tuned and r.config.family == "fp8gemv" and r.cublas_us == 30.0
    assert "beats dequantize + F.linear 30.00 µs" in r.why
    # the 16-bit call of the same (M, d, n) is not served by the FP8 entry, nor is the other FP8 layout
    plain = table.route(4096, 4096, 1, "torch", "fp16", "fp16")
    assert not plain.tuned and "not in the table" in plain.why
    block = table.route(4096, 4096, 1, "torch", "fp16", "fp16", "e4m3-b128")
    assert not block.tuned and "dequantize + F.linear runs" in block.why


def test_dequantize_faster_than_the_kernel_runs_dequantize(tmp_path):
    shape = Shape(4096, 4096, 1, "bf16", "e4m3-row")
    table = load_table(_search(tmp_path, shape, Fp8Runner(dequant_us=4.0)))   # (the fake FP8 kernels: 5 µs at best)
    r = table.route(4096, 4096, 1, "torch", "bf16", "bf16", "e4m3-row")
    assert not r.tuned and r.cublas_us == 4.0
    assert r.why.endswith(": dequantize + F.linear runs")


def _table(entries):
    return Table({"schema": 1, "gpu": {"name": "X"}, "entries": entries})


def test_fp8_entries_route_by_their_format_and_batch():
    def entry(n, tuned, dequant, weights="e4m3-b128"):
        return {"M": 1024, "d": 4096, "n": n, "dtype": "fp16", "weights": weights,
                "winner": {"family": "fp8gemv", "config": FP8, "us": tuned},
                "baselines": {"dequant-torch": {"us": dequant, "status": "ok"}}}

    t = _table({"1024x4096x1.e4m3-b128": entry(1, 3.0, 12.0), "1024x4096x4.e4m3-b128": entry(4, 11.9, 12.0)})
    assert t.route(1024, 4096, 1, weights="e4m3-b128").tuned
    r4 = t.route(1024, 4096, 4, weights="e4m3-b128")          # a 0.8% win: inside the 1% margin
    assert not r4.tuned and "dequantize + F.linear runs" in r4.why
    r2 = t.route(1024, 4096, 2, weights="e4m3-b128")          # not measured, and the n=4 entry barely won
    assert not r2.tuned and "tuned at n=1,4 only" in r2.why and "--weights e4m3-b128" in r2.why
    assert "x1.01..x4.00 dequantize + F.linear" in r2.why and "dequantize + F.linear runs" in r2.why
    assert not t.route(1024, 4096, 1).tuned                   # a 16-bit call: not this entry
    # the "tuned" policy runs the FP8 family's config for an FP8 shape the table lacks, never a 16-bit one
    t.policy = "tuned"
    t._routes.clear()
    r = t.route(4096, 4096, 1, weights="e4m3-row")
    assert r.tuned and r.config.family == "fp8gemv"


def _fp8_entry(M, n, tuned, dequant, dtype="fp16", config=None):
    return {"M": M, "d": 4096, "n": n, "dtype": dtype, "weights": "e4m3-row",
            "winner": {"family": "fp8gemv", "config": config or FP8, "us": tuned},
            "baselines": {"dequant-torch": {"us": dequant, "status": "ok"}}}


def test_an_untuned_fp8_call_runs_a_kernel_where_every_fp8_entry_beat_dequantize_widely():
    """FP8 calls the table has not measured replace dequantize + F.linear: where each of the table's FP8 entries of
    the format and dtype measured its kernel at least fp8route.EVIDENCE times faster (over at least ENTRIES entries),
    the table's pick runs (the winner at the nearest n, the nearest tuned shape, the family's default), and says it
    was never measured there; else dequantize + F.linear."""
    from gemvtune.runtime import fp8route

    other = {**FP8, "tpr": 64}
    good = {"4096x4096x1.e4m3-row": _fp8_entry(4096, 1, 6.0, 60.0),
            "4096x4096x8.e4m3-row": _fp8_entry(4096, 8, 10.0, 60.0, config=other)}
    t = _table(good)
    r2 = t.route(4096, 4096, 2, weights="e4m3-row")
    assert r2.tuned and r2.config.family == "fp8gemv" and r2.config.tpr == FP8["tpr"]
    assert "winner tuned at n=1" in r2.why and "never measured on this shape" in r2.why and "x6.0..x10.0" in r2.why
    assert r2.tuned_us is None and r2.cublas_us is None                    # nothing measured: no times claimed
    assert t.route(4096, 4096, 16, weights="e4m3-row").config.tpr == 64    # the winner at n=8
    r = t.route(6144, 4096, 1, weights="e4m3-row")                         # a shape it lacks: the nearest one's
    assert r.tuned and "nearest tuned shape 4096x4096" in r.why
    assert t.route(6144, 4096, 3, weights="e4m3-row").tuned                # no n=3 anywhere: the family's default
    assert not t.route(4096, 4096, 2, dtype="bf16", weights="e4m3-row").tuned   # no BF16 evidence
    assert not t.route(4096, 4096, 2, weights="e4m3-b128").tuned           # nor of the other format
    assert not t.route(4096, 4096, 2).tuned                                # 16-bit calls: unchanged
    one = _table({"4096x4096x1.e4m3-row": _fp8_entry(4096, 1, 6.0, 60.0)})
    r = one.route(4096, 4096, 2, weights="e4m3-row")
    assert fp8route.ENTRIES == 2 and not r.tuned and "its 1 e4m3-row fp16 entries" in r.why
    weak = _table({**good, "1024x4096x1.e4m3-row": _fp8_entry(1024, 1, 3.0, 4.5)})   # x1.5: below EVIDENCE
    r = weak.route(4096, 4096, 2, weights="e4m3-row")
    assert not r.tuned and "x1.50..x10.00" in r.why and "dequantize + F.linear runs" in r.why
    lost = _table({**good, "1024x4096x1.e4m3-row": _fp8_entry(1024, 1, 9.0, 4.5)})   # a kernel that lost
    assert not lost.route(4096, 4096, 2, weights="e4m3-row").tuned


def test_the_committed_table_runs_fp8_kernels_at_every_n_of_its_fp8_shapes():
    t = load_table(Path(__file__).resolve().parents[1] / "results" / "nvidia-h200" / "table.json", costmodel=None)
    for n in range(1, 17):
        r = t.route(14336, 4096, n, weights="e4m3-row")
        assert r.tuned and r.config.family in ("fp8gemv", "fp8mma"), (n, r.why)
        assert ("never measured" in r.why) == (n not in (1, 8))


def test_an_untuned_n_takes_the_same_shapes_winner_only_within_a_factor_of_two():
    """A config tuned for n = 1 or 2 (a GEMV) ran 8 and 16 tokens at 14-28% of the read ceiling on an H100, where the
    nearest shape's winner at that n (an MMA config) ran 39-49% (gemvtune bench fp8, 2026-12-05): beyond
    table.N_TRANSFER times the tuned n the nearest tuned shape at this n runs instead, and the same shape's winner
    only where no shape is tuned at this n."""
    from gemvtune.kernels.families import FAMILIES
    from gemvtune.runtime.table import N_TRANSFER

    mma = FAMILIES["fp8mma"].config_cls().to_dict()
    entries = {"14336x4096x1.e4m3-row": _fp8_entry(14336, 1, 16.0, 350.0),
               "14336x4096x2.e4m3-row": _fp8_entry(14336, 2, 18.0, 350.0),
               "128256x4096x8.e4m3-row": {**_fp8_entry(128256, 8, 140.0, 3000.0),
                                          "winner": {"family": "fp8mma", "config": mma, "us": 140.0}}}
    t = _table(entries)
    assert N_TRANSFER == 2
    cfg, how = t.lookup(Shape(14336, 4096, 4, weights="e4m3-row"))           # 4 = 2 x 2: the n = 2 winner
    assert cfg.family == "fp8gemv" and how == "winner tuned at n=2"
    cfg, how = t.lookup(Shape(14336, 4096, 8, weights="e4m3-row"))           # 8 = 4 x 2: another shape's n = 8 winner
    assert cfg.family == "fp8mma" and how == "nearest tuned shape 128256x4096"
    r = t.route(14336, 4096, 8, weights="e4m3-row")
    assert r.tuned and r.config.family == "fp8mma" and "nearest tuned shape 128256x4096" in r.why
    cfg, how = t.lookup(Shape(14336, 4096, 16, weights="e4m3-row"))          # no shape tuned at 16: the same shape's
    assert cfg.family == "fp8gemv" and how == "winner tuned at n=2"           # nearest n, before any family default
    cfg, how = t.lookup(Shape(4096, 4096, 3, weights="e4m3-row"))            # nothing at n = 3, no 4096x4096 entry:
    assert how == "fp8 default fallback"                                      # the family's default
