"""The linear layers of one decode step as one GPU runs them: W [M, d] = [out_features, in_features] of each
linear of a decoder layer (attention, then the MLP or the sparse block), how many layers run it, then the LM head.

Unfused as transformers builds them (q, k, v, o; gate, up, down), or fused as engines run them (qkv, gate_up; for
latent attention with a q LoRA, ``fused_qkv_a_proj``: q_a and kv_a in one, as vLLM and SGLang merge them).

Tensor parallelism (``tp``), as vLLM and SGLang shard a model over TP GPUs (``vllm/model_executor/layers/linear.py``,
``vocab_parallel_embedding.py``, ``fused_moe``):

- column-parallel (q, k, v, gate, up, qkv, gate_up; q_b, kv_b; experts' and shared experts' gate/up): M / TP rows;
  TP must divide the attention heads and every intermediate size;
- KV heads: kv / TP each when TP <= kv; one KV head, replicated on TP / kv GPUs, when TP > kv
  (QKVParallelLinear); TP and kv must divide one another;
- row-parallel (o, down, experts' down): d / TP columns;
- replicated (routers [experts, hidden], the shared-expert gate [1, hidden], q_a and kv_a of latent attention):
  whole on every GPU;
- the LM head, vocab-parallel (ParallelLMHead): the vocabulary padded to a multiple of 64
  (DEFAULT_VOCAB_PADDING_SIZE), then split in TP: ceil(vocab / 64) * 64 / TP rows. At TP 1 the head is the
  config's vocabulary, as transformers builds it (and as ``search --model`` has always tuned it).

Experts are tensor-parallel within each expert (every GPU holds a shard of every expert), not expert-parallel."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..errors import UsageError
from .hfmoe import MLA, MoE
from .shapes import Shape

VOCAB_PADDING = 64      # vLLM's and SGLang's DEFAULT_VOCAB_PADDING_SIZE


@dataclass(frozen=True)
class Linear:
    """One linear layer, y = x W^T (+ b): W is [M, d]; ``per_layer`` False for the LM head (once per step)."""

    name: str
    M: int
    d: int
    bias: bool = False
    per_layer: bool = True

    def shape(self, n: int = 1) -> Shape:
        return Shape(self.M, self.d, n)


@dataclass(frozen=True)
class StepLinear:
    """A linear of the step: run by ``layers`` decoder layers (1 for the LM head); ``routed``: a routed expert's
    linear, launched once per activated expert on that expert's tokens."""

    linear: Linear
    layers: int
    routed: bool = False


class Decoder(Protocol):
    """What the step is built from (``gemvtune.kernels.hfconfig.HFModel``)."""

    @property
    def name(self) -> str: ...
    @property
    def hidden_size(self) -> int: ...
    @property
    def intermediate_size(self) -> int: ...
    @property
    def num_attention_heads(self) -> int: ...
    @property
    def num_key_value_heads(self) -> int: ...
    @property
    def head_dim(self) -> int: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def num_hidden_layers(self) -> int: ...
    @property
    def attention_bias(self) -> bool: ...
    @property
    def qkv_bias(self) -> bool: ...
    @property
    def o_bias(self) -> bool: ...
    @property
    def ffn_bias(self) -> bool: ...
    @property
    def moe(self) -> MoE | None: ...
    @property
    def mla(self) -> MLA | None: ...


def padded_vocab(vocab: int) -> int:
    return -(-vocab // VOCAB_PADDING) * VOCAB_PADDING


def _sizes_split(model: Decoder) -> list[tuple[str, int]]:
    """(field, size) of every intermediate size the model's MLPs split in TP."""
    moe = model.moe
    out = [("intermediate_size", model.intermediate_size)] if not moe or moe.sparse_layers < model.num_hidden_layers \
        else []
    if moe and moe.sparse_layers:
        out.append(("intermediate_size" if moe.family == "mixtral" else "moe_intermediate_size",
                    moe.expert_intermediate))
        if moe.shared_intermediate and moe.family == "qwen":
            out.append(("shared_expert_intermediate_size", moe.shared_intermediate))
    return out


def check_tp(model: Decoder, tp: int) -> None:
    """A UsageError unless ``tp`` shards the model as the engines shard it (one line, naming the field)."""
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise UsageError(f"tensor parallelism must be a positive integer, got {tp!r}")
    if tp == 1:
        return
    heads, kv = model.num_attention_heads, model.num_key_value_heads
    if heads % tp:
        raise UsageError(f"{model.name}: TP {tp} does not divide num_attention_heads ({heads}): each GPU runs "
                         "whole attention heads")
    if model.mla is None and (kv % tp if tp <= kv else tp % kv):
        raise UsageError(f"{model.name}: TP {tp} and num_key_value_heads ({kv}) must divide one another: a GPU holds "
                         "kv/TP KV heads, or one KV head replicated on TP/kv GPUs (vLLM's QKVParallelLinear)")
    for field, inter in _sizes_split(model):
        if inter % tp:
            raise UsageError(f"{model.name}: TP {tp} does not divide {field} ({inter}): gate/up are split by rows, "
                             "down by columns")
    rows = padded_vocab(model.vocab_size)
    if rows % tp:
        raise UsageError(f"{model.name}: TP {tp} does not divide the LM head's {rows} rows (vocab_size "
                         f"{model.vocab_size} padded to a multiple of {VOCAB_PADDING}, as vLLM and SGLang pad it)")


def mlp(prefix: str, inter: int, h: int, fused: bool, tp: int, bias: bool = False) -> list[Linear]:
    """A gated MLP of intermediate size ``inter`` (gate/up column-parallel, down row-parallel)."""
    i = inter // tp
    down = Linear(prefix + "down_proj", h, i, bias)
    if fused:
        return [Linear(prefix + "gate_up_proj", 2 * i, h, bias), down]
    return [Linear(prefix + "gate_proj", i, h, bias), Linear(prefix + "up_proj", i, h, bias), down]


def _latent(model: Decoder, a: MLA, heads: int, fused: bool) -> list[Linear]:
    """DeepseekV3Attention's linears, ``heads`` of them on this GPU."""
    h, b = model.hidden_size, model.attention_bias
    kv_a = a.kv_lora_rank + a.qk_rope_head_dim
    if a.q_lora_rank is None:
        q = [Linear("q_proj", heads * a.qk_head_dim, h), Linear("kv_a_proj_with_mqa", kv_a, h, b)]
    elif fused:
        q = [Linear("fused_qkv_a_proj", a.q_lora_rank + kv_a, h, b),
             Linear("q_b_proj", heads * a.qk_head_dim, a.q_lora_rank)]
    else:
        q = [Linear("q_a_proj", a.q_lora_rank, h, b), Linear("q_b_proj", heads * a.qk_head_dim, a.q_lora_rank),
             Linear("kv_a_proj_with_mqa", kv_a, h, b)]
    return q + [Linear("kv_b_proj", heads * (a.qk_nope_head_dim + a.v_head_dim), a.kv_lora_rank),
                Linear("o_proj", h, heads * a.v_head_dim, b)]


def attention(model: Decoder, fused: bool = False, tp: int = 1) -> list[Linear]:
    """The attention linears of one layer on one GPU of ``tp``."""
    h, heads = model.hidden_size, model.num_attention_heads // tp
    if model.mla is not None:
        return _latent(model, model.mla, heads, fused)
    q, kv = heads * model.head_dim, max(1, model.num_key_value_heads // tp) * model.head_dim
    o, b = Linear("o_proj", h, q, model.o_bias), model.qkv_bias
    if fused:
        return [Linear("qkv_proj", q + 2 * kv, h, b), o]
    return [Linear("q_proj", q, h, b), Linear("k_proj", kv, h, b), Linear("v_proj", kv, h, b), o]


def step_linears(model: Decoder, fused: bool = False, tp: int = 1) -> list[StepLinear]:
    """Every linear of one decode step on one GPU of ``tp``, in launch order within a layer (attention, the dense
    MLP where a layer has one, the router, the shared expert's gate and MLP, the routed experts), then the LM head."""
    check_tp(model, tp)
    h, layers, moe = model.hidden_size, model.num_hidden_layers, model.moe
    sparse = moe.sparse_layers if moe else 0
    out = [StepLinear(x, layers) for x in attention(model, fused, tp)]
    if layers > sparse:
        out += [StepLinear(x, layers - sparse) for x in mlp("", model.intermediate_size, h, fused, tp, model.ffn_bias)]
    if moe and sparse:
        out.append(StepLinear(Linear("router", moe.experts, h), sparse))
        if moe.shared_gate:
            out.append(StepLinear(Linear("shared_expert_gate", 1, h), sparse))
        if moe.shared_intermediate:
            out += [StepLinear(x, sparse) for x in mlp(moe.shared_name + ".", moe.shared_intermediate, h, fused, tp)]
        out += [StepLinear(x, sparse, routed=True) for x in mlp("experts.", moe.expert_intermediate, h, fused, tp)]
    rows = model.vocab_size if tp == 1 else padded_vocab(model.vocab_size) // tp
    return out + [StepLinear(Linear("lm_head", rows, h, False, per_layer=False), 1)]
