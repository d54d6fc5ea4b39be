"""The layers ``gemvtune bench guard`` times (``gemvtune.bench.guard``): K copies of one weight as the module a model
runs without gemvtune (stock) and as the module gemvtune puts in its place, both holding the same tensors; the float64
reference their outputs are checked against; what a swapped call launched.

- 16-bit weights: ``nn.Linear`` (stock) and the same modules after ``swap_linears`` (each call routed by the table:
  the tuned kernel, or ``F.linear`` inside the wrapper).
- FP8 weights (``Shape.weights``: "e4m3-row", "e4m3-b128"): each copy quantised by ``GemvFp8Linear.from_linear``
  with the table (the tuned FP8 kernel, or dequantize + F.linear where the table measured that faster); stock is a
  ``GemvFp8Linear`` of the very same codes and scales without a table: dequantize + F.linear on every call, what an
  FP8 model runs without a kernel and what the route weighs FP8 kernels against. The reference is float64 of the
  dequantised weights (code x scale, exact in float32), and the bound adds the fallback's own rounding of the
  weights to x's dtype (``fp8linear.bound``).

torch is imported inside functions only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..kernels.shapes import FP8_LAYOUTS, Shape

TORCH_DTYPE = {"fp16": "float16", "bf16": "bfloat16"}


@dataclass
class Layers:
    """K copies of one weight as the stock modules and the same weights as the modules gemvtune runs."""

    shape: Shape
    stock: list[Any]
    swapped: list[Any]
    container: Any                      # the swapped modules (what ``explain`` reads)
    ref_weight: Any                     # copy 0's weights, exact (the reference is computed from it in float64)
    capped: bool = False


def _linears(backend: Any, shape: Shape, copies: int, seed: int) -> Any:
    """``copies`` ``nn.Linear(d, M, bias=False)`` of ``shape.dtype`` on the backend's device, one at a time, each with
    its own random weight (uniform in ±1/√d, as nn.Linear draws it; a generator of its own, not the global one), no
    gradient."""
    import torch

    dt = getattr(torch, TORCH_DTYPE[shape.dtype])
    gen = torch.Generator(device=backend.device).manual_seed(seed)
    for _ in range(copies):
        lin = torch.nn.Linear(shape.d, shape.M, bias=False, device="meta", dtype=dt).to_empty(device=backend.device)
        lin.weight.requires_grad_(False)
        lin.weight.uniform_(-shape.d ** -0.5, shape.d ** -0.5, generator=gen)
        yield lin.eval()


def build_layers(backend: Any, table: Any, shape: Shape, copies: int, seed: int = 0) -> Layers:
    """The ``copies`` stock modules and the swapped ones of ``shape`` (module docstring), with no gradient."""
    import torch

    if shape.weights:
        return _fp8_layers(backend, table, shape, copies, seed)
    from ..runtime.torch_linear import swap_linears

    with torch.no_grad():
        mods = list(_linears(backend, shape, copies, seed))
        container = torch.nn.ModuleList(mods)
        swap_linears(container, table)
    return Layers(shape, list(mods), list(container), container, mods[0].weight)


def _fp8_layers(backend: Any, table: Any, shape: Shape, copies: int, seed: int) -> Layers:
    """Each copy quantised with the table (the 16-bit weight freed as the next is drawn); stock: the same codes and
    scales in a ``GemvFp8Linear`` without a table."""
    import torch

    from ..runtime.torch_fp8 import SCALE_NAMES, GemvFp8Linear

    layout = FP8_LAYOUTS[shape.weights]
    stock, swapped = [], []
    with torch.no_grad():
        for lin in _linears(backend, shape, copies, seed):
            g = GemvFp8Linear.from_linear(lin, table, layout).eval()
            del lin
            params = {"weight": g.weight, SCALE_NAMES[layout]: getattr(g, SCALE_NAMES[layout])}
            stock.append(GemvFp8Linear(params, g.scales, layout, None, None, origin="dequantize + F.linear").eval())
            swapped.append(g)
        container = torch.nn.ModuleList(swapped)
        ref = swapped[0].dequantized(torch.float32)
    return Layers(shape, stock, swapped, container, ref)


def bound_extra(shape: Shape) -> float:
    """What the stock contender's bound adds to ``guardverdict.error_bound`` for ``shape``: FP8 weights' fallback
    rounds each weight to x's dtype (``fp8linear.bound``); 16-bit weights are exact."""
    if not shape.weights:
        return 0.0
    from ..runtime.fp8linear import bound

    return bound(shape.dtype)


def reference(x: Any, W: Any, rows: int = 8192) -> Any:
    """F.linear(x, W) in float64, W converted a block of ``rows`` rows at a time (a 128256x4096 weight would be
    4.2 GB whole in float64)."""
    import torch
    import torch.nn.functional as F

    xd = x.double()
    return torch.cat([F.linear(xd, w.double()) for w in W.split(rows)], dim=-1)


def relerr(y: Any, ref: Any) -> float:
    """‖y − ref‖ / ‖ref‖ in float64; NaN where y is not finite or not ref's shape."""
    import torch

    if tuple(y.shape) != tuple(ref.shape) or not bool(torch.isfinite(y).all()):
        return float("nan")
    return float((y.double() - ref).norm() / ref.norm())


def launches(mod: Any, shape: Shape, n: int, route: str) -> str:
    """What a swapped call of ``n`` rows launched after its warm-up: "tuned kernel" where the route is tuned and its
    plan was built, else the fallback ("F.linear": the route is cuBLAS, or the library refused the table's algorithm;
    FP8 weights: "dequantize + F.linear")."""
    fallback = "dequantize + F.linear" if shape.weights else "F.linear"
    if route != "tuned":
        return fallback
    from ..runtime import torch_op

    key = torch_op.plan_key(mod._tid, shape.M, shape.d, n, False, shape.dtype, mod.weight.get_device(), shape.dtype,
                            shape.weights)
    return "tuned kernel" if key in torch_op._FAST else fallback


__all__ = ["Layers", "TORCH_DTYPE", "bound_extra", "build_layers", "launches", "reference", "relerr"]
