"""Sibling linears in one launch as a PyTorch operator, ``torch.ops.gemvtune.linear_group``, and the eager path
behind it (``run_group``).

``gemvtune::linear_group(Tensor x, Tensor[] weights, Tensor?[] biases, int table) -> Tensor[]`` computes
``[F.linear(x, W_i, b_i) for each member]`` (FP16 or BF16 in and out, like ``nn.Linear``) with ONE launch of the
grouped variant of the config the table's group route chose (``gemvtune.runtime.grouproute``): every member's W,
y and bias by pointer, no weight copied or concatenated. Where the group route says "separate", or anything the
grouped kernel cannot take (CPU tensors, FP32, n > 16, members of another dtype or device, a weight not contiguous
or not 16-byte aligned, a member with a bias beside one without), each member is ``F.linear`` (the results of
``F.linear``, as ungrouped). It is a ``torch.library.custom_op`` with a fake implementation, so
``torch.compile(fullgraph=True)`` traces it as one opaque op; on the CPU it runs too (``F.linear`` per member).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from ..errors import UsageError
from ..kernels.epilogue import Epilogue
from ..kernels.group import MAX_GROUP, GroupShape
from ..kernels.shapes import MAX_BATCH
from . import grouproute
from .torch_op import _ALIGN, _TABLES, DTYPES, _raw_stream, device_allows, register_table

# Grouped plans by (table id, members' rows, d, n, bias, out dtype, device, input dtype), like torch_op._FAST; a key
# whose plan could not be built holds None (warned once; the members run F.linear).
_GROUP_FAST: dict[tuple, Any] = {}


def _alone(x: torch.Tensor, weights: Sequence[torch.Tensor], biases: Sequence[torch.Tensor | None]) -> list[torch.Tensor]:
    return [F.linear(x, w, b) for w, b in zip(weights, biases)]


def _group_plan(key: tuple, config: Any, group: GroupShape, epilogue: Epilogue, dev: int) -> Any:
    """The grouped variant's ``LaunchPlan`` (compiled and loaded once per key), or None where it cannot be built."""
    if key in _GROUP_FAST:
        return _GROUP_FAST[key]
    from ..device.plan import LaunchPlan  # (the GPU path only)

    try:
        plan = LaunchPlan.build_group(config, group, epilogue, dev)
    except Exception as e:   # a compile or load failure: the members run F.linear, said once
        warnings.warn(f"gemvtune: the grouped kernel {config.label} for {group} could not be built "
                      f"({type(e).__name__}: {str(e)[:300]}); its members run F.linear", stacklevel=4)
        plan = None
    _GROUP_FAST[key] = plan
    return plan


def group_unsupported(x: torch.Tensor, weights: Sequence[torch.Tensor], biases: Sequence[torch.Tensor | None]) -> str:
    """Why one grouped launch cannot take these tensors ("" if it can, up to the alignment checked at launch)."""
    if not 2 <= len(weights) <= MAX_GROUP or len(biases) != len(weights):
        return f"a group has 2 to {MAX_GROUP} members, each with a bias entry; got {len(weights)} and {len(biases)}"
    if not x.is_cuda:
        return f"x on {x.device}, not a CUDA device"
    if x.dtype not in DTYPES:
        return f"x is {str(x.dtype).replace('torch.', '')}; the tuned kernels are FP16 or BF16"
    dev, d = x.get_device(), x.shape[-1] if x.dim() else -1
    for w in weights:
        if w.dtype is not x.dtype or w.get_device() != dev or w.dim() != 2 or w.shape[1] != d or not w.is_contiguous():
            return "a weight is not a contiguous [M, d] matrix of x's dtype on x's device"
    has_bias = biases[0] is not None
    for w, b in zip(weights, biases):
        if (b is not None) != has_bias:
            return "some members have a bias and some not"
        if b is not None and (b.dtype is not x.dtype or b.get_device() != dev or b.shape != (w.shape[0],)
                              or not b.is_contiguous()):
            return "a bias is not a contiguous vector of x's dtype on x's device"
    return ""


def run_group(x: torch.Tensor, weights: Sequence[torch.Tensor], biases: Sequence[torch.Tensor | None], table: Any,
              tid: int | None = None) -> list[torch.Tensor]:
    """``[F.linear(x, W_i, b_i) ...]`` in one grouped launch on torch's current stream where the table's group
    route for these members at this n says "grouped"; ``F.linear`` per member otherwise. Each y_i is a fresh
    contiguous ``x.shape[:-1] + (M_i,)`` tensor of x's dtype."""
    if group_unsupported(x, weights, biases):
        return _alone(x, weights, biases)
    d = x.shape[-1]
    n = x.numel() // d if d else 0
    if not 1 <= n <= MAX_BATCH:
        return _alone(x, weights, biases)
    if tid is None:
        tid = register_table(table)
    Ms = tuple(int(w.shape[0]) for w in weights)
    has_bias = biases[0] is not None
    dt = DTYPES[x.dtype]
    dev = x.get_device()
    key = (tid, Ms, d, n, has_bias, dt, dev, dt)
    plan = _GROUP_FAST.get(key)
    if plan is None:
        if key in _GROUP_FAST:
            return _alone(x, weights, biases)   # (its plan could not be built)
        try:
            group = GroupShape(Ms, d, n, dt)
        except UsageError:
            return _alone(x, weights, biases)
        route = grouproute.choose_group(table, group, "torch", dt)
        if not route.grouped or not device_allows(table, dev):   # (another GPU model: the routes say separate now)
            return _alone(x, weights, biases)
        plan = _group_plan(key, route.config, group, Epilogue(dt, has_bias), dev)
        if plan is None:
            return _alone(x, weights, biases)
    wps = [w.data_ptr() for w in weights]
    if any(p % _ALIGN for p in wps):
        return _alone(x, weights, biases)
    if not x.is_contiguous():
        x = x.contiguous()
    if x.data_ptr() % _ALIGN:
        x = x.clone()
    ys = [torch.empty(x.shape[:-1] + (M,), dtype=x.dtype, device=x.device) for M in Ms]
    bps = [b.data_ptr() for b in biases if b is not None] if has_bias else None
    plan.launch_group(wps, x.data_ptr(), [y.data_ptr() for y in ys], bps, _raw_stream(dev))
    return ys


@torch.library.custom_op("gemvtune::linear_group", mutates_args=())
def linear_group(x: torch.Tensor, weights: list[torch.Tensor], biases: list[torch.Tensor | None],
                 table: int) -> list[torch.Tensor]:
    """``[F.linear(x, W_i, b_i) ...]`` through the group route of table ``table`` (an id from ``register_table``)."""
    if table not in _TABLES:
        raise UsageError(f"gemvtune::linear_group: no table registered under id {table}")
    _check_args(x, weights, biases)
    return run_group(x, weights, biases, _TABLES[table], table)


def _need(cond: Any, msg: str) -> None:
    torch._check(cond, lambda: "gemvtune::linear_group: " + msg)


def _check_args(x: torch.Tensor, weights: Sequence[torch.Tensor], biases: Sequence[torch.Tensor | None]) -> None:
    _need(len(weights) >= 1 and len(biases) == len(weights), f"{len(weights)} weights and {len(biases)} biases")
    for w, b in zip(weights, biases):
        _need(w.dim() == 2, f"a weight must be 2-D, got {tuple(w.shape)}")
        _need(x.dim() >= 1 and x.shape[-1] == w.shape[1], f"x {tuple(x.shape)} does not match weight {tuple(w.shape)}")
        if b is not None:
            _need(b.dim() == 1 and b.shape[0] == w.shape[0],
                  f"bias {tuple(b.shape)} does not match weight {tuple(w.shape)}")


@linear_group.register_fake
def _linear_group_fake(x: torch.Tensor, weights: list[torch.Tensor], biases: list[torch.Tensor | None],
                       table: int) -> list[torch.Tensor]:
    _check_args(x, weights, biases)
    return [x.new_empty((*x.shape[:-1], w.shape[0])) for w in weights]
