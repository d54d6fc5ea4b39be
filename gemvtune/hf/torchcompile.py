"""torch.compile bookkeeping of ``gemvtune bench hf`` (compiled mode: ``generate`` with
``cache_implementation="static"``, which transformers compiles itself): dynamo's counters before and after
a call, room for two variants' guard sets, a full reset between blocked variants, and a one-line summary
of each variant's compiled warm-up. torch is imported inside functions only."""

from __future__ import annotations

import contextlib
import math
from typing import Any

from .report import IMPLS

DYNAMO_RECOMPILE_LIMIT = 64     # stock and swapped are two guard sets on one code object (default limit 8)


def dynamo_counts() -> dict[str, Any]:
    try:
        from torch._dynamo.utils import counters

        return {"unique_graphs": int(counters["stats"]["unique_graphs"]), "frames_ok": int(counters["frames"]["ok"]),
                "graph_breaks": int(sum(counters["graph_break"].values())),
                "break_reasons": dict(counters["graph_break"])}
    except Exception:
        return {}


def dynamo_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    if not before or not after:
        return {}
    out = {k: after[k] - before[k] for k in ("unique_graphs", "frames_ok", "graph_breaks")}
    reasons = {k: v - before["break_reasons"].get(k, 0) for k, v in after["break_reasons"].items()}
    out["break_reasons"] = {k[:200]: v for k, v in sorted(reasons.items(), key=lambda kv: -kv[1]) if v > 0}
    return out


def raise_recompile_limits() -> dict[str, Any]:
    """Room for the two variants' guard sets (and transformers' own recompiles) per code object."""
    import torch._dynamo

    cfg, done = torch._dynamo.config, {}
    for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit", "accumulated_cache_size_limit"):
        try:
            cur = getattr(cfg, name)
        except AttributeError:
            continue
        want = DYNAMO_RECOMPILE_LIMIT if not name.startswith("accumulated") else max(DYNAMO_RECOMPILE_LIMIT * 8, 512)
        try:
            if isinstance(cur, int) and cur < want:
                setattr(cfg, name, want)
            done[name] = getattr(cfg, name)
        except Exception:
            pass
    return done


def reset_compile(model: Any) -> None:
    """Forget every compiled graph: dynamo's caches, CUDA-graph trees, and the compiled callable that
    transformers keeps on the model (``_compiled_call``)."""
    import torch

    with contextlib.suppress(Exception):
        torch._dynamo.reset()
    with contextlib.suppress(Exception):
        from torch._inductor.cudagraph_trees import reset_cudagraph_trees

        reset_cudagraph_trees()
    for attr in ("_compiled_call", "_last_compile_config"):
        with contextlib.suppress(Exception):
            if attr in model.__dict__:
                delattr(model, attr)



def compile_summary(info: dict[str, Any], model: Any) -> dict[str, str]:
    """Per implementation, what torch.compile did in its compiled warm-up (graphs, graph breaks, the most
    frequent break reason), and whether transformers kept a compiled callable on the model."""
    out = {}
    for impl in IMPLS:
        warmup = info.get("warmup", {})
        w = warmup.get(f"{impl}/compiled (blocked)") or warmup.get(f"{impl}/compiled") or {}
        d = w.get("dynamo") or {}
        text = f"warm-up {w.get('seconds', math.nan):.1f} s, {w.get('status', '?')}"
        if d:
            text += f", {d.get('unique_graphs', 0)} graphs compiled, {d.get('graph_breaks', 0)} graph breaks"
            reasons = d.get("break_reasons") or {}
            if reasons:
                k = next(iter(reasons))
                text += f" (most: {k[:150]} ×{reasons[k]})"
        out[impl] = text
    out["transformers"] = ("kept a compiled forward on the model (_compiled_call)" if "_compiled_call" in model.__dict__
                           else "kept no compiled forward on the model: compiled mode may not have compiled")
    return out
