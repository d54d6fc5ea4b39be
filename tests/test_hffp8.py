"""gemvtune.runtime.hffp8 on the CPU: transformers' own FP8 linear modules (finegrained FP8Linear with 128x128
blocks, per-tensor and UE8M0 scales; FbgemmFp8Linear; CompressedTensorsFP8Linear and the compressed-tensors
checkpoint layouts), built directly with known codes and scales, give back those very codes (same storage) and
scales in gemvtune's layout, and fp8torch.dequantize matches transformers' own dequantisation bit for bit; what
cannot be taken (64x64 blocks, wrong-shaped or raw-byte scales, other FP8 formats, embeddings, grouped linears) is
a reason line, and a module that is no FP8 at all is None. A tiny Llama swapped to FP8Linear by transformers'
replace_with_fp8_linear lists its 14 linears (lm_head stays unquantised).

transformers will not load an FP8 model as FP8 on the CPU: FineGrainedFP8HfQuantizer.validate_environment asks for
accelerate, then, with no GPU or XPU, dequantises a pre-quantised checkpoint to BF16 (and refuses to quantise one on
the fly); the FP8 forward needs the finegrained-fp8 Triton kernel. So the Llama test calls the integration's
replace function (which builds the modules on the meta device) and fills each module's weight and scales itself."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (hffp8 needs it)")
fg = pytest.importorskip("transformers.integrations.finegrained_fp8", reason="transformers' FP8 integration")

from gemvtune.runtime import fp8torch  # noqa: E402
from gemvtune.runtime.hffp8 import Fp8Source, fp8_linears, fp8_source  # noqa: E402

E4M3 = torch.float8_e4m3fn


def weight(out_f: int, in_f: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(out_f, in_f, generator=g) * torch.exp2(torch.randint(-4, 4, (out_f, 1), generator=g).float())


def finegrained(out_f, in_f, block=(128, 128), bias=False, **kw):
    """An FP8Linear filled with fp8torch's block128 (or row-per-tensor) quantisation of a random weight."""
    m = fg.FP8Linear(in_f, out_f, block_size=block, has_bias=bias, **kw)
    if block == (128, 128) and m.weight_scale_inv.dtype == torch.float32:
        codes, scales = fp8torch.quantize(weight(out_f, in_f), "block128")
        m.weight.data.copy_(codes.view(E4M3))
        m.weight_scale_inv.data.copy_(scales)
    else:
        m.weight.data.copy_(fp8torch.quantize(weight(out_f, in_f), "row")[0].view(E4M3))
    if bias:
        m.bias.data.normal_()
    return m


@pytest.mark.parametrize("out_f, in_f", [(300, 200), (129, 144), (256, 384), (64, 32)])
def test_finegrained_block128_gives_its_own_codes_and_scales(out_f, in_f):
    m = finegrained(out_f, in_f, bias=True)
    src = fp8_source(m)
    assert isinstance(src, Fp8Source), src
    assert src.layout == "block128" and (src.out_features, src.in_features) == (out_f, in_f)
    assert src.codes.dtype == torch.uint8 and src.codes.data_ptr() == m.weight.data_ptr()
    assert torch.equal(src.codes, m.weight.view(torch.uint8))
    assert src.scales.data_ptr() == m.weight_scale_inv.data_ptr() and src.scales.dtype == torch.float32
    assert src.bias is not None and src.bias.data_ptr() == m.bias.data_ptr()
    assert src.origin == "transformers FP8Linear block 128x128" and "W8A16" in src.note and "dynamic" in src.note
    ours = fp8torch.dequantize(src.codes, src.scales, src.layout, torch.float32)
    theirs = fg._dequantize_fp8_weight(m.weight, m.weight_scale_inv, [128, 128], torch.float32)
    assert torch.equal(ours, theirs)
    if out_f % 128 == 0 and in_f % 128 == 0:        # the load-time dequantiser (no ragged blocks): fp32 product, cast
        deq = fg.Fp8Dequantize(None)
        for dt in (torch.float32, torch.bfloat16, torch.float16):
            assert torch.equal(fp8torch.dequantize(src.codes, src.scales, src.layout, dt),
                               deq._dequantize_one(m.weight, m.weight_scale_inv, output_dtype=dt))
    assert (fp8torch.check(src.codes, src.scales, src.layout) == "") == (in_f % 16 == 0)


def test_finegrained_per_tensor_and_static_activation():
    m = finegrained(200, 160, block=None, activation_scheme="static")
    m.weight_scale_inv.data.fill_(0.37)
    src = fp8_source(m)
    assert isinstance(src, Fp8Source), src
    assert src.layout == "row" and src.scales.shape == (200,) and bool((src.scales == 0.37).all())
    assert "per-tensor" in src.origin and "activation_scale" in src.note
    theirs = fg._dequantize_fp8_weight(m.weight, m.weight_scale_inv, None, torch.float32)
    assert torch.equal(fp8torch.dequantize(src.codes, src.scales, "row", torch.float32), theirs)
    assert fp8torch.check(src.codes, src.scales, src.layout) == ""


@pytest.mark.skipif(not hasattr(torch, "float8_e8m0fnu"), reason="torch has no float8_e8m0fnu")
def test_finegrained_ue8m0_scales_become_exact_float32():
    m = finegrained(256, 384, scale_fmt="ue8m0")
    exps = torch.randint(100, 140, (2, 3), dtype=torch.uint8)
    m.weight_scale_inv.data.copy_(exps.view(torch.float8_e8m0fnu))
    src = fp8_source(m)
    assert isinstance(src, Fp8Source), src
    assert src.layout == "block128" and "float8_e8m0fnu scales made float32" in src.origin
    assert torch.equal(src.scales, torch.exp2(exps.double() - 127).float())
    deq = fg.Fp8Dequantize(None)._dequantize_one(m.weight, m.weight_scale_inv, output_dtype=torch.float32)
    assert torch.equal(fp8torch.dequantize(src.codes, src.scales, "block128", torch.float32), deq)


def test_finegrained_refusals():
    assert "block size 64x64" in fp8_source(fg.FP8Linear(256, 256, block_size=(64, 64)))
    m = finegrained(300, 200)
    m.weight_scale_inv = torch.nn.Parameter(torch.ones(2, 3))                 # transposed grid
    assert "should be (3, 2) for 128x128 blocks, got (2, 3)" in fp8_source(m)
    m.weight_scale_inv = torch.nn.Parameter(torch.ones(3, 2, dtype=torch.uint8), requires_grad=False)  # raw bytes
    assert "dtype torch.uint8" in fp8_source(m)
    m = finegrained(256, 256)
    m.weight = torch.nn.Parameter(m.weight.float())           # dequantised in place: no codes to read
    assert "weight is torch.float32" in fp8_source(m)
    g = fg.FP8GroupedLinear(128, 256, n_groups=2, block_size=(128, 128))
    assert "grouped linear (n_groups=2)" in fp8_source(g)
    emb = fg.FP8Embedding(64, 32)
    assert "embedding" in fp8_source(emb)


def test_fbgemm_fp8_linear_is_row():
    fb = pytest.importorskip("transformers.integrations.fbgemm_fp8", reason="transformers' fbgemm integration")
    m = fb.FbgemmFp8Linear(144, 96, True)                     # constructs on the CPU without fbgemm_gpu
    codes, scales = fp8torch.quantize(weight(96, 144, 3), "row")
    m.weight.data.copy_(codes.view(E4M3))
    m.weight_scale.data.copy_(scales[:, None])
    src = fp8_source(m)
    assert isinstance(src, Fp8Source), src
    assert src.layout == "row" and src.origin == "transformers FbgemmFp8Linear per-channel scale"
    assert src.codes.data_ptr() == m.weight.data_ptr() and src.scales.data_ptr() == m.weight_scale.data_ptr()
    assert torch.equal(src.codes, codes) and torch.equal(src.scales, scales)
    assert src.bias is not None and src.bias.data_ptr() == m.bias.data_ptr() and src.bias.dtype == torch.float32
    assert "input_scale_ub" in src.note and fp8torch.check(src.codes, src.scales, "row") == ""


def test_compressed_tensors_channel_and_tensor():
    ct = pytest.importorskip("transformers.integrations.compressed_tensors", reason="transformers' c-t integration")
    m = ct.CompressedTensorsFP8Linear(160, 48)                # its kernel layout: weight_scale [1, out]
    codes, scales = fp8torch.quantize(weight(48, 160, 4), "row")
    m.weight.data.copy_(codes.view(E4M3))
    m.weight_scale.data.copy_(scales[None])
    src = fp8_source(m)
    assert isinstance(src, Fp8Source) and src.layout == "row" and torch.equal(src.scales, scales)
    assert src.scales.data_ptr() == m.weight_scale.data_ptr()
    for ckpt, want in ((scales[:, None].clone(), scales), (torch.tensor([[0.5]]), torch.full((48,), 0.5)),
                       (scales.bfloat16()[:, None], scales.bfloat16().float())):
        m.weight_scale = torch.nn.Parameter(ckpt, requires_grad=False)     # the checkpoint's own layouts
        src = fp8_source(m)
        assert isinstance(src, Fp8Source) and src.layout == "row" and torch.equal(src.scales, want), src
    m.weight_scale = torch.nn.Parameter(torch.ones(48, 2), requires_grad=False)   # group strategy
    assert "neither per-tensor, per-channel nor 128x128" in fp8_source(m)


class StandIn(torch.nn.Module):
    """A module of no known class with the attributes an FP8 linear carries."""

    def __init__(self, w, **tensors):
        super().__init__()
        self.weight = torch.nn.Parameter(w, requires_grad=False)
        for k, v in tensors.items():
            self.register_buffer(k, v)


def test_recognition_is_by_attributes_and_none_means_not_fp8():
    codes = torch.zeros(32, 64, dtype=E4M3)
    src = fp8_source(StandIn(codes, weight_scale=torch.ones(32, 1)))
    assert isinstance(src, Fp8Source) and src.origin == "StandIn per-channel scale"
    assert "no weight_scale_inv or weight_scale" in fp8_source(StandIn(codes))
    assert "both" in fp8_source(StandIn(codes, weight_scale=torch.ones(32), weight_scale_inv=torch.ones(1, 1)))
    assert "float8_e5m2" in fp8_source(StandIn(codes.to(torch.float8_e5m2), weight_scale=torch.ones(32)))
    assert "no 2-D weight" in fp8_source(StandIn(torch.zeros(2, 32, 64, dtype=E4M3), weight_scale=torch.ones(2)))
    for plain in (torch.nn.Linear(64, 32), torch.nn.LayerNorm(8), torch.nn.Embedding(4, 4), torch.nn.Sequential()):
        assert fp8_source(plain) is None
    with pytest.raises(TypeError):
        fp8_source(codes)  # type: ignore[arg-type]


def test_tiny_llama_lists_its_14_fp8_linears():
    tf = pytest.importorskip("transformers")
    from transformers.quantizers.quantizer_finegrained_fp8 import FineGrainedFP8HfQuantizer

    cfg = tf.LlamaConfig(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=512)
    model = tf.LlamaForCausalLM(cfg)
    dense = {n: m.weight.detach().clone() for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    qcfg = tf.FineGrainedFP8Config()
    skip = FineGrainedFP8HfQuantizer(qcfg).get_modules_to_not_convert(model, None, model._keep_in_fp32_modules)
    assert skip == ["lm_head"]
    fg.replace_with_fp8_linear(model, modules_to_not_convert=skip, quantization_config=qcfg)
    for name, m in model.named_modules():               # the replace function builds them on meta: fill them
        if isinstance(m, fg.FP8Linear):
            m.to_empty(device="cpu")
            codes, scales = fp8torch.quantize(dense[name], "block128")
            m.weight.data.copy_(codes.view(E4M3))
            m.weight_scale_inv.data.copy_(scales)
    found = fp8_linears(model)
    names = [f.name for f in found]
    assert len(found) == 14 and "lm_head" not in names
    assert {n.rsplit(".", 1)[1] for n in names} == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                                    "down_proj"}
    for f in found:
        assert isinstance(f.source, Fp8Source) and f.source.layout == "block128", f
        assert getattr(f.parent, f.attr) is f.module and f.source.codes.data_ptr() == f.module.weight.data_ptr()
        codes, scales = fp8torch.quantize(dense[f.name], "block128")
        assert torch.equal(f.source.codes, codes) and torch.equal(f.source.scales, scales)
        assert fp8torch.check(f.source.codes, f.source.scales, "block128", M=f.source.out_features) == ""
    model.model.layers[1].mlp.up_proj.block_size = (64, 64)  # one that cannot be taken is listed with its reason
    bad = [f for f in fp8_linears(model) if isinstance(f.source, str)]
    assert [f.name for f in bad] == ["model.layers.1.mlp.up_proj"] and "64x64" in bad[0].source
    with pytest.raises(TypeError):
        fp8_linears("model")  # type: ignore[arg-type]
