"""The fused decode step's kernels (pure: no GPU): per layer the q/k/v group, o with the residual add, the gate/up
group writing SwiGLU's product, down with the residual add, then the LM head; each kernel's programmatic-dependent-
launch variant at every prefetch depth (``pdl=chainK``, ``gemvtune.kernels.gemv``), and the depths a chain search
tries. The decode step benchmark (``gemvtune.bench.step``) times them in one CUDA graph
(``gemvtune.runners.cuda.fusedstep``) and searches the depths there, in the model's own sequence of launches: a depth
means nothing in an isolated kernel, where nothing runs before it.

A slot runs the table's kernel for its shape: the members' fused shape's best GEMV-family record for a group (the
family with a grouped template and the fusions), the entry's winner for o, down and the LM head where that is a
GEMV-family config (else its best GEMV-family record; else the llama.cpp config). A kernel of another family keeps
its own launch and no chain variant.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..kernels.epilogue import Epilogue
from ..kernels.gemv import CHAIN_DEPTHS, CHAIN_TRIGGERS, LLAMA_CPP
from ..kernels.group import GROUP_FAMILIES, GroupShape
from ..kernels.shapes import Shape

SLOTS = ("qkv", "o", "gate_up", "down", "lm_head")
# A chain variant: (trigger, depth); ("", 0) is no programmatic dependent launch (gemvtune.kernels.gemv: chainK, earlyK)
VARIANTS = (("", 0), *((t, d) for t in CHAIN_TRIGGERS for d in CHAIN_DEPTHS))


@dataclass(frozen=True)
class StepKernel:
    """One kernel of the fused step: its slot, config, shape (the fused shape for a group), group and epilogue."""

    slot: str
    config: Any
    shape: Shape
    epilogue: Epilogue
    group: GroupShape | None = None
    why: str = ""

    @property
    def label(self) -> str:
        return self.config.label + self.epilogue.label + (f".g{len(self.group.Ms)}" if self.group else "")

    @property
    def variant(self) -> tuple[str, int]:
        """(trigger family, depth) of its chain variant; ("", 0): no programmatic dependent launch."""
        d = int(getattr(self.config, "chain_depth", 0))
        return (self.config.pdl[:5], d) if d else ("", 0)


def _gemv_record(table: Any, shape: Shape, epilogue: Epilogue) -> tuple[Any, str]:
    """The entry's winner where it is a GEMV-family config that can fuse ``epilogue``, else its fastest such record,
    else the llama.cpp config."""
    from .groupbench import _template_records

    recs = [(us, cfg) for us, cfg in _template_records(table, shape)
            if cfg.family in GROUP_FAMILIES and not epilogue.invalid_reasons(cfg)]
    e = table.entry(shape)
    try:
        win = e.winner_config() if e is not None else None
    except Exception:   # (a winner this version cannot read is no candidate)
        win = None
    if any(cfg == win for _, cfg in recs):
        return win, f"the winner of {shape}"
    if recs:
        us, cfg = recs[0]
        return cfg, f"the best {cfg.family} record of {shape} ({us:.2f} µs)"
    return LLAMA_CPP, f"the llama.cpp config ({shape} has no record that can fuse {epilogue.label or 'it'})"


def step_kernels(table: Any, model: Any, dtype: str = "fp16") -> dict[str, StepKernel]:
    """The fused step's kernel of each slot for ``model`` (a ``gemvtune.kernels.hfconfig.HFModel``) at n = 1."""
    from .groupbench import group_config

    qkv, gate_up = model.groups(1, dtype)
    out: dict[str, StepKernel] = {}
    e_qkv, e_swiglu = Epilogue(dtype), Epilogue(dtype, swiglu=True)
    cfg, why = group_config(table, qkv, e_qkv)
    out["qkv"] = StepKernel("qkv", cfg, qkv.fused, e_qkv, qkv, why)
    h, i, q = model.hidden_size, model.intermediate_size, model.q_width
    res = Epilogue(dtype, residual=True)
    for slot, shape in (("o", Shape(h, q, 1, dtype)), ("down", Shape(h, i, 1, dtype))):
        cfg, why = _gemv_record(table, shape, res)
        out[slot] = StepKernel(slot, cfg, shape, res, None, why)
    cfg, why = group_config(table, gate_up, e_swiglu)
    out["gate_up"] = StepKernel("gate_up", cfg, gate_up.fused, e_swiglu, gate_up, why)
    head = Shape(model.vocab_size, h, 1, dtype)
    cfg, how = table.lookup(head)
    if cfg.family not in GROUP_FAMILIES:
        cfg, how = _gemv_record(table, head, Epilogue(dtype))
    out["lm_head"] = StepKernel("lm_head", cfg, head, Epilogue(dtype), None, how)
    return {s: out[s] for s in SLOTS}


def pdl_value(variant: tuple[str, int]) -> str:
    """The ``pdl`` field of a chain variant: ``off``, ``chainK`` or ``earlyK``."""
    trigger, depth = variant
    return f"{trigger}{depth}" if depth else "off"


def at_depth(k: StepKernel, variant: tuple[str, int]) -> StepKernel | None:
    """``k`` as chain variant ``variant`` ((trigger, depth); ("", 0): no programmatic dependent launch); None where its
    family has no chain variant or the config cannot run it (too few vectors per thread for the depth)."""
    if not hasattr(k.config, "chain_depth"):
        return k if variant[1] == 0 else None
    cfg = dataclasses.replace(k.config, pdl=pdl_value(variant))
    if cfg.invalid_reasons(k.shape):
        return None
    return dataclasses.replace(k, config=cfg)


def depths_of(k: StepKernel) -> list[tuple[str, int]]:
    """The chain variants ``k`` can run as (("", 0) always first)."""
    return [v for v in VARIANTS if at_depth(k, v) is not None]
