"""What the swap changes besides speed, in ``gemvtune bench hf``: greedy token agreement of
stock and swapped, their logits' differences at prefill and the first decode step, and
``gemvtune.explain`` of the swapped layers. Reported, never required. torch is imported inside
functions only."""

from __future__ import annotations

import math
from typing import Any

from .report import MODES, explain_summary, token_agreement
from .rounds import Bench, first_line


def _cache_kwarg(model: Any) -> str:
    """The forward's cache argument: ``cache`` in recent transformers, ``past_key_values`` before."""
    import inspect

    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in params else "past_key_values"


def _cache_of(out: Any) -> Any:
    c = out.get("cache") if hasattr(out, "get") else None
    return c if c is not None else out.past_key_values


def agreement(b: Bench) -> dict[str, Any]:
    out = {}
    for mode in MODES:
        s, g = b.outputs.get(("stock", mode), []), b.outputs.get(("gemvtune", mode), [])
        s_ok, g_ok = [x for x in s if x], [x for x in g if x]
        if not s_ok or not g_ok:
            out[mode] = {"error": "no successful generate of both implementations"}
            continue
        a = token_agreement(s_ok[0], g_ok[0])
        a["stock_repeatable"] = all(x == s_ok[0] for x in s_ok)
        a["gemvtune_repeatable"] = all(x == g_ok[0] for x in g_ok)
        out[mode] = a
    return out


def logit_diffs(b: Bench) -> dict[str, Any]:
    """Prefill and the first decode step, eager, both fed the prompt and stock's greedy next token:
    max|a - b| / max|a| (a stock, b gemvtune) of the logits."""
    torch, model = b.torch, b.model
    kw = _cache_kwarg(model)
    res: dict[str, Any] = {}

    def run(impl: str, nxt: Any) -> tuple[Any, Any, Any]:
        b.v.use(impl)
        with torch.no_grad():
            out = model(input_ids=b.ids, use_cache=True)
            pre = out.logits.float()
            if nxt is None:
                nxt = pre[:, -1:].argmax(-1)
            out2 = model(input_ids=nxt, use_cache=True, **{kw: _cache_of(out)})
            dec = out2.logits[:, -1].float()
        return pre, dec, nxt

    def rel(a: Any, x: Any) -> float:
        den = float(a.abs().max())
        num = float((a - x).abs().max())
        return num / den if den > 0 and math.isfinite(den) else math.nan

    try:
        pre_s, dec_s, nxt = run("stock", None)
        pre_g, dec_g, _ = run("gemvtune", nxt)
        res = {"prefill_rel": rel(pre_s, pre_g), "decode_rel": rel(dec_s, dec_g),
               "prefill_max_abs_stock": float(pre_s.abs().max()), "decode_max_abs_stock": float(dec_s.abs().max()),
               "decode_argmax_equal": bool((dec_s.argmax(-1) == dec_g.argmax(-1)).all()),
               "gemvtune_finite": bool(torch.isfinite(pre_g).all() and torch.isfinite(dec_g).all())}
    except Exception as e:
        res = {"error": first_line(e)}
    return res


def explain_rows(model: Any) -> dict[str, Any]:
    """``gemvtune.explain(model, n=1)`` of the swapped model, summarized; an error is recorded, not raised."""
    try:
        from ..runtime.torch_linear import explain

        ex = explain(model, n=1)
        rows = [dict(r) for r in ex]
        groups = [dict(g) for g in ex.groups]
        summary = explain_summary(rows)
        for kind, key in (("siblings", "sibling_routes"), ("swiglu", "swiglu_routes")):
            # per sibling-group / SwiGLU-MLP route at n=1 ("grouped", "separate", "ungrouped"): how many
            routes = [str(g["route"]) for g in groups if g.get("kind", "siblings") == kind]
            if routes:
                summary[key] = {k: routes.count(k) for k in dict.fromkeys(routes)}
        return {"rows": rows, "groups": groups, "summary": summary, "notes": list(getattr(ex, "notes", []))}
    except Exception as e:
        return {"error": first_line(e)}
