"""Whether sibling linears (``gemvtune.kernels.group.GroupShape``: q/k/v, gate/up) run as one grouped launch or
each alone, decided from the table's measurements (pure: no GPU). Like ``gemvtune.runtime.route``, a group must
never make a caller slower than what its members would run alone.

- grouped: the fastest measured record of the table's entry for the fused shape (same dtype) whose family has a
  grouped template (``GROUP_FAMILIES``), that can run the group (``group_reasons``) and fuse the ``out``
  epilogue. A grouped variant of a config runs what that config runs on the fused shape, so its time is the
  fused shape's measured time;
- separate: the sum over the members of what each member's own route runs (``Table.route``, for the same kind of
  caller): its tuned time where it runs the tuned kernel, else its cuBLAS time (for a caller under
  ``torch.compile``, framework ``torch-compile``: the faster of cuBLAS and the Inductor time the entry records,
  since F.linear there is Inductor's). Each member's time must be measured in the table at this n (its own
  entry): a member whose route takes its time from another n or from the cost model counts as unknown;
- grouped runs only when grouped_us < separate_us * (1 - max(route.MARGIN, noise)), noise being the grouped
  record's relative ``spread`` plus the largest ``spread`` among the member records used (absent: 0).

``swiglu=True`` asks for the gate/up group of a SwiGLU MLP that writes ``silu(g)·u`` in the same launch
(``Epilogue(swiglu=True)``): only records whose config can fuse it count (an even number of rows per block: a gate
row and its up row in one block), and the rule above applies against the members alone. Where the plain grouped
launch (``swiglu=False``) is itself "grouped", it is what would run otherwise, so the SwiGLU record must also be no
slower than the plain one's measured time (a tie goes to SwiGLU: the same launch, minus the elementwise
``silu(g)·u`` kernel and the g and u tensors; that saving is not counted anywhere else).

Anything missing (the fused shape not in the table, no grouped-capable record, a member time unknown) is
"separate", with the reason; nothing here raises on a table that lacks an entry.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

from ..baselines import cublas_of
from ..kernels.epilogue import Epilogue
from ..kernels.group import GROUP_FAMILIES, GroupShape, group_reasons
from ..kernels.shapes import Shape
from . import route as _route

# Group routes per table (a table is read-only once loaded; Table keeps its own routes the same way).
_CACHE: weakref.WeakKeyDictionary[Any, dict[tuple, GroupRoute]] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class GroupRoute:
    kind: str                         # "grouped" (one launch over all members) or "separate" (each member's route)
    config: Any = None                # the config whose grouped variant runs, when kind == "grouped"
    why: str = ""
    grouped_us: float | None = None   # the fused shape's measured time of that config (None: none measured)
    separate_us: float | None = None  # the sum of the members' own routes' times (None: one is unknown)

    @property
    def grouped(self) -> bool:
        return self.kind == "grouped"


def choose_group(table: Any, group: GroupShape, framework: str = "torch", out: str | None = None,
                 swiglu: bool = False) -> GroupRoute:
    """The ``GroupRoute`` of ``group`` through ``table`` for a caller of ``framework`` wanting an ``out`` result
    (``fp32`` or the group's dtype; None: the group's dtype, what ``nn.Linear`` returns); ``swiglu``: the launch
    also fuses SwiGLU (gate, up: one output ``silu(g)·u``). Cached per table."""
    return _checked("choose_group", table, group, framework, out, swiglu)


def choose_swiglu(table: Any, group: GroupShape, framework: str = "torch", out: str | None = None) -> GroupRoute:
    """``choose_group(..., swiglu=True)``: whether a gate/up group (two members of equal rows) runs as one launch
    that writes ``silu(g)·u``, or each member alone (the name a SwiGLU caller asks, so a test that fakes one route
    leaves the other alone)."""
    return _checked("choose_swiglu", table, group, framework, out, True)


def _checked(who: str, table: Any, group: GroupShape, framework: str, out: str | None, swiglu: bool) -> GroupRoute:
    if not isinstance(group, GroupShape):
        raise TypeError(f"{who}: group must be a GroupShape, got {type(group).__name__}")
    if not isinstance(swiglu, bool):
        raise TypeError(f"{who}: swiglu must be True or False, got {swiglu!r}")
    out = group.dtype if out is None else out
    if out not in ("fp32", group.dtype):
        raise ValueError(f"a {group.dtype} group's output is fp32 or {group.dtype}, not {out!r}")
    return _cached(table, group, framework, out, swiglu)


def forget(table: Any) -> None:
    """Drop the group routes of ``table`` (its device check changed what may run: ``Table.check_device``)."""
    try:
        _CACHE.pop(table, None)
    except TypeError:   # (an object that cannot be weakly referenced: nothing was cached)
        pass


def _cached(table: Any, group: GroupShape, framework: str, out: str, swiglu: bool) -> GroupRoute:
    key = (group, framework, out, swiglu)
    try:
        cache = _CACHE.setdefault(table, {})
    except TypeError:   # (an object that cannot be weakly referenced: no cache)
        cache = {}
    r = cache.get(key)
    if r is None:
        r = cache[key] = _choose(table, group, framework, out, swiglu)
    return r


def _separate(why: str, grouped_us: float | None = None, separate_us: float | None = None) -> GroupRoute:
    return GroupRoute("separate", None, why, grouped_us, separate_us)


def _fused_best(entry: Any, group: GroupShape, out: str, swiglu: bool = False, arch: Any = None
                ) -> tuple[float, Any, Any] | None:
    """(µs, config, record) of the fastest measured record of the fused shape's entry that can run ``group``
    as one grouped launch with an ``out`` epilogue (and SwiGLU) on ``arch`` (None: sm_90); None if none can."""
    epi = Epilogue(out, swiglu=swiglu)
    best = None
    for rec in entry.records():
        us = rec.ok_us
        if us is None or rec.config is None:
            continue
        try:
            cfg = rec.config_object()
        except Exception:   # (a record whose config this version cannot read: not a candidate)
            continue
        if (cfg.family not in GROUP_FAMILIES or group_reasons(cfg, group, epi) or epi.invalid_reasons(cfg)
                or cfg.arch_reasons(group.fused, arch) or cfg.chain_only()):
            continue
        if best is None or us < best[0]:
            best = (us, cfg, rec)
    return best


def _member_record(table: Any, shape: Shape, r: Any, framework: str) -> tuple[str, float | None, Any]:
    """(what runs, its time, the record behind that time in the member's own entry; None: the entry lacks it)."""
    entry = table.entry(shape)
    if r.tuned:
        recs = [*entry.records(), *entry.candidates] if entry is not None else []   # (route.runnable's records)
        return "tuned", r.tuned_us, next((rec for rec in recs if rec.ok_us is not None and rec.ok_us == r.tuned_us),
                                         None)
    if r.inductor_us is not None and (r.cublas_us is None or r.inductor_us < r.cublas_us):
        again = entry.reconfirmed if entry is not None else None
        recs = [entry.baselines.get("inductor") if entry is not None else None,
                again.baselines.get("inductor") if again is not None else None]
        return "Inductor", r.inductor_us, next((rec for rec in recs if rec is not None and rec.ok_us == r.inductor_us),
                                               None)
    if entry is None:
        return "cuBLAS", r.cublas_us, None
    return "cuBLAS", r.cublas_us, cublas_of(entry.baselines, framework, ok=lambda rec: rec.ok_us is not None)


def _choose(table: Any, group: GroupShape, framework: str, out: str, swiglu: bool) -> GroupRoute:
    fused = group.fused
    if swiglu and (len(group.Ms) != 2 or group.Ms[0] != group.Ms[1]):
        return _separate(f"SwiGLU needs two members of equal rows (gate, up), got {group}")
    entry_of = getattr(table, "entry", None)
    if not callable(entry_of):
        return _separate("the table holds no entries to read (not a gemvtune Table)")
    foreign = getattr(table, "foreign", "")
    if foreign:   # another GPU model than the table's (gemvtune.runtime.tablegpu): each member runs cuBLAS
        return _separate(foreign)
    entry = entry_of(fused)
    if entry is None:
        return _separate(f"the fused shape {fused.M}x{fused.d} at n={fused.n} ({fused.dtype}) is not in the table")
    best = _fused_best(entry, group, out, swiglu, getattr(table, "arch", None))
    if best is None:
        fuse = " and fuse SwiGLU (an even number of rows per block)" if swiglu else ""
        return _separate(f"no measured {'/'.join(GROUP_FAMILIES)} kernel of the fused shape {fused.M}x{fused.d} at "
                         f"n={fused.n} can run this group with {out} output{fuse}")
    g_us, cfg, g_rec = best
    parts, spreads, total = [], [], 0.0
    for m in group.members:
        r = table.route(m.M, m.d, m.n, framework, out, m.dtype)
        what, us, rec = _member_record(table, m, r, framework)
        if us is None:
            return _separate(f"member {m.M}x{m.d}: its {what} time is unknown ({r.why})", g_us)
        if rec is None:
            return _separate(f"member {m.M}x{m.d} at n={m.n} is not measured in the table ({r.why})", g_us)
        total += us
        spreads.append(rec.spread or 0.0)
        parts.append(f"{m.M}x{m.d} {what} {us:.2f}")
    noise = (g_rec.spread or 0.0) + max(spreads, default=0.0)
    margin = max(_route.MARGIN, noise)
    alone = f"the members alone {total:.2f} µs ({' + '.join(parts)})"
    rule = f"{margin:.1%} (the larger of the {_route.MARGIN:.0%} margin and the noise {noise:.1%})"
    what = "SwiGLU grouped" if swiglu else "grouped"
    if not g_us < total * (1.0 - margin):
        return _separate(f"{what} {g_us:.2f} µs ({cfg.label}) is not faster than {alone} by more than {rule}",
                         g_us, total)
    why = f"{what} {g_us:.2f} µs ({cfg.label}) beats {alone} by more than {rule}"
    if swiglu:
        plain = _cached(table, group, framework, out, False)
        if plain.grouped and plain.grouped_us is not None:
            if g_us > plain.grouped_us:
                return _separate(f"the plain grouped launch {plain.grouped_us:.2f} µs ({plain.config.label}) is faster "
                                 f"than {what} {g_us:.2f} µs ({cfg.label}): it runs, then silu(g)·u", g_us, total)
            why += f", and is no slower than the plain grouped launch {plain.grouped_us:.2f} µs ({plain.config.label})"
    return GroupRoute("grouped", cfg, why, g_us, total)
