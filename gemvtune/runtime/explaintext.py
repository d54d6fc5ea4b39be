"""``format_explain``: the text summary of ``gemvtune.explain``'s rows (pure: dicts in, text out; no torch).

Three parts: the linear layers (counts per route, then one line per distinct M×d, route and reason), the sibling
groups (``kind`` "siblings": q/k/v, gate/up in one launch) and the SwiGLU MLPs (``kind`` "swiglu": gate/up writing
silu(g)·u into down's input), each with counts per route and one line per distinct members, shape, route and reason;
then the notes (``rows.notes``: what is not fused in the model as a whole, e.g. the residual adds).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

# The routes of a layer's row, in the order counted: a tuned kernel, cuBLAS (F.linear), an FP8 layer's dequantize +
# F.linear, F.linear where no kernel can run, an FP8 layer left with its own module's forward
_ROUTES = ("tuned", "cublas", "dequant", "F.linear", "module")
# Per kind of group row: (what the lines call it, the routes in the order counted)
_KINDS = {"siblings": ("sibling groups", ("grouped", "separate", "ungrouped")),
          "swiglu": ("SwiGLU MLPs (gate/up -> silu(g)*u in one launch)", ("grouped", "separate", "ungrouped"))}


def format_explain(rows: list[dict[str, Any]]) -> str:
    """A short text summary of ``explain``'s rows: counts per route, then one line per distinct
    (M, d, route, why) with the layers it covers; then the groups and the SwiGLU MLPs the same way, and the notes."""
    counts = Counter(r["route"] for r in rows)
    fp8 = Counter(r.get("weights") for r in rows if r.get("weights"))
    lines = [f"{len(rows)} linear layers: " + ", ".join(f"{counts[k]} {k}" for k in _ROUTES if counts[k])
             + "".join(f"; {c} with {w} weights" for w, c in sorted(fp8.items()))]
    groups: dict[tuple, list[str]] = defaultdict(list)
    for r in rows:
        groups[(r["M"], r["d"], r.get("weights") or "", r["route"], r["why"], r.get("compiled_route"),
                r.get("compiled_why"))].append(r["name"].rsplit(".", 1)[-1])
    for (M, d, weights, route, why, c_route, c_why), names in groups.items():
        kinds = ", ".join(sorted(set(names)))
        lines.append(f"  {M}x{d}{' ' + weights if weights else ''} {route:8s} x{len(names):<4d} [{kinds}] {why}")
        if c_route is not None:
            lines.append(f"    under torch.compile: {c_route} ({c_why})")
    sib = getattr(rows, "groups", None) or []
    for kind, (title, routes) in _KINDS.items():
        mine = [g for g in sib if g.get("kind", "siblings") == kind]
        if not mine:
            continue
        counts = Counter(g["route"] for g in mine)
        lines.append(f"{len(mine)} {title}: " + ", ".join(f"{counts[k]} {k}" for k in routes if counts[k]))
        by: dict[tuple, list[str]] = defaultdict(list)
        for g in mine:
            members = "+".join(g["members"]) + (f" -> {g['down']}" if g.get("down") else "")
            by[(members, g["shape"] or "", g["route"], g["why"], g.get("compiled_route"),
                g.get("compiled_why"))].append(g["parent"])
        for (members, shape, route, why, c_route, c_why), parents in by.items():
            lines.append(f"  {members} {shape} {route:9s} x{len(parents):<4d} [{parents[0] or '(the model)'}"
                         + (", ..." if len(parents) > 1 else "") + f"] {why}")
            if c_route is not None:
                lines.append(f"    under torch.compile: {c_route} ({c_why})")
    lines += [f"note: {n}" for n in getattr(rows, "notes", None) or []]
    return "\n".join(lines)
