"""SwiGLU MLPs found by module structure: a module whose ``forward`` computes exactly
``self.<down>(self.<act>(self.<gate>(x)) * self.<up>(x))`` with ``<act>`` a SiLU, as transformers' Llama, Qwen2 and
Mistral MLPs do, so that the gate/up group can write ``silu(g)·u`` straight into the down projection's input
(``gemvtune.kernels.epilogue``, ``swiglu``).

``mlp_form(source, children)`` reads the forward's source (``ast``; never run). The body may be a docstring, then
assignments of single names, then ``return``: every assigned name is used exactly once later and is inlined
(``g = act(gate(x)); u = up(x); return down(g * u)`` is the same form; so is transformers' ``down_proj = ...;
return down_proj``); the result must be that one expression, the two factors in either order (a product of two
values is the same either way), ``<act>`` either a child (``self.act_fn``) or a function named through the
forward's module (``F.silu``). The forward takes exactly (self, x) and has no decorator. Anything else is not the
form, with the reason.

``find_swiglu(parent)`` then checks the modules themselves: ``<act>`` is a SiLU (``torch.nn.SiLU``, transformers'
``SiLUActivation`` or ``torch.nn.functional.silu``; checked by isinstance/identity, never by name), gate and up are
linear children of equal out_features with the same in_features, dtype, device and bias-ness, and nothing that
fusing would skip can be observed: no hooks on the module, its act, gate or up, no forward patched on an instance,
no parameters or buffers of its own and no state-dict methods of its own (a wrapper carries its children only).
Nothing here raises on a module.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import functools
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .siblings import forward_source, member_reasons, parse_forward


@dataclass(frozen=True)
class SwiGLUForm:
    """The attribute names of a SwiGLU MLP's parts (``act`` a child's name, or ``act_path`` a dotted function name
    read through the forward's globals), or ``why`` it is not one."""

    gate: str = ""
    up: str = ""
    down: str = ""
    act: str = ""
    act_path: str = ""
    why: str = ""
    up_first: bool = False     # the forward calls up before gate (its two-statement form may)

    @property
    def found(self) -> bool:
        return not self.why


_NOT = "its forward is not self.<down>(self.<act>(self.<gate>(x)) * self.<up>(x))"


def _no(why: str) -> SwiGLUForm:
    return SwiGLUForm(why=f"{_NOT}: {why}")


def _self_call(node: ast.AST, me: str) -> tuple[str, ast.expr] | None:
    """(attribute, its one argument) of ``self.<attr>(<arg>)`` with no keyword, else None."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
            and node.func.value.id == me and len(node.args) == 1 and not node.keywords
            and not isinstance(node.args[0], ast.Starred)):
        return node.func.attr, node.args[0]
    return None


def _dotted(node: ast.AST) -> str:
    """``a.b.c`` of a chain of names ("" if not one)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return ""
    return ".".join([node.id, *reversed(parts)])


class _Inline(ast.NodeTransformer):
    """Replaces each use of an assigned name by its (inlined) value, counting the uses."""

    def __init__(self, env: dict[str, ast.expr], uses: dict[str, int]):
        self.env, self.uses = env, uses

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.env:
            self.uses[node.id] += 1
            return self.env[node.id]
        return node


def mlp_form(source: str, children: Iterable[str]) -> SwiGLUForm:
    """The SwiGLU form of the forward defined by ``source`` over the module's ``children`` (attribute names of its
    child modules), by structure alone (the modules are checked by ``find_swiglu``)."""
    fn, why = parse_forward(source)
    if fn is None:
        return SwiGLUForm(why=why)
    a = fn.args
    params = a.posonlyargs + a.args
    if len(params) != 2 or a.vararg or a.kwarg or a.kwonlyargs or a.defaults:
        return _no("it does not take exactly (self, x)")
    if fn.decorator_list or isinstance(fn, ast.AsyncFunctionDef):
        return _no("it is decorated or async")
    me, x = params[0].arg, params[1].arg
    body = list(fn.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]   # the docstring
    if not body or not isinstance(body[-1], ast.Return) or body[-1].value is None:
        return _no("it does not end with returning a value")
    env: dict[str, ast.expr] = {}
    uses: dict[str, int] = {}
    inline = _Inline(env, uses)
    for stmt in body[:-1]:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target, value = stmt.targets[0], stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None and stmt.simple:
            target, value = stmt.target, stmt.value
        else:
            return _no(f"line {stmt.lineno} is not an assignment of one name")
        if not isinstance(target, ast.Name) or target.id in (me, x) or target.id in env:
            return _no(f"line {stmt.lineno} assigns {ast.unparse(target)} (self, x or a name assigned twice)")
        env[target.id] = inline.visit(value)
        uses[target.id] = 0
    expr = inline.visit(body[-1].value)
    unused = [k for k, v in uses.items() if v != 1]
    if unused:
        return _no(f"{unused[0]} is used {uses[unused[0]]} times (each assigned name must be used once)")
    kids = set(children)
    outer = _self_call(expr, me)
    if outer is None or outer[0] not in kids:
        return _no("it does not return a call of one child on one argument")
    down, prod = outer
    if not (isinstance(prod, ast.BinOp) and isinstance(prod.op, ast.Mult)):
        return _no(f"self.{down}'s argument is not a product of two factors")
    for gated, plain in ((prod.left, prod.right), (prod.right, prod.left)):
        up = _self_call(plain, me)
        if up is None or not (isinstance(up[1], ast.Name) and up[1].id == x) or up[0] not in kids:
            continue
        if not (isinstance(gated, ast.Call) and len(gated.args) == 1 and not gated.keywords):
            continue
        gate = _self_call(gated.args[0], me)
        if gate is None or not (isinstance(gate[1], ast.Name) and gate[1].id == x) or gate[0] not in kids:
            continue
        act_attr = _self_call(gated, me)
        act, path = (act_attr[0], "") if act_attr is not None else ("", _dotted(gated.func))
        if not (act or path) or (path and path.split(".")[0] in (me, x)):
            continue
        names = [gate[0], up[0], down] + ([act] if act else [])
        if len(set(names)) < len(names):
            return _no(f"the same child is used twice ({', '.join(names)})")
        first = min((gated.args[0], plain), key=lambda c: (getattr(c, "lineno", 0), getattr(c, "col_offset", 0)))
        return SwiGLUForm(gate[0], up[0], down, act, path, up_first=first is plain)
    return _no(f"self.{down}'s argument is not act(self.<gate>({x})) * self.<up>({x})")


@functools.lru_cache(maxsize=256)
def _form_of(fn: Any, children: frozenset[str]) -> SwiGLUForm:
    source, why = forward_source(fn)
    return mlp_form(source, children) if not why else SwiGLUForm(why=why)


def _hooks(mod: Any) -> str:
    """Which hooks ``mod`` has that a call skipped by the fusion would not run ("" if none)."""
    kinds = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")
    return ", ".join(k.strip("_").replace("_", " ") for k in kinds if getattr(mod, k, None))


def is_silu(act: Any) -> bool:
    """Whether ``act`` computes exactly ``silu``: ``torch.nn.SiLU`` (its own forward), transformers'
    ``SiLUActivation`` (where transformers is loaded), or the function ``torch.nn.functional.silu``."""
    import torch

    if act is torch.nn.functional.silu:
        return True
    if not isinstance(act, torch.nn.Module) or "forward" in vars(act):
        return False
    if isinstance(act, torch.nn.SiLU) and type(act).forward is torch.nn.SiLU.forward:
        return True
    tf = sys.modules.get("transformers.activations")
    cls = getattr(tf, "SiLUActivation", None)
    return isinstance(cls, type) and isinstance(act, cls)


def resolve_act(fn: Any, path: str) -> Any:
    """The object ``path`` (``F.silu``) names in ``fn``'s module, read by attribute (None: it names nothing)."""
    head, *rest = path.split(".")
    scope = getattr(fn, "__globals__", {})
    obj = scope.get(head, getattr(builtins, head, None))
    for part in rest:
        obj = getattr(obj, part, None)
    return obj


def _what(obj: Any) -> str:
    return getattr(obj, "__qualname__", None) or type(obj).__name__


def find_swiglu(parent: Any, linear_types: Iterable[type] | None = None) -> SwiGLUForm:
    """The SwiGLU form of ``parent`` with its modules checked (``why`` empty: it can be fused)."""
    import torch

    types = tuple(linear_types) if linear_types is not None else (torch.nn.Linear,)
    try:
        kids = dict(parent.named_children())
        if "forward" in vars(parent):
            return SwiGLUForm(why="its forward is replaced on the instance (a hook or patch): its structure is unknown")
        fn = getattr(type(parent), "forward", None)
        form = _form_of(fn, frozenset(kids))
        if not form.found:
            return form
        act = kids[form.act] if form.act else resolve_act(fn, form.act_path)
        act_name = f"self.{form.act}" if form.act else form.act_path
        if act is None:
            return SwiGLUForm(why=f"{act_name} names nothing in the forward's module")
        why = "" if is_silu(act) else (f"{act_name} is {_what(act)}, not a SiLU: act(gate)·up is not fused (the "
                                       "kernel's epilogue computes silu(g)·u)")
        gate, up = kids[form.gate], kids[form.up]
        if not why:
            missing = [n for n, m in ((form.gate, gate), (form.up, up)) if not isinstance(m, types)]
            why = (f"{', '.join(missing)} not swapped (a filter excluded it, or it is not an nn.Linear)" if missing
                   else member_reasons([gate, up], [form.gate, form.up]))
        if not why and gate.out_features != up.out_features:
            why = (f"out_features differ: {form.gate} {gate.out_features}, {form.up} {up.out_features} "
                   "(silu(g)·u pairs row i of each)")
        if not why:
            hooked = [f"{n} ({h})" for n, m in (("the module", parent), (form.gate, gate), (form.up, up),
                                                 (act_name, act)) if (h := _hooks(m))]
            patched = [n for n, m in ((form.gate, gate), (form.up, up)) if "forward" in vars(m)]
            why = (f"hooks that fusing would skip: {', '.join(hooked)}" if hooked
                   else f"{patched[0]}'s forward is replaced on the instance" if patched else _own_state(parent))
        return form if not why else dataclasses.replace(form, why=why)
    except Exception as e:   # (a module that cannot be inspected: not fused)
        return SwiGLUForm(why=f"its structure could not be read: {type(e).__name__}: {e}")


def looks_gated(parent: Any, linear_types: Iterable[type]) -> bool:
    """Whether ``parent``'s children look like a gated MLP's whatever its forward: exactly three linear children,
    two of one (in, out) with in != out, the third (out, in) (a candidate ``explain`` reports when not fused)."""
    types = tuple(linear_types)
    lins: list[Any] = [m for m in parent.children() if isinstance(m, types)]
    if len(lins) != 3:
        return False
    dims = [(int(m.in_features), int(m.out_features)) for m in lins]
    for i in range(3):
        a, b, c = dims[i], dims[(i + 1) % 3], dims[(i + 2) % 3]
        if a == b and a[0] != a[1] and c == (a[1], a[0]):
            return True
    return False


def _own_state(parent: Any) -> str:
    """Why ``parent`` holds state a wrapper carrying its children only would lose ("" if none)."""
    import torch

    own = [n for n, _ in parent.named_parameters(recurse=False)] + [n for n, _ in parent.named_buffers(recurse=False)]
    if own:
        return f"it holds parameters or buffers of its own ({', '.join(own)})"
    cls = type(parent)
    for name in ("_save_to_state_dict", "_load_from_state_dict", "get_extra_state", "set_extra_state", "__call__"):
        if getattr(cls, name, None) is not getattr(torch.nn.Module, name, None):
            return f"its class defines its own {name}"
    if (parent._state_dict_hooks or parent._state_dict_pre_hooks or parent._load_state_dict_pre_hooks
            or parent._load_state_dict_post_hooks):
        return "it has state-dict hooks"
    return ""
