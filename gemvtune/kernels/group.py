"""Sibling linears in one launch: a group of weights [M_i, d] that read the same x (q, k, v; gate, up), run as one
grouped kernel over the rows of all of them, each row reading its own member's W and writing its own member's y.

The weights are never copied or concatenated: the kernel takes one pointer per member (W, y, bias) and the member
ends, and picks a row's member by comparing its row with them. So a group runs what the fused shape
(sum of M_i, d, n) runs, launch geometry, loads and all, with the rows of each member in their own buffers:
a grouped variant is a config of the fused shape (``GroupShape.fused``), rendered with ``group`` members.

Kernel ABI of a grouped variant: the plain ABI (``gemvtune.kernels.launchspec``) with M the rows of all members,
then one struct by value, ``GroupArgs { const T* W[G]; OUT_T* y[G]; const T* bias[G]; int end[G]; }`` (``end``:
the running sums of M_i); the W, y and bias slots of the plain ABI are not read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from .gemv import NAME as GEMV_NAME
from .shapes import MAX_BATCH, Shape

MAX_GROUP = 4            # members of one group (q, k, v: 3; gate, up: 2)
GROUP_FAMILIES = (GEMV_NAME,)   # the families whose template renders a grouped variant


@dataclass(frozen=True, order=True)
class GroupShape:
    """``Ms``: the members' rows, in launch order; all share d, n and dtype."""

    Ms: tuple[int, ...]
    d: int
    n: int = 1
    dtype: str = "fp16"

    def __post_init__(self) -> None:
        if not isinstance(self.Ms, tuple) or not 2 <= len(self.Ms) <= MAX_GROUP:
            raise UsageError(f"a group has 2 to {MAX_GROUP} members, got {self.Ms!r}")
        for M in self.Ms:
            if isinstance(M, bool) or not isinstance(M, int) or M < 1:
                raise UsageError(f"a group member's rows must be a positive integer, got {M!r}")
        if isinstance(self.n, bool) or not isinstance(self.n, int) or not 1 <= self.n <= MAX_BATCH:
            raise UsageError(f"a group's batch n must be 1..{MAX_BATCH}, got {self.n!r}")
        Shape(sum(self.Ms), self.d, self.n, self.dtype)   # checks d, the dtype and the size (the fused shape)

    @property
    def fused(self) -> Shape:
        """The shape the group runs as: all members' rows, the same d, n and dtype."""
        return Shape(sum(self.Ms), self.d, self.n, self.dtype)

    @property
    def members(self) -> tuple[Shape, ...]:
        return tuple(Shape(M, self.d, self.n, self.dtype) for M in self.Ms)

    @property
    def ends(self) -> tuple[int, ...]:
        """The running sums of the members' rows (the last is the fused M)."""
        out, t = [], 0
        for M in self.Ms:
            t += M
            out.append(t)
        return tuple(out)

    def __str__(self) -> str:
        return "+".join(map(str, self.Ms)) + f"x{self.d}" + (f"@n{self.n}" if self.n != 1 else "") + self.fused.dtype_suffix(".")


def group_reasons(config: Any, group: GroupShape, epilogue: Any = None) -> list[str]:
    """Why ``config`` cannot run ``group`` as one grouped launch with ``epilogue`` (empty: it can): its family has a
    grouped template, it runs the fused shape, and the epilogue suits a group (SwiGLU: two members of equal rows,
    gate then up; a residual belongs to one linear, never to a group)."""
    fam = getattr(config, "family", None)
    if fam not in GROUP_FAMILIES:
        return [f"the {fam} family has no grouped template (grouped: {', '.join(GROUP_FAMILIES)})"]
    r = list(config.invalid_reasons(group.fused))
    if getattr(epilogue, "residual", False):
        r.append("a residual is added to one linear's output, not to a group's")
    if getattr(epilogue, "swiglu", False) and (len(group.Ms) != 2 or group.Ms[0] != group.Ms[1]):
        r.append(f"swiglu needs two members of equal rows (gate, up), got {group}")
    return r
