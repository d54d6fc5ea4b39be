"""A Hugging Face ``config.json`` read into the linear layers of a decoder-only model: unfused as
transformers builds them (q/k/v/o, gate/up/down, LM head) or fused as inference engines run them
(qkv, o, gate_up, down, LM head). Pure Python: no torch or transformers import, local files only.

Read: ``model_type`` llama, mistral, qwen2 and any other type with the same fields (read as llama-like, its
``model_type`` kept); the mixtures of experts mixtral, qwen2_moe, qwen3_moe, deepseek_v2 and deepseek_v3 (their
experts and DeepSeek's latent attention: ``gemvtune.kernels.hfmoe``); multimodal models through their text model
(``text_config``, or the top level where the text fields are there, as Qwen2-VL keeps them), the vision tower left
out and said so (``HFModel.note``). Refused, with the reason: other mixtures of experts and decoders whose linears
are not llama's (gpt2, falcon, mamba, ...). W is [M, d] = [out_features, in_features]; the linears of a step, and
their tensor-parallel shards: ``gemvtune.kernels.steplayers``."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from ..errors import UsageError
from .hffields import flag, show, size
from .hfmoe import MLA, MOE_TYPES, MoE, read_mla, read_moe, refuse_unknown_experts
from .shapes import Shape
from .steplayers import Linear, step_linears

__all__ = ["HFModel", "Linear", "MODELS", "PRESETS", "PRESET_SOURCES", "model_shapes", "preset_path",
           "read_hf_config", "read_preset"]

# The presets: faithful copies of the public config.json of these checkpoints (gemvtune/kernels/hf_configs/).
PRESET_SOURCES: dict[str, str] = {
    "llama-3-8b": "meta-llama/Meta-Llama-3-8B",
    "llama-3-70b": "meta-llama/Meta-Llama-3-70B",
    "qwen2.5-7b": "Qwen/Qwen2.5-7B-Instruct",
    "mistral-7b": "mistralai/Mistral-7B-v0.1",
    "mistral-nemo-12b": "mistralai/Mistral-Nemo-Base-2407",
}
PRESETS: tuple[str, ...] = tuple(PRESET_SOURCES)
SUPPORTED_TYPES: tuple[str, ...] = ("llama", "mistral", "qwen2", "mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2",
                                    "deepseek_v3")
QKV_BIAS_TYPES = ("qwen2", "qwen2_moe", "qwen2_vl", "qwen2_5_vl")   # q/k/v with bias, o and the MLP without
VISION_FIELDS = ("vision_config", "audio_config")
_MAX_BYTES = 8 * 2**20          # a config.json is a few kB; anything this large is the wrong file


@dataclass(frozen=True)
class HFModel:
    """The fields of a config.json that fix a decoder's linear layers. ``attention_bias`` and
    ``mlp_bias`` are the file's flags (default False); ``qkv_bias``/``o_bias``/``ffn_bias`` are the
    biases transformers actually builds (qwen2: q/k/v with bias, o and the MLP without). ``moe``: the sparse
    blocks of a mixture of experts; ``mla``: DeepSeek's latent attention (its ``head_dim`` is q's,
    qk_nope + qk_rope); ``note``: what of the file was left out (a multimodal model's vision tower)."""

    name: str
    model_type: str
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    num_hidden_layers: int
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    mlp_bias: bool = False
    source: str = ""
    moe: MoE | None = None
    mla: MLA | None = None
    note: str = ""

    @property
    def qkv_bias(self) -> bool:
        return True if self.model_type in QKV_BIAS_TYPES else self.attention_bias

    @property
    def o_bias(self) -> bool:
        return False if self.model_type in QKV_BIAS_TYPES else self.attention_bias

    @property
    def ffn_bias(self) -> bool:
        return False if self.model_type in QKV_BIAS_TYPES else self.mlp_bias

    @property
    def q_width(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.num_key_value_heads * self.head_dim

    def linear_layers(self, fused: bool = False) -> list[Linear]:
        """The distinct linears of a layer in launch order, then the LM head: unfused q_proj, k_proj, v_proj,
        o_proj, gate_proj, up_proj, down_proj (transformers' modules); fused qkv_proj, o_proj, gate_up_proj,
        down_proj (vLLM, SGLang, TensorRT-LLM, llama.cpp's fused weights). A mixture of experts adds its router,
        shared expert and experts; latent attention has its own projections (``gemvtune.kernels.steplayers``)."""
        return [x.linear for x in step_linears(self, fused)]

    def groups(self, n: int = 1, dtype: str = "fp16") -> list[Any]:
        """The sibling linears of a layer that read the same x, as ``GroupShape``s (``gemvtune.kernels.group``):
        q, k, v, then gate, up. Dense llama-like decoders only."""
        from .group import GroupShape

        if self.moe is not None or self.mla is not None:
            raise UsageError(f"{self.name}: sibling groups (q, k, v; gate, up) are built for dense llama-like "
                             f"decoders, not {self.model_type}")
        h, i = self.hidden_size, self.intermediate_size
        return [GroupShape((self.q_width, self.kv_width, self.kv_width), h, n, dtype), GroupShape((i, i), h, n, dtype)]

    def shapes(self, fused: bool = False, n: int = 1) -> list[Shape]:
        """The distinct (M, d) of :meth:`linear_layers`, first seen first, at batch n (every linear at n: the
        tokens an expert sees are ``gemvtune.kernels.modelshapes.step_shapes``')."""
        return [Shape(M, d, n) for M, d in dict.fromkeys((x.M, x.d) for x in self.linear_layers(fused))]

    @classmethod
    def from_dict(cls, data: Any, where: str = "config", name: str = "") -> HFModel:
        """Check the fields of a parsed config.json (``where`` names it in every error) and build the model."""
        if not isinstance(data, dict):
            raise UsageError(f"{where} is not a JSON object (a Hugging Face config.json is one), "
                             f"got {type(data).__name__}")
        top = _model_type(data, where)
        text, at, note = data, where, ""
        if data.get("text_config") is not None:
            text, at = data["text_config"], f"{where}: text_config"
            if not isinstance(text, dict):
                raise UsageError(f"{at} must be a JSON object, got {show(text)}")
        left = [k for k in VISION_FIELDS if data.get(k) is not None]
        if text is not data:
            note = f"{top}: its text model (text_config) read"
        elif left:
            note = f"{top}: its text fields read at the top level"
        if left:
            note += f"; its {' and '.join(left)} (run on the images, not per decoded token) left out"
        model_type = _model_type(text, at) if text is not data else top
        refuse_unknown_experts(text, model_type, at)
        if model_type in OTHER_ARCHITECTURES:
            raise UsageError(f"{at}: model_type {show(model_type)} has other linear layers than llama's "
                             "(q/k/v/o, gate/up/down); gemvtune reads llama-like decoders and the mixtures of "
                             f"experts {', '.join(MOE_TYPES)}")
        hidden = size(text, "hidden_size", at)
        inter = size(text, "intermediate_size", at)
        heads = size(text, "num_attention_heads", at)
        kv = size(text, "num_key_value_heads", at, default=heads)
        vocab = size(text, "vocab_size", at)
        layers = size(text, "num_hidden_layers", at)
        mla = read_mla(text, model_type, at)
        head_dim = mla.qk_head_dim if mla else size(text, "head_dim", at, default=0)
        if not head_dim:
            if hidden % heads:
                raise UsageError(f"{at}: field 'num_attention_heads' ({heads}) does not divide 'hidden_size' "
                                 f"({hidden}) and no 'head_dim' is given")
            head_dim = hidden // heads
        if kv > heads or heads % kv:
            raise UsageError(f"{at}: field 'num_key_value_heads' ({kv}) must divide 'num_attention_heads' ({heads})")
        if not name:
            named = data.get("_name_or_path")
            name = named.strip() if isinstance(named, str) and named.strip() else "model"
        model = cls(name=name, model_type=model_type, hidden_size=hidden, intermediate_size=inter,
                    num_attention_heads=heads, num_key_value_heads=kv, head_dim=head_dim, vocab_size=vocab,
                    num_hidden_layers=layers, tie_word_embeddings=flag(text, "tie_word_embeddings", at),
                    attention_bias=flag(text, "attention_bias", at), mlp_bias=flag(text, "mlp_bias", at),
                    source=where, moe=read_moe(text, model_type, layers, at), mla=mla, note=note)
        for fused in (False, True):
            for lin in model.linear_layers(fused):
                try:
                    lin.shape()
                except UsageError as e:                      # Shape's own limits: 2^31, no GPU holds it
                    what = f" ({FIELDS[lin.name]})" if lin.name in FIELDS and mla is None else ""
                    raise UsageError(f"{at}: {lin.name}{what} is {lin.M}x{lin.d}, refused: {e}") from None
        return model


_KV_ROWS = "num_key_value_heads*head_dim x hidden_size"
FIELDS = {"q_proj": "num_attention_heads*head_dim x hidden_size", "k_proj": _KV_ROWS, "v_proj": _KV_ROWS,
          "o_proj": "hidden_size x num_attention_heads*head_dim", "gate_proj": "intermediate_size x hidden_size",
          "up_proj": "intermediate_size x hidden_size", "down_proj": "hidden_size x intermediate_size",
          "lm_head": "vocab_size x hidden_size",
          "qkv_proj": "(num_attention_heads+2*num_key_value_heads)*head_dim x hidden_size",
          "gate_up_proj": "2*intermediate_size x hidden_size"}   # the field formulas of a dense decoder's linears
# Decoders whose linear layers are not llama's q/k/v/o + gate/up/down (fused or shaped otherwise).
OTHER_ARCHITECTURES = ("gpt2", "gpt_neox", "gptj", "falcon", "bloom", "mpt", "opt", "mamba", "mamba2", "rwkv",
                       "t5", "bart", "bert", "jamba", "dbrx")


def _model_type(data: dict, where: str) -> str:
    model_type = data.get("model_type")
    if model_type is None:
        raise UsageError(f"{where}: required field 'model_type' is missing")
    if not isinstance(model_type, str) or not model_type.strip():
        raise UsageError(f"{where}: field 'model_type' must be a non-empty string, got {show(model_type)}")
    return model_type.strip()


def read_hf_config(path: str | os.PathLike) -> HFModel:
    """Read a local Hugging Face ``config.json`` (the file, or the folder holding it) into an HFModel;
    bad input is one UsageError naming the file and the field. Never downloads anything."""
    p = Path(path).expanduser()
    if p.is_dir():
        folder, p = p, p / "config.json"
        if not p.is_file():
            raise UsageError(f"folder {folder} holds no config.json")
    where = f"config {p}"
    from ..userfile import decode_json, read_bytes

    raw = read_bytes(p, "config", _MAX_BYTES)   # a regular file, capped: a FIFO or /dev/zero is one line
    if not raw.strip():
        raise UsageError(f"{where} is empty")
    data = decode_json(raw, where)
    stem = p.parent.resolve().name if p.name == "config.json" else p.stem
    named = data.get("_name_or_path") if isinstance(data, dict) else None
    name = named.strip() if isinstance(named, str) and named.strip() else stem
    return HFModel.from_dict(data, where=where, name=name)


def preset_path(name: str) -> Path:
    """The packaged config.json of a model preset (gemvtune/kernels/hf_configs/NAME.json)."""
    if not isinstance(name, str) or name not in PRESET_SOURCES:
        raise UsageError(f"unknown model preset {name!r}; known: {', '.join(sorted(PRESETS))}")
    return Path(__file__).resolve().parent / "hf_configs" / f"{name}.json"


def read_preset(name: str) -> HFModel:
    """A preset read from its packaged config.json, named by the preset (read once, then cached)."""
    return _read_preset(preset_path(name).stem)


@cache
def _read_preset(name: str) -> HFModel:
    return dataclasses.replace(read_hf_config(preset_path(name)), name=name)


class _Models(Mapping):
    """``MODELS[name]``: the linear layers of one decode step of a model preset as engines run them
    (fused: qkv, o, gate_up, down, then lm_head), ``(layer_name, M, d)`` with (M, d) = (out_features,
    in_features). Derived from the preset's packaged Hugging Face config.json (gemvtune/kernels/hf_configs/),
    read on first use, so ``import gemvtune`` reads no file."""

    def _names(self) -> tuple[str, ...]:
        return PRESETS

    def __getitem__(self, name: str) -> list[tuple[str, int, int]]:
        if not isinstance(name, str) or name not in self._names():
            raise KeyError(name)
        return [(x.name.removesuffix("_proj"), x.M, x.d) for x in read_preset(name).linear_layers(fused=True)]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._names()

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    def __repr__(self) -> str:
        return f"MODELS({', '.join(self._names())})"


MODELS: Mapping[str, list[tuple[str, int, int]]] = _Models()


def model_shapes(name: str, n: int = 1, fused: bool = False) -> list[Shape]:
    """The distinct (M, d) shapes of a model preset's linear layers at batch n, first seen first:
    unfused as transformers runs them (q, k, v, o, gate, up, down, lm_head) or, with ``fused``, as
    engines run them (qkv, o, gate_up, down, lm_head)."""
    return read_preset(name).shapes(fused=fused, n=n)
