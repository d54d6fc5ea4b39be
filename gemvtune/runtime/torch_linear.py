"""PyTorch drop-in: ``GemvLinear`` runs an ``nn.Linear`` through the table's tuned kernels where it can
(CUDA FP16 or BF16, 1..16 rows of input) and through ``torch.nn.functional.linear`` everywhere else.

This is the only gemvtune module that imports torch; ``import gemvtune`` does not load it.

    table = gemvtune.runtime.table.load_table("results/nvidia-h200/table.json")
    names = swap_linears(model, table)        # in place; the same Parameters, nothing copied
    with torch.no_grad():
        y = model(x)                          # warm-up: compiles each shape's kernel once
    ...                                       # (now capturable in torch.cuda.graph)
    restore_linears(model)                    # the original nn.Linear objects are back

CUDA graphs: a layer compiles its kernel and allocates its workspace (a ``LaunchPlan``) the first time
it sees a batch size n; that must happen outside capture. Run the model once with every batch size you
will capture (on a side stream, as PyTorch's CUDA-graph documentation asks for any warm-up) before
``torch.cuda.graph(...)``; ``torch.compile(mode="reduce-overhead")`` warms up by itself.

``explain(model)`` says, per linear layer, whether it runs a tuned kernel or falls back, and why, and, where it
differs, what the layer runs under ``torch.compile`` (there the tuned kernel must also beat the Inductor time the
table records: ``gemvtune.runtime.verdict``).

``swap_linears(model, table, group=True)`` also runs sibling layers that read the same x (q/k/v, gate/up) as one
grouped launch where the table measured that faster than the members alone (``gemvtune.runtime.torch_siblings``),
and replaces each SwiGLU MLP by a wrapper whose gate/up launch writes silu(g)·u straight into the down projection's
input (``gemvtune.runtime.torch_mlp``); ``explain(model).groups`` lists the groups and the MLPs, their routes, and
the candidates that were not grouped or fused, with why. ``restore_linears`` returns the names it restored and a
``reswap()`` that puts back the very objects it removed (groups and MLP wrappers included).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import torch
import torch.nn.functional as F

from ..kernels.shapes import MAX_BATCH
from .explaintext import format_explain
from .torch_mlp import GemvSwiGLUMLP, attach_mlps, detach_mlps, mlp_rows, residual_note
from .torch_op import _ALIGN, DTYPES, device_allows, register_table, route_flags, run_linear
from .torch_siblings import attach_groups, detach_groups, group_rows, kept_groups, reattach
from .torchmods import check_table as _check_table
from .torchmods import linear_children as _linear_children

__all__ = ["ExplainRows", "GemvLinear", "GemvSwiGLUMLP", "Restored", "explain", "format_explain", "restore_linears",
           "swap_linears"]


class GemvLinear(torch.nn.Module):
    """Wraps an ``nn.Linear``: holds the *same* weight and bias Parameters (registered under the same
    names, so ``state_dict`` keys do not change) and the original module, for ``restore_linears``.

    ``forward(x)`` computes ``F.linear(x, weight, bias)`` (out in the weight's dtype, bias and cast fused into
    the tuned kernel) through the table's route for (M, d, n, dtype), n = x.numel() // in_features: the tuned
    kernel where the table measured it faster than cuBLAS for the weight's dtype (FP16 and BF16 entries are
    separate: a BF16 layer never runs a kernel tuned only for FP16) on the table's own GPU model (on another, every
    call: ``gemvtune.runtime.tablegpu``), else ``F.linear`` itself. Anything the
    kernels cannot take is ``F.linear`` too: CPU, FP32, x of another dtype than the weight, n > max_batch,
    a gradient needed, a weight not contiguous or not 16-byte aligned. Eager calls launch directly
    (``torch_op.run_linear``); under ``torch.compile`` the layer is the custom op ``torch.ops.gemvtune.linear``, so
    ``fullgraph=True`` traces it and Inductor's CUDA graphs capture its kernels, where the table's route for
    compiled callers (framework ``torch-compile``) says tuned: the tuned kernel beat cuBLAS and the Inductor time
    the table records; elsewhere the layer traces ``F.linear`` and Inductor compiles it.
    """

    weight: torch.nn.Parameter          # registered in __init__ (declared for the type checker)
    bias: torch.nn.Parameter | None

    def __init__(self, linear: torch.nn.Linear, table: Any, max_batch: int = MAX_BATCH):
        super().__init__()
        if not isinstance(linear, torch.nn.Linear):
            raise TypeError(f"GemvLinear wraps an nn.Linear, got {type(linear).__name__}")
        _check_table(table, "GemvLinear")
        if isinstance(max_batch, bool) or not isinstance(max_batch, int) or not 1 <= max_batch <= MAX_BATCH:
            raise ValueError(f"max_batch must be in 1..{MAX_BATCH}, got {max_batch!r}")
        self.in_features, self.out_features = linear.in_features, linear.out_features
        # nn.Linear declares its weight a Tensor; it is a Parameter (register_parameter checks)
        self.register_parameter("weight", cast(torch.nn.Parameter, linear.weight))
        self.register_parameter("bias", linear.bias)
        self.table, self.max_batch = table, max_batch
        self._tid = register_table(table)
        # A table runs its kernels on its own GPU model only: checked here against torch's current device (another
        # model: one warning, and every route below is cuBLAS), and again on the device of each plan built.
        device_allows(table)
        # Route per weight dtype and n (index 0 unused), decided once from the table's measurements: constants
        # that torch.compile reads without tracing the table (a weight cast after the swap finds its dtype's).
        # A zero-sized layer (0 in or out features) has no shape to tune: F.linear for every n.
        empty = not (self.in_features and self.out_features)
        self._tuned = self._routes(table, "torch", empty)
        # the same under torch.compile: a subset of the eager routes (tuned there beat cuBLAS too), so the op, which
        # routes again at run time for eager callers, runs the tuned kernel wherever the trace calls it
        self._compiled = self._routes(table, "torch-compile", empty)
        self._original = (linear,)  # a tuple: not registered as a submodule (state_dict keys stay the same)
        # swap_linears(..., group=True): the sibling group (a torch_siblings.LinearGroup, a plain object: not a
        # submodule), this layer's place in its call order, or why a candidate group of it was not grouped
        self._sibling: Any = None
        self._sibling_index = 0
        self._sibling_note: tuple[str, tuple[str, ...], str] | None = None
        # swap_linears(..., group=True): why the SwiGLU MLP candidate this layer is part of was not fused
        self._mlp_note: tuple[str, tuple[str, ...], str] | None = None

    def _routes(self, table: Any, framework: str, empty: bool) -> dict[torch.dtype, tuple[bool, ...]]:
        return route_flags(table, self.out_features, self.in_features, self.max_batch, framework, empty=empty)

    @property
    def original(self) -> torch.nn.Linear:
        return self._original[0]

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, max_batch={self.max_batch}")

    def static_reason(self) -> str:
        """Why no call of this layer can run a tuned kernel ("" when some can): what the weight is."""
        w, b = self.weight, self.bias
        if not (self.in_features and self.out_features):
            return f"a zero-sized layer ({self.in_features} in, {self.out_features} out features): nothing to tune"
        if not w.is_cuda:
            return f"weight on {w.device}, not a CUDA device"
        if w.dtype not in DTYPES:
            return f"weight is {str(w.dtype).replace('torch.', '')}; the tuned kernels are FP16 or BF16"
        if not w.is_contiguous():
            return "weight is not contiguous"
        if w.data_ptr() % _ALIGN:
            return f"weight is not {_ALIGN}-byte aligned"
        if b is not None and (b.dtype != w.dtype or not b.is_contiguous() or b.device != w.device):
            return "bias is not a contiguous vector of the weight's dtype on the weight's device"
        return ""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling():
            return self._traced(x)
        g = self._sibling
        if g is not None and g.active:   # a sibling group: one launch for all members, or this member's kept output
            y = g.eager(self, x)
            if y is not None:
                return y
        # Eager: the per-call CPU cost is what a user feels (decode is CPU-bound in eager mode), so
        # this path reads only cheap attributes (dtype singletons, device indices) and one tuple; the
        # route comes first, so a call that runs cuBLAS anyway pays nothing more for the checks below.
        w, b = self.weight, self.bias
        n = x.numel() // self.in_features if self.in_features else 0   # (0: a zero-sized layer, F.linear)
        tuned = self._tuned.get(w.dtype)
        if tuned is None or n > self.max_batch or not tuned[n]:
            return F.linear(x, w, b)  # not FP16/BF16, cuBLAS measured faster for this n, or the table lacks it
        if (x.dtype is not w.dtype or not x.is_cuda or x.get_device() != w.get_device()
                or not x.dim() or x.shape[-1] != self.in_features or not w.is_contiguous()
                or (b is not None and (b.dtype is not w.dtype or not b.is_contiguous()))):
            return F.linear(x, w, b)
        if torch.is_grad_enabled() and (x.requires_grad or w.requires_grad or (b is not None and b.requires_grad)):
            return F.linear(x, w, b)  # the tuned kernels have no backward: autograd gets F.linear
        return run_linear(x, w, b, self.table, self._tid)

    def _traced(self, x: torch.Tensor) -> torch.Tensor:
        """What torch.compile traces: the same decisions on static properties, then the custom op
        (its implementation checks pointers and alignment at run time)."""
        g = self._sibling
        if g is not None and g.active:
            y = g.traced(self, x)
            if y is not None:
                return y
        w, b = self.weight, self.bias
        k = self.in_features
        tuned = self._compiled.get(w.dtype)
        if not (tuned is not None and x.is_cuda and x.dtype == w.dtype and x.device == w.device
                and x.dim() > 0 and x.shape[-1] == k and w.is_contiguous()
                and (b is None or (b.dtype == w.dtype and b.is_contiguous()))):
            return F.linear(x, w, b)
        if torch.is_grad_enabled() and (x.requires_grad or w.requires_grad or (b is not None and b.requires_grad)):
            return F.linear(x, w, b)
        n = x.numel() // k if k else 0
        if n > self.max_batch or not tuned[n]:
            return F.linear(x, w, b)
        return torch.ops.gemvtune.linear(x, w, b, self._tid)


def swap_linears(model: torch.nn.Module, table: Any,
                 filter: Callable[[str, torch.nn.Module], bool] | None = None,
                 max_batch: int = MAX_BATCH, group: bool = False) -> list[str]:
    """Replace, in place, every submodule of type exactly ``nn.Linear`` (subclasses such as quantized
    or LoRA layers have their own forward and are left alone) for which ``filter(name, module)`` is
    true (default: all) by a ``GemvLinear`` sharing its Parameters. Any dtype and device may be
    swapped: what the tuned kernels cannot run falls back to ``F.linear``. A module shared under two
    names gets one wrapper. The root module itself is never replaced. Returns the names replaced.

    ``group=True``: then find, in every module's ``forward``, the sibling ``GemvLinear`` children called on the
    same input (q/k/v, gate/up: ``gemvtune.runtime.siblings``) and attach a ``LinearGroup`` to each group's members
    (not a submodule: ``state_dict`` is unchanged), so that a call where the table measured one grouped launch
    faster than the members alone runs them all in one launch (``gemvtune.runtime.torch_siblings``); and replace
    every SwiGLU MLP (``down(silu(gate(x)) * up(x))``: ``gemvtune.runtime.gatedmlp``) in its parent by a
    ``GemvSwiGLUMLP`` holding the same children under the same names, whose gate/up launch writes silu(g)·u
    where the table measured that faster (``gemvtune.runtime.torch_mlp``)."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"swap_linears: model must be a torch.nn.Module, got {type(model).__name__}")
    _check_table(table, "swap_linears")
    if filter is not None and not callable(filter):
        raise TypeError(f"swap_linears: filter must be a callable (name, module) -> bool, got {type(filter).__name__}")
    if not isinstance(group, bool):
        raise TypeError(f"swap_linears: group must be True or False, got {group!r}")
    done: dict[int, GemvLinear] = {}
    names = []
    for name, parent, cname, child in list(_linear_children(model)):
        if type(child) is not torch.nn.Linear or (filter is not None and not filter(name, child)):
            continue
        if id(child) not in done:
            done[id(child)] = GemvLinear(child, table, max_batch)
        setattr(parent, cname, done[id(child)])
        names.append(name)
    from .torch_fp8 import wrap_fp8_modules

    names += wrap_fp8_modules(model, table, filter, max_batch)[0]   # FP8 linears a checkpoint loaded
    if group:
        detach_mlps(model, GemvLinear)   # (a model swapped before: its MLPs' own forwards are read again)
        attach_groups(model, table, GemvLinear)
        attach_mlps(model, table, GemvLinear)
    return names


def restore_linears(model: torch.nn.Module) -> Restored:
    """Put back the original ``nn.Linear`` objects where ``swap_linears`` put a ``GemvLinear`` (a
    Parameter reassigned on the wrapper meanwhile is carried over) and the original module of every fused SwiGLU
    MLP, and remove every sibling group. Returns the names restored (a list), whose ``reswap()`` puts the same
    swapped objects back."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"restore_linears: model must be a torch.nn.Module, got {type(model).__name__}")
    swapped = [m for m in model.modules() if isinstance(m, GemvLinear)]
    kept = kept_groups(swapped)
    notes = [(m, m._mlp_note) for m in swapped if m._mlp_note is not None]
    mlps = detach_mlps(model, GemvLinear)
    detach_groups(model, GemvLinear)
    names: list[str] = []
    slots: list[tuple[str, Any, str, Any, Any]] = []
    from .torch_fp8 import GemvFp8Linear

    for name, parent, cname, child in list(_linear_children(model)):
        if isinstance(child, GemvFp8Linear):   # its original module, or an nn.Linear of its dequantised weights
            orig = child.restored()
            setattr(parent, cname, orig)
            names.append(name)
            slots.append((name, parent, cname, orig, child))
            continue
        if not isinstance(child, GemvLinear):
            continue
        orig = child.original
        if orig.weight is not child.weight:
            orig.weight = child.weight
        if orig.bias is not child.bias:
            orig.register_parameter("bias", child.bias)
        setattr(parent, cname, orig)
        names.append(name)
        slots.append((name, parent, cname, orig, child))
    return Restored(names, slots, mlps, kept, notes)


class Restored(list[str]):
    """What ``restore_linears`` answers: the names it restored (a list), ``groups`` and ``mlps`` (how many sibling
    groups and fused SwiGLU MLPs it removed), and ``reswap()``, which puts the very objects it removed back
    (each ``GemvLinear``, its sibling group, each ``GemvSwiGLUMLP``): a caller switching one model between stock and
    swapped (``gemvtune bench hf``) keeps one fixed set of module objects, so torch.compile's guards match."""

    def __init__(self, names: list[str], slots: list[tuple[str, Any, str, Any, Any]],
                 mlps: list[tuple[Any, str, Any, Any]], kept: list[tuple[Any, ...]], notes: list[tuple[Any, Any]]):
        super().__init__(names)
        self._slots, self._mlps, self._kept, self._notes = slots, mlps, kept, notes
        self.groups = len({id(k[1]) for k in kept if k[1] is not None})
        self.mlps = len({id(w) for *_, w in mlps})

    def reswap(self) -> list[str]:
        """Put back each swapped layer and MLP wrapper where restore_linears found it, where its original is still
        in place (a slot the caller changed since is left alone), with the sibling groups whose members are all
        back; Parameters and children reassigned on the originals meanwhile are carried over. Returns the names put
        back. ``restore_linears`` undoes it again."""
        names, present = [], set()
        for name, parent, cname, orig, w in self._slots:
            if parent._modules.get(cname) is not orig:
                continue
            if not isinstance(w, GemvLinear):   # an FP8 layer: its own tensors, not the original's
                setattr(parent, cname, w)
                names.append(name)
                continue
            if w.weight is not orig.weight:
                w.register_parameter("weight", orig.weight)
            if w.bias is not orig.bias:
                w.register_parameter("bias", orig.bias)
            setattr(parent, cname, w)
            names.append(name)
            present.add(id(w))
        for parent, cname, orig, wrapper in self._mlps:
            if parent._modules.get(cname) is orig:
                for k, m in orig._modules.items():
                    if wrapper._modules.get(k) is not m:
                        wrapper._modules[k] = m
                wrapper.training = orig.training
                setattr(parent, cname, wrapper)
        reattach(self._kept, present)
        for m, note in self._notes:
            m._mlp_note = note
        return names


class ExplainRows(list[dict[str, Any]]):
    """``explain``'s rows (a list: one dict per linear layer), ``groups``: one dict per sibling group and per
    SwiGLU MLP, and ``notes``: what is not fused in the model as a whole, and why."""

    groups: list[dict[str, Any]]
    notes: list[str]


def explain(model: torch.nn.Module, n: int = 1) -> ExplainRows:
    """Per linear layer of ``model`` (swapped or not), what a call with n rows runs and why: a dict
    with ``name, M, d, bias, weights`` ("" for 16-bit weights, else the FP8 format: ``GemvFp8Linear`` layers and FP8
    layers a checkpoint loaded), ``route`` ("tuned", "cublas": ``F.linear`` chosen from the table's
    measurements, "dequant": an FP8 layer's dequantize + F.linear, "F.linear": the layer cannot run a tuned kernel, or
    "module": an FP8 layer left with its own forward), ``why``, ``tuned_us`` and
    ``cublas_us`` (the table's measurements behind the choice, or None), and ``compiled_route`` and
    ``compiled_why``: what the same call runs under ``torch.compile`` where that differs ("inductor": Inductor's
    F.linear beat the tuned kernel, "cublas"), else None. A grouped member's own row says what it would run alone.
    ``.groups``: per sibling group and per SwiGLU MLP (``swap_linears(..., group=True)``) a dict with ``kind``
    ("siblings" or "swiglu"), ``parent, members, shape`` (the GroupShape at n), ``route`` ("grouped": one launch,
    for an MLP one that writes silu(g)·u; "separate": each member's own route; "ungrouped": a candidate that could
    not be grouped or fused), ``why``, ``grouped_us`` and ``separate_us`` (an MLP's row also ``down`` and ``act``).
    ``.notes``: what is not fused in the model as a whole, and why (the residual adds)."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"explain: model must be a torch.nn.Module, got {type(model).__name__}")
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_BATCH:
        raise ValueError(f"n must be in 1..{MAX_BATCH}, got {n!r}")
    rows = []
    from .torch_fp8 import fp8_rows

    fp8 = fp8_rows(model, n)   # FP8 layers: wrapped, or left with their own forward (and why)
    for name, mod in model.named_modules():
        if name in fp8:
            rows.append(fp8[name])
        elif isinstance(mod, GemvLinear):
            row = {"name": name, "M": mod.out_features, "d": mod.in_features, "bias": mod.bias is not None,
                   "weights": "", "tuned_us": None, "cublas_us": None, "compiled_route": None, "compiled_why": None}
            why = mod.static_reason()
            if why:
                rows.append({**row, "route": "F.linear", "why": why})
                continue
            if n > mod.max_batch:
                rows.append({**row, "route": "F.linear", "why": f"n={n} above this layer's max_batch={mod.max_batch}"})
                continue
            device_allows(mod.table, mod.weight.get_device())   # (another GPU model: the routes say so)
            dt = DTYPES[mod.weight.dtype]
            r = mod.table.route(mod.out_features, mod.in_features, n, "torch", dt, dt)
            c = mod.table.route(mod.out_features, mod.in_features, n, "torch-compile", dt, dt)
            if c.tuned != r.tuned:
                row.update(compiled_route=c.kind, compiled_why=c.why)
            rows.append({**row, "route": "tuned" if r.tuned else "cublas", "why": r.why,
                         "tuned_us": r.tuned_us, "cublas_us": r.cublas_us})
        elif type(mod) is torch.nn.Linear:
            rows.append({"name": name, "M": mod.out_features, "d": mod.in_features, "bias": mod.bias is not None,
                         "weights": "", "route": "F.linear",
                         "why": "not swapped (swap_linears left it, or a filter excluded it)",
                         "tuned_us": None, "cublas_us": None, "compiled_route": None, "compiled_why": None})
    out = ExplainRows(rows)
    out.groups = group_rows(model, n, GemvLinear) + mlp_rows(model, n, GemvLinear)
    out.notes = [note] if (note := residual_note(model, GemvLinear)) else []
    return out
