"""The accuracy of FP8 weights in ``gemvtune bench hf --weights``: the first decode step's logits of the quantised
model against a float64 reference of the *same* dequantised model, and its greedy tokens against the 16-bit model.

Three runs of the prompt and one decode step, all fed the prompt and the FP8 model's greedy next token:
- ``kernel``: the FP8 model as the bench runs it (each linear through its route: the FP8 kernels);
- ``fallback``: the same weights through dequantize + F.linear in the 16-bit dtype (cuBLAS);
- ``reference``: a float64 copy of the model, each FP8 linear's weight dequantised exactly (code x scale in float64),
  every other parameter and buffer the model's own, cast to float64.

The stated tolerance: the kernel's first-step logits are within ``FACTOR`` x the fallback's error against the
float64 reference (max |a - ref| / max |ref|), or within ``FLOOR`` where the fallback happens to be closer than that.
Both run the same weights in 16-bit activations through ``layers`` layers; only the order and precision of the
linears' sums differ (the kernels add in FP32, cuBLAS in FP32 with 16-bit inputs and output), so the kernel's error
is the 16-bit model's own error, not the quantisation's. The float64 copy needs 8 bytes per parameter (64 GB for
Llama-3-8B): it is built on the model's GPU where that much is free beside what the bench holds, else in host
memory and run there (on an H100 of 80 GB, 2026-12-06, the GPU copy ran out of memory beside the stock model, the
FP8 model and the kept 16-bit weights). Where neither holds it, the check says so and the bench goes on."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

from .check import _cache_kwarg, _cache_of
from .report import fp8_line  # noqa: F401  (re-exported: the bench prints it)
from .rounds import Bench, first_line

FACTOR = 2.0
FLOOR = 1e-3


@contextlib.contextmanager
def fallback_only(model: Any) -> Iterator[None]:
    """Every ``GemvFp8Linear`` of ``model`` runs dequantize + F.linear for the block (its routes emptied)."""
    from ..runtime.torch_fp8 import GemvFp8Linear

    layers = [m for m in model.modules() if isinstance(m, GemvFp8Linear)]
    kept = [(m._tuned, m._compiled) for m in layers]
    try:
        for m in layers:
            m._tuned, m._compiled = {}, {}
        yield
    finally:
        for m, (t, c) in zip(layers, kept):
            m._tuned, m._compiled = t, c


def float64_bytes(model: Any) -> int:
    """Bytes of ``float64_reference(model)``: 8 per element of every parameter and buffer (an FP8 linear's codes
    become float64 weights of as many elements), each tensor once (``parameters()`` and ``buffers()`` skip shared
    ones)."""
    return 8 * sum(t.numel() for t in [*model.parameters(), *model.buffers()])


HEADROOM = 1.15            # the float64 copy's bytes times this, plus SPARE, must be free on the GPU
SPARE = 2 * 2**30          # (activations, the dequantisation's temporaries)


def reference_device(model: Any, free_bytes: int | None) -> str:
    """Where ``float64_reference`` builds its copy: the model's device where ``free_bytes`` (free on it; None: not a
    GPU) hold the copy with headroom, else the host ("cpu")."""
    import torch

    dev = _device_of(model, torch)
    if dev.type != "cuda" or free_bytes is None:
        return "cpu"
    return str(dev) if float64_bytes(model) * HEADROOM + SPARE <= free_bytes else "cpu"


def _device_of(model: Any, torch: Any) -> Any:
    for t in [*model.parameters(), *model.buffers()]:
        return t.device
    return torch.device("cpu")


def float64_reference(model: Any, device: Any = None) -> Any:
    """A float64 copy of ``model`` (FP8 linears swapped in): the same architecture built on the meta device and
    filled on ``device`` (None: the model's), each ``GemvFp8Linear`` an ``nn.Linear`` of its exactly dequantised
    weights (dequantised where the copy lives: a host copy never needs its float64 weights on the GPU)."""
    import torch

    from ..runtime.fp8torch import dequantize
    from ..runtime.torch_fp8 import GemvFp8Linear

    dev = torch.device(device) if device is not None else _device_of(model, torch)
    with torch.device("meta"):
        ref = type(model)(model.config)
    ref.to_empty(device=dev)
    mods = dict(ref.named_modules())
    for name, m in model.named_modules():
        r = mods[name]
        if isinstance(m, GemvFp8Linear):
            w = dequantize(m.weight.to(dev), m.scales.to(dev), m.layout, torch.float64)
            r.weight = torch.nn.Parameter(w, requires_grad=False)
            b = m.bias_tensor
            if b is not None:
                r.bias = torch.nn.Parameter(b.detach().to(device=dev, dtype=torch.float64), requires_grad=False)
            continue
        for k, v in [*m.named_parameters(recurse=False), *m.named_buffers(recurse=False)]:
            t = getattr(r, k, None)
            if isinstance(t, torch.Tensor):
                t.data = (v.detach().to(device=dev, dtype=torch.float64) if v.is_floating_point()
                          else v.detach().to(dev, copy=True))
    return ref.to(torch.float64).eval().requires_grad_(False)


def _first_step(model: Any, ids: Any, nxt: Any, torch: Any) -> tuple[Any, Any]:
    """(the next token, the first decode step's logits in float64) of ``model`` fed ``ids``, then ``nxt`` (None:
    its own greedy token)."""
    kw = _cache_kwarg(model)
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
        if nxt is None:
            nxt = out.logits[:, -1:].argmax(-1)
        step = model(input_ids=nxt, use_cache=True, **{kw: _cache_of(out)})
    return nxt, step.logits[:, -1].to(torch.float64)


def fp8_accuracy(b: Bench) -> dict[str, Any]:
    """The module docstring's check on the bench's model (gemvtune's variant: its FP8 layers): the errors, the
    tolerance, whether it held, and the first decode step's argmax agreement of kernel and reference. An error
    (the float64 copy out of memory, say) is recorded, never raised."""
    torch, model = b.torch, b.model
    b.v.use("gemvtune")
    res: dict[str, Any] = {"factor": FACTOR, "floor": FLOOR}
    try:
        nxt, kern = _first_step(model, b.ids, None, torch)
        with fallback_only(model):
            _, fall = _first_step(model, b.ids, nxt, torch)
        dev = _device_of(model, torch)
        torch.cuda.empty_cache()
        where = reference_device(model, torch.cuda.mem_get_info(dev)[0] if dev.type == "cuda" else None)
        res["reference_device"] = where
        ref_model = float64_reference(model, where)
        try:
            _, ref = _first_step(ref_model, b.ids.to(where), nxt.to(where), torch)
            ref = ref.to(kern.device)
        finally:
            del ref_model
            torch.cuda.empty_cache()
        den = float(ref.abs().max())
        e_k = float((kern - ref).abs().max()) / den if den > 0 else math.nan
        e_f = float((fall - ref).abs().max()) / den if den > 0 else math.nan
        tol = max(FACTOR * e_f, FLOOR)
        res.update(kernel_rel=e_k, fallback_rel=e_f, tolerance=tol, held=bool(e_k <= tol),
                   argmax_equal=bool((kern.argmax(-1) == ref.argmax(-1)).all()),
                   kernel_finite=bool(torch.isfinite(kern).all()))
    except Exception as e:
        res["error"] = first_line(e)
    finally:
        b.v.use("stock")
    return res
