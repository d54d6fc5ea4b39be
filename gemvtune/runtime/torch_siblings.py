"""Sibling ``GemvLinear`` layers in one launch: the ``LinearGroup`` that ``swap_linears(model, table, group=True)``
attaches to the members of each sibling group (``gemvtune.runtime.siblings``: q/k/v, gate/up), and what
``explain`` says of the groups.

A group is a plain object on its members (``member._sibling``), never a submodule, parameter or buffer: the model's
``state_dict`` keys and tensors do not change. A member's call runs the group when the group's route for this
weight dtype and n is "grouped" (``gemvtune.runtime.grouproute``, decided once per n from the table's
measurements) and the call can run a tuned kernel at all (x of the weights' dtype on their device, n <= max_batch,
no gradient needed): then the first member in call order computes every member's output with one
``torch_group.run_group`` (eager) or ``torch.ops.gemvtune.linear_group`` (under ``torch.compile``), and keeps the
others' outputs for the same x (the same tensor object: ``x is stash_x``, and in eager the same version: x not
changed in place since). A later member called with that x takes its output; called with another tensor, or
once its output was taken, it computes alone (always correct). The stash is emptied once every member has taken
its output, so no tensor is kept from one step to the next (a forward that stops between the members leaves it
until the group's next first call).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from ..errors import UsageError
from ..kernels.group import GroupShape
from . import grouproute, torch_group
from .siblings import find_siblings
from .torch_op import _ALIGN, DTYPES, register_table


class LinearGroup:
    """Sibling layers ``members`` (attribute ``names`` of the module ``parent``, in call order) sharing one x."""

    def __init__(self, parent: str, names: Sequence[str], members: Sequence[Any], table: Any):
        self.parent, self.names, self.members = parent, tuple(names), tuple(members)
        self.table, self.tid = table, register_table(table)
        self.d = int(members[0].in_features)
        self.Ms = tuple(int(m.out_features) for m in members)
        self.max_batch = min(m.max_batch for m in members)
        # Per torch dtype and n (index 0 unused): whether the group route says "grouped" (constants for torch.compile)
        # for eager callers and, under torch.compile, against the members' compiled routes (their F.linear is
        # Inductor's: grouproute); the op decides again at run time with the eager route, so a compiled group is
        # also grouped for eager callers (a group the eager route leaves separate runs its members' own routes)
        self._grouped = {tdt: (False,) + tuple(self.route(n, dt).grouped for n in range(1, self.max_batch + 1))
                         for tdt, dt in DTYPES.items()}
        self._grouped_compiled = {tdt: tuple(g and self.route(n, DTYPES[tdt], "torch-compile").grouped
                                             for n, g in enumerate(v)) for tdt, v in self._grouped.items()}
        self.active = any(any(v) for v in self._grouped.values())
        self._x: torch.Tensor | None = None   # the x whose outputs are kept, its version, and the outputs by member
        self._ver = -1
        self._out: dict[int, torch.Tensor] = {}

    def shape(self, n: int, dtype: str) -> GroupShape:
        return GroupShape(self.Ms, self.d, n, dtype)

    def route(self, n: int, dtype: str, framework: str = "torch") -> grouproute.GroupRoute:
        try:
            group = self.shape(n, dtype)
        except UsageError as e:
            return grouproute.GroupRoute("separate", None, f"not a group shape: {e}")
        return grouproute.choose_group(self.table, group, framework, dtype)

    def clear(self) -> None:
        self._x, self._ver, self._out = None, -1, {}

    def __repr__(self) -> str:
        return f"LinearGroup({self.parent}: {'+'.join(self.names)}, {'+'.join(map(str, self.Ms))}x{self.d})"

    def _runs(self, x: torch.Tensor, compiled: bool = False) -> list[Any] | None:
        """The members' (weights, biases) when this call runs the group, else None (static properties only)."""
        grouped = (self._grouped_compiled if compiled else self._grouped).get(x.dtype)
        if grouped is None or x.dim() == 0 or x.shape[-1] != self.d:
            return None
        n = x.numel() // self.d if self.d else 0
        if not 1 <= n <= self.max_batch or not grouped[n]:
            return None
        ws = [m.weight for m in self.members]
        bs = [m.bias for m in self.members]
        for w, b in zip(ws, bs):
            if w.dtype != x.dtype or w.device != x.device or (b is None) != (bs[0] is None):
                return None
        if torch.is_grad_enabled() and (x.requires_grad or any(w.requires_grad for w in ws)
                                        or any(b is not None and b.requires_grad for b in bs)):
            return None   # the tuned kernels have no backward: autograd gets F.linear
        return [ws, bs]

    def eager(self, member: Any, x: torch.Tensor) -> torch.Tensor | None:
        """The member's output from the group (None: the member computes alone)."""
        i = member._sibling_index
        if i:
            if self._x is x:
                if self._ver == (-1 if x.is_inference() else x._version):
                    y = self._out.pop(i, None)
                    if not self._out:
                        self.clear()
                    return y
                self.clear()   # x changed in place since: the kept outputs are stale
            return None
        self.clear()
        wb = self._runs(x)
        if wb is None:
            return None
        ys = torch_group.run_group(x, wb[0], wb[1], self.table, self.tid)
        self._x, self._ver = x, (-1 if x.is_inference() else x._version)
        self._out = {j: ys[j] for j in range(1, len(ys))}
        return ys[0]

    def traced(self, member: Any, x: torch.Tensor) -> torch.Tensor | None:
        """``eager`` as torch.compile traces it: the custom op, the stash kept by tensor identity."""
        i = member._sibling_index
        if i:
            if self._x is x:
                y = self._out.pop(i, None)
                if not self._out:
                    self._x = None
                return y
            return None
        self._x, self._out = None, {}
        wb = self._runs(x, compiled=True)
        if wb is None:
            return None
        ys = torch.ops.gemvtune.linear_group(x, wb[0], wb[1], self.tid)
        self._x = x
        self._out = {j: ys[j] for j in range(1, len(ys))}
        return ys[0]

    def explain_row(self, n: int) -> dict[str, Any]:
        """What a call with n rows runs: one grouped launch or each member's own route, and why; under
        torch.compile, where that differs (``compiled_route``, ``compiled_why``; None where it does not)."""
        row: dict[str, Any] = {"kind": "siblings", "parent": self.parent, "members": list(self.names),
                               "grouped_us": None, "separate_us": None, "compiled_route": None, "compiled_why": None}
        w = self.members[0].weight
        dt = DTYPES.get(w.dtype)
        why = next((f"{name}: {r}" for name, m in zip(self.names, self.members) if (r := m.static_reason())), "")
        try:
            row["shape"] = str(self.shape(n, dt or "fp16"))
        except UsageError:
            row["shape"] = f"{'+'.join(map(str, self.Ms))}x{self.d}@n{n}"
        if why or dt is None:
            return {**row, "route": "separate", "why": why or "the weights are not FP16 or BF16"}
        if n > self.max_batch:
            return {**row, "route": "separate", "why": f"n={n} above the members' max_batch={self.max_batch}"}
        r = self.route(n, dt)
        if r.grouped:
            c = self.route(n, dt, "torch-compile")
            if not c.grouped:
                row.update(compiled_route=c.kind, compiled_why=c.why)
        return {**row, "route": r.kind, "why": r.why, "grouped_us": r.grouped_us, "separate_us": r.separate_us}


def _note(mods: Sequence[Any], parent: str, names: Sequence[str], why: str) -> None:
    for m in mods:
        if m._sibling_note is None:
            m._sibling_note = (parent, tuple(names), why)


def _static_reasons(names: Sequence[str], mine: Sequence[str], mods: Sequence[Any]) -> str:
    """Why swapped members ``mods`` (``mine`` of the found group ``names``) cannot be grouped ("" if they can)."""
    if len(mods) < 2:
        left = [c for c in names if c not in mine]
        return f"{', '.join(left)} not swapped (a filter excluded it, or it is not an nn.Linear)"
    for c, m in zip(mine, mods):
        if m._sibling is not None:
            return f"{c} is already in the group of {m._sibling.parent} (a module shared between parents)"
        if m.table is not mods[0].table or m.weight.dtype != mods[0].weight.dtype:
            return "the members were swapped with different tables"
        if not m.weight.is_contiguous():
            return f"{c}'s weight is not contiguous"
        if m.weight.data_ptr() % _ALIGN:
            return f"{c}'s weight is not {_ALIGN}-byte aligned"
    return ""


def attach_groups(model: torch.nn.Module, table: Any, gemv_type: type[Any]) -> None:
    """Find the sibling groups among the ``gemv_type`` (``GemvLinear``) children of every module of ``model`` and
    attach a ``LinearGroup`` to each group's members; candidates that cannot be grouped say why (``explain``)."""
    detach_groups(model, gemv_type)
    for pname, parent in model.named_modules():
        swapped: dict[str, Any] = {c: m for c, m in parent.named_children() if isinstance(m, gemv_type)}
        if len(swapped) < 2:
            continue
        try:
            sib = find_siblings(parent, (torch.nn.Linear, gemv_type))
        except Exception as e:   # (a module whose children cannot be listed or inspected: no groups)
            _note(list(swapped.values()), pname, tuple(swapped), f"its structure could not be read: {e}")
            continue
        if sib.why:
            _note(list(swapped.values()), pname, tuple(swapped), f"not grouped: {sib.why}")
            continue
        for names, why in sib.rejected:
            _note([swapped[c] for c in names if c in swapped], pname, names, why)
        for names in sib.groups:
            mine = tuple(c for c in names if c in swapped)
            mods = [swapped[c] for c in mine]
            why = _static_reasons(names, mine, mods)
            if why:
                _note(mods, pname, names, why)
                continue
            g = LinearGroup(pname, mine, mods, mods[0].table)
            for i, m in enumerate(mods):
                m._sibling, m._sibling_index, m._sibling_note = g, i, None


def detach_groups(model: torch.nn.Module, gemv_type: type[Any]) -> None:
    """Remove every group and group note from the ``gemv_type`` layers of ``model``."""
    for m in model.modules():
        if isinstance(m, gemv_type):
            detach(m)


def detach(m: Any) -> None:
    g = m._sibling
    if g is not None:
        g.clear()
        for other in g.members:
            if other is not m and other._sibling is g:
                other._sibling, other._sibling_index = None, 0
        g.members = ()
    m._sibling, m._sibling_index, m._sibling_note = None, 0, None


def group_rows(model: torch.nn.Module, n: int, gemv_type: type[Any]) -> list[dict[str, Any]]:
    """Per sibling group of ``model`` (``swap_linears(..., group=True)``): its members, GroupShape, route at n and
    why; per candidate that was not grouped: its members (route "ungrouped") and why."""
    rows: list[dict[str, Any]] = []
    seen: set[int] = set()
    notes: set[tuple] = set()
    m: Any
    for m in model.modules():
        if not isinstance(m, gemv_type):
            continue
        g = m._sibling
        if g is not None and id(g) not in seen:
            seen.add(id(g))
            rows.append(g.explain_row(n))
        note = m._sibling_note
        if note is not None and note not in notes:
            notes.add(note)
            rows.append({"kind": "siblings", "parent": note[0], "members": list(note[1]), "shape": None,
                         "route": "ungrouped", "why": note[2], "grouped_us": None, "separate_us": None,
                         "compiled_route": None, "compiled_why": None})
    return rows


def kept_groups(mods: Sequence[Any]) -> list[tuple[Any, Any, int, Any, tuple[Any, ...]]]:
    """The group state of swapped layers ``mods`` (each: the layer, its group, its index, its note, the group's
    members), for ``reattach`` after ``detach`` removed it."""
    return [(m, m._sibling, m._sibling_index, m._sibling_note, m._sibling.members if m._sibling is not None else ())
            for m in mods]


def reattach(kept: Sequence[tuple[Any, Any, int, Any, tuple[Any, ...]]], present: set[int]) -> int:
    """Give back the group state ``kept_groups`` saved, for the groups whose members are all in ``present`` (ids
    of the layers in the model again); returns the number of groups given back."""
    groups: set[int] = set()
    for m, g, i, note, members in kept:
        m._sibling_note = note
        if g is not None and all(id(o) in present for o in members):
            m._sibling, m._sibling_index = g, i
            g.members = members
            groups.add(id(g))
    return len(groups)
