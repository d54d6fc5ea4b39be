"""Re-confirmation and the compiled caller's route on the GPU (marked gpu; skipped with the reason where no CUDA
device answers): ``gemvtune check --reconfirm`` on a two-entry copy of the committed table (small shapes, two
rounds) writes each entry's re-confirmation from a process other than this one, and the route reads it; under
torch.compile a layer whose table records Inductor faster traces F.linear, and the op where it does not. With
--inductor (slow tier: two Inductor compiles of a shape) the Inductor record lands beside cuBLAS."""

import json
import os

import pytest
from conftest import ROOT, run_cli

from gemvtune import Shape
from gemvtune.runtime.route import judge, tuned_config
from gemvtune.runtime.table import load_table

pytestmark = pytest.mark.gpu

TABLE = ROOT / "results" / "nvidia-h200" / "table.json"
SMALL = ("1024x4096x1", "512x3584x1")   # 8 MB and 3.7 MB of weights: a few seconds each


def _copy(tmp_path, keys=SMALL):
    data = json.loads(TABLE.read_text())
    data["entries"] = {k: data["entries"][k] for k in keys}
    p = tmp_path / "table.json"
    p.write_text(json.dumps(data))
    return p


def _gpu_name():
    import cupy as cp

    props = cp.cuda.runtime.getDeviceProperties(0)
    return props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])


def test_check_reconfirm_writes_the_field_from_another_process_and_the_route_reads_it(tmp_path):
    if _gpu_name() != "NVIDIA H200":
        pytest.skip(f"the committed table is the H200's; this is {_gpu_name()}")
    p = _copy(tmp_path)
    r = run_cli("check", "--table", str(p), "--reconfirm", "--shape", "1024x4096", "--shape", "512x3584",
                "--rounds", "2", "--out", str(tmp_path / "c"))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "2 entries re-confirmed" in r.stdout and list((tmp_path / "c").glob("reconfirm-*.csv"))
    t = load_table(p, costmodel=None)
    for s in (Shape(1024, 4096), Shape(512, 3584)):
        e = t.entry(s)
        rc = e.reconfirmed
        assert rc is not None and rc.rounds == 2 and rc.pid not in (None, os.getpid()), s
        assert rc.gpu["name"] == "NVIDIA H200" and rc.gpu.get("pci_bus_id"), rc.gpu
        k = rc.kernels[0]
        assert k.ok_us is not None and k.config_object() == tuned_config(e) and k.rounds == 2, k
        assert rc.baselines["cublas-torch"].ok_us is not None and "inductor" not in rc.baselines
        v = judge(e, "torch", s, "fp16")
        assert v.again is not None and v.again.tuned_us == k.ok_us, v
        route = t.route(s.M, s.d, s.n, "torch", "fp16", "fp16")
        assert route.again_tuned_us == k.ok_us and "re-confirmed in a fresh process" in route.why, route.why


@pytest.mark.slow   # two Inductor max-autotune compiles: tens of seconds
def test_check_reconfirm_inductor_records_inductor_beside_cublas(tmp_path):
    if _gpu_name() != "NVIDIA H200":
        pytest.skip(f"the committed table is the H200's; this is {_gpu_name()}")
    pytest.importorskip("triton", reason="Inductor's GPU kernels need Triton")
    p = _copy(tmp_path, SMALL[:1])
    r = run_cli("check", "--table", str(p), "--reconfirm", "--inductor", "--shape", "1024x4096", "--rounds", "2",
                "--out", str(tmp_path / "c"))
    assert r.returncode == 0, r.stderr[-3000:]
    e = load_table(p, costmodel=None).entry(Shape(1024, 4096))
    ind = e.reconfirmed.baselines["inductor"]
    assert ind.ok_us is not None and "best of 2 compiles" in ind.name, ind
    comp = load_table(p, costmodel=None).route(1024, 4096, 1, "torch-compile", "fp16", "fp16")
    assert comp.inductor_us == ind.ok_us and "against Inductor" in comp.why, comp.why


def test_torch_compile_traces_f_linear_where_the_table_records_inductor_faster():
    import torch

    from gemvtune.kernels.gemv import GemvConfig
    from gemvtune.runtime.table import Table
    from gemvtune.runtime.torch_linear import GemvLinear

    cfg = GemvConfig(block=128, vec="half8", tpr=32)

    def table(inductor):
        e = {"M": 256, "d": 4096, "n": 1, "winner": {"family": "gemv", "config": cfg.to_dict(), "us": 3.0},
             "baselines": {"cublas-torch": {"us": 6.0}, **({"inductor": {"us": inductor}} if inductor else {})}}
        return Table({"schema": 1, "gpu": {"name": _gpu_name()}, "entries": {"256x4096x1": e}})

    torch.manual_seed(0)
    x = torch.randn(1, 4096, device="cuda", dtype=torch.float16)
    for inductor, ours in ((2.0, 0), (4.0, 1), (None, 1)):
        lin = torch.nn.Linear(4096, 256, bias=False).cuda().half()
        g = GemvLinear(lin, table(inductor))
        graphs = []

        def backend(gm, example_inputs, graphs=graphs):
            graphs.append(gm)
            return gm.forward

        torch._dynamo.reset()
        with torch.no_grad():
            y = torch.compile(g, backend=backend, fullgraph=True)(x)
            ref = torch.nn.functional.linear(x, lin.weight)
        ops = [n.target for gm in graphs for n in gm.graph.nodes if n.op == "call_function"]
        found = [t for t in ops if t in (torch.ops.gemvtune.linear, torch.ops.gemvtune.linear.default)]
        assert len(found) == ours, (inductor, ops)
        assert float((y.double() - ref.double()).norm() / ref.double().norm()) < 1e-2
    torch._dynamo.reset()
