"""The tuned benchmark's summary, markdown and chart, and its CLI errors, without a GPU."""

import math

import pandas as pd
import pytest
from conftest import ROOT, run_cli

from gemvtune import Shape
from gemvtune.bench.report import bench_markdown, geomean, plot_bench, summary_row
from gemvtune.runners.base import Measurement, Status


def _m(kind, us, ok=True, name="k"):
    return Measurement(name, kind, 4096, 4096, 1, Status.OK if ok else Status.WRONG, us_median=us, us_min=us, us_max=us)


def test_summary_row_uses_round_medians_and_same_run_ratios():
    s = Shape(4096, 4096)
    ms = [_m("tuned", 10.0, name="b128.half8"), _m("tuned", 11.0), _m("tuned", 30.0, ok=False), _m("tuned", 9.0),
          _m("llama.cpp", 12.0), _m("llama.cpp", 12.0), _m("cublas", 20.0), _m("cublas-torch", 14.0)]
    r = summary_row(s, ms, 4000.0, "tuned")
    assert r["tuned_us"] == 10.0 and r["rounds"] == 3                 # the wrong round is not counted
    assert r["tuned_spread"] == pytest.approx(0.2)
    assert r["cublas_us"] == 14.0 and r["cublas_method"] == "cublas-torch"   # the graph-timed cuBLAS
    assert r["x_cublas"] == pytest.approx(1.4) and r["x_llama"] == pytest.approx(1.2)
    assert r["pct_ceiling"] == pytest.approx(100 * s.bytes_moved / 4000e3 / 10.0)
    assert r["tuned"] == "b128.half8"


def test_markdown_and_chart(tmp_path):
    rows = [summary_row(Shape(M, 4096), [_m("tuned", us), _m("llama.cpp", 1.2 * us), _m("cublas", 1.3 * us)], 4000.0, "tuned")
            for M, us in ((4096, 10.0), (14336, 30.0))]
    for r in rows:
        r.update(bare_launch_us=3.0, table_gemv_us=3.6, dispatch_ratio=1.2)
    df = pd.DataFrame(rows)
    md = bench_markdown(df, {"read_gbps": 4000.0, "launch_floor_us": 0.5})
    assert "×cuBLAS 1.300" in md and "×llama.cpp config 1.200" in md and "1.20× the CPU time" in md
    assert "×Inductor - (lowest -)" in md and "×best(cuBLAS, Inductor) - (lowest -)" in md   # not measured: empty
    assert md.count("\n| 4096x4096 |") + md.count("| 14336x4096 |") == 2
    p = plot_bench(df, tmp_path / "b.png", "test")
    assert p.stat().st_size > 5000
    assert math.isnan(geomean([])) and geomean([2.0, 8.0]) == pytest.approx(4.0)


def test_bench_cli_bad_table_is_one_line(tmp_path):
    r = run_cli("bench", "kernels", "--shape", "4096x4096", "--table", str(tmp_path / "none.json"))
    assert r.returncode == 2 and "does not exist" in r.stderr and "Traceback" not in r.stderr
    (tmp_path / "bad.json").write_text("{not json")
    r = run_cli("bench", "kernels", "--suite", "decode", "--table", str(tmp_path / "bad.json"))
    assert r.returncode == 2 and "not valid JSON" in r.stderr


def test_bench_cli_no_gpu_exit_3():
    import gemvtune.runners.cuda as rc  # noqa: F401  (cupy importable; the device is what is missing)
    from gemvtune.device._cupy import cuda_available

    if not cuda_available():
        pytest.skip("a CUDA device answers here")
    r = run_cli("bench", "kernels", "--shape", "4096x4096", "--table", str(ROOT / "results" / "nvidia-h200" / "table.json"))
    assert r.returncode == 3 and "Traceback" not in r.stderr


def test_tuned_bench_glue_with_a_fake_runner(tmp_path, monkeypatch):
    """run_tuned_bench end to end on the CPU: the committed table's lookup, interleaved rounds, summary
    files and chart (the runner and the dispatch timing faked; compiles are real)."""
    from fakes import FakeRunner

    import gemvtune.bench.percall as rd
    import gemvtune.runners.cuda as rc
    from gemvtune.bench.kernels import run_tuned_bench

    class Fake(FakeRunner):
        arch = "sm_90"

        def __init__(self):
            super().__init__()
            self.device_info = lambda: {"name": "NVIDIA H200", "driver": "0", "compute_capability": "9.0"}

        def ceiling(self):
            return {"read_gbps": 4500.0, "read_gbps_min": 4400.0, "read_gbps_max": 4600.0, "launch_floor_us": 0.5}

        def measure_seed(self, shape, verify=True):
            return Measurement("seed", "seed", shape.M, shape.d, shape.n, Status.OK, us_median=12.5)

        def measure_inductor(self, shape, verify=True):
            return Measurement("ind", "inductor", shape.M, shape.d, shape.n, Status.OK, us_median=14.0, compile_s=30.0)

    monkeypatch.setattr(rc, "CudaRunner", Fake)
    monkeypatch.setattr(rd, "dispatch_overhead", lambda table, shape: {"bare_launch_us": 3.0, "table_gemv_us": 3.3,
                                                                       "dispatch_ratio": 1.1})
    table = ROOT / "results" / "nvidia-h200" / "table.json"
    path = run_tuned_bench([Shape(4096, 4096), Shape(4096, 4096, 8), Shape(3000, 4096)], str(table), str(tmp_path),
                           echo=lambda s: None, rounds=2)
    df = pd.read_csv(path)
    assert set(df.kind) == {"tuned", "llama.cpp", "seed", "cublas", "inductor"} and (df.kind == "tuned").sum() == 6
    assert set(df[df.kind == "llama.cpp"].name) == {"llama.cpp config (d compiled in)"}
    assert (df.kind == "inductor").sum() == 6 and (df.kind == "seed").sum() == 6        # interleaved, every round
    summ = pd.read_csv(str(path).replace(".csv", "-summary.csv"))
    import importlib.util

    # 3000x4096 is in no entry: the cost model's pick where LightGBM can load the committed model, else the nearest shape
    untabled = "cost model's pick" if importlib.util.find_spec("lightgbm") else "nearest"
    assert list(summ.n) == [1, 8, 1] and list(summ.lookup)[0] == "tuned" and untabled in list(summ.lookup)[2]
    assert (summ.x_cublas > 0).all() and (summ.dispatch_ratio == 1.1).all()
    assert (summ.inductor_us == 14.0).all() and (summ.best_baseline_us == 14.0).all() and (summ.x_seed > 0).all()
    assert (summ.inductor_compile_s == 30.0).all()
    assert path.with_name(path.stem + ".png").stat().st_size > 5000
    md = path.with_name(path.stem + "-summary.md").read_text()
    assert "| 1 | 2 | " in md and "| 8 | 1 | " in md and "tuned time / its n = 1 time" in md   # two batches: growth column
    path = run_tuned_bench([Shape(4096, 4096)], str(table), str(tmp_path / "no-ind"), echo=lambda s: None, rounds=1,
                           inductor=False)
    assert "inductor" not in set(pd.read_csv(path).kind)
    summ = pd.read_csv(str(path).replace(".csv", "-summary.csv"))
    assert summ.x_inductor.isna().all() and summ.x_best.isna().all() and (summ.x_cublas > 0).all()
    assert list(summ.dtype) == ["fp16"] and path.name.startswith("bench-tuned-2")
    path = run_tuned_bench([Shape(4096, 4096, 1, "bf16")], str(table), str(tmp_path / "bf16"), echo=lambda s: None,
                           rounds=1, inductor=False)                 # a BF16 run: its own entry, files named so
    assert path.name.startswith("bench-tuned-bf16-")
    summ = pd.read_csv(str(path).replace(".csv", "-summary.csv"))
    assert list(summ.dtype) == ["bf16"] and list(summ.lookup) == ["tuned"] and "dispatch_ratio" not in summ
    assert "| 4096x4096 bf16 | 1 |" in path.with_name(path.stem + "-summary.md").read_text()


def test_percall_names_the_config_of_kernel_and_library_plans():
    """gemvtune percall reads the config a plan runs: a kernel plan's launch spec, or a library plan's own
    config (a cuBLASLt algorithm has no spec and no kernel to launch by hand: no RawKernel row)."""
    import types

    from gemvtune.bench.percall import _plan_config, _rawkernel

    cfg = types.SimpleNamespace(label="lt.a21")
    lib = types.SimpleNamespace(config=cfg)
    kern = types.SimpleNamespace(spec=types.SimpleNamespace(config=types.SimpleNamespace(label="b256")))
    assert _plan_config(lib) is cfg and _plan_config(kern).label == "b256"
    assert _rawkernel(None, lib, None, None, None) is None


def test_dtype_comparison_pairs_shapes_and_judges_the_ratio_of_ratios():
    from gemvtune.bench.report import dtype_comparison, dtype_markdown

    def summ(dtype, rows):
        return pd.DataFrame([{"M": M, "d": d, "n": n, "dtype": dtype, "tuned": "k", "tuned_us": t, "cublas_us": c,
                              "x_cublas": c / t} for M, d, n, t, c in rows])

    bf = summ("bf16", [(4096, 4096, 1, 10.0, 13.0), (4096, 4096, 8, 10.0, 12.0), (1024, 4096, 1, 3.0, 7.0)])
    fp = summ("fp16", [(4096, 4096, 1, 10.0, 13.1), (4096, 4096, 8, 10.0, 13.0), (512, 4096, 1, 2.0, 7.0)])
    m = dtype_comparison(bf, fp)
    assert list(zip(m.M, m.n)) == [(4096, 1), (4096, 8)]             # shapes in both only
    assert m.x_cublas_ratio.round(4).tolist() == [round(1.3 / 1.31, 4), round(1.2 / 1.3, 4)]
    assert m.within.tolist() == [True, False]                         # 0.8% in, 7.7% out
    md = dtype_markdown(m)
    assert "| bf16 ×cuBLAS |" in md and "1 of 2 within 2%" in md
