"""FP8 weights in PyTorch on the GPU (marked gpu; skipped with the reason where no CUDA device answers): a 2-layer
transformers Llama quantised with ``quantize_fp8`` runs every linear through the FP8 kernels and matches its
dequantised 16-bit twin at every decode step (eager, CUDA graph, torch.compile); ``Table.gemv`` with scales agrees
with the float64 product and refuses bad weights with one line, never a wrong answer.

The table is an empty one of this GPU under the policy ``tuned``: every FP8 shape runs the FP8 family's lookup
(its fallback configs), so the kernels, not dequantize + F.linear, are what is checked."""

from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
tf = pytest.importorskip("transformers")

import gemvtune  # noqa: E402
from gemvtune.device.plan import LaunchPlan  # noqa: E402
from gemvtune.runtime import fp8torch  # noqa: E402
from gemvtune.runtime.table import Table  # noqa: E402
from gemvtune.runtime.torch_fp8 import GemvFp8Linear, quantize_fp8  # noqa: E402
from gemvtune.runtime.torch_linear import explain, restore_linears  # noqa: E402

pytestmark = pytest.mark.gpu
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def _table():
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    return Table({"schema": 1, "gpu": {"name": torch.cuda.get_device_name()}, "entries": {}}, policy="tuned")


def _spy(monkeypatch):
    """Shapes launched with scales (the FP8 kernels), in order."""
    calls = []
    real = LaunchPlan.launch

    def launch(self, *args, **kw):
        if kw.get("scales") or (len(args) > 5 and args[5]):
            calls.append((self.spec.shape.M, self.spec.shape.d, self.spec.shape.n))
        return real(self, *args, **kw)

    monkeypatch.setattr(LaunchPlan, "launch", launch)
    return calls


def _llama(dtype):
    torch.manual_seed(0)
    cfg = tf.LlamaConfig(hidden_size=512, intermediate_size=1024, num_hidden_layers=2, num_attention_heads=8,
                         num_key_value_heads=2, vocab_size=1024)
    return tf.LlamaForCausalLM(cfg).to("cuda", DTYPES[dtype]).eval()


@pytest.mark.parametrize("layout", ["row", "block128"])
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_a_quantised_llama_matches_its_dequantised_twin_per_step(dtype, layout, monkeypatch):
    table = _table()
    model = _llama(dtype)
    report = quantize_fp8(model, table, layout=layout)
    assert len(report) == 15 and report.saved > 0
    rows = explain(model)
    assert all(r["route"] == "tuned" for r in rows), [r for r in rows if r["route"] != "tuned"][:3]
    twin = copy.deepcopy(model)
    restore_linears(twin)             # nn.Linear of the dequantised weights (code x scale, rounded once)
    calls = _spy(monkeypatch)
    ids = torch.randint(0, 1024, (1, 6), device="cuda")
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=8, do_sample=False, return_dict_in_generate=True,
                             output_logits=True)
        assert len(calls) >= 15 * 8 and (1024, 512, 1) in calls     # every decode step's linears, the LM head
        seq = out.sequences
        ref = twin(seq[:, :-1]).logits[0, ids.shape[1] - 1:].float()   # the twin on the same tokens, every step
    got = torch.stack([lg[0].float() for lg in out.logits])
    scale = ref.abs().max()
    # the twin's weights are the kernel's exact ones rounded once to the dtype (relative u), and its own cuBLAS
    # sums differ in order: logits agree to a few u of the largest (BF16: u = 2^-8)
    tol = (2.0**-11 if dtype == "fp16" else 2.0**-8) * 16 * scale
    assert (got - ref).abs().max() <= tol, ((got - ref).abs().max().item(), tol.item())
    agree = (got.argmax(-1) == ref.argmax(-1)).float().mean().item()
    assert agree >= 0.75, agree


def test_cuda_graph_and_compile_run_the_fp8_kernels(monkeypatch):
    table = _table()
    lin = torch.nn.Linear(4096, 1024, bias=True).to("cuda", torch.float16)
    layer = GemvFp8Linear.from_linear(lin, table)
    x = torch.randn(4, 4096, device="cuda", dtype=torch.float16)
    w = fp8torch.dequantize(layer.weight, layer.scales, "row", torch.float64)
    ref = x.double() @ w.T + layer.bias_tensor.double()
    calls = _spy(monkeypatch)
    with torch.no_grad():
        y = layer(x)
        assert calls == [(1024, 4096, 4)]
        assert (y.double() - ref).abs().max() <= 2.0**-10 * ref.abs().max() + 1e-3
        static = x.clone()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            layer(static)
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = layer(static)
        x2 = torch.randn_like(x)
        static.copy_(x2)
        g.replay()
        torch.cuda.synchronize()
        assert torch.allclose(out, layer(x2))
        compiled = torch.compile(layer, fullgraph=True)
        calls.clear()
        yc = compiled(x2)
        assert calls and torch.allclose(yc, layer(x2))


def test_table_gemv_with_scales_agrees_and_refuses_bad_weights():
    table = _table()
    M, d = 4096, 4096
    w = torch.randn(M, d, device="cuda") * torch.exp2(torch.randint(-3, 3, (M, 1), device="cuda").float())
    for layout in ("row", "block128"):
        codes, scales = fp8torch.quantize(w, layout)
        ref_w = fp8torch.dequantize(codes, scales, layout, torch.float64)
        for n in (1, 4, 16):
            x = torch.randn(n, d, device="cuda", dtype=torch.bfloat16)
            y = table.gemv(codes, x, scales=scales)
            ref = x.double() @ ref_w.T
            assert y.dtype == torch.float32 and y.shape == ((M,) if n == 1 else (n, M))
            assert ((y.double().view(n, M) - ref).norm() / ref.norm()) < 1e-2
        bad = scales.clone()
        bad.view(-1)[0] = 0.0
        with pytest.raises(gemvtune.UsageError, match="zero"):
            table.gemv(codes, x, scales=bad)
        with pytest.raises(gemvtune.UsageError, match="fit neither layout"):
            table.gemv(codes, x, scales=scales.view(-1)[:7])
    buf = torch.empty(M * d + 16, dtype=torch.uint8, device="cuda")
    off = buf[1:1 + M * d].view(M, d)
    off.copy_(codes)
    with pytest.raises(gemvtune.UsageError, match="aligned"):
        table.gemv(off, x, scales=scales)
