"""The cuBLASLt family on the GPU (marked gpu; needs nvmath-python, gemvtune[blas]): the heuristic gives
algorithms for 4096x4096 at n = 1, 3, 8, 16; every candidate is verified against float64 like a kernel (or
recorded as refused, with the library's reason) on an odd shape too; a timed one is timed by the graph
method; Table.gemv and the PyTorch op run an algorithm entry on torch and CuPy arrays and match F.linear; a
short `gemvtune search --family cublaslt` writes a table entry."""

import json

import pytest
from conftest import run_cli

from gemvtune.kernels.cublaslt import CublasLtConfig
from gemvtune.kernels.families import config_to_dict
from gemvtune.kernels.shapes import Shape
from gemvtune.runners.base import Status

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def runner():
    pytest.importorskip("nvmath.bindings.cublasLt", reason="the cublaslt family needs nvmath-python (gemvtune[blas])")
    from gemvtune.runners.cuda import CudaRunner

    r = CudaRunner(replays=7)
    why = r.lt_problem()
    if why:
        pytest.skip(why)
    return r


@pytest.mark.parametrize("n", [1, 3, 8, 16])
def test_heuristic_gives_candidates(runner, n):
    found = runner.lt_heuristics(Shape(4096, 4096, n))
    assert found and all(isinstance(c, CublasLtConfig) and ws >= 0 for c, ws in found)
    assert len({c.label for c, _ in found}) >= 1
    print(n, [(c.label, ws) for c, ws in found])


@pytest.mark.parametrize("shape", [Shape(4096, 4096, 1), Shape(4096, 4096, 16), Shape(37, 4104, 3), Shape(64, 4096, 8)])
def test_every_candidate_is_verified_or_refused_with_its_reason(runner, shape):
    from gemvtune.device.ltplan import LtRefused

    try:
        found = runner.lt_heuristics(shape)
    except LtRefused as e:   # no algorithm for this shape at 16-byte alignment: the library's answer, recorded
        pytest.skip(f"{shape}: {e}")
    ok = 0
    for cfg, _ in found:
        m = runner.measure(cfg, shape, timed=False)
        assert m.status in (Status.OK, Status.LAUNCH_ERROR), (cfg.label, m.status, m.error)
        if m.status == Status.LAUNCH_ERROR:
            assert "cuBLASLt" in m.error, m.error
            continue
        assert m.relerr <= m.bound, (cfg.label, m.relerr, m.bound)
        ok += 1
    assert ok, f"no candidate of {shape} verified"
    for out, bias in (("fp16", False), ("fp16", True)):   # nn.Linear's epilogues through the library
        from gemvtune.kernels.epilogue import Epilogue

        m = runner.measure(found[0][0], shape, timed=False, epilogue=Epilogue(out, bias))
        assert m.status in (Status.OK, Status.LAUNCH_ERROR) and (m.ok or "cuBLASLt" in m.error), (m.status, m.error)
    runner.release()


def test_a_timed_algorithm_uses_the_graph_method(runner):
    shape = Shape(4096, 4096, 8)
    cfg = runner.lt_heuristics(shape)[0][0]
    m = runner.measure(cfg, shape)
    assert m.ok and m.us_median > 0 and m.method.startswith("graph") and m.launches > 1, (m.status, m.error)
    print(cfg.label, m.us_median, m.pct_ceiling)
    runner.release()


def _table(shape, cfg):
    from gemvtune.runtime.table import Table

    entry = {"M": shape.M, "d": shape.d, "n": shape.n,
             "winner": {"family": cfg.family, "config": cfg.to_dict(), "label": cfg.label, "us": 1.0, "status": "ok"},
             "baselines": {"cublas": {"us": 1000.0, "status": "ok"}, "cublas-torch": {"us": 1000.0, "status": "ok"}}}
    return Table({"schema": 1, "gpu": {}, "entries": {f"{shape.M}x{shape.d}x{shape.n}": entry}})


@pytest.mark.parametrize("n", [1, 3])
def test_table_gemv_runs_an_algorithm_on_torch_and_cupy(runner, n):
    torch = pytest.importorskip("torch")
    import cupy as cp
    import torch.nn.functional as F

    shape = Shape(4096, 4096, n)
    cfg = runner.lt_heuristics(shape)[0][0]
    t = _table(shape, cfg)
    assert t.route(shape.M, shape.d, n, "torch", "fp16").config == cfg
    W = (torch.rand(shape.M, shape.d, device="cuda") * 2 - 1).half()
    x = (torch.rand(n, shape.d, device="cuda") * 2 - 1).half()
    b = (torch.rand(shape.M, device="cuda") * 2 - 1).half()
    xv = x.reshape(-1) if n == 1 else x
    ref = F.linear(x.double(), W.double())
    scale = ref.norm()
    y = t.gemv(W, xv)                                       # FP32 out
    assert y.dtype == torch.float32 and float((y.double().reshape(ref.shape) - ref).norm() / scale) < 1e-4
    y16 = t.gemv(W, xv, bias=b, out_dtype="fp16")           # FP16 out with the library's bias epilogue
    ref_b = ref + b.double()
    assert float((y16.double().reshape(ref.shape) - ref_b).norm() / ref_b.norm()) < 2e-3
    from gemvtune.runtime import torch_op

    tid = torch_op.register_table(t)
    lin = torch.ops.gemvtune.linear(x, W, b, tid)           # the op nn.Linear swaps to
    assert torch.allclose(lin.float(), F.linear(x, W, b).float(), rtol=2e-2, atol=2e-2)
    Wc, xc = cp.asarray(W), cp.asarray(xv)
    yc = t.gemv(Wc, xc)                                     # CuPy: the dispatcher runs the same algorithm
    assert isinstance(yc, cp.ndarray) and float(cp.linalg.norm(yc.reshape(ref.shape) - cp.asarray(ref)) / float(scale)) < 1e-4
    g = torch.cuda.CUDAGraph()                              # capturable once planned
    out = torch.empty(n, shape.M, device="cuda")
    with torch.cuda.graph(g):
        t.gemv(W, xv, out=out)
    g.replay()
    torch.cuda.synchronize()
    assert float((out.double().reshape(ref.shape) - ref).norm() / scale) < 1e-4


def test_short_search_writes_a_table_entry(tmp_path):
    pytest.importorskip("nvmath.bindings.cublasLt", reason="the cublaslt family needs nvmath-python (gemvtune[blas])")
    r = run_cli("search", "--shape", "4096x4096", "--batch", "8", "--family", "cublaslt", "--trials", "6",
                "--rounds", "1", "--top-k", "2", "--no-reconfirm", "--results", str(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    data = json.loads((tmp_path / "table.json").read_text())
    e = data["entries"]["4096x4096x8"]
    assert e["cublaslt"]["family"] == "cublaslt" and e["cublaslt"]["us"] > 0
    assert e["winner"]["family"] in ("cublaslt", "gemv")   # (the llama.cpp config is always re-measured beside)
    assert e["search"]["families"] == ["cublaslt"]
    if e["winner"]["family"] == "cublaslt":
        from gemvtune.runtime.export import build_header
        from gemvtune.runtime.table import load_table

        assert "use your BLAS" in build_header(load_table(tmp_path / "table.json"))
    print(e["winner"]["label"], e["winner"]["us"], config_to_dict(CublasLtConfig(**e["cublaslt"]["config"])))
