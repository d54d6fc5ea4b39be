"""SwiGLU in one launch as a PyTorch operator, ``torch.ops.gemvtune.swiglu``, and the eager path behind it
(``run_swiglu``).

``gemvtune::swiglu(Tensor x, Tensor gate_w, Tensor up_w, Tensor? gate_b, Tensor? up_b, int table) -> Tensor``
computes ``F.silu(F.linear(x, gate_w, gate_b)) * F.linear(x, up_w, up_b)`` (FP16 or BF16 in and out) with ONE
grouped launch of the gate/up group (``gemvtune.kernels.group``, gate first) with the SwiGLU epilogue
(``gemvtune.kernels.epilogue``): each pair of gate and up rows is combined in FP32, ``silu(g + bg) * (u + bu)``,
and rounded once into the output ``h [.., M]``; no g or u tensor, no elementwise kernel. It runs where the table's
group route with SwiGLU (``grouproute.choose_swiglu``) says "grouped"; otherwise, and for anything the grouped
kernel cannot take (CPU tensors, FP32, n > 16, weights of another dtype or device or shape, a weight not contiguous
or not 16-byte aligned, a bias on one member only), it is exactly ``F.silu(F.linear(...)) * F.linear(...)``. A
``torch.library.custom_op`` with a fake implementation: ``torch.compile(fullgraph=True)`` traces it as one op.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from ..errors import UsageError
from ..kernels.epilogue import Epilogue
from ..kernels.group import GroupShape
from ..kernels.shapes import MAX_BATCH
from . import grouproute
from .torch_group import _GROUP_FAST, _group_plan, group_unsupported
from .torch_op import _ALIGN, _TABLES, DTYPES, _raw_stream, device_allows, register_table


def swiglu_alone(x: torch.Tensor, gate_w: torch.Tensor, up_w: torch.Tensor, gate_b: torch.Tensor | None,
                 up_b: torch.Tensor | None) -> torch.Tensor:
    """What runs without the fused launch: ``F.silu(F.linear(x, gate_w, gate_b)) * F.linear(x, up_w, up_b)``."""
    return F.silu(F.linear(x, gate_w, gate_b)) * F.linear(x, up_w, up_b)


def swiglu_unsupported(x: torch.Tensor, gate_w: torch.Tensor, up_w: torch.Tensor, gate_b: torch.Tensor | None,
                       up_b: torch.Tensor | None) -> str:
    """Why one SwiGLU launch cannot take these tensors ("" if it can, up to the alignment checked at launch)."""
    why = group_unsupported(x, [gate_w, up_w], [gate_b, up_b])
    if not why and gate_w.shape != up_w.shape:
        return f"gate {tuple(gate_w.shape)} and up {tuple(up_w.shape)} differ: silu(g)·u pairs row i of each"
    return why


def run_swiglu(x: torch.Tensor, gate_w: torch.Tensor, up_w: torch.Tensor, gate_b: torch.Tensor | None,
               up_b: torch.Tensor | None, table: Any, tid: int | None = None) -> torch.Tensor:
    """``silu(x·gate_wᵀ + gate_b) * (x·up_wᵀ + up_b)`` in one launch on torch's current stream where the table's
    SwiGLU group route says "grouped", else ``swiglu_alone``. The result is a fresh contiguous
    ``x.shape[:-1] + (M,)`` tensor of x's dtype."""
    if swiglu_unsupported(x, gate_w, up_w, gate_b, up_b):
        return swiglu_alone(x, gate_w, up_w, gate_b, up_b)
    d = x.shape[-1]
    n = x.numel() // d if d else 0
    if not 1 <= n <= MAX_BATCH:
        return swiglu_alone(x, gate_w, up_w, gate_b, up_b)
    if tid is None:
        tid = register_table(table)
    M = int(gate_w.shape[0])
    has_bias = gate_b is not None
    dt = DTYPES[x.dtype]
    dev = x.get_device()
    key = ("swiglu", tid, M, d, n, has_bias, dt, dev)
    plan = _GROUP_FAST.get(key)
    if plan is None:
        if key in _GROUP_FAST:
            return swiglu_alone(x, gate_w, up_w, gate_b, up_b)   # (its plan could not be built)
        try:
            group = GroupShape((M, M), d, n, dt)
        except UsageError:
            return swiglu_alone(x, gate_w, up_w, gate_b, up_b)
        route = grouproute.choose_swiglu(table, group, "torch", dt)
        if not route.grouped or not device_allows(table, dev):   # (another GPU model: the routes say separate now)
            return swiglu_alone(x, gate_w, up_w, gate_b, up_b)
        plan = _group_plan(key, route.config, group, Epilogue(dt, has_bias, swiglu=True), dev)
        if plan is None:
            return swiglu_alone(x, gate_w, up_w, gate_b, up_b)
    wps = [gate_w.data_ptr(), up_w.data_ptr()]
    if any(p % _ALIGN for p in wps):
        return swiglu_alone(x, gate_w, up_w, gate_b, up_b)
    if not x.is_contiguous():
        x = x.contiguous()
    if x.data_ptr() % _ALIGN:
        x = x.clone()
    h = torch.empty(x.shape[:-1] + (M,), dtype=x.dtype, device=x.device)
    bps = [gate_b.data_ptr(), up_b.data_ptr()] if gate_b is not None and up_b is not None else None
    plan.launch_group(wps, x.data_ptr(), [h.data_ptr(), h.data_ptr()], bps, _raw_stream(dev))
    return h


@torch.library.custom_op("gemvtune::swiglu", mutates_args=())
def swiglu(x: torch.Tensor, gate_w: torch.Tensor, up_w: torch.Tensor, gate_b: torch.Tensor | None,
           up_b: torch.Tensor | None, table: int) -> torch.Tensor:
    """``F.silu(F.linear(x, gate_w, gate_b)) * F.linear(x, up_w, up_b)`` through the SwiGLU group route of table
    ``table`` (an id from ``register_table``)."""
    if table not in _TABLES:
        raise UsageError(f"gemvtune::swiglu: no table registered under id {table}")
    _check_args(x, gate_w, up_w, gate_b, up_b)
    return run_swiglu(x, gate_w, up_w, gate_b, up_b, _TABLES[table], table)


def _need(cond: Any, msg: str) -> None:
    torch._check(cond, lambda: "gemvtune::swiglu: " + msg)


def _check_args(x: torch.Tensor, gate_w: torch.Tensor, up_w: torch.Tensor, gate_b: torch.Tensor | None,
                up_b: torch.Tensor | None) -> None:
    _need(gate_w.dim() == 2 and up_w.dim() == 2, f"weights must be 2-D, got {tuple(gate_w.shape)}, {tuple(up_w.shape)}")
    _need(gate_w.shape == up_w.shape, f"gate {tuple(gate_w.shape)} and up {tuple(up_w.shape)} must have one shape")
    _need(x.dim() >= 1 and x.shape[-1] == gate_w.shape[1],
          f"x {tuple(x.shape)} does not match weight {tuple(gate_w.shape)}")
    for b in (gate_b, up_b):
        if b is not None:
            _need(b.dim() == 1 and b.shape[0] == gate_w.shape[0],
                  f"bias {tuple(b.shape)} does not match weight {tuple(gate_w.shape)}")


@swiglu.register_fake
def _swiglu_fake(x: torch.Tensor, gate_w: torch.Tensor, up_w: torch.Tensor, gate_b: torch.Tensor | None,
                 up_b: torch.Tensor | None, table: int) -> torch.Tensor:
    _check_args(x, gate_w, up_w, gate_b, up_b)
    return x.new_empty((*x.shape[:-1], gate_w.shape[0]))
