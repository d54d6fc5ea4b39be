"""Issue 21 on the GPU (marked gpu; skipped with the reason where no CUDA device answers): BF16 variants of every
template family verified against the float64 reference of the BF16 inputs at n = 1, 3, 8, 16 on odd shapes, with
BF16 and FP32 outputs and a BF16 bias; planted faults caught in BF16; the baselines in BF16 (cuBLAS through torch,
the llama.cpp config; CuPy's cuBLAS and the FP16 seed kernel refused with their reason); and the PyTorch paths: a
BF16 layer runs a BF16 entry's kernel and matches F.linear, a BF16 layer on an FP16-only table runs F.linear itself
(bit for bit), and the reverse."""

import functools
import random

import pytest
from conftest import committed_gpu_or_skip
from cover import sample, tiered, valid_of, verify_failures

from gemvtune import LLAMA_CPP, Shape
from gemvtune.build.render import render
from gemvtune.kernels.epilogue import Epilogue
from gemvtune.kernels.families import FAMILIES

pytestmark = pytest.mark.gpu

SHAPES = tiered([Shape(7, 72, 1, "bf16"), Shape(129, 4104, 3, "bf16"), Shape(4096, 4096, 8, "bf16"),
                 Shape(1000, 4104, 16, "bf16")], lambda s: s.n == 8)   # n = 8: the second tier


@functools.lru_cache(maxsize=8)
def _sample(shape: Shape, k: int = 4, seed: int = 5) -> tuple:
    """Every template family: each valid value of each parameter, plus k seeded random configs (drawn once per
    session for each argument set: the epilogue tests ask for the same one twice)."""
    rng = random.Random(seed)
    out: list = []
    for fam in FAMILIES.values():
        if fam.library:
            continue
        valid = valid_of(fam.name, shape)
        if valid:
            out += sample(valid, fam.seed, fam.domains, k, rng)
    return tuple(dict.fromkeys(out))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_bf16_variants_of_every_family_verify(runner, shape):
    cfgs = _sample(shape)
    assert {c.family for c in cfgs} >= {"gemv", "splitk"}
    failed = verify_failures(runner, cfgs, shape)
    assert not failed, failed[:5]


@pytest.mark.parametrize("out", ["bf16", "fp32"])
def test_bf16_epilogues_verify(runner, out):
    shape = Shape(129, 4104, 3, "bf16")
    failed = []
    for bias in (False, True):
        epi = Epilogue(out, bias)
        failed += verify_failures(runner, [LLAMA_CPP] + [c for c in _sample(shape, k=1) if not epi.invalid_reasons(c)][:6],
                                  shape, epi)
    assert not failed, failed[:5]


@pytest.mark.parametrize("kind", ["drop_tail", "fp16_reads"])
def test_bf16_planted_faults_caught(runner, kind):
    shape = Shape(4096, 4104, 1, "bf16")
    src = render(LLAMA_CPP, shape)
    if kind == "drop_tail":
        bad = src.replace("const int v_end = min(NVEC, v_begin + VPS);", "const int v_end = min(NVEC, v_begin + VPS) - 1;")
    else:   # the BF16 bits read as FP16: every product wrong
        bad = render(LLAMA_CPP, Shape(4096, 4104))
    assert bad != src
    m = runner.measure(LLAMA_CPP, shape, timed=False, source=bad, name=f"planted-bf16-{kind}")
    assert m.status == "wrong", (m.status, m.relerr, m.error)


def test_bf16_baselines(runner):
    shape = Shape(4096, 4096, 1, "bf16")
    cup = runner.measure_cublas(shape)
    assert cup.status == "invalid" and "bf16" in cup.error
    torch_cublas = runner.measure_torch_linear(shape)
    assert torch_cublas is not None and torch_cublas.ok and torch_cublas.dtype == "bf16"
    seed = runner.measure_seed(shape)
    assert seed.status == "invalid" and "FP16 only" in seed.error
    m = runner.measure(LLAMA_CPP, shape)
    assert m.ok and m.us_median > 0 and m.dtype == "bf16" and m.row()["dtype"] == "bf16"


def _bf16_table(fp16_table):
    """The committed table with its 4096x4096 n = 1 entry also as a BF16 entry (same times; its configs' FP16
    accumulators made FP32, since a BF16 entry cannot hold a 16-bit accumulator: the route refuses it)."""
    import copy

    from gemvtune.runtime.table import Table, entry_key

    data = copy.deepcopy(fp16_table.data)
    e = copy.deepcopy(data["entries"][entry_key(Shape(4096, 4096))])
    e["dtype"] = "bf16"
    for c in [e["winner"], *e.get("candidates", [])]:
        if c.get("family") == "gemv" and c["config"].get("acc") == "fp16":
            c["config"]["acc"] = "fp32"
            c["label"] = c["name"] = c["label"].replace(".fp16.", ".fp32.")
    data["entries"][entry_key(Shape(4096, 4096, 1, "bf16"))] = e
    return Table(data, fp16_table.path)


def _fp16_only(table):
    """A copy of ``table`` without its BF16 entries."""
    import copy

    from gemvtune.runtime.table import Table

    data = copy.deepcopy(table.data)
    data["entries"] = {k: e for k, e in data["entries"].items() if e.get("dtype", "fp16") == "fp16"}
    return Table(data, table.path)


def test_torch_bf16_layers_run_bf16_entries_only(monkeypatch):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    from conftest import ROOT

    from gemvtune.device.plan import LaunchPlan
    from gemvtune.runtime.table import load_table
    from gemvtune.runtime.torch_linear import GemvLinear, explain

    calls = []
    real = LaunchPlan.launch

    def spy(self, *args, **kw):
        calls.append((self.spec.shape.M, self.spec.shape.d, self.spec.shape.n, self.spec.shape.dtype))
        return real(self, *args, **kw)

    monkeypatch.setattr(LaunchPlan, "launch", spy)

    committed_gpu_or_skip()   # (the tables below are the committed one's: the H200's)
    committed = load_table(ROOT / "results" / "nvidia-h200" / "table.json", costmodel=None)
    fp16 = _fp16_only(committed)    # (the committed table has BF16 entries of its own since 2026-12-02)
    both = _bf16_table(fp16)
    torch.manual_seed(0)
    lin = torch.nn.Linear(4096, 4096, bias=True).to("cuda", torch.bfloat16)
    x = torch.randn(1, 4096, device="cuda", dtype=torch.bfloat16)
    ref = torch.nn.functional.linear(x, lin.weight, lin.bias)
    with torch.no_grad():
        g = GemvLinear(lin, both)
        assert explain(torch.nn.Sequential(g))[0]["route"] == "tuned"
        y = g(x)
        assert y.dtype == torch.bfloat16 and calls == [(4096, 4096, 1, "bf16")]   # our BF16 kernel ran
        err = (y.float() - ref.float()).norm() / ref.float().norm()
        assert err < 2e-2, float(err)
        plain = GemvLinear(lin, fp16)                                            # FP16 entries only: F.linear
        assert torch.equal(plain(x), ref) and "another dtype" in explain(torch.nn.Sequential(plain))[0]["why"]
        assert len(calls) == 1
        lin16 = torch.nn.Linear(4096, 4096, bias=False).to("cuda", torch.float16)   # the reverse: an FP16 layer
        only_bf16 = _bf16_table(fp16)
        del only_bf16.data["entries"]["4096x4096x1"]
        g16 = GemvLinear(lin16, type(only_bf16)(only_bf16.data, only_bf16.path))
        x16 = x.to(torch.float16)
        assert torch.equal(g16(x16), torch.nn.functional.linear(x16, lin16.weight)) and len(calls) == 1
        with pytest.raises(RuntimeError):                                        # mixed dtypes: torch's own error
            g(x16)
        compiled = torch.compile(g, fullgraph=True)
        yc = compiled(x)
        assert ((yc.float() - ref.float()).norm() / ref.float().norm()) < 2e-2
