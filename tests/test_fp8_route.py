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
    r2 = t.route(1024, 4096, 2, weights="e4m3-b128")          # only measured n run a kernel
    assert not r2.tuned and "tuned at n=1,4 only" in r2.why and "--weights e4m3-b128" in r2.why
    assert not t.route(1024, 4096, 1).tuned                   # a 16-bit call: not this entry
    # the "tuned" policy runs the FP8 family's config for an FP8 shape the table lacks, never a 16-bit one
    t.policy = "tuned"
    t._routes.clear()
    r = t.route(4096, 4096, 1, weights="e4m3-row")
    assert r.tuned and r.config.family == "fp8gemv"
