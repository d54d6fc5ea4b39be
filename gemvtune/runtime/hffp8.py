"""FP8 linear layers as checkpoints ship them, recognised by what they hold (a 2-D E4M3 ``weight`` and its scales),
not by class name, and mapped onto gemvtune's FP8 format (``gemvtune.kernels.fp8``: codes × float32 scales, layouts
``row`` and ``block128``) without copying the codes.

Recognised (every one multiplies the codes by its scale, as ours does):

- transformers ``integrations/finegrained_fp8.py`` ``FP8Linear`` (``FineGrainedFP8Config``; DeepSeek-V3-style
  checkpoints): ``weight`` float8_e4m3fn [out, in], ``weight_scale_inv`` float32 [ceil(out/128), ceil(in/128)] with
  ``block_size`` (128, 128) -> ``block128`` (the same array); ``block_size`` None with a one-element
  ``weight_scale_inv`` (per-tensor) -> ``row``, the scalar repeated to [out]; UE8M0 scales (``float8_e8m0fnu``,
  ``scale_fmt="ue8m0"``) converted exactly to float32 (2^(e-127)). Other block sizes are refused.
- transformers ``integrations/fbgemm_fp8.py`` ``FbgemmFp8Linear``: ``weight_scale`` float32 [out, 1] -> ``row``.
- compressed-tensors FP8 (transformers ``integrations/compressed_tensors.py`` ``CompressedTensorsFP8Linear``, and
  the checkpoint's own layout): ``weight_scale`` [1, out] / [out, 1] / [out] ("channel") -> ``row``; one element
  ("tensor") -> ``row`` repeated. Group and block strategies under ``weight_scale`` are refused (their block size is
  not recorded on the module).

Activation quantisation is not applied: gemvtune runs W8A16 (x stays FP16/BF16, the weight is dequantised inside
the kernel), where these layers quantise x to FP8 too (dynamically per token or block, or with a static
``activation_scale``/``input_scale``). The outputs therefore differ from the checkpoint's own FP8 GEMM by x's FP8
rounding (W8A16 is the closer of the two to the unquantised model); ``Fp8Source.note`` says so per layer.

``fp8_source(module)`` answers ``None`` for a module that is not FP8-looking at all (no float8 tensor and no
``weight_scale_inv``/``weight_scale``), an ``Fp8Source`` for one it can take, else one reason line (a ``str``).
It recognises the format only; whether the pair can run the CUDA kernel (alignment, d % 16, finite positive
scale values, device) is ``gemvtune.runtime.fp8torch.check``'s question.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch

from ..kernels.fp8 import BLOCK, scales_shape

__all__ = ["Fp8Found", "Fp8Source", "fp8_linears", "fp8_source"]

_FP8_DTYPES = tuple(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
                                                "float8_e8m0fnu") if hasattr(torch, n))
_SCALE_NAMES = ("weight_scale_inv", "weight_scale")
_EXACT_TO_F32 = (torch.float32, torch.float16, torch.bfloat16) + tuple(
    getattr(torch, n) for n in ("float8_e8m0fnu",) if hasattr(torch, n))
_NOTE = ("activation quantisation not applied ({}): gemvtune runs W8A16, x stays 16-bit, so outputs differ from "
         "the checkpoint's FP8 GEMM by x's FP8 rounding")


@dataclass(frozen=True, eq=False)
class Fp8Source:
    """An FP8 linear's weight in gemvtune's format: ``codes`` uint8 [out, in] (a view of the module's weight, same
    storage), ``scales`` float32 of ``layout``'s shape (the module's own tensor where it already is one, else a new
    small one), the module's ``bias`` (as it is, or None), the sizes, where it came from and what is not honoured."""

    codes: torch.Tensor
    scales: torch.Tensor
    layout: str
    bias: torch.Tensor | None
    in_features: int
    out_features: int
    origin: str
    note: str


class Fp8Found(NamedTuple):
    """One entry of ``fp8_linears``: where the module sits (qualified name, parent, attribute) and what it is."""

    name: str
    parent: torch.nn.Module
    attr: str
    module: torch.nn.Module
    source: Fp8Source | str


def _tensor(module: torch.nn.Module, name: str) -> torch.Tensor | None:
    t = getattr(module, name, None)
    return t if isinstance(t, torch.Tensor) else None


def _fp8_looking(module: torch.nn.Module) -> bool:
    if any(_tensor(module, n) is not None for n in _SCALE_NAMES):
        return True
    own = list(module.named_parameters(recurse=False)) + list(module.named_buffers(recurse=False))
    return any(t.dtype in _FP8_DTYPES for _, t in own)


def _origin(module: torch.nn.Module) -> str:
    cls = type(module)
    return f"transformers {cls.__name__}" if cls.__module__.startswith("transformers.") else cls.__name__


def _as_f32(scale: torch.Tensor, what: str) -> torch.Tensor | str:
    """The scale as float32 (itself when it is; an exact conversion from FP16, BF16 or UE8M0), or why not."""
    if scale.dtype == torch.float32:
        return scale.detach()
    if scale.dtype in _EXACT_TO_F32:
        return scale.detach().to(torch.float32)
    return f"{what} of dtype {scale.dtype}: gemvtune takes float32 scales (or FP16, BF16, UE8M0, converted exactly)"


def _block_size(module: torch.nn.Module) -> tuple[int, ...] | None | str:
    bs = getattr(module, "block_size", None)
    if bs is None:
        return None
    try:
        return tuple(int(b) for b in bs)
    except (TypeError, ValueError):
        return f"block_size {bs!r} is not a pair of integers"


def _activation(module: torch.nn.Module) -> str:
    for name in ("activation_scale", "input_scale"):
        if (t := _tensor(module, name)) is not None:
            return f"static per-tensor {name} not used" if t.numel() == 1 else f"{name} {tuple(t.shape)} not used"
    if _tensor(module, "input_scale_ub") is not None:
        return "dynamic per-row, input_scale_ub not used"
    scheme = getattr(module, "activation_scheme", "dynamic")
    return f"{scheme}" if isinstance(scheme, str) else "dynamic"


def fp8_source(module: torch.nn.Module) -> Fp8Source | str | None:
    """What an FP8 linear module holds, in gemvtune's format (``Fp8Source``); or one line saying why an FP8-looking
    module cannot be taken; or None for a module that is not FP8-looking at all (no float8 tensor of its own and no
    ``weight_scale_inv``/``weight_scale``). Never raises for a module's contents; TypeError for a non-module."""
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"fp8_source takes a torch.nn.Module, got {type(module).__name__}")
    if not _fp8_looking(module):
        return None
    cls = type(module).__name__
    if isinstance(module, torch.nn.Embedding) or hasattr(module, "num_embeddings"):
        return f"{cls} is an FP8 embedding table, not a linear layer"
    if getattr(module, "n_groups", None) not in (None, 1):
        return f"{cls} is a block-diagonal grouped linear (n_groups={module.n_groups}), not one [out, in] weight"
    w = _tensor(module, "weight")
    if w is None or w.ndim != 2:
        return f"{cls} has no 2-D weight [out, in] (shape {None if w is None else tuple(w.shape)}): not a linear layer"
    if w.dtype != torch.float8_e4m3fn:
        if w.dtype in (torch.int8, torch.uint8):
            return f"{cls} weight is {w.dtype} (FP4-packed or integer), not E4M3 codes"
        return f"{cls} weight is {w.dtype}: gemvtune reads float8_e4m3fn (OCP E4M3 fn) codes only"
    out_f, in_f = (int(n) for n in w.shape)
    for attr, n in (("out_features", out_f), ("in_features", in_f)):
        if isinstance(given := getattr(module, attr, n), int) and given != n:
            return f"{cls} {attr}={given} but its weight is {out_f}x{in_f}"
    named = [(n, t) for n in _SCALE_NAMES if (t := _tensor(module, n)) is not None]
    if len(named) != 1:
        return (f"{cls} has an FP8 weight and both weight_scale_inv and weight_scale: which multiplies is unclear"
                if named else f"{cls} has an FP8 weight but no weight_scale_inv or weight_scale")
    name, raw = named[0]
    shape = tuple(raw.shape)
    bs = _block_size(module) if name == "weight_scale_inv" else None
    if isinstance(bs, str):
        return f"{cls} {bs}"
    scale = _as_f32(raw, f"{cls} {name}")
    if isinstance(scale, str):
        return scale
    origin = _origin(module)
    if bs == (BLOCK, BLOCK) or (bs is not None and bs != (out_f, in_f)):     # fp8_linear: None or [N, K] is per-tensor
        if bs != (BLOCK, BLOCK):
            return (f"{cls} block size {'x'.join(map(str, bs))}: gemvtune's FP8 kernels take 128x128 blocks "
                    "or one scale per row")
        if shape != (want := scales_shape(out_f, in_f, "block128")):
            return f"{cls} {name} of the {out_f}x{in_f} weight should be {want} for 128x128 blocks, got {shape}"
        layout, origin = "block128", f"{origin} block 128x128"
    elif raw.numel() == 1:
        layout, origin = "row", f"{origin} per-tensor scale"
        scale = scale.reshape(1).expand(out_f).contiguous()
    elif name == "weight_scale_inv" and len(shape) == 2 and shape == scales_shape(out_f, in_f, "block128"):
        layout, origin = "block128", f"{origin} block 128x128 (from the scales' shape)"
    elif shape in ((out_f,), (out_f, 1), (1, out_f)):
        layout, origin = "row", f"{origin} per-channel scale"
        scale = scale.reshape(out_f)
    else:
        return (f"{cls} {name} of shape {shape} for the {out_f}x{in_f} weight is neither per-tensor, per-channel "
                "nor 128x128 blocks")
    if raw.dtype != torch.float32:
        origin += f" ({str(raw.dtype).removeprefix('torch.')} scales made float32)"
    bias = _tensor(module, "bias")
    return Fp8Source(codes=w.detach().view(torch.uint8), scales=scale, layout=layout,
                     bias=None if bias is None else bias.detach(), in_features=in_f, out_features=out_f,
                     origin=origin, note=_NOTE.format(_activation(module)))


def fp8_linears(model: torch.nn.Module) -> list[Fp8Found]:
    """Every FP8-looking submodule of ``model`` (the root excluded), one entry per (parent, attribute) the way
    ``swap_linears`` walks: its ``Fp8Source`` where it can be taken, else the reason line."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"fp8_linears: model must be a torch.nn.Module, got {type(model).__name__}")
    found = []
    for pname, parent in model.named_modules(remove_duplicate=False):
        for cname, child in list(parent.named_children()):
            source = fp8_source(child)
            if source is not None:
                found.append(Fp8Found(f"{pname}.{cname}" if pname else cname, parent, cname, child, source))
    return found
