"""FP8 weights in a PyTorch model, on the CPU (the routes' decisions and every fallback; the kernels themselves are
tests/test_fp8_gpu.py's): ``quantize_fp8`` turns a model's linears into ``GemvFp8Linear`` layers whose outputs are
the dequantised weights' product, reports the memory saved, and ``restore_linears`` undoes it (the very modules back
with ``keep_fp16``, else linears of the dequantised weights); FP8 linears transformers built are wrapped by
``swap_linears`` holding their own tensors (``state_dict`` unchanged), and one whose scales the kernels cannot take
keeps its own forward, with ``explain`` saying why; the route of an FP8 layer reads the table's FP8 entries only."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
tf = pytest.importorskip("transformers")

import gemvtune  # noqa: E402
from gemvtune.runtime import fp8torch  # noqa: E402
from gemvtune.runtime.fp8linear import dequantized, fallback_linear  # noqa: E402
from gemvtune.runtime.table import Table  # noqa: E402
from gemvtune.runtime.torch_fp8 import GemvFp8Linear, quantize_fp8  # noqa: E402
from gemvtune.runtime.torch_linear import GemvLinear, explain, format_explain, restore_linears, swap_linears  # noqa: E402

FP8 = {"block": 64, "tpr": 8, "vec": 16, "unroll": 1, "hint": "default"}   # valid for d = 256


def tiny_llama(dtype=torch.float32, seed=0):
    torch.manual_seed(seed)
    cfg = tf.LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=512)
    return tf.LlamaForCausalLM(cfg).to(dtype).eval()


def fp8_table(entries=()):
    """A table with FP8 entries (key: the entry's shape) whose tuned times beat dequantize + F.linear."""
    es = {}
    for M, d, n, dtype, weights in entries:
        key = f"{M}x{d}x{n}" + ("" if dtype == "fp16" else f".{dtype}") + f".{weights}"
        es[key] = {"M": M, "d": d, "n": n, "dtype": dtype, "weights": weights,
                   "winner": {"family": "fp8gemv", "config": FP8, "us": 3.0},
                   "baselines": {"dequant-torch": {"us": 12.0, "status": "ok"}}}
    return Table({"schema": 1, "gpu": {"name": "X"}, "entries": es})


def test_quantize_fp8_replaces_every_linear_and_computes_the_dequantised_product():
    model = tiny_llama()
    ids = torch.tensor([[1, 5, 9, 2]])
    report = quantize_fp8(model)
    layers = [m for m in model.modules() if isinstance(m, GemvFp8Linear)]
    assert len(report) == 15 and len(layers) == 15      # 7 per layer x 2, and the LM head
    assert not any(type(m) is torch.nn.Linear for m in model.modules())
    # FP32 weights (4 bytes) to 1 byte + one float32 scale per row
    n_w = sum(m.in_features * m.out_features for m in layers)
    rows = sum(m.out_features for m in layers)
    assert report.before == 4 * n_w and report.after == n_w + 4 * rows and report.saved == 3 * n_w - 4 * rows
    assert "GB saved" in str(report) and "e4m3-row" in str(report)
    q = model.model.layers[0].self_attn.q_proj
    assert q.weight.dtype == torch.float8_e4m3fn and q.weight_scale.shape == (256, 1)
    assert set(model.state_dict()) >= {"model.layers.0.self_attn.q_proj.weight",
                                       "model.layers.0.self_attn.q_proj.weight_scale"}
    x = torch.randn(3, 256)
    ref = x.double() @ fp8torch.dequantize(q.weight, q.scales, "row", torch.float64).T
    y = q(x)
    assert y.dtype == torch.float32 and torch.allclose(y.double(), ref, rtol=1e-4, atol=1e-4)
    with torch.no_grad():
        logits = model(ids).logits
    assert torch.isfinite(logits).all()


def test_quantize_fp8_block128_keeps_checkpoint_names_and_restore_gives_the_modules_back():
    model = tiny_llama(torch.bfloat16)
    before = {n: m for n, m in model.named_modules() if type(m) is torch.nn.Linear}
    report = quantize_fp8(model, layout="block128", keep_fp16=True)
    assert report.kept and report.saved < 0 < report.before - report.fp8   # kept 16-bit weights: nothing freed yet
    up = model.model.layers[1].mlp.up_proj
    assert up.weight_scale_inv.shape == (4, 2) and up.layout == "block128"   # 512 x 256 in 128-blocks
    restored = restore_linears(model)
    assert sorted(restored) == sorted(before)
    assert all(dict(model.named_modules())[n] is m for n, m in before.items())
    again = restored.reswap()
    assert sorted(again) == sorted(before) and isinstance(model.model.layers[1].mlp.up_proj, GemvFp8Linear)


def test_restore_without_kept_weights_gives_linears_of_the_dequantised_weights():
    model = tiny_llama(torch.bfloat16)
    w = model.model.layers[0].mlp.down_proj.weight.detach().clone()
    quantize_fp8(model)
    codes, scales = fp8torch.quantize(w, "row")
    restore_linears(model)
    down = model.model.layers[0].mlp.down_proj
    assert type(down) is torch.nn.Linear and down.weight.dtype == torch.bfloat16
    assert torch.equal(down.weight, fp8torch.dequantize(codes, scales, "row", torch.bfloat16))


def test_swapped_linears_are_quantised_from_their_originals():
    model = tiny_llama()
    swap_linears(model, fp8_table())
    assert any(isinstance(m, GemvLinear) for m in model.modules())
    report = quantize_fp8(model, fp8_table())
    assert len(report) == 15 and not any(isinstance(m, GemvLinear) for m in model.modules())


def test_quantize_fp8_refuses_bad_arguments_and_skips_what_it_cannot_quantise():
    model = torch.nn.Sequential(torch.nn.Linear(32, 16), torch.nn.Linear(16, 8).to(torch.float64))
    with pytest.raises(ValueError, match="layout"):
        quantize_fp8(model, layout="block64")
    with pytest.raises(TypeError, match="Table"):
        quantize_fp8(model, "results/table.json")
    with pytest.raises(TypeError, match="keep_fp16"):
        quantize_fp8(model, keep_fp16="yes")
    report = quantize_fp8(model)
    assert list(report) == ["0"] and report.skipped == [("1", "weight is float64")]


def test_the_route_of_an_fp8_layer_reads_the_fp8_entries_of_its_dtype():
    lin = torch.nn.Linear(256, 512, bias=False)
    t = fp8_table([(512, 256, 1, "fp16", "e4m3-row"), (512, 256, 2, "bf16", "e4m3-row")])
    layer = GemvFp8Linear.from_linear(lin, t)
    assert layer._tuned[torch.float16][1] and not layer._tuned[torch.float16][2]
    assert layer._tuned[torch.bfloat16][2] and not layer._tuned[torch.bfloat16][1]
    block = GemvFp8Linear.from_linear(lin, t, "block128")            # the table has no block entries
    assert not any(block._tuned[torch.float16]) and not any(block._tuned[torch.bfloat16])
    # on the CPU a tuned route still runs the fallback (not a CUDA tensor): the same numbers
    x = torch.randn(1, 256, dtype=torch.float16)
    assert torch.equal(layer(x), fallback_linear(x, layer.weight, layer.scales, "row"))


def test_explain_lists_the_fp8_layers_and_why():
    model = tiny_llama()
    swap_linears(model, fp8_table())
    quantize_fp8(model, fp8_table(), filter=lambda name, m: "mlp" in name)
    rows = explain(model)
    fp8 = [r for r in rows if r["weights"]]
    assert len(fp8) == 6 and all(r["weights"] == "e4m3-row" and r["route"] == "dequant" for r in fp8)
    assert all("not a CUDA device" in r["why"] for r in fp8)
    assert sum(1 for r in rows if not r["weights"]) == 9
    text = format_explain(rows)
    assert "15 linear layers" in text and "6 with e4m3-row weights" in text and "512x256 e4m3-row dequant" in text


def _hf_fp8_model():
    """A tiny Llama whose linears are transformers' FineGrainedFP8 FP8Linear (block 128x128), filled with
    gemvtune's quantisation of the dense weights (transformers loads FP8 on a GPU only: tests/test_hffp8.py)."""
    fg = pytest.importorskip("transformers.integrations.finegrained_fp8")
    model = tiny_llama()
    dense = {n: m.weight.detach().clone() for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    fg.replace_with_fp8_linear(model, modules_to_not_convert=["lm_head"], quantization_config=tf.FineGrainedFP8Config())
    for name, m in model.named_modules():
        if isinstance(m, fg.FP8Linear):
            m.to_empty(device="cpu")
            codes, scales = fp8torch.quantize(dense[name], "block128")
            m.weight.data.copy_(codes.view(torch.float8_e4m3fn))
            m.weight_scale_inv.data.copy_(scales)
    return model, fg


def test_swap_linears_wraps_transformers_fp8_layers_with_their_own_tensors():
    model, fg = _hf_fp8_model()
    sd = model.state_dict()
    bad = model.model.layers[1].self_attn.k_proj
    bad.weight_scale_inv.data[0, 0] = 0.0                       # a zero scale: the kernels never take it
    names = swap_linears(model, fp8_table())
    assert len(names) == 1 + 13                                 # the LM head (nn.Linear) and 13 of 14 FP8 layers
    assert model.model.layers[1].self_attn.k_proj is bad        # kept with its own forward
    q = model.model.layers[0].self_attn.q_proj
    assert isinstance(q, GemvFp8Linear) and q.layout == "block128" and isinstance(q.original, fg.FP8Linear)
    after = model.state_dict()
    assert list(after) == list(sd) and all(after[k].data_ptr() == sd[k].data_ptr() for k in sd)
    x = torch.randn(2, 256)
    ref = x.double() @ fp8torch.dequantize(q.weight, q.original.weight_scale_inv, "block128", torch.float64).T
    assert torch.allclose(q(x).double(), ref, rtol=1e-4, atol=1e-4)
    rows = {r["name"]: r for r in explain(model)}
    k = rows["model.layers.1.self_attn.k_proj"]
    assert k["route"] == "module" and k["weights"] == "e4m3-b128" and "zero" in k["why"] and "FP8Linear" in k["why"]
    assert rows["model.layers.0.self_attn.q_proj"]["weights"] == "e4m3-b128"
    restore_linears(model)
    assert isinstance(model.model.layers[0].self_attn.q_proj, fg.FP8Linear)
    assert list(model.state_dict()) == list(sd)


def test_table_gemv_with_scales_needs_cuda_tensors():
    t = fp8_table()
    codes, scales = fp8torch.quantize(torch.randn(64, 64), "row")
    with pytest.raises(gemvtune.UsageError, match="CUDA tensor"):
        t.gemv(codes, torch.randn(64, dtype=torch.float16), scales=scales)


def test_the_fallback_dequantises_as_transformers_does():
    w = torch.randn(300, 200) * 3
    for layout in ("row", "block128"):
        codes, scales = fp8torch.quantize(w, layout)
        for dt in (torch.float16, torch.bfloat16):
            got = dequantized(codes, scales, layout, dt)
            exact = fp8torch.dequantize(codes, scales, layout, torch.float64)
            u = 2.0**-11 if dt == torch.float16 else 2.0**-8
            assert got.dtype == dt and torch.all((got.double() - exact).abs() <= 2 * u * exact.abs() + 1e-30)


def test_the_float64_reference_runs_on_the_host_where_the_gpu_lacks_room():
    """bench hf --weights' accuracy check (gemvtune.hf.fp8check): its float64 copy of the quantised model is built
    where it fits (on an H100 of 80 GB the GPU copy of Llama-3-8B ran out of memory, 2026-12-06), each FP8 linear an
    exact dequantisation, and the host copy's logits are the float64 product of the same weights."""
    from gemvtune.hf.fp8check import _first_step, float64_bytes, float64_reference, reference_device

    model = tiny_llama()
    quantize_fp8(model)
    need = float64_bytes(model)
    params = sum(t.numel() for t in {id(t): t for t in [*model.parameters(), *model.buffers()]}.values())
    assert need == 8 * params
    assert reference_device(model, None) == "cpu"             # a host model: the host
    assert reference_device(model, 10 * need) == "cpu"        # (free bytes of a GPU it is not on: still the host)
    ref = float64_reference(model, "cpu")
    assert all(p.dtype == torch.float64 for p in ref.parameters())
    q = model.model.layers[1].mlp.down_proj
    r = ref.model.layers[1].mlp.down_proj
    assert torch.equal(r.weight, fp8torch.dequantize(q.weight, q.scales, "row", torch.float64))
    assert torch.equal(ref.model.norm.weight, model.model.norm.weight.double())
    ids = torch.tensor([[1, 5, 9, 2]])
    nxt, logits = _first_step(ref, ids, None, torch)
    _, again = _first_step(model, ids, nxt, torch)
    assert logits.dtype == torch.float64 and torch.allclose(logits, again, rtol=1e-3, atol=1e-3)



def test_the_float64_reference_stays_on_the_gpu_where_it_fits(monkeypatch):
    from gemvtune.hf import fp8check

    model = tiny_llama()
    quantize_fp8(model)
    need = fp8check.float64_bytes(model)
    monkeypatch.setattr(fp8check, "_device_of", lambda m, t: torch.device("cuda", 0))   # as if on the first GPU
    room = math.ceil(need * fp8check.HEADROOM + fp8check.SPARE)
    assert fp8check.reference_device(model, room) == "cuda:0"
    assert fp8check.reference_device(model, room - 1) == "cpu"
    assert fp8check.reference_device(model, None) == "cpu"


def test_percall_times_the_fp8_paths_of_one_layer():
    """percall ops' FP8 rows (gemvtune.bench.percall._fp8_paths): a copy of the layer quantised per row, table.gemv
    with its codes and scales, dequantize + F.linear of the same; the layer it was given is left as it was."""
    from gemvtune.bench.percall import PATHS, RATIOS, _fp8_paths, percall_markdown

    lin = torch.nn.Linear(256, 512, bias=False)
    before = lin.weight.detach().clone()
    x = torch.randn(2, 256)
    out32 = torch.empty(2, 512)
    fns = _fp8_paths(fp8_table(), lin, x, x, out32)
    assert set(fns) == {"GemvFp8Linear", "table.gemv fp8", "dequant + F.linear"} and set(fns) <= set(PATHS)
    assert torch.equal(fns["GemvFp8Linear"](), fns["dequant + F.linear"]())   # (on the CPU: the same fallback)
    with pytest.raises(gemvtune.UsageError, match="CUDA"):
        fns["table.gemv fp8"]()    # (Table.gemv with scales takes CUDA tensors only)
    assert type(lin) is torch.nn.Linear and torch.equal(lin.weight, before)
    row = {"M": 512, "d": 256, "n": 2, "dtype": "fp16", "route": "tuned", "route_why": "w",
           **{k: v for p in ("GemvFp8Linear", "dequant + F.linear") for k, v in ((p, 3.0), (p + "_min", 2.0),
                                                                                   (p + "_max", 4.0))},
           "GemvFp8Linear / dequant + F.linear": 1.0}
    text = percall_markdown([row], {"name": "X"}, "cmd")
    assert "| GemvFp8Linear | 3.00 (2.00..4.00) |" in text and "**GemvFp8Linear / dequant + F.linear** | **1.000**" in text
    assert "GemvFp8Linear / dequant + F.linear" in RATIOS
