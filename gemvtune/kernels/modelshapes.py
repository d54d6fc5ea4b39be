"""The shapes of one decode step of a model as one GPU runs it: each distinct (M, d, n, dtype), the linears that run
it, its launches per step, the weight bytes they read and their share of the step's weight bytes. What a whole-model
tune budgets by, and what ``gemvtune shapes`` prints.

Experts at decode batch n (top-k of E experts, routing taken as uniform: each token picks k distinct experts, each
expert with probability k/E, independently of the other tokens):

- the experts a sparse layer reads are, in expectation, E_act = E * (1 - (1 - k/E)^n) (each expert is left out by
  all n tokens with probability (1 - k/E)^n); their launches per step are sparse layers * E_act, and so are the
  weight bytes (each activated expert's W read once);
- each activated expert runs its GEMV on the tokens routed to it: n * k of them over E_act experts, so the shape
  tuned is n_e = ceil(n * k / E_act), between 1 and n (E_act >= k). Computed in exact fractions: at n = 1,
  E_act = k and n_e = 1 exactly.

Everything else (attention, dense MLPs, routers, shared experts, the LM head) runs once per layer on all n tokens."""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from .hfconfig import HFModel
from .shapes import Shape
from .steplayers import step_linears


@dataclass(frozen=True)
class StepShape:
    """One distinct shape of a decode step on one GPU.

    ``shape``: (M, d, n, dtype) as tuned (for routed experts, n is the tokens per activated expert);
    ``layers``: the names of the linears that run it, e.g. ("q_proj",) or ("gate_proj", "up_proj");
    ``calls``: its launches per decode step (decoder layers x launches per layer; fractional for experts);
    ``weight_bytes``: the W bytes those calls read per step; ``share``: weight_bytes over the step's total."""

    shape: Shape
    layers: tuple[str, ...]
    calls: float
    weight_bytes: float
    share: float


@dataclass(frozen=True)
class Routing:
    """Routed experts at batch n: ``active``, the expected experts a sparse layer reads; ``tokens``, the tokens each
    activated expert runs on (the n of its shape)."""

    active: Fraction
    tokens: int


def routing(experts: int, top_k: int, n: int) -> Routing:
    """E_act = E (1 - (1 - k/E)^n) and n_e = ceil(n k / E_act), exactly (see the module's words)."""
    for what, v in (("experts", experts), ("top_k", top_k), ("n", n)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{what} must be a positive integer, got {v!r}")
    if top_k > experts:
        raise ValueError(f"top_k ({top_k}) is more than the experts ({experts})")
    active = experts * (1 - (1 - Fraction(top_k, experts)) ** n)
    return Routing(active, math.ceil(Fraction(n * top_k) / active))


def step_shapes(model: HFModel, n: int = 1, tp: int = 1, fused: bool = False, dtype: str = "fp16",
                weights: str = "") -> list[StepShape]:
    """The distinct shapes of one decode step of ``model`` (``read_hf_config`` / ``read_preset``) at batch ``n`` on
    one GPU of ``tp`` (its tensor-parallel shards, ``gemvtune.kernels.steplayers``), unfused as transformers runs
    them or ``fused`` as engines do, in launch order (first seen first); ``weights``: an FP8 format W is stored in
    (``Shape.weights``: its bytes are the codes and scales). The shares sum to 1. A TP that does not shard the model,
    or a bad n, dtype or format, is one UsageError."""
    Shape(1, 1, n, dtype, weights)   # n, dtype and format checked first, with Shape's own words
    route = routing(model.moe.experts, model.moe.top_k, n) if model.moe else None
    found: dict[Shape, tuple[list[str], Fraction]] = {}
    for s in step_linears(model, fused, tp):
        lin = s.linear
        per_layer, tokens = (route.active, route.tokens) if s.routed and route else (Fraction(1), n)
        names, calls = found.get(shape := Shape(lin.M, lin.d, tokens, dtype, weights), ([], Fraction(0)))
        found[shape] = (names + [lin.name] * (lin.name not in names), calls + s.layers * per_layer)
    total = sum(calls * shape.weight_bytes for shape, (_, calls) in found.items())
    return [StepShape(shape, tuple(names), float(calls), float(calls * shape.weight_bytes),
                      float(calls * shape.weight_bytes / total)) for shape, (names, calls) in found.items()]
