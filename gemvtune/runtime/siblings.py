"""Sibling linears found by module structure: the linear children of a module that its ``forward`` calls on the
same input, as q/k/v of an attention and gate/up of a gated MLP are (``gemvtune.kernels.group``).

``find_siblings(parent)`` reads ``type(parent).forward``'s source (``inspect.getsource``, dedented, parsed with
``ast``; never run) and finds the calls ``self.<child>(<name>)`` of a linear child with exactly one positional
argument, a bare name, and no keyword. The calls on one name, in source order, are a group when:

- each runs exactly once, unconditionally: not under an ``if``, loop, ``try`` or ``match``, not in a conditional
  expression, a boolean operator's later operands, a lambda, a comprehension or a nested function; and the child
  is referred to nowhere else in ``forward``;
- between the first call and the last, the name is not bound again (assignment, augmented or annotated assignment,
  ``:=``, a loop or ``with`` target, ``del``, an import), nothing of it is assigned (``name[...] = ``,
  ``name.attr = ``), no method ending in ``_`` is called (``x.add_()``, ``torch.relu_(...)``: in place, on
  anything, since it could be an alias of the name), no call passes ``inplace=True``, and no ``return``, ``raise``
  or ``yield`` can end the call sequence early;
- there are 2 to ``MAX_GROUP`` of them, distinct modules with the same in_features, weight dtype and device, and
  all with a bias or none (out_features may differ).

Every candidate that is not a group is reported with the reason; a forward that cannot be read (no source, not a
function, a forward replaced on the instance) gives no groups and says why. Nothing here raises on a module.
"""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..kernels.group import MAX_GROUP

_Pos = tuple[int, int]
# what runs its parts zero times, more than once, or later (every part of these is conditional)
_SCOPES_AND_BRANCHES = (ast.While, ast.Try, ast.Match, ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                        ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


@dataclass(frozen=True)
class Siblings:
    groups: tuple[tuple[str, ...], ...] = ()                   # member attribute names, in call order
    rejected: tuple[tuple[tuple[str, ...], str], ...] = ()     # (candidate members, why they are not a group)
    why: str = ""                                               # why the forward could not be read (no groups)


def find_siblings(parent: Any, linear_types: Iterable[type] | None = None) -> Siblings:
    """The sibling groups among ``parent``'s direct children of ``linear_types`` (default ``nn.Linear``)."""
    import torch

    types = tuple(linear_types) if linear_types is not None else (torch.nn.Linear,)
    children = {name: c for name, c in parent.named_children() if isinstance(c, types)}
    if len(children) < 2:
        return Siblings()
    if "forward" in vars(parent):
        return Siblings(why="its forward is replaced on the instance (a hook or patch): its structure is unknown")
    found = forward_calls(getattr(type(parent), "forward", None), frozenset(children))
    if found.why:
        return found
    groups, rejected = [], list(found.rejected)
    for names in found.groups:
        why = member_reasons([children[c] for c in names], names)
        if why:
            rejected.append((names, why))
        else:
            groups.append(names)
    return Siblings(tuple(groups), tuple(rejected))


def member_reasons(mods: Sequence[Any], names: Sequence[str]) -> str:
    """Why linear modules ``mods`` (named ``names``) cannot be one group ("" if they can)."""
    if not 2 <= len(mods) <= MAX_GROUP:
        return f"{len(mods)} members: a group has 2 to {MAX_GROUP}"
    if len({id(m) for m in mods}) < len(mods):
        return "the same module is called under two of these names"

    def differ(what: str, vals: list[Any]) -> str:
        return (f"{what} differ: " + ", ".join(f"{n} {str(v).replace('torch.', '')}" for n, v in zip(names, vals))
                if len(set(vals)) > 1 else "")

    try:
        ws = [m.weight for m in mods]
        return (differ("in_features", [m.in_features for m in mods]) or differ("weight dtypes", [w.dtype for w in ws])
                or differ("devices", [w.device for w in ws])
                or differ("biases", ["bias" if m.bias is not None else "no bias" for m in mods]))
    except AttributeError as e:
        return f"not linear layers: {e}"


@functools.lru_cache(maxsize=256)
def forward_calls(fn: Any, children: frozenset[str]) -> Siblings:
    """The candidate groups of a ``forward`` function (by structure alone: the members are not checked)."""
    source, why = forward_source(fn)
    return call_groups(source, children) if not why else Siblings(why=why)


def call_groups(source: str, children: Iterable[str]) -> Siblings:
    """The candidate groups of the function defined by ``source`` (the first statement) over ``children``, the
    attribute names of its linear children."""
    fn, why = parse_forward(source)
    if fn is None:
        return Siblings(why=why)
    params = fn.args.posonlyargs + fn.args.args
    if not params:
        return Siblings(why="its forward takes no self argument")
    scan = _Scan(params[0].arg, set(children))
    for stmt in fn.body:
        scan.visit(stmt, False)
    return scan.result()


def parse_forward(source: str) -> tuple[ast.FunctionDef | ast.AsyncFunctionDef | None, str]:
    """(the function defined by ``source``'s first statement, or a class's ``forward``; "") or (None, why not)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        return None, f"its forward's source does not parse: {e.msg} (line {e.lineno})"
    fn = tree.body[0] if tree.body else None
    while isinstance(fn, ast.ClassDef) and fn.body:   # (a source that is a class: its forward)
        fn = next((s for s in fn.body if isinstance(s, ast.FunctionDef) and s.name == "forward"), None)
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None, "its forward's source is not a function definition"
    return fn, ""


def forward_source(fn: Any) -> tuple[str, str]:
    """(the dedented source of a ``forward`` function, "") or ("", why it cannot be read)."""
    if not callable(fn):
        return "", "it has no forward method"
    try:
        return textwrap.dedent(inspect.getsource(fn)), ""
    except (OSError, TypeError) as e:
        return "", f"its forward's source cannot be read ({type(e).__name__}: {e})"


def _start(node: ast.AST) -> _Pos:
    return (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))


def _end(node: ast.AST) -> _Pos:
    return (getattr(node, "end_lineno", None) or 0, getattr(node, "end_col_offset", None) or 0)


@dataclass
class _Call:
    child: str
    var: str
    start: _Pos
    end: _Pos
    conditional: bool


@dataclass
class _Scan:
    me: str                  # the forward's first parameter (self)
    children: set[str]
    uses: dict[str, int] = field(default_factory=dict)                        # self.<child> references
    calls: list[_Call] = field(default_factory=list)
    binds: dict[str, list[tuple[_Pos, str]]] = field(default_factory=dict)    # name -> (when, how) it changes
    anywhere: list[tuple[_Pos, str]] = field(default_factory=list)            # in-place calls, early exits

    def _bind(self, target: ast.AST, when: _Pos, how: str) -> None:
        if isinstance(target, ast.Name):
            self.binds.setdefault(target.id, []).append((when, how))
        elif isinstance(target, (ast.Tuple, ast.List)):
            for t in target.elts:
                self._bind(t, when, how)
        elif isinstance(target, ast.Starred):
            self._bind(target.value, when, how)
        elif isinstance(target, (ast.Subscript, ast.Attribute)):
            root = target.value
            while isinstance(root, (ast.Subscript, ast.Attribute)):
                root = root.value
            if isinstance(root, ast.Name):
                self.binds.setdefault(root.id, []).append((when, "assigned into"))

    def _note(self, node: ast.AST, cond: bool) -> None:
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == self.me
                and node.attr in self.children):
            self.uses[node.attr] = self.uses.get(node.attr, 0) + 1
        if isinstance(node, ast.Call):
            f = node.func
            if (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == self.me
                    and f.attr in self.children and len(node.args) == 1 and not node.keywords
                    and isinstance(node.args[0], ast.Name)):
                self.calls.append(_Call(f.attr, node.args[0].id, _start(node), _end(node), cond))
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name.endswith("_") and not name.endswith("__"):
                self.anywhere.append((_end(node), f"{name}() changes a tensor in place"))
            if any(k.arg == "inplace" and not (isinstance(k.value, ast.Constant) and not k.value.value)
                   for k in node.keywords):
                self.anywhere.append((_end(node), f"{name or 'a call'}(inplace=...) may change a tensor in place"))
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            if not (isinstance(node, ast.AnnAssign) and node.value is None):
                for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    self._bind(t, _end(node), "assigned")
        elif isinstance(node, ast.NamedExpr):
            self._bind(node.target, _end(node), "assigned (:=)")
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            self._bind(node.target, _start(node.target), "a loop target")
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            self._bind(node.optional_vars, _end(node.context_expr), "a with target")
        elif isinstance(node, ast.ExceptHandler) and node.name:
            self.binds.setdefault(node.name, []).append((_start(node), "an except target"))
        elif isinstance(node, ast.Delete):
            for t in node.targets:
                self._bind(t, _start(node), "deleted")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                self.binds.setdefault((a.asname or a.name).split(".")[0], []).append((_start(node), "imported"))
        elif isinstance(node, (ast.Return, ast.Raise, ast.Yield, ast.YieldFrom)):
            self.anywhere.append((_end(node), f"a {type(node).__name__.lower()} may end forward"))

    def visit(self, node: ast.AST, cond: bool) -> None:
        self._note(node, cond)
        parts: list[tuple[Any, bool]]
        if isinstance(node, ast.If):
            parts = [(node.test, cond), (node.body, True), (node.orelse, True)]
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            parts = [(node.iter, cond), (node.target, True), (node.body, True), (node.orelse, True)]
        elif isinstance(node, ast.IfExp):
            parts = [(node.test, cond), (node.body, True), (node.orelse, True)]
        elif isinstance(node, ast.BoolOp):
            parts = [(node.values[:1], cond), (node.values[1:], True)]
        elif isinstance(node, _SCOPES_AND_BRANCHES) or type(node).__name__ == "TryStar":
            parts = [(list(ast.iter_child_nodes(node)), True)]
        else:
            parts = [(list(ast.iter_child_nodes(node)), cond)]
        for sub, c in parts:
            for n in sub if isinstance(sub, list) else [sub]:
                self.visit(n, c)

    def result(self) -> Siblings:
        groups: list[tuple[str, ...]] = []
        rejected: list[tuple[tuple[str, ...], str]] = []
        by_var: dict[str, list[_Call]] = {}
        for c in sorted(self.calls, key=lambda c: c.start):
            by_var.setdefault(c.var, []).append(c)
        for var, calls in by_var.items():
            if len(calls) < 2:
                continue
            ok = []
            for c in calls:
                if self.uses.get(c.child, 0) > 1:
                    rejected.append(((c.child,), f"{self.me}.{c.child} is used {self.uses[c.child]} times in forward"))
                elif c.conditional:
                    rejected.append(((c.child,), f"{self.me}.{c.child}({var}) runs under a condition, in a loop or "
                                                 "in a nested scope"))
                else:
                    ok.append(c)
            names = tuple(c.child for c in ok)
            if len(ok) < 2:
                continue
            first, last = ok[0], ok[-1]
            between = f"between {self.me}.{first.child}({var}) and {self.me}.{last.child}({var})"
            changes = [f"{var} is {how}" for when, how in self.binds.get(var, []) if first.end <= when <= last.start]
            changes += [what for when, what in self.anywhere if first.end <= when <= last.start]
            if changes:
                rejected.append((names, f"{changes[0]} {between}"))
            elif len(ok) > MAX_GROUP:
                rejected.append((names, f"{len(ok)} calls on {var}: a group has at most {MAX_GROUP} members"))
            else:
                groups.append(names)
        return Siblings(tuple(groups), tuple(rejected))
