"""SwiGLU MLPs in one launch on swapped models: ``swap_linears(model, table, group=True)`` replaces each MLP whose
forward is ``self.<down>(self.<act>(self.<gate>(x)) * self.<up>(x))`` with a SiLU (``gemvtune.runtime.gatedmlp``)
by a ``GemvSwiGLUMLP`` in its parent, and ``explain`` says what each runs and why.

The wrapper holds the *same* child modules under the *same* names (so ``state_dict`` keys and tensors do not
change) and the original module (not registered), which ``detach_mlps`` puts back. Its forward is
``down(h)``: ``h`` from one grouped launch of gate and up that writes ``silu(g)·u`` (eager: ``torch_swiglu.
run_swiglu``; under ``torch.compile``: ``torch.ops.gemvtune.swiglu``) where the table's SwiGLU group route for this
weight dtype and n says "grouped" and the call can run a tuned kernel at all (x of the weights' dtype on their
device, n <= max_batch, no gradient needed, no hook on gate, up or act that the launch would skip); otherwise
``act(gate(x)) * up(x)`` through the members themselves (their own routes, or their sibling group's launch).
"""

from __future__ import annotations

from typing import Any

import torch

from ..errors import UsageError
from ..kernels.group import GroupShape
from . import grouproute, torch_swiglu
from .gatedmlp import SwiGLUForm, find_swiglu, looks_gated, resolve_act
from .torch_op import DTYPES, register_table

_MODULE = torch.nn.modules.module


def _global_hooks() -> bool:
    return bool(_MODULE._global_forward_hooks or _MODULE._global_forward_pre_hooks
                or _MODULE._global_backward_hooks or _MODULE._global_backward_pre_hooks)


def _hooked(mod: Any) -> bool:
    return isinstance(mod, torch.nn.Module) and bool(mod._forward_hooks or mod._forward_pre_hooks
                                                     or mod._backward_hooks or mod._backward_pre_hooks)


class GemvSwiGLUMLP(torch.nn.Module):
    """A SwiGLU MLP (``mlp``, at ``parent`` in the model) whose gate/up group writes ``silu(g)·u`` in one launch."""

    _gemv_M: int                  # (declared for the type checker: plain attributes, set in __init__)
    _gemv_d: int
    _gemv_max_batch: int
    _gemv_fused: dict[Any, tuple[bool, ...]]

    def __init__(self, mlp: torch.nn.Module, form: SwiGLUForm, parent: str, table: Any, act_fn: Any = None):
        super().__init__()
        for name, child in mlp._modules.items():   # the same children, in the same order: the same state_dict
            self._modules[name] = child
        for k, v in vars(mlp).items():              # (plain attributes: config, hidden_size, a function act, ...)
            if not k.startswith("_") and k != "training" and not hasattr(type(self), k):
                setattr(self, k, v)
        self.training = mlp.training
        self._gemv_original = (mlp,)               # a tuple: not a submodule
        self._gemv_form, self._gemv_parent, self._gemv_act_fn = form, parent, (act_fn,)
        self._gemv_table, self._gemv_tid = table, register_table(table)
        gate: Any = self._modules[form.gate]
        up: Any = self._modules[form.up]
        self._gemv_M, self._gemv_d = int(gate.out_features), int(gate.in_features)
        self._gemv_max_batch = min(gate.max_batch, up.max_batch)
        # Per torch dtype and n (index 0 unused): whether the SwiGLU route says "grouped" (constants for torch.compile)
        self._gemv_fused = {tdt: (False,) + tuple(self.route(n, dt).grouped for n in range(1, self._gemv_max_batch + 1))
                            for tdt, dt in DTYPES.items()}

    @property
    def original(self) -> torch.nn.Module:
        return self._gemv_original[0]

    @property
    def form(self) -> SwiGLUForm:
        return self._gemv_form

    def extra_repr(self) -> str:
        f = self._gemv_form
        return f"{f.down}(silu({f.gate}(x)) * {f.up}(x)): one launch for {f.gate}+{f.up} where the table says so"

    def route(self, n: int, dtype: str) -> grouproute.GroupRoute:
        try:
            group = GroupShape((self._gemv_M, self._gemv_M), self._gemv_d, n, dtype)
        except UsageError as e:
            return grouproute.GroupRoute("separate", None, f"not a group shape: {e}")
        return grouproute.choose_swiglu(self._gemv_table, group, "torch", dtype)

    def _product(self, x: torch.Tensor) -> torch.Tensor:
        """``act(gate(x)) * up(x)`` through the modules, in the original forward's call order."""
        f = self._gemv_form
        act = self._gemv_act_fn[0] if f.act_path else getattr(self, f.act)
        if f.up_first:
            u = getattr(self, f.up)(x)
            return act(getattr(self, f.gate)(x)) * u
        return act(getattr(self, f.gate)(x)) * getattr(self, f.up)(x)

    def _runs(self, x: torch.Tensor) -> tuple[Any, Any, Any, Any] | None:
        """(gate W, up W, gate b, up b) when this call runs the SwiGLU launch, else None (static properties)."""
        fused = self._gemv_fused.get(x.dtype)
        d = self._gemv_d
        if fused is None or x.dim() == 0 or x.shape[-1] != d:
            return None
        n = x.numel() // d if d else 0
        if not 1 <= n <= self._gemv_max_batch or not fused[n]:
            return None
        f = self._gemv_form
        g, u = getattr(self, f.gate), getattr(self, f.up)
        wg, wu, bg, bu = g.weight, u.weight, g.bias, u.bias
        if (wg.dtype != x.dtype or wu.dtype != x.dtype or wg.device != x.device or wu.device != x.device
                or wg.shape != wu.shape or (bg is None) != (bu is None)):
            return None
        if torch.is_grad_enabled() and (x.requires_grad or wg.requires_grad or wu.requires_grad
                                        or (bg is not None and (bg.requires_grad or bu.requires_grad))):
            return None   # the tuned kernels have no backward: autograd gets the modules
        if _global_hooks() or _hooked(g) or _hooked(u) or (not f.act_path and _hooked(getattr(self, f.act))):
            return None   # a hook on a module the launch would not call: call the modules
        return (wg, wu, bg, bu)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ws = self._runs(x)
        if ws is None:
            h = self._product(x)
        elif torch.compiler.is_compiling():
            h = torch.ops.gemvtune.swiglu(x, ws[0], ws[1], ws[2], ws[3], self._gemv_tid)
        else:
            h = torch_swiglu.run_swiglu(x, ws[0], ws[1], ws[2], ws[3], self._gemv_table, self._gemv_tid)
        return getattr(self, self._gemv_form.down)(h)

    def explain_row(self, n: int) -> dict[str, Any]:
        """What a call with n rows runs: one SwiGLU launch or the members' own calls, and why."""
        f = self._gemv_form
        gate, up = getattr(self, f.gate), getattr(self, f.up)
        dt = DTYPES.get(gate.weight.dtype)
        row: dict[str, Any] = {"kind": "swiglu", "parent": self._gemv_parent, "members": [f.gate, f.up],
                               "down": f.down, "act": f.act or f.act_path, "grouped_us": None, "separate_us": None}
        try:
            row["shape"] = str(GroupShape((self._gemv_M, self._gemv_M), self._gemv_d, n, dt or "fp16"))
        except UsageError:
            row["shape"] = f"{self._gemv_M}+{self._gemv_M}x{self._gemv_d}@n{n}"
        why = next((f"{name}: {r}" for name, m in ((f.gate, gate), (f.up, up))
                    if (r := getattr(m, "static_reason", lambda: "not swapped")())), "")
        if why or dt is None:
            return {**row, "route": "separate", "why": why or "the weights are not FP16 or BF16"}
        if n > self._gemv_max_batch:
            return {**row, "route": "separate", "why": f"n={n} above the members' max_batch={self._gemv_max_batch}"}
        r = self.route(n, dt)
        return {**row, "route": r.kind, "why": r.why, "grouped_us": r.grouped_us, "separate_us": r.separate_us}


def _parents(model: torch.nn.Module):
    """(qualified name, parent, attribute, child) of every direct child of every module (shared ones each time)."""
    for pname, parent in model.named_modules(remove_duplicate=False):
        for cname, child in list(parent._modules.items()):
            if child is not None:
                yield (f"{pname}.{cname}" if pname else cname), parent, cname, child


def attach_mlps(model: torch.nn.Module, table: Any, gemv_type: type[Any]) -> None:
    """Replace every SwiGLU MLP of ``model`` whose gate and up are ``gemv_type`` (``GemvLinear``) by a
    ``GemvSwiGLUMLP``; a candidate that cannot be fused says why on its swapped linears (``mlp_rows``)."""
    detach_mlps(model, gemv_type)
    root = [m for m in model.children() if isinstance(m, gemv_type)]
    if len(root) >= 2 and (form := find_swiglu(model, (gemv_type,))).found:
        why = "the model itself is this MLP: swap_linears never replaces the root module (swap its parent)"
        for m in root:
            m._mlp_note = ("", (form.gate, form.up), why)
    done: dict[int, Any] = {}
    for name, parent, cname, child in list(_parents(model)):
        if id(child) in done:
            if done[id(child)] is not None:
                setattr(parent, cname, done[id(child)])
            continue
        done[id(child)] = None
        if (isinstance(child, (gemv_type, torch.nn.Linear))
                or sum(isinstance(c, (gemv_type, torch.nn.Linear)) for c in child.children()) < 2):
            continue   # (a SwiGLU MLP has two linear children at least)
        form = find_swiglu(child, (gemv_type,))   # (gate and up swapped: a plain nn.Linear is "not swapped")
        swapped = [m for m in child.children() if isinstance(m, gemv_type)]
        if not form.found:
            if swapped and (form.gate or looks_gated(child, (torch.nn.Linear, gemv_type))):
                note = (name, tuple(n for n in (form.gate, form.up) if n) or
                        tuple(n for n, m in child.named_children() if isinstance(m, gemv_type)), form.why)
                for m in swapped:
                    m._mlp_note = note
            continue
        act_fn = resolve_act(type(child).forward, form.act_path) if form.act_path else None
        done[id(child)] = GemvSwiGLUMLP(child, form, name, table, act_fn)
        setattr(parent, cname, done[id(child)])


def detach_mlps(model: torch.nn.Module, gemv_type: type[Any]) -> list[tuple[Any, str, Any, Any]]:
    """Put back the original module of every ``GemvSwiGLUMLP`` of ``model`` (children reassigned on the wrapper
    meanwhile carried over, and its training flag) and drop every not-fused note; returns the (parent, attribute,
    original, wrapper) slots."""
    slots = []
    for _, parent, cname, child in list(_parents(model)):
        if isinstance(child, GemvSwiGLUMLP):
            orig = child.original
            for k, m in child._modules.items():
                if orig._modules.get(k, None) is not m:
                    orig._modules[k] = m
            orig.training = child.training
            setattr(parent, cname, orig)
            slots.append((parent, cname, orig, child))
    for m in model.modules():
        if isinstance(m, gemv_type):
            m._mlp_note = None
    return slots


def mlp_rows(model: torch.nn.Module, n: int, gemv_type: type[Any]) -> list[dict[str, Any]]:
    """Per fused SwiGLU MLP: its members, GroupShape, route at n and why; per candidate that was not fused: its
    members (route "ungrouped") and why."""
    rows: list[dict[str, Any]] = []
    seen: set[int] = set()
    notes: set[tuple] = set()
    for m in model.modules():
        if isinstance(m, GemvSwiGLUMLP) and id(m) not in seen:
            seen.add(id(m))
            rows.append(m.explain_row(n))
        note = getattr(m, "_mlp_note", None) if isinstance(m, gemv_type) else None
        if note is not None and note not in notes:
            notes.add(note)
            rows.append({"kind": "swiglu", "parent": note[0], "members": list(note[1]), "shape": None,
                         "route": "ungrouped", "why": note[2], "grouped_us": None, "separate_us": None})
    return rows


def residual_note(model: torch.nn.Module, gemv_type: type[Any]) -> str:
    """Why the residual adds around a fused block are not fused into down_proj / o_proj (the GEMV family's
    ``Epilogue(residual=True)`` could add them): named per model, by the classes of the modules that call the
    fused MLPs and grouped attentions ("" where ``swap_linears(..., group=True)`` fused nothing)."""
    mlps = [name for name, m in model.named_modules() if isinstance(m, GemvSwiGLUMLP)]
    groups = {g.parent for m in model.modules() if isinstance(m, gemv_type) and (g := m._sibling) is not None}
    parents = sorted({q for p in [*mlps, *groups] if (q := p.rpartition(".")[0])})
    classes = sorted({type(model.get_submodule(p)).__name__ for p in parents})
    if not classes:
        return ""
    return (f"the residual adds are not fused into the output projections (down_proj, o_proj): in {', '.join(classes)} "
            "the add (residual + mlp(...), residual + self_attn(...)) is in the layer's own forward, after the MLP or "
            "attention module returns, so the projection never sees the residual; fusing it would replace that "
            "forward (its hooks, transformers' output-capturing hooks, returned attention weights, the cache "
            "argument), which gemvtune does not do (docs/pytorch.md)")
