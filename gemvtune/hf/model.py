"""The model of ``gemvtune bench hf``: a transformers causal LM built from a local config.json
(no download: transformers' own config class, random seeded weights), and its two variants on one model
object, stock and after ``gemvtune.swap_linears`` (``Variants``; with ``group=True``, the sibling groups too).

torch and transformers are imported inside functions only: ``import gemvtune.hf.model`` stays light,
and without transformers ``check_transformers`` says, in one line, to ``pip install 'gemvtune[hf]'``."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from ..errors import UsageError
from .report import IMPLS

MIN_TRANSFORMERS = (4, 50)
INSTALL_HINT = "pip install 'gemvtune[hf]'"
DTYPES = ("float16", "bfloat16", "float32")


# ---- checks that need no GPU (the CLI runs them before the GPU check) ----------------------------------

def _version_tuple(text: str) -> tuple[int, ...]:
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", str(text))
    return tuple(int(g) for g in m.groups() if g is not None) if m else (0,)


def check_transformers() -> str:
    """transformers (and torch) importable and recent enough, else one UsageError; returns the version."""
    try:
        import transformers
    except Exception as e:  # ImportError, or a broken install raising anything on import
        why = (str(e).splitlines() or [type(e).__name__])[0][:120]
        raise UsageError(f"a Hugging Face model (bench hf, percall hf) needs Hugging Face transformers, which cannot be imported ({why}): "
                         f"{INSTALL_HINT}") from None
    version = str(getattr(transformers, "__version__", "0"))
    if _version_tuple(version) < MIN_TRANSFORMERS:
        raise UsageError(f"a Hugging Face model (bench hf, percall hf) needs transformers >= {'.'.join(map(str, MIN_TRANSFORMERS))}, this is "
                         f"{version}: {INSTALL_HINT} --upgrade")
    try:
        import torch  # noqa: F401
    except Exception as e:
        raise UsageError(f"a Hugging Face model (bench hf, percall hf) needs PyTorch, which cannot be imported "
                         f"({(str(e).splitlines() or [''])[0][:120]})") from None
    return version


def config_file(path: str | os.PathLike) -> Path:
    """The config.json a --hf-config names: the file itself, or config.json inside a folder."""
    p = Path(path).expanduser()
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise UsageError(f"folder {p} holds no config.json")
        p = p / "config.json"
    if not p.is_file():
        raise UsageError(f"config {p} does not exist")
    return p


def file_name(text: str) -> str:
    """A model name made safe for a file name: ``meta-llama/Meta-Llama-3-8B`` -> ``meta-llama-3-8b``
    (the organisation is dropped; lower case, letters, digits, dots and dashes)."""
    last = str(text).strip().rstrip("/").split("/")[-1]
    return re.sub(r"[^a-z0-9.]+", "-", last.lower()).strip("-.") or "model"


def read_config(path: str | os.PathLike) -> tuple[dict[str, Any], str, Path]:
    """(fields of the config.json, a file-friendly model name, the file). Validated by
    gemvtune.kernels.hfconfig.read_hf_config (one UsageError per bad file), then by the few checks below."""
    from ..kernels.hfconfig import read_hf_config

    p = config_file(path)
    model = read_hf_config(p)
    name = getattr(model, "name", None)
    from ..userfile import JSON_BYTES, read_json

    fields = read_json(p, "config", JSON_BYTES)   # (read_hf_config read it whole just now; the same checks)
    if not isinstance(fields, dict):
        raise UsageError(f"config {p} is not a JSON object (a Hugging Face config.json is one)")
    if model.moe is not None or model.mla is not None or isinstance(fields.get("text_config"), dict):
        what = ("a mixture-of-experts model" if model.moe else "a latent-attention model" if model.mla
                else "a multimodal model whose text model is nested under 'text_config'")
        raise UsageError(f"config {p}: {what}; the Hugging Face benchmarks build and swap dense text decoders from "
                         "their own config.json (gemvtune shapes lists this model's shapes)")
    mt = fields.get("model_type")
    if not isinstance(mt, str) or not mt.strip():
        raise UsageError(f"config {p}: field 'model_type' is missing or not a string")
    if not name:
        named = fields.get("_name_or_path")
        name = named if isinstance(named, str) and named.strip() else (
            p.parent.resolve().name if p.name == "config.json" else p.stem)
    return fields, file_name(name), p


def _per_layer_keys(d: dict[str, Any], layers: int) -> list[str]:
    """Per-layer lists of a config dict (``layer_types``, ``no_rope_layers``, ...): a list whose key names
    layers and whose length is the layer count."""
    return [k for k, v in d.items() if isinstance(v, list) and len(v) == layers and "layer" in k.lower()]


def with_layers(fields: dict[str, Any], layers_key: str, old: int, new: int) -> tuple[dict[str, Any], list[str]]:
    """A copy of the config dict with ``new`` layers: the layer count set, and per-layer lists cut to
    ``new`` (or repeated cyclically up to it). Returns (dict, the lists adjusted)."""
    d = dict(fields)
    for k in {layers_key, "num_hidden_layers"}:
        if k in d or k == layers_key:
            d[k] = new
    adjusted = []
    for k in _per_layer_keys(fields, old):
        d[k] = [fields[k][i % old] for i in range(new)]
        adjusted.append(k)
    return d, adjusted


def build_config(fields: dict[str, Any], layers: int | None, where: str = "config") -> tuple[Any, dict[str, Any]]:
    """A transformers config from the fields (no file access, no download: the config class of
    ``model_type`` from transformers' mapping, ``from_dict``), ``layers`` overriding the layer count.
    ``auto_map`` (remote code) and ``quantization_config`` are dropped: the model is built from
    transformers' own class with plain random weights. Returns (config, info)."""
    import transformers

    d = dict(fields)
    dropped = [k for k in ("auto_map", "quantization_config") if d.pop(k, None) is not None]
    mt = str(d["model_type"]).strip()
    try:
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING

        cls = CONFIG_MAPPING[mt]
    except KeyError:
        raise UsageError(f"{where}: transformers {transformers.__version__} does not know model_type {mt!r}") from None

    def make(dd: dict[str, Any]) -> Any:
        try:
            return cls.from_dict(dict(dd))
        except Exception as e1:
            try:
                kw = {k: v for k, v in dd.items() if k != "model_type"}
                return transformers.AutoConfig.for_model(mt, **kw)
            except Exception:
                raise UsageError(f"{where}: transformers cannot build a {cls.__name__} from it: "
                                 f"{(str(e1).splitlines() or [type(e1).__name__])[0][:160]}") from None

    cfg = make(d)
    old = getattr(cfg, "num_hidden_layers", None)
    if not isinstance(old, int) or old < 1:
        raise UsageError(f"{where}: the {cls.__name__} has no num_hidden_layers (a nested text_config is not "
                         f"supported: give the text model's own config.json)")
    adjusted: list[str] = []
    if layers is not None and layers != old:
        key = getattr(cls, "attribute_map", {}).get("num_hidden_layers", "num_hidden_layers")
        d2, adjusted = with_layers(d, key, old, layers)
        cfg = make(d2)
        if getattr(cfg, "num_hidden_layers", None) != layers:
            cfg.num_hidden_layers = layers
    n = int(cfg.num_hidden_layers)
    return cfg, {"model_type": mt, "config_class": cls.__name__, "config_layers": old, "layers": n,
                 "dropped_fields": dropped, "adjusted_fields": adjusted}


# ---- GPU side --------------------------------------------------------------------------------------------

def _torch_dtype(torch: Any, dtype: str) -> Any:
    if dtype not in DTYPES:
        raise UsageError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return getattr(torch, dtype)


def build_model(cfg: Any, dtype: str = "float16", device: str = "cuda", seed: int = 0) -> Any:
    """``AutoModelForCausalLM.from_config`` with random weights (seeded) built on ``device`` in
    ``dtype``, in eval mode, with gradients off."""
    import torch
    import transformers

    dt = _torch_dtype(torch, dtype)
    kw = {"dtype": dt} if _version_tuple(transformers.__version__) >= (4, 56) else {"torch_dtype": dt}
    torch.manual_seed(seed)
    try:
        with torch.device(device):
            model = transformers.AutoModelForCausalLM.from_config(cfg, **kw)
    except ValueError as e:
        raise UsageError(f"transformers cannot build a causal LM from this config: "
                         f"{(str(e).splitlines() or [''])[0][:200]}") from None
    p = next(model.parameters())
    if p.device.type != torch.device(device).type:
        model.to(device)
    model.eval()
    model.requires_grad_(False)
    return model


class Variants:
    """Stock and swapped on one model object. ``gemvtune.swap_linears`` runs once; then ``restore_linears`` puts
    the stock modules back and its answer's ``reswap()`` the swapped ones (the same GemvLinear objects, sibling
    groups and SwiGLU MLP wrappers each time): every round sees the same module objects of each variant, so
    torch.compile's guards match one of two cached graphs instead of recompiling at each switch."""

    def __init__(self, model: Any, table: Any, group: bool = False, weights: str = ""):
        """``weights`` ("e4m3-row", "e4m3-b128"): gemvtune's variant is the model's linears quantised to FP8
        (``quantize_fp8``, the 16-bit weights kept for the stock variant), not ``swap_linears``."""
        from ..runtime.torch_fp8 import GemvFp8Linear, quantize_fp8
        from ..runtime.torch_linear import GemvLinear, restore_linears, swap_linears

        self.model = model
        self._restore = restore_linears
        self.fp8 = None
        if weights:
            from ..kernels.shapes import FP8_LAYOUTS

            self.fp8 = quantize_fp8(model, table, FP8_LAYOUTS[weights], keep_fp16=True)
            self.names = list(self.fp8)
        else:
            self.names = list(swap_linears(model, table, group=group))
        self._restored = restore_linears(model)
        self.groups, self.mlps = self._restored.groups, self._restored.mlps
        self.missing = [n for n in self.names if n not in self._restored]
        left = [n for n, m in model.named_modules() if isinstance(m, (GemvLinear, GemvFp8Linear))]
        if left:
            raise RuntimeError(f"restore_linears left {len(left)} swapped layers (e.g. {left[0]}): no stock variant")
        self.current = "stock"

    def use(self, impl: str) -> None:
        if impl not in IMPLS:
            raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
        if impl == self.current:
            return
        if impl == "gemvtune":
            self._restored.reswap()
        else:
            self._restored = self._restore(self.model)
        self.current = impl


def pad_id(cfg: Any) -> int:
    for v in (getattr(cfg, "pad_token_id", None), getattr(cfg, "eos_token_id", None)):
        if isinstance(v, (list, tuple)) and v:
            v = v[0]
        if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
            return v
    return 0
