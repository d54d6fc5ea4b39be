"""A Hugging Face ``config.json`` read into the linear layers of a decoder-only model: unfused as
transformers builds them (q/k/v/o, gate/up/down, LM head) or fused as inference engines run them
(qkv, o, gate_up, down, LM head). Pure Python: no torch or transformers import, local files only.

Supported: ``model_type`` llama, mistral and qwen2; any other type with the same fields is read as
llama-like (its ``model_type`` is kept). W is [M, d] = [out_features, in_features]."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from ..errors import UsageError
from .shapes import Shape

# The presets: faithful copies of the public config.json of these checkpoints (gemvtune/kernels/hf_configs/).
PRESET_SOURCES: dict[str, str] = {
    "llama-3-8b": "meta-llama/Meta-Llama-3-8B",
    "llama-3-70b": "meta-llama/Meta-Llama-3-70B",
    "qwen2.5-7b": "Qwen/Qwen2.5-7B-Instruct",
    "mistral-7b": "mistralai/Mistral-7B-v0.1",
    "mistral-nemo-12b": "mistralai/Mistral-Nemo-Base-2407",
}
PRESETS: tuple[str, ...] = tuple(PRESET_SOURCES)
SUPPORTED_TYPES: tuple[str, ...] = ("llama", "mistral", "qwen2")
_MAX_BYTES = 8 * 2**20          # a config.json is a few kB; anything this large is the wrong file


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
class HFModel:
    """The fields of a config.json that fix a decoder's linear layers. ``attention_bias`` and
    ``mlp_bias`` are the file's flags (default False); ``qkv_bias``/``o_bias``/``ffn_bias`` are the
    biases transformers actually builds (qwen2: q/k/v with bias, o and the MLP without)."""

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

    @property
    def qkv_bias(self) -> bool:
        return True if self.model_type == "qwen2" else self.attention_bias

    @property
    def o_bias(self) -> bool:
        return False if self.model_type == "qwen2" else self.attention_bias

    @property
    def ffn_bias(self) -> bool:
        return False if self.model_type == "qwen2" else self.mlp_bias

    @property
    def q_width(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.num_key_value_heads * self.head_dim

    def linear_layers(self, fused: bool = False) -> list[Linear]:
        """Per layer in launch order, then the LM head: unfused q_proj, k_proj, v_proj, o_proj,
        gate_proj, up_proj, down_proj (transformers' modules); fused qkv_proj, o_proj, gate_up_proj,
        down_proj (vLLM, SGLang, TensorRT-LLM, llama.cpp's fused weights)."""
        h, i = self.hidden_size, self.intermediate_size
        o = Linear("o_proj", h, self.q_width, self.o_bias)
        down = Linear("down_proj", h, i, self.ffn_bias)
        head = Linear("lm_head", self.vocab_size, h, False, per_layer=False)
        if fused:
            return [Linear("qkv_proj", self.q_width + 2 * self.kv_width, h, self.qkv_bias), o,
                    Linear("gate_up_proj", 2 * i, h, self.ffn_bias), down, head]
        return [Linear("q_proj", self.q_width, h, self.qkv_bias), Linear("k_proj", self.kv_width, h, self.qkv_bias),
                Linear("v_proj", self.kv_width, h, self.qkv_bias), o,
                Linear("gate_proj", i, h, self.ffn_bias), Linear("up_proj", i, h, self.ffn_bias), down, head]

    def groups(self, n: int = 1, dtype: str = "fp16") -> list[Any]:
        """The sibling linears of a layer that read the same x, as ``GroupShape``s (``gemvtune.kernels.group``):
        q, k, v, then gate, up."""
        from .group import GroupShape

        h, i = self.hidden_size, self.intermediate_size
        return [GroupShape((self.q_width, self.kv_width, self.kv_width), h, n, dtype), GroupShape((i, i), h, n, dtype)]

    def shapes(self, fused: bool = False, n: int = 1) -> list[Shape]:
        """The distinct (M, d) of :meth:`linear_layers`, first seen first, at batch n."""
        return [Shape(M, d, n) for M, d in dict.fromkeys((x.M, x.d) for x in self.linear_layers(fused))]

    @classmethod
    def from_dict(cls, data: Any, where: str = "config", name: str = "") -> HFModel:
        """Check the fields of a parsed config.json (``where`` names it in every error) and build the model."""
        if not isinstance(data, dict):
            raise UsageError(f"{where} is not a JSON object (a Hugging Face config.json is one), "
                             f"got {type(data).__name__}")
        model_type = data.get("model_type")
        if model_type is None:
            raise UsageError(f"{where}: required field 'model_type' is missing" + _nested_hint(data))
        if not isinstance(model_type, str) or not model_type.strip():
            raise UsageError(f"{where}: field 'model_type' must be a non-empty string, got {_show(model_type)}")
        _refuse_other_architectures(data, model_type.strip(), where)
        hidden = _size(data, "hidden_size", where)
        inter = _size(data, "intermediate_size", where)
        heads = _size(data, "num_attention_heads", where)
        kv = _size(data, "num_key_value_heads", where, default=heads)
        vocab = _size(data, "vocab_size", where)
        layers = _size(data, "num_hidden_layers", where)
        head_dim = _size(data, "head_dim", where, default=0)
        if not head_dim:
            if hidden % heads:
                raise UsageError(f"{where}: field 'num_attention_heads' ({heads}) does not divide 'hidden_size' "
                                 f"({hidden}) and no 'head_dim' is given")
            head_dim = hidden // heads
        if kv > heads or heads % kv:
            raise UsageError(f"{where}: field 'num_key_value_heads' ({kv}) must divide 'num_attention_heads' ({heads})")
        if not name:
            named = data.get("_name_or_path")
            name = named.strip() if isinstance(named, str) and named.strip() else "model"
        model = cls(name=name, model_type=model_type.strip(), hidden_size=hidden, intermediate_size=inter,
                    num_attention_heads=heads, num_key_value_heads=kv, head_dim=head_dim, vocab_size=vocab,
                    num_hidden_layers=layers, tie_word_embeddings=_flag(data, "tie_word_embeddings", where),
                    attention_bias=_flag(data, "attention_bias", where), mlp_bias=_flag(data, "mlp_bias", where),
                    source=where)
        kv_rows = "num_key_value_heads*head_dim x hidden_size"
        fields = {"q_proj": "num_attention_heads*head_dim x hidden_size", "k_proj": kv_rows, "v_proj": kv_rows,
                  "o_proj": "hidden_size x num_attention_heads*head_dim",
                  "gate_proj": "intermediate_size x hidden_size", "up_proj": "intermediate_size x hidden_size", "down_proj": "hidden_size x intermediate_size",
                  "lm_head": "vocab_size x hidden_size",
                  "qkv_proj": "(num_attention_heads+2*num_key_value_heads)*head_dim x hidden_size",
                  "gate_up_proj": "2*intermediate_size x hidden_size"}
        for fused in (False, True):
            for lin in model.linear_layers(fused):
                try:
                    lin.shape()
                except UsageError as e:                      # Shape's own limits: 2^31, no GPU holds it
                    raise UsageError(f"{where}: {lin.name} ({fields[lin.name]}) is {lin.M}x{lin.d}, "
                                     f"refused: {e}") from None
        return model


def _show(v: Any) -> str:
    """A value for an error line: short, one line."""
    text = json.dumps(v) if not isinstance(v, (dict, list)) else type(v).__name__
    return text if len(text) <= 40 else text[:37] + "..."


# Fields that make a decoder a mixture of experts: its FFN is many [moe_intermediate, hidden] experts (and maybe a
# shared expert), not the one gate/up/down this reader would list. Until MoE shapes are built, such a model is
# refused rather than tuned on shapes it does not have.
MOE_FIELDS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_intermediate_size",
              "shared_expert_intermediate_size", "n_shared_experts", "num_experts_per_tok", "moe_num_experts")
# Decoders whose linear layers are not llama's q/k/v/o + gate/up/down (fused or shaped otherwise).
OTHER_ARCHITECTURES = ("gpt2", "gpt_neox", "gptj", "falcon", "bloom", "mpt", "opt", "mamba", "mamba2", "rwkv",
                       "t5", "bart", "bert", "jamba", "dbrx", "mixtral", "deepseek_v2", "deepseek_v3")


def _refuse_other_architectures(data: dict, model_type: str, where: str) -> None:
    experts = [k for k in MOE_FIELDS if data.get(k) not in (None, 0, False)]
    if experts or "moe" in model_type.lower() or model_type in ("mixtral", "dbrx", "deepseek_v2", "deepseek_v3"):
        n = next((data[k] for k in ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
                  if isinstance(data.get(k), int) and not isinstance(data.get(k), bool)), None)
        raise UsageError(f"{where}: {_show(model_type)} is a mixture-of-experts model"
                         + (f" ({n} experts)" if n else f" ({', '.join(experts[:3])})" if experts else "")
                         + "; gemvtune reads dense decoders (llama, mistral, qwen2 and llama-like) only for now, "
                           "so its expert shapes would be missed")
    if model_type in OTHER_ARCHITECTURES:
        raise UsageError(f"{where}: model_type {_show(model_type)} has other linear layers than llama's "
                         "(q/k/v/o, gate/up/down); gemvtune reads dense llama-like decoders only for now")


def _nested_hint(data: dict) -> str:
    return " (its text model is nested under 'text_config': give that part as its own config.json)" \
        if isinstance(data.get("text_config"), dict) else ""


def _size(data: dict, field: str, where: str, default: int | None = None) -> int:
    """A positive integer field; a bool, a float (even 4096.0) or a string is refused. null or absent
    takes ``default``; absent without one is a missing required field."""
    v = data.get(field)
    if v is None:
        if default is None:
            raise UsageError(f"{where}: required field {field!r} is "
                             f"{'missing' if field not in data else 'null'}" + _nested_hint(data))
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise UsageError(f"{where}: field {field!r} must be a positive integer, got {_show(v)}")
    if v < 1:
        raise UsageError(f"{where}: field {field!r} must be a positive integer, got {v}")
    return v


def _flag(data: dict, field: str, where: str) -> bool:
    v = data.get(field)
    if v is None:
        return False
    if not isinstance(v, bool):
        raise UsageError(f"{where}: field {field!r} must be true or false, got {_show(v)}")
    return v


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
