"""The shapes of a decode step as one GPU runs it (gemvtune.kernels.steplayers, gemvtune.kernels.modelshapes):
tensor-parallel shards, mixtures of experts, latent attention, multimodal configs, ``gemvtune shapes`` and --tp.

Every expected number here was worked out by hand from the config values (written out in the comments), not by the
code under test. The configs under tests/data/hf/ are the public config.json files of Qwen/Qwen2.5-72B-Instruct,
mistralai/Mixtral-8x7B-v0.1, Qwen/Qwen1.5-MoE-A2.7B (its published fields), Qwen/Qwen3-30B-A3B,
deepseek-ai/DeepSeek-V3 and mistralai/Mistral-Small-3.1-24B-Instruct-2503."""

import dataclasses
import json
from fractions import Fraction

import pytest
from conftest import ROOT

from gemvtune import Shape, UsageError
from gemvtune.cli.main import main
from gemvtune.kernels.hfconfig import HFModel, read_hf_config, read_preset
from gemvtune.kernels.modelshapes import StepShape, routing, step_shapes
from gemvtune.kernels.steplayers import step_linears
from gemvtune.tuning.api import tune_shapes

DATA = ROOT / "tests" / "data" / "hf"
QWEN72 = DATA / "qwen2.5-72b-instruct.json"
MIXTRAL = DATA / "mixtral-8x7b.json"
QWEN_MOE = DATA / "qwen1.5-moe-a2.7b.json"
QWEN3_MOE = DATA / "qwen3-30b-a3b.json"
DEEPSEEK = DATA / "deepseek-v3.json"
MISTRAL3 = DATA / "mistral-small-3.1-24b-instruct.json"


def _layers(model, tp, fused=False):
    return [(x.name, x.M, x.d) for x in (s.linear for s in step_linears(model, fused, tp))]


# Llama-3-70B: hidden 8192, 64 heads of 128, 8 KV heads, intermediate 28672, vocab 128256 (= 2004 x 64: no padding).
# TP 2: q 32 heads = 4096 rows, 4 KV heads = 512, o 8192 x 4096, gate/up 14336, head 128256/2 = 64128,
#       qkv (32 + 2*4)*128 = 5120, gate_up 2*14336 = 28672.
# TP 4: q 16 heads = 2048, 2 KV heads = 256, gate/up 7168, head 32064, qkv (16+4)*128 = 2560, gate_up 14336.
# TP 8: q 8 heads = 1024, 1 KV head = 128, gate/up 3584, head 16032, qkv (8+2)*128 = 1280, gate_up 7168.
LLAMA70 = {
    2: ([("q_proj", 4096, 8192), ("k_proj", 512, 8192), ("v_proj", 512, 8192), ("o_proj", 8192, 4096),
         ("gate_proj", 14336, 8192), ("up_proj", 14336, 8192), ("down_proj", 8192, 14336), ("lm_head", 64128, 8192)],
        [("qkv_proj", 5120, 8192), ("o_proj", 8192, 4096), ("gate_up_proj", 28672, 8192), ("down_proj", 8192, 14336),
         ("lm_head", 64128, 8192)]),
    4: ([("q_proj", 2048, 8192), ("k_proj", 256, 8192), ("v_proj", 256, 8192), ("o_proj", 8192, 2048),
         ("gate_proj", 7168, 8192), ("up_proj", 7168, 8192), ("down_proj", 8192, 7168), ("lm_head", 32064, 8192)],
        [("qkv_proj", 2560, 8192), ("o_proj", 8192, 2048), ("gate_up_proj", 14336, 8192), ("down_proj", 8192, 7168),
         ("lm_head", 32064, 8192)]),
    8: ([("q_proj", 1024, 8192), ("k_proj", 128, 8192), ("v_proj", 128, 8192), ("o_proj", 8192, 1024),
         ("gate_proj", 3584, 8192), ("up_proj", 3584, 8192), ("down_proj", 8192, 3584), ("lm_head", 16032, 8192)],
        [("qkv_proj", 1280, 8192), ("o_proj", 8192, 1024), ("gate_up_proj", 7168, 8192), ("down_proj", 8192, 3584),
         ("lm_head", 16032, 8192)]),
}
# Qwen2.5-72B: hidden 8192, 64 heads of 128, 8 KV heads, intermediate 29568, vocab 152064 (= 2376 x 64).
# TP 2: gate/up 14784, head 76032; TP 4: gate/up 7392, head 38016; TP 8: gate/up 3696, head 19008 (heads as Llama's).
QWEN72_TP = {
    2: ([("q_proj", 4096, 8192), ("k_proj", 512, 8192), ("v_proj", 512, 8192), ("o_proj", 8192, 4096),
         ("gate_proj", 14784, 8192), ("up_proj", 14784, 8192), ("down_proj", 8192, 14784), ("lm_head", 76032, 8192)],
        [("qkv_proj", 5120, 8192), ("o_proj", 8192, 4096), ("gate_up_proj", 29568, 8192), ("down_proj", 8192, 14784),
         ("lm_head", 76032, 8192)]),
    4: ([("q_proj", 2048, 8192), ("k_proj", 256, 8192), ("v_proj", 256, 8192), ("o_proj", 8192, 2048),
         ("gate_proj", 7392, 8192), ("up_proj", 7392, 8192), ("down_proj", 8192, 7392), ("lm_head", 38016, 8192)],
        [("qkv_proj", 2560, 8192), ("o_proj", 8192, 2048), ("gate_up_proj", 14784, 8192), ("down_proj", 8192, 7392),
         ("lm_head", 38016, 8192)]),
    8: ([("q_proj", 1024, 8192), ("k_proj", 128, 8192), ("v_proj", 128, 8192), ("o_proj", 8192, 1024),
         ("gate_proj", 3696, 8192), ("up_proj", 3696, 8192), ("down_proj", 8192, 3696), ("lm_head", 19008, 8192)],
        [("qkv_proj", 1280, 8192), ("o_proj", 8192, 1024), ("gate_up_proj", 7392, 8192), ("down_proj", 8192, 3696),
         ("lm_head", 19008, 8192)]),
}


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_llama_3_70b_shards(tp):
    m = read_preset("llama-3-70b")
    assert _layers(m, tp) == LLAMA70[tp][0]
    assert _layers(m, tp, fused=True) == LLAMA70[tp][1]


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_qwen2_5_72b_shards_keep_qkv_bias(tp):
    m = read_hf_config(QWEN72)
    assert (m.name, m.hidden_size, m.intermediate_size, m.num_attention_heads, m.num_key_value_heads, m.vocab_size,
            m.num_hidden_layers) == ("qwen2.5-72b-instruct", 8192, 29568, 64, 8, 152064, 80)
    assert _layers(m, tp) == QWEN72_TP[tp][0]
    assert _layers(m, tp, fused=True) == QWEN72_TP[tp][1]
    assert [s.linear.bias for s in step_linears(m, True, tp)] == [True, False, False, False, False]


def test_tp_1_is_the_unsharded_model():
    m = read_preset("llama-3-70b")
    assert _layers(m, 1) == [(x.name, x.M, x.d) for x in m.linear_layers()]
    assert [s.shape for s in step_shapes(m)] == m.shapes()


def test_kv_heads_replicated_when_tp_exceeds_them():
    # TP 16 > 8 KV heads: each GPU one KV head (replicated on 2 GPUs), 64/16 = 4 q heads = 512 rows; qkv (4+2)*128
    # = 768; gate/up 28672/16 = 1792; head 128256/16 = 8016.
    m = read_preset("llama-3-70b")
    assert _layers(m, 16, fused=True) == [("qkv_proj", 768, 8192), ("o_proj", 8192, 512),
                                          ("gate_up_proj", 3584, 8192), ("down_proj", 8192, 1792),
                                          ("lm_head", 8016, 8192)]
    assert _layers(m, 16)[1] == ("k_proj", 128, 8192)
    # Mixtral at TP 16: 2 q heads = 256 rows, its 8 KV heads each replicated on 2 GPUs: 128 rows
    assert _layers(read_hf_config(MIXTRAL), 16)[:3] == [("q_proj", 256, 4096), ("k_proj", 128, 4096),
                                                         ("v_proj", 128, 4096)]


def test_vocab_padded_to_64_before_the_split():
    base = {**json.loads((ROOT / "gemvtune/kernels/hf_configs/llama-3-8b.json").read_text()), "vocab_size": 32001}
    m = HFModel.from_dict(base)
    assert _layers(m, 1)[-1] == ("lm_head", 32001, 4096)          # TP 1: transformers' head, the config's vocab
    assert _layers(m, 2)[-1] == ("lm_head", 16032, 4096)          # ceil(32001/64) = 501 -> 32064 / 2


def _tiny(**over):
    return HFModel.from_dict({"model_type": "llama", "hidden_size": 384, "intermediate_size": 384,
                              "num_attention_heads": 6, "vocab_size": 100, "num_hidden_layers": 2, **over}, name="tiny")


BAD_TP = [  # (model, tp, needle)
    (lambda: read_preset("llama-3-70b"), 3, "TP 3 does not divide num_attention_heads (64)"),
    (lambda: read_preset("qwen2.5-7b"), 7, "TP 7 and num_key_value_heads (4) must divide one another"),
    (lambda: read_preset("llama-3-70b"), 128, "TP 128 does not divide num_attention_heads"),
    (lambda: _tiny(num_key_value_heads=2), 3, "TP 3 and num_key_value_heads (2)"),
    (lambda: _tiny(intermediate_size=385), 3, "does not divide intermediate_size (385)"),
    (lambda: _tiny(), 3, "the LM head's 128 rows (vocab_size 100 padded to a multiple of 64"),
    (lambda: read_hf_config(QWEN_MOE), 3, "TP 3 does not divide num_attention_heads (16)"),
    (lambda: HFModel.from_dict({**json.loads(MIXTRAL.read_text()), "intermediate_size": 14000}), 32,
     "does not divide intermediate_size (14000)"),                # 14000 / 32 = 437.5 (heads 32/32, KV 8 | 32)
    (lambda: HFModel.from_dict({**json.loads(QWEN3_MOE.read_text()), "moe_intermediate_size": 760}), 16,
     "does not divide moe_intermediate_size (760)"),              # 760 / 16 = 47.5 (heads 32/16, KV 4 | 16)
    (lambda: read_preset("llama-3-8b"), 0, "must be a positive integer, got 0"),
    (lambda: read_preset("llama-3-8b"), True, "must be a positive integer, got True"),
]


@pytest.mark.parametrize("model,tp,needle", BAD_TP, ids=[f"{i}:{b[2][:30]}" for i, b in enumerate(BAD_TP)])
def test_a_tp_that_does_not_shard_the_model_is_one_line(model, tp, needle):
    with pytest.raises(UsageError) as e:
        step_shapes(model(), 1, tp)
    assert needle in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_routing_rule_by_hand():
    # Mixtral, 2 of 8: n = 1 reads 8 (1 - 6/8) = 2 experts of 1 token; n = 4: 8 (1 - (3/4)^4) = 8 * 175/256 = 175/32
    # = 5.47 experts, 8 tokens over them = 1.46 -> 2; n = 16: 8 (1 - (3/4)^16) = 7.92, 32 / 7.92 = 4.04 -> 5.
    assert (routing(8, 2, 1).active, routing(8, 2, 1).tokens) == (2, 1)
    assert (routing(8, 2, 4).active, routing(8, 2, 4).tokens) == (Fraction(175, 32), 2)
    assert routing(8, 2, 16).active == Fraction(8 * (4**16 - 3**16), 4**16) and routing(8, 2, 16).tokens == 5
    # DeepSeek-V3, 8 of 256: n = 1 exactly 8 experts of 1 token (no rounding up of 1.0000001)
    assert (routing(256, 8, 1).active, routing(256, 8, 1).tokens) == (8, 1)
    # Qwen1.5-MoE, 4 of 60, n = 4: 60 (1 - (14/15)^4) = 60 * 12209/50625 = 48836/3375 = 14.47; 16 / 14.47 -> 2
    assert (routing(60, 4, 4).active, routing(60, 4, 4).tokens) == (Fraction(48836, 3375), 2)
    assert routing(4, 4, 16).tokens == 16                          # every token to every expert: n each
    with pytest.raises(ValueError):
        routing(8, 9, 1)


def test_mixtral_experts_and_router():
    m = read_hf_config(MIXTRAL)
    assert m.moe is not None and (m.moe.experts, m.moe.top_k, m.moe.expert_intermediate, m.moe.sparse_layers) == \
        (8, 2, 14336, 32)
    got = {(s.shape.M, s.shape.d, s.shape.n): (s.layers, s.calls) for s in step_shapes(m, 1)}
    assert got == {(4096, 4096, 1): (("q_proj", "o_proj"), 64), (1024, 4096, 1): (("k_proj", "v_proj"), 64),
                   (8, 4096, 1): (("router",), 32),
                   (14336, 4096, 1): (("experts.gate_proj", "experts.up_proj"), 32 * 2 * 2),   # 2 experts, gate+up
                   (4096, 14336, 1): (("experts.down_proj",), 64), (32000, 4096, 1): (("lm_head",), 1)}
    at4 = {(s.shape.M, s.shape.d, s.shape.n): s.calls for s in step_shapes(m, 4)}
    assert at4[(14336, 4096, 2)] == 32 * 2 * 175 / 32 and at4[(4096, 14336, 2)] == 175 and at4[(8, 4096, 4)] == 32
    # TP 8: 4 q heads = 512 rows, 1 KV head = 128, experts 14336/8 = 1792, router whole, head 32000/8 = 4000
    assert _layers(m, 8) == [("q_proj", 512, 4096), ("k_proj", 128, 4096), ("v_proj", 128, 4096),
                             ("o_proj", 4096, 512), ("router", 8, 4096), ("experts.gate_proj", 1792, 4096),
                             ("experts.up_proj", 1792, 4096), ("experts.down_proj", 4096, 1792),
                             ("lm_head", 4000, 4096)]


def test_qwen_moe_shared_expert_and_shares_by_hand():
    m = read_hf_config(QWEN_MOE)
    assert m.qkv_bias and not m.o_bias
    # per layer (24 layers, all sparse) at n = 1: q,k,v,o 4 x 2048^2; router 60 x 2048; shared gate 1 x 2048;
    # shared MLP 3 x 5632 x 2048; 4 experts x 3 x 1408 x 2048; then the head 151936 x 2048. In parameters:
    # 402653184 + 2949120 + 49152 + 830472192 + 830472192 + 311164928 = 2377760768.
    got = {(s.shape.M, s.shape.d): s for s in step_shapes(m, 1)}
    assert list(got) == [(2048, 2048), (60, 2048), (1, 2048), (5632, 2048), (2048, 5632), (1408, 2048), (2048, 1408),
                         (151936, 2048)]
    assert got[(1, 2048)].layers == ("shared_expert_gate",) and got[(1, 2048)].calls == 24
    assert got[(2048, 2048)].share == pytest.approx(402653184 / 2377760768, rel=1e-12)
    assert got[(1408, 2048)].weight_bytes == 192 * 1408 * 2048 * 2                  # 24 x 4 experts x (gate, up)
    assert got[(1408, 2048)].share == pytest.approx(553648128 / 2377760768, rel=1e-12)
    assert sum(s.weight_bytes for s in got.values()) == 2 * 2377760768
    at4 = {(s.shape.M, s.shape.d, s.shape.n): s.calls for s in step_shapes(m, 4)}
    assert at4[(1408, 2048, 2)] == pytest.approx(2344128 / 3375) and at4[(5632, 2048, 4)] == 48   # 24*2*48836/3375


def test_qwen3_moe_sparse_steps_and_tp():
    m = read_hf_config(QWEN3_MOE)
    assert (m.head_dim, m.moe.experts, m.moe.top_k, m.moe.shared_intermediate, m.moe.sparse_layers) == \
        (128, 128, 8, 0, 48)
    # TP 4: 8 q heads = 1024, 1 KV head = 128, experts 768/4 = 192, head 151936 (= 2374 x 64) / 4 = 37984
    assert _layers(m, 4, fused=True) == [("qkv_proj", 1280, 2048), ("o_proj", 2048, 1024), ("router", 128, 2048),
                                         ("experts.gate_up_proj", 384, 2048), ("experts.down_proj", 2048, 192),
                                         ("lm_head", 37984, 2048)]
    # TP 8 > 4 KV heads: one replicated; q 4 heads = 512; experts 96; head 18992
    assert _layers(m, 8)[:3] == [("q_proj", 512, 2048), ("k_proj", 128, 2048), ("v_proj", 128, 2048)]
    assert _layers(m, 8)[-2:] == [("experts.down_proj", 2048, 96), ("lm_head", 18992, 2048)]
    # layers 0 and 47 dense, every second layer sparse: odd i = 1, 3, ..., 47 are 24, less 47: 23 sparse, 25 dense
    data = {**json.loads(QWEN3_MOE.read_text()), "mlp_only_layers": [0, 47], "decoder_sparse_step": 2}
    m2 = HFModel.from_dict(data)
    assert m2.moe.sparse_layers == 23
    layers = {s.linear.name: s.layers for s in step_linears(m2)}
    assert layers["gate_proj"] == 25 and layers["router"] == 23 and layers["experts.down_proj"] == 23
    assert [s for s in step_linears(m2) if s.linear.name == "gate_proj"][0].linear.M == 6144
    # counted, not looped over: a hostile layer count reads at once (every second of 10^12 layers sparse)
    assert HFModel.from_dict({**data, "num_hidden_layers": 10**12, "mlp_only_layers": []}).moe.sparse_layers == \
        5 * 10**11


def test_deepseek_v3_latent_attention_and_experts():
    m = read_hf_config(DEEPSEEK)
    # q_lora 1536, kv_lora 512, qk_nope 128, qk_rope 64 (q head 192), v 128, 128 heads, hidden 7168;
    # 3 dense layers of 18432, 58 sparse of 256 experts of 2048 (top 8) and one shared expert of 2048 x 1
    assert [(s.linear.name, s.linear.M, s.linear.d, s.layers, s.routed) for s in step_linears(m)] == [
        ("q_a_proj", 1536, 7168, 61, False), ("q_b_proj", 128 * 192, 1536, 61, False),
        ("kv_a_proj_with_mqa", 576, 7168, 61, False), ("kv_b_proj", 128 * 256, 512, 61, False),
        ("o_proj", 7168, 16384, 61, False),
        ("gate_proj", 18432, 7168, 3, False), ("up_proj", 18432, 7168, 3, False), ("down_proj", 7168, 18432, 3, False),
        ("router", 256, 7168, 58, False), ("shared_experts.gate_proj", 2048, 7168, 58, False),
        ("shared_experts.up_proj", 2048, 7168, 58, False), ("shared_experts.down_proj", 7168, 2048, 58, False),
        ("experts.gate_proj", 2048, 7168, 58, True), ("experts.up_proj", 2048, 7168, 58, True),
        ("experts.down_proj", 7168, 2048, 58, True), ("lm_head", 129280, 7168, 1, False)]
    # TP 8, fused: q_a + kv_a = 1536 + 576 = 2112 rows (replicated); 16 heads: q_b 16*192 = 3072, kv_b 16*256 = 4096,
    # o 7168 x 16*128 = 2048; dense gate_up 2 * 18432/8 = 4608; experts and shared 2048/8 = 256; head 129280/8 = 16160
    assert _layers(m, 8, fused=True) == [
        ("fused_qkv_a_proj", 2112, 7168), ("q_b_proj", 3072, 1536), ("kv_b_proj", 4096, 512), ("o_proj", 7168, 2048),
        ("gate_up_proj", 4608, 7168), ("down_proj", 7168, 2304), ("router", 256, 7168),
        ("shared_experts.gate_up_proj", 512, 7168), ("shared_experts.down_proj", 7168, 256),
        ("experts.gate_up_proj", 512, 7168), ("experts.down_proj", 7168, 256), ("lm_head", 16160, 7168)]
    got = {(s.shape.M, s.shape.d): s for s in step_shapes(m, 1, 8, fused=True)}
    # the shared expert (58 launches) and 8 routed experts (58 x 8) read the same 512 x 7168 shape at n = 1
    assert got[(512, 7168)].calls == 58 + 58 * 8 and got[(512, 7168)].layers == (
        "shared_experts.gate_up_proj", "experts.gate_up_proj")
    assert got[(256, 7168)].layers == ("router",) and got[(256, 7168)].calls == 58
    with pytest.raises(UsageError, match="sibling groups"):
        m.groups()


def test_deepseek_without_q_lora_runs_one_q_proj():
    data = {**json.loads(DEEPSEEK.read_text()), "q_lora_rank": None, "hidden_size": 2048, "num_attention_heads": 16,
            "num_key_value_heads": 16}
    # 16 heads x 192 = 3072 rows of q_proj; kv_a 512 + 64 = 576 stays its own linear, fused or not
    assert _layers(HFModel.from_dict(data), 1, fused=True)[:4] == [
        ("q_proj", 3072, 2048), ("kv_a_proj_with_mqa", 576, 2048), ("kv_b_proj", 4096, 512), ("o_proj", 2048, 2048)]


def test_multimodal_read_through_its_text_model():
    m = read_hf_config(MISTRAL3)
    assert (m.model_type, m.hidden_size, m.num_hidden_layers, m.head_dim) == ("mistral", 5120, 40, 128)
    assert "text_config" in m.note and "vision_config" in m.note and "left out" in m.note
    assert _layers(m, 1) == [("q_proj", 4096, 5120), ("k_proj", 1024, 5120), ("v_proj", 1024, 5120),
                             ("o_proj", 5120, 4096), ("gate_proj", 32768, 5120), ("up_proj", 32768, 5120),
                             ("down_proj", 5120, 32768), ("lm_head", 131072, 5120)]
    # Qwen2-VL keeps its text fields at the top level, beside vision_config
    qwen = json.loads((ROOT / "gemvtune/kernels/hf_configs/qwen2.5-7b.json").read_text())
    vl = HFModel.from_dict({**qwen, "model_type": "qwen2_vl", "vision_config": {"depth": 32}})
    assert vl.qkv_bias and "top level" in vl.note and "vision_config" in vl.note
    assert vl.shapes() == read_preset("qwen2.5-7b").shapes()
    assert read_preset("llama-3-8b").note == ""


def test_shares_sum_to_one_and_the_value_is_frozen():
    for m in (read_preset("llama-3-70b"), read_hf_config(MIXTRAL), read_hf_config(DEEPSEEK), read_hf_config(QWEN_MOE)):
        for n in (1, 3, 16):
            for fused in (False, True):
                rows = step_shapes(m, n, 2, fused, "bf16")
                assert sum(r.share for r in rows) == pytest.approx(1.0, abs=1e-12)
                assert all(r.shape.dtype == "bf16" and 1 <= r.shape.n <= n for r in rows)
    s = step_shapes(read_preset("llama-3-8b"))[0]
    assert isinstance(s, StepShape)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.calls = 2  # type: ignore[misc]
    with pytest.raises(UsageError, match="above the supported 16"):
        step_shapes(read_preset("llama-3-8b"), 17)


def test_llama_3_70b_tp8_shares_by_hand():
    # fused, n = 1, in parameters: qkv 80 x 1280 x 8192 = 838860800; o 80 x 8192 x 1024 = 671088640; gate_up
    # 80 x 7168 x 8192 = 4697620480; down 80 x 8192 x 3584 = 2348810240; head 16032 x 8192 = 131334144;
    # total 8687714304 (17.38 GB in FP16)
    rows = step_shapes(read_preset("llama-3-70b"), 1, 8, fused=True)
    assert [(r.shape.M, r.shape.d, r.calls) for r in rows] == [(1280, 8192, 80), (8192, 1024, 80), (7168, 8192, 80),
                                                                (8192, 3584, 80), (16032, 8192, 1)]
    assert [r.weight_bytes for r in rows] == [2 * 838860800, 2 * 671088640, 2 * 4697620480, 2 * 2348810240,
                                              2 * 131334144]
    assert rows[2].share == pytest.approx(4697620480 / 8687714304, rel=1e-12)


# ------------------------------------------------------------------------------ tune_shapes, search, the CLI

def test_tune_shapes_with_tp_and_experts():
    assert tune_shapes(model="llama-3-70b", fused=True, tp=8) == [
        Shape(1280, 8192), Shape(8192, 1024), Shape(7168, 8192), Shape(8192, 3584), Shape(16032, 8192)]
    # Mixtral at n = 1 and 4: the experts' shapes at 1 and 2 tokens, the rest at 1 and 4; shape by shape
    assert tune_shapes(hf_config=MIXTRAL, batch=[1, 4]) == [
        Shape(4096, 4096, 1), Shape(4096, 4096, 4), Shape(1024, 4096, 1), Shape(1024, 4096, 4), Shape(8, 4096, 1),
        Shape(8, 4096, 4), Shape(14336, 4096, 1), Shape(14336, 4096, 2), Shape(4096, 14336, 1),
        Shape(4096, 14336, 2), Shape(32000, 4096, 1), Shape(32000, 4096, 4)]
    with pytest.raises(UsageError, match="tp picks one GPU's shards"):
        tune_shapes(["64x64"], tp=2)
    with pytest.raises(UsageError, match="tp must be a positive number"):
        tune_shapes(model="llama-3-8b", tp=True)


def test_search_tp_reaches_the_search(tmp_path, monkeypatch):
    from click.testing import CliRunner

    import gemvtune.cli.search_cmd as cs
    import gemvtune.tuning.search_run as sc
    from gemvtune.cli.main import cli

    got = []
    monkeypatch.setattr(cs, "_make_runner", lambda shapes, replay, wd: (None, None, str(tmp_path)))
    monkeypatch.setattr(sc, "run_searches", lambda runner, shapes, *a, **k: got.append(shapes))
    r = CliRunner().invoke(cli, ["search", "--model", "llama-3-70b", "--tp", "8", "--fused"])
    assert r.exit_code == 0, r.output
    assert got[-1] == [Shape(1280, 8192), Shape(8192, 1024), Shape(7168, 8192), Shape(8192, 3584), Shape(16032, 8192)]


def _run(capsys, *args):
    code = 0
    try:
        main(list(args))
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, [ln for ln in err.splitlines() if ln.strip()]


def test_shapes_command(capsys, tmp_path):
    code, out, err = _run(capsys, "shapes", "--model", "llama-3-70b", "--tp", "8")
    assert code == 0 and not err
    lines = out.splitlines()
    assert lines[0] == "llama-3-70b (llama): 80 layers, TP 8: one GPU's shards, unfused, fp16"
    table = lines[lines.index("batch n = 1") + 2:]
    assert table[0].split() == ["3584x8192", "1", "160", "9395.2", "54.07%", "gate_proj,", "up_proj"]
    assert table[5].split() == ["16032x8192", "1", "1", "262.7", "1.51%", "lm_head"]
    assert table[6] == "total: 17.38 GB of weights read per step on each GPU, 6 shapes"
    csv = tmp_path / "s.csv"
    code, out, err = _run(capsys, "shapes", "--hf-config", str(MIXTRAL), "--batch", "1,4", "--csv", str(csv))
    assert code == 0 and "2 token(s) each" in out and "router" in out
    rows = csv.read_text().splitlines()
    assert rows[0] == "model,tp,fused,dtype,weights,batch,M,d,n,layers,calls,weight_bytes,share" and len(rows) == 1 + 12
    assert "mixtral-8x7b,1,False,fp16,,4,14336,4096,2,experts.gate_proj experts.up_proj,350," in csv.read_text()
    code, out, err = _run(capsys, "shapes", "--model", "llama-3-8b", "--weights", "e4m3-row", "--csv", str(csv))
    assert code == 0 and not err and out.splitlines()[0].endswith("fp16, e4m3-row weights (codes and scales)")
    assert "total: 7.51 GB of weights read per step" in out                      # 15.01 GB in FP16
    row = next(r for r in csv.read_text().splitlines() if ",14336,4096,1," in r).split(",")
    assert row[4] == "e4m3-row" and int(row[-2]) == 64 * (14336 * 4096 + 4 * 14336)   # codes + a scale per row
    code, out, _ = _run(capsys, "shapes", "--hf-config", str(MISTRAL3))
    assert code == 0 and out.splitlines()[1].startswith("note: mistral3: its text model (text_config) read")


@pytest.mark.parametrize("args,needle", [
    (["shapes", "--model", "llama-3-70b", "--tp", "3"], "TP 3 does not divide num_attention_heads (64)"),
    (["shapes"], "shapes needs one model"),
    (["shapes", "--model", "llama-3-8b", "--hf-config", str(MIXTRAL)], "shapes needs one model"),
    (["shapes", "--model", "llama-3-8b", "--tp", "0"], "--tp"),
    (["shapes", "--model", "llama-3-8b", "--batch", "17"], "outside 1..16"),
    (["search", "--shape", "64x64", "--tp", "2"], "--tp picks one GPU's shards"),
    (["search", "--hf-config", str(QWEN3_MOE), "--tp", "3"], "TP 3 does not divide num_attention_heads (32)"),
])
def test_shapes_and_tp_bad_input_is_one_line_exit_2(capsys, tmp_path, args, needle):
    code, out, err = _run(capsys, *args)
    assert code == 2 and len(err) == 1 and needle in err[0], (code, err)
