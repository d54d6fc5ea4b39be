"""The mixture-of-experts and latent-attention fields of a Hugging Face ``config.json``, as transformers builds them:

- ``mixtral``: every layer a sparse block of ``num_local_experts`` experts of ``intermediate_size``, top
  ``num_experts_per_tok``, router ``[experts, hidden]`` (MixtralSparseMoeBlock);
- ``qwen2_moe``: ``num_experts`` experts of ``moe_intermediate_size``, a shared expert of
  ``shared_expert_intermediate_size`` and its sigmoid gate ``[1, hidden]`` (Qwen2MoeSparseMoeBlock); ``qwen3_moe``
  the same without the shared expert. Layer i is sparse when it is not in ``mlp_only_layers`` and
  (i + 1) % ``decoder_sparse_step`` == 0; the others are dense MLPs of ``intermediate_size``;
- ``deepseek_v2``/``deepseek_v3``: ``n_routed_experts`` experts of ``moe_intermediate_size``, ``n_shared_experts``
  folded into one shared MLP of ``moe_intermediate_size * n_shared_experts`` (DeepseekV3MoE); layer i is sparse
  when i >= ``first_k_dense_replace`` and i % ``moe_layer_freq`` == 0 (DeepSeek's own modeling code; transformers
  has no ``moe_layer_freq``, every DeepSeek checkpoint sets it to 1). Their attention is multi-head latent
  attention (DeepseekV3Attention): ``q_lora_rank`` (null: one q_proj), ``kv_lora_rank``, ``qk_nope_head_dim``,
  ``qk_rope_head_dim``, ``v_head_dim``.

Any other config with expert fields is refused: its expert layout is not known here, so its shapes would be wrong."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UsageError
from .hffields import count, layer_list, show, size

# model_type -> its family of expert layout
MOE_TYPES: dict[str, str] = {"mixtral": "mixtral", "qwen2_moe": "qwen", "qwen3_moe": "qwen",
                             "deepseek_v2": "deepseek", "deepseek_v3": "deepseek"}
MLA_TYPES = ("deepseek_v2", "deepseek_v3")
# Fields that make a decoder a mixture of experts (any type), and those that count its experts.
MOE_FIELDS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_intermediate_size",
              "shared_expert_intermediate_size", "n_shared_experts", "num_experts_per_tok", "moe_num_experts")
_EXPERT_COUNTS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")


@dataclass(frozen=True)
class MoE:
    """The sparse blocks of a decoder: ``experts`` routed experts of ``expert_intermediate`` each, ``top_k`` per
    token, in ``sparse_layers`` of the layers (the rest are dense MLPs of the model's ``intermediate_size``); a
    shared expert of ``shared_intermediate`` (0: none) run on every token, with its sigmoid gate [1, hidden] where
    ``shared_gate``. ``family``: mixtral, qwen or deepseek (the names of its modules)."""

    family: str
    experts: int
    top_k: int
    expert_intermediate: int
    sparse_layers: int
    shared_intermediate: int = 0
    shared_gate: bool = False

    @property
    def shared_name(self) -> str:
        return "shared_experts" if self.family == "deepseek" else "shared_expert"


@dataclass(frozen=True)
class MLA:
    """Multi-head latent attention: ``q_lora_rank`` None where q is one projection."""

    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


def refuse_unknown_experts(data: dict, model_type: str, where: str) -> None:
    """A UsageError for a config with expert fields whose type is not one of MOE_TYPES."""
    if model_type in MOE_TYPES:
        return
    experts = [k for k in MOE_FIELDS if data.get(k) not in (None, 0, False)]
    if experts or "moe" in model_type.lower() or model_type == "dbrx":
        n = next((data[k] for k in _EXPERT_COUNTS
                  if isinstance(data.get(k), int) and not isinstance(data.get(k), bool)), None)
        raise UsageError(f"{where}: {show(model_type)} is a mixture-of-experts model"
                         + (f" ({n} experts)" if n else f" ({', '.join(experts[:3])})" if experts else "")
                         + f" of a kind gemvtune does not read (it reads {', '.join(MOE_TYPES)} and dense "
                           "llama-like decoders), so its expert shapes would be missed")


def read_moe(data: dict, model_type: str, layers: int, where: str) -> MoE | None:
    """The MoE of a config of one of MOE_TYPES (None for any other type); a missing or bad field is one UsageError."""
    family = MOE_TYPES.get(model_type)
    if family is None:
        return None
    if family == "mixtral":
        experts, inter = size(data, "num_local_experts", where), size(data, "intermediate_size", where)
        sparse, shared, gate = layers, 0, False
    elif family == "qwen":
        experts, inter = size(data, "num_experts", where), size(data, "moe_intermediate_size", where)
        step = size(data, "decoder_sparse_step", where, default=1)
        dense_only = layer_list(data, "mlp_only_layers", where, layers)
        sparse = layers // step - sum(1 for i in dense_only if (i + 1) % step == 0)   # (no loop over the layers)
        gate = model_type == "qwen2_moe"
        shared = size(data, "shared_expert_intermediate_size", where) if gate else 0
    else:
        experts, inter = size(data, "n_routed_experts", where), size(data, "moe_intermediate_size", where)
        first, freq = count(data, "first_k_dense_replace", where), size(data, "moe_layer_freq", where, default=1)
        sparse = max(0, (layers - 1) // freq - (first - 1) // freq)        # multiples of freq in first..layers-1
        shared, gate = inter * count(data, "n_shared_experts", where), False
    top_k = size(data, "num_experts_per_tok", where)
    if top_k > experts:
        raise UsageError(f"{where}: field 'num_experts_per_tok' ({top_k}) is more than the {experts} experts")
    return MoE(family, experts, top_k, inter, sparse, shared, gate)


def read_mla(data: dict, model_type: str, where: str) -> MLA | None:
    """The latent attention of a DeepSeek config (None for any other type)."""
    if model_type not in MLA_TYPES:
        return None
    q = data.get("q_lora_rank")
    return MLA(None if q is None else size(data, "q_lora_rank", where), size(data, "kv_lora_rank", where),
               size(data, "qk_nope_head_dim", where), size(data, "qk_rope_head_dim", where),
               size(data, "v_head_dim", where))
