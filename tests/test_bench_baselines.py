"""The benchmark's baselines beside cuBLAS (issue 19, items 4 and 6), on the CPU: the summary's ratios against
Inductor and the best of cuBLAS and Inductor, their geomeans per batch with the lowest row named, the growth of
the tuned time with n, missing values left empty; the seed kernel as written (llama.cpp's, d at run time)
compiled with NVRTC; Inductor's compile (one code object per shape, no silent fallback to eager) and its
measurement's failure paths with a stand-in harness; the CLI's --no-inductor. The GPU runs are in
test_bench_baselines_gpu.py."""

import math
from types import SimpleNamespace

import pandas as pd
import pytest
from conftest import ROOT

from gemvtune import Shape
from gemvtune.bench.report import baseline_columns, bench_markdown, geomean, scaling, summary_row
from gemvtune.runners.base import Measurement, Status
from gemvtune.runners.cuda.seed import SEED_KERNEL, compile_seed, seed_invalid_reasons, seed_launch, seed_source

CEIL = {"read_gbps": 4000.0, "launch_floor_us": 0.5}


def _m(shape, kind, us, ok=True, **kw):
    return Measurement(kind, kind, shape.M, shape.d, shape.n, Status.OK if ok else Status.LAUNCH_ERROR,
                       us_median=us, us_min=us, us_max=us, error="" if ok else "planted failure", **kw)


def _row(shape, tuned, llama, seed, cublas, inductor):
    ms = [_m(shape, "tuned", tuned), _m(shape, "llama.cpp", llama), _m(shape, "seed", seed),
          _m(shape, "cublas-torch", cublas), _m(shape, "cublas", cublas + 5.0)]
    if inductor is not None:
        ms.append(_m(shape, "inductor", inductor, compile_s=40.0, params={"kernel": "triton template"}))
    return summary_row(shape, ms, 4000.0, "tuned")


# ---- summary math -----------------------------------------------------------------------------------------

def test_summary_row_ratios_against_every_baseline_and_the_best_of_cublas_and_inductor():
    s = Shape(4096, 4096)
    ms = [_m(s, "tuned", 10.0), _m(s, "tuned", 10.4), _m(s, "llama.cpp", 12.0), _m(s, "seed", 12.5),
          _m(s, "cublas-torch", 13.0), _m(s, "cublas", 14.0), _m(s, "inductor", 11.0, compile_s=33.0,
                                                                   params={"kernel": "triton template"}),
          _m(s, "inductor", 11.4, compile_s=33.0), _m(s, "inductor", 99.0, ok=False)]
    r = summary_row(s, ms, 4000.0, "tuned")
    assert r["tuned_us"] == pytest.approx(10.2) and r["inductor_us"] == pytest.approx(11.2)   # medians of the ok rounds
    assert r["x_inductor"] == pytest.approx(11.2 / 10.2) and r["x_cublas"] == pytest.approx(13.0 / 10.2)
    assert r["best_baseline_us"] == pytest.approx(11.2) and r["best_baseline"] == "inductor"
    assert r["x_best"] == pytest.approx(11.2 / 10.2)
    assert r["x_seed"] == pytest.approx(12.5 / 10.2) and r["x_llama"] == pytest.approx(12.0 / 10.2)
    assert r["inductor_compile_s"] == 33.0 and r["inductor_kernel"] == "triton template"
    assert "inductor: planted failure" in r["baseline_errors"]
    faster_cublas = baseline_columns(10.0, 12.0, 12.5, 10.5, 11.0)
    assert faster_cublas["best_baseline"] == "cublas" and faster_cublas["x_best"] == pytest.approx(1.05)


@pytest.mark.parametrize("inductor", [None, "failed"])
def test_missing_inductor_leaves_its_ratios_empty(inductor):
    s = Shape(4096, 4096)
    ms = [_m(s, "tuned", 10.0), _m(s, "llama.cpp", 12.0), _m(s, "seed", 12.5), _m(s, "cublas-torch", 13.0)]
    if inductor:
        ms.append(_m(s, "inductor", math.nan, ok=False, compile_s=20.0))
    r = summary_row(s, ms, 4000.0, "tuned")
    assert math.isnan(r["inductor_us"]) and math.isnan(r["x_inductor"])
    assert math.isnan(r["best_baseline_us"]) and math.isnan(r["x_best"]) and r["best_baseline"] == ""
    assert r["x_cublas"] == pytest.approx(1.3)
    assert r["inductor_compile_s"] == 20.0 if inductor else math.isnan(r["inductor_compile_s"])
    md = bench_markdown(pd.DataFrame([r]), CEIL)
    assert "| 4096x4096 | 1 | 34 | 10.00 |" in md and "| - | - | 1.300 | - |" in md   # ×best and ×Inductor empty
    assert ("Baselines that failed" in md) == bool(inductor)


def test_per_batch_geomeans_name_the_lowest_row_and_the_growth_with_n():
    us = {  # (M, d): n -> (tuned, cublas, inductor)
        (4096, 4096): {1: (10.0, 12.0, 11.0), 2: (11.0, 12.1, 11.5), 16: (14.0, 12.5, 13.0)},
        (14336, 4096): {1: (28.0, 30.0, 32.0), 2: (30.0, 30.5, 31.0), 16: (38.0, 31.0, 30.5)},
    }
    rows = [_row(Shape(M, d, n), t, 1.2 * t, 1.25 * t, c, i) for (M, d), byn in us.items() for n, (t, c, i) in byn.items()]
    rows.append(_row(Shape(1024, 16384, 2), 9.0, 10.0, 10.0, 14.0, None))   # no n = 1 row and no Inductor
    df = pd.DataFrame(rows)
    grow = scaling(df)
    assert grow[2] == pytest.approx(1.4) and grow[5] == pytest.approx(38 / 28) and math.isnan(grow[6])
    md = bench_markdown(df, CEIL)
    table = {ln.split(" | ")[0].strip("| "): ln for ln in md.splitlines() if ln.startswith("| ") and ln.count("|") == 9}
    # ×best at n = 16: 4096x4096 12.5/14 = 0.893, 14336x4096 30.5/38 = 0.803 (the lowest, named)
    assert f"{geomean([12.5 / 14, 30.5 / 38]):.3f} (lowest 0.803, 14336x4096)" in table["16"]
    assert f"{geomean([12 / 10, 30 / 28]):.3f} (lowest 1.071, 14336x4096)" in table["1"]   # ×best = ×cuBLAS here
    # the tuned time over its own n = 1 time: 1.4 and 1.357 at n = 16, the worst named
    assert f"{geomean([1.4, 38 / 28]):.3f} (worst 1.400, 4096x4096)" in table["16"]
    assert "1 (the reference)" in table["1"]
    assert table["2"].split(" | ")[1] == "3" and "(lowest 1.111, 1024x16384)" in table["2"]   # its ×cuBLAS 10/9
    single = bench_markdown(df[df.n == 1], CEIL)
    assert "tuned time / its n = 1 time" not in single and "×Inductor" in single


def test_summarize_reads_the_new_baselines_and_older_csvs(tmp_path):
    from gemvtune.bench.summary import summarize_bench
    from gemvtune.reports.runcsv import provenance, write_csv

    ms = []
    for n, t in ((1, 10.0), (2, 11.0)):
        s = Shape(4096, 4096, n)
        ms += [_m(s, "llama.cpp", 12.0), _m(s, "seed", 12.6), _m(s, "cublas-torch", 13.0), _m(s, "cublas", 14.0),
               _m(s, "inductor", 12.0), Measurement("b64.half8", "variant", s.M, s.d, n, Status.OK, us_median=t,
                                                    us_min=t, us_max=t, pct_ceiling=80.0, params={"block": 64})]
    p = write_csv(ms, tmp_path / "b.csv", provenance({"name": "NVIDIA H200"}, ceiling={"read_gbps": 4600.0}))
    md = summarize_bench(p)
    assert "| 4096×4096 | 1 | 34 | 12.00 | 12.60 | 13.00 | 14.00 | 12.00 | `b64.half8` | 10.00 |" in md
    assert "| 1.200 | 1.300 | 1.200 | 1.200 | 1.260 | 1/1 |" in md                    # ×best ×cuBLAS ×Inductor ×llama ×seed
    assert "| 4096×4096 | seed kernel | 12.60 | 11.4 |" in md                          # MEASURING's seed: our seed
    assert "tuned time / its n = 1 time" in md and "1.100 (worst 1.100, 4096x4096)" in md
    old = ROOT / "tests" / "data" / "bench-20261129-121850.csv"
    text = summarize_bench(old)                                                       # no seed, no Inductor
    assert "| 4096×4096 | 1 | 34 | 11.17 | - | 13.70 |" in text and "| 4096×4096 | llama.cpp config | 11.17 |" in text


# ---- the seed kernel as written ------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 3, 8, 16])
def test_seed_kernel_compiles_for_each_n_and_reads_d_and_m_at_run_time(n):
    pytest.importorskip("cuda.bindings")
    src = seed_source(n)
    assert f"constexpr int N = {n};" in src and "const int ncols" in src and "const int nrows" in src
    assert "constexpr int D" not in src and "4097" not in src
    c = compile_seed(n, "sm_90")
    assert c.resources.registers > 0 and c.resources.spill_stores == 0
    assert c.resources.smem_bytes == 4 * 32 * n            # one float per warp slot and column
    for shape in (Shape(37, 4098, n), Shape(1, 2, n), Shape(152064, 3584, n)):   # odd M, d not a multiple of 4 or 256
        assert seed_invalid_reasons(shape) == []
        grid, block, tail = seed_launch(shape)
        assert grid == (shape.M,) and block == (256,) and [int(v) for v in tail] == [shape.d, shape.M]
    assert compile_seed(n, "sm_80").cubin_path != c.cubin_path and SEED_KERNEL == "seed_gemv"


@pytest.mark.parametrize("shape", [Shape(37, 4097, 3), Shape(1, 1), Shape(4096, 14335, 16)], ids=str)
def test_seed_kernel_refuses_odd_d_as_llama_cpp_does(shape):
    from gemvtune.runners.cuda.libtimers import Baselines

    why = seed_invalid_reasons(shape)
    assert len(why) == 1 and f"d = {shape.d} is odd" in why[0] and "ncols % 2 == 0" in why[0]
    m = Baselines(SimpleNamespace()).measure_seed(shape)     # refused before any compile or GPU work
    assert m.status == Status.INVALID and m.kind == "seed" and m.error == why[0]
    assert m.name == "seed kernel (llama.cpp as written, d at run time)"


def test_seed_source_refuses_a_bad_n():
    for n in (0, 17, 2.0, True):
        with pytest.raises(ValueError):
            seed_source(n)


# ---- Inductor: the compile and its checks (cheap dynamo backends stand in for Inductor on the CPU) ----------

torch = pytest.importorskip("torch")


def test_each_shape_compiles_its_own_graph_past_dynamo_s_recompile_limit():
    """Twelve shapes, more than dynamo's default limit of 8 recompiles per code object: each compiles a
    graph of its own (never the silent eager fallback) and computes F.linear."""
    from gemvtune.runners.cuda.inductor import compile_linear

    limit = torch._dynamo.config.recompile_limit
    for i in range(12):
        x, w = torch.randn(1 + i % 4, 8 + i), torch.randn(5 + i, 8 + i)
        c = compile_linear(torch, f"case{i}", (x, w), backend="eager")
        assert c.fn is not None and c.error == "" and c.kernel == "backend eager", c
        assert torch.equal(c.fn(x, w), torch.nn.functional.linear(x, w))
    assert torch._dynamo.config.recompile_limit == limit          # raised for the compile only


def test_a_call_that_compiled_no_graph_is_a_failure_not_a_baseline(monkeypatch):
    from gemvtune.runners.cuda.inductor import compile_linear

    x, w = torch.randn(2, 8), torch.randn(4, 8)
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: fn)      # runs eagerly: dynamo never sees the call
    c = compile_linear(torch, "eager", (x, w))
    assert c.fn is None and "compiled no graph" in c.error and "eager" in c.error
    monkeypatch.undo()
    c = compile_linear(torch, "mismatch", (x, torch.randn(4, 9)), backend="eager")
    assert c.fn is None and c.error.startswith("compile failed: ") and "\n" not in c.error


def test_chosen_kernel_reads_inductor_s_generated_code():
    from gemvtune.runners.cuda.inductor import chosen_kernel

    assert chosen_kernel([]) .startswith("unknown")
    assert chosen_kernel(["triton_tem_fused_mm_0.run(arg0_1, arg1_1, buf0)"]) == "triton template"
    assert chosen_kernel(["extern_kernels.mm(arg0_1, reinterpret_tensor(arg1_1))"]) == "extern mm (aten: cuBLAS)"
    assert chosen_kernel(["triton_red_fused_mm_0.run()", "triton_poi_fused_1.run()"]) == \
        "triton reduction + triton pointwise"
    assert chosen_kernel(["call(args)"]) == "other"


@pytest.mark.slow   # one real Inductor compile on the CPU (a C++ compiler; seconds)
def test_inductor_compile_on_the_cpu_sees_its_generated_code():
    from gemvtune.runners.cuda.inductor import compile_linear

    x, w = torch.randn(3, 64), torch.randn(32, 64)
    c = compile_linear(torch, "cpu", (x, w), mode=None)
    assert c.fn is not None and c.error == "" and c.compile_s > 0
    assert c.kernel and not c.kernel.startswith("unknown"), c.kernel
    assert torch.allclose(c.fn(x, w), torch.nn.functional.linear(x, w), atol=1e-5)


class _Harness:
    """What measure_inductor uses of a runner, on the CPU: NumPy copies for buffers, a stand-in timer."""

    def __init__(self, fail_buffers=False):
        import contextlib

        import numpy as np

        self.fail_buffers = fail_buffers
        self.gpu_lock = SimpleNamespace(held=contextlib.nullcontext)
        self.on_stream = contextlib.nullcontext
        rng = np.random.default_rng(0)
        self.b = SimpleNamespace(W=[rng.random((6, 8), dtype=np.float32) for _ in range(2)],
                                 x=[rng.random((2, 8), dtype=np.float32) for _ in range(2)], copies=2, flush=False)
        self.calls = []

    def buffers(self, shape):
        if self.fail_buffers:
            raise RuntimeError("out of memory\nsecond line")
        return self.b

    def time_torch(self, torch_, shape, b, call):
        self.calls += [call(i) for i in range(4)]
        return [2.0, 1.0, 3.0], 4

    def fill_times(self, m, t, shape, method, n, b):
        m.us_median, m.method, m.launches = sorted(t)[len(t) // 2], method, n


def test_measure_inductor_compiles_once_per_shape_and_records_it(monkeypatch):
    from gemvtune.runners.cuda import inductor

    compiles, real = [], inductor.compile_linear

    def fake_compile(torch_, tag, args, **kw):
        compiles.append(tag)
        return real(torch_, tag, args, backend="eager")

    monkeypatch.setattr(inductor, "compile_linear", fake_compile)
    h, cache, s = _Harness(), {}, Shape(6, 8, 2)
    ms = [inductor.measure_inductor(h, s, cache, h.time_torch, verify=False) for _ in range(3)]
    assert compiles == ["6x8@n2"] and list(cache) == [s]               # compiled once, reused by every round
    for m in ms:
        assert m.ok and m.kind == "inductor" and m.name == "inductor (max-autotune-no-cudagraphs)", m.error
        assert m.us_median == 2.0 and m.launches == 4 and m.method == "graph" and m.compile_s == cache[s].compile_s
        assert m.bound == pytest.approx(4 * 2 ** -11 * math.sqrt(1 + 8 / 3072))   # the FP16-output bound
    ref = torch.nn.functional.linear(torch.from_dlpack(h.b.x[1]), torch.from_dlpack(h.b.W[1]))
    assert torch.allclose(h.calls[1], ref)                            # the i-th call uses copy i % copies


def test_measure_inductor_failures_are_measurements(monkeypatch):
    from gemvtune.runners.cuda import inductor

    s = Shape(6, 8, 2)
    m = inductor.measure_inductor(_Harness(fail_buffers=True), s, {}, _Harness().time_torch)
    assert m.status == Status.LAUNCH_ERROR and m.error == "RuntimeError: out of memory"
    calls = []
    monkeypatch.setattr(inductor, "compile_linear", lambda *a, **k: calls.append(1) or inductor.InductorCompile(
        None, 12.5, error="compile failed: BackendCompilerFailed: no triton"))
    cache = {}
    for _ in range(2):
        m = inductor.measure_inductor(_Harness(), s, cache, _Harness().time_torch)
        assert m.status == Status.LAUNCH_ERROR and "no triton" in m.error and m.compile_s == 12.5
    assert calls == [1]                                                # a failed compile is not retried each round
    monkeypatch.setitem(__import__("sys").modules, "torch", None)      # torch not importable
    m = inductor.measure_inductor(_Harness(), Shape(6, 8, 3), {}, _Harness().time_torch)
    assert m.status == Status.LAUNCH_ERROR and m.error.startswith("torch cannot be imported")


# ---- the CLI ----------------------------------------------------------------------------------------------

def test_bench_no_inductor_reaches_both_benchmarks(monkeypatch):
    from click.testing import CliRunner

    import gemvtune.bench.kernels as cb
    import gemvtune.cli.bench_cmd as bc
    import gemvtune.cli.main as cm

    got = []
    monkeypatch.setattr(bc, "_gpu_check", lambda: None)
    monkeypatch.setattr(cb, "run_tuned_bench", lambda shapes, table, out, **kw: got.append(("tuned", kw["inductor"])))
    monkeypatch.setattr(cb, "run_bench", lambda shapes, pick, out, **kw: got.append(("configs", kw["inductor"])))
    table = str(ROOT / "results" / "nvidia-h200" / "table.json")
    for args in ([], ["--no-inductor"]):
        r = CliRunner().invoke(cm.cli, ["bench", "kernels", "--shape", "4096x4096", "--table", table, *args])
        assert r.exit_code == 0, r.output
        r = CliRunner().invoke(cm.cli, ["bench", "kernels", "--shape", "4096x4096", "--configs", "llama", *args])
        assert r.exit_code == 0, r.output
    assert got == [("tuned", True), ("configs", True), ("tuned", False), ("configs", False)]
    r = CliRunner().invoke(cm.cli, ["bench", "kernels", "--help"])
    assert "--no-inductor" in r.output and "--hf-config" not in r.output and "--layers" not in r.output


def test_bench_hf_refuses_no_inductor_in_one_line(tmp_path):
    from conftest import run_cli

    r = run_cli("bench", "hf", str(tmp_path), "--no-inductor")
    assert r.returncode == 2 and "No such option '--no-inductor'" in r.stderr and "Traceback" not in r.stderr
    r = run_cli("bench", "--hf-config", str(tmp_path), "--no-inductor")     # the old spelling, as it refused
    assert r.returncode == 2 and "drop --no-inductor" in r.stderr.splitlines()[-1] and "Traceback" not in r.stderr


def test_a_contender_wrong_in_its_first_round_is_verified_again_every_round():
    from gemvtune.bench.kernels import _check

    s, first = Shape(64, 64), {}
    assert _check(first, "seed")                                   # its first round
    first["seed"], first["tuned"] = _m(s, "seed", 1.0), _m(s, "tuned", 1.0, ok=False)
    assert not _check(first, "seed") and _check(first, "tuned") and _check(first, "inductor")


def test_a_second_inductor_compile_is_its_own_with_the_caches_off(monkeypatch):
    """Inductor's pick moves between compiles: ``compile=1`` compiles the shape again (its own code object, tagged
    ``_1``, Inductor's caches off for it), kept apart from the first in the cache and reused by later rounds."""
    from gemvtune.runners.cuda import inductor

    compiles, real = [], inductor.compile_linear

    def fake_compile(torch_, tag, args, **kw):
        compiles.append((tag, kw.get("fresh", False)))
        return real(torch_, tag, args, backend="eager")

    monkeypatch.setattr(inductor, "compile_linear", fake_compile)
    h, cache, s = _Harness(), {}, Shape(6, 8, 2)
    for _ in range(2):
        for i in (0, 1):
            m = inductor.measure_inductor(h, s, cache, h.time_torch, verify=False, compile=i)
            assert m.ok and m.kind == "inductor", m.error
    assert compiles == [("6x8@n2", False), ("6x8@n2_1", True)] and set(cache) == {s, (s, 1)}
    assert m.name == "inductor (max-autotune-no-cudagraphs) #2"
    import torch

    with inductor._no_caches(torch, True):                          # the switch this torch has, on for the block
        assert torch._inductor.config.force_disable_caches is True
    assert torch._inductor.config.force_disable_caches is False
