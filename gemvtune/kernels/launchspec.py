"""The launches of one call of a variant, as data (pure: no GPU): kernels in order with grid and block,
the workspace, the alignment its loads need and whether it uses programmatic dependent launch.

Every place that launches a variant reads it from here: the run-time plan (``gemvtune.device.plan``: the
runner, the dispatcher, the PyTorch op and the decode-step benchmark) and the exported C++ header.

Kernel ABI, shared by every kernel of every family (the main kernel and its helpers):

    extern "C" __global__ void NAME(const half* W, const half* x, OUT_T* y, const half* bias,
                                    float* ws, unsigned int* counters, int M)

OUT_T is ``float`` or ``half`` (``Epilogue.out``); ``bias`` is read only when ``Epilogue.bias``
(it may be null otherwise); ``ws`` holds ``ws_floats`` floats and ``counters`` ``counters`` unsigned
ints, zero before the first call (the kernels leave them zero again).

A variant of FP8 weights (``Shape.weights`` "e4m3-row" / "e4m3-b128": the fp8gemv family) reads W as
``const unsigned char*`` (E4M3 codes) and takes one more argument after M, ``const float* __restrict__ scales``
(``gemvtune.kernels.fp8``'s scales of the shape's layout): ``LaunchSpec.scales``.

A grouped variant (``group``: a ``gemvtune.kernels.group.GroupShape`` whose fused shape is ``shape``) takes one
more argument after M, the members' pointers and row ends by value (``gemvtune.kernels.group``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from .epilogue import DEFAULT, Epilogue
from .shapes import Shape

WS_ALIGN = 256  # bytes: the counters start on their own aligned boundary after the partial sums


@dataclass(frozen=True)
class LaunchSpec:
    config: Any
    shape: Shape
    epilogue: Epilogue
    kernels: tuple[tuple[str, tuple[int, int, int], tuple[int, int, int]], ...]  # (name, grid, block)
    ws_floats: int          # float workspace elements (>= 1)
    counters: int           # unsigned counters (>= 1)
    align: int              # bytes every W, x (and bias) pointer must be aligned to
    pdl: bool               # launched with programmatic stream serialization (pdl=on or chainK)
    smem: int = 0           # dynamic shared memory bytes of every kernel of the call (the launch opts in past 48 KiB)
    group: Any = None       # a GroupShape: one launch over the rows of its members (None: one weight)
    scales: bool = False    # FP8 weights: W is E4M3 codes and a trailing ``const float* scales`` argument follows M

    @property
    def counters_offset(self) -> int:
        """Byte offset of the counters in one workspace allocation (floats first)."""
        return -(-self.ws_floats * 4 // WS_ALIGN) * WS_ALIGN

    @property
    def workspace_bytes(self) -> int:
        return self.counters_offset + self.counters * 4

    @property
    def needs_workspace(self) -> bool:
        """Whether any kernel reads ws or counters: the config's family says (``config.needs_workspace``)."""
        return bool(self.config.needs_workspace(self.shape))


def launch_spec(config: Any, shape: Shape, epilogue: Epilogue = DEFAULT, group: Any = None) -> LaunchSpec:
    """The launches of ``config`` on ``shape`` with ``epilogue`` (grouped over ``group``'s members when given: its
    fused shape is ``shape``); UsageError when it cannot run it."""
    reasons = list(config.invalid_reasons(shape)) + epilogue.invalid_reasons(config)
    if group is not None:
        from .group import group_reasons

        reasons += ([] if group.fused == shape else [f"the group {group} runs as {group.fused}, not {shape}"])
        reasons += group_reasons(config, group, epilogue)
    elif epilogue.swiglu:
        reasons.append("swiglu is the epilogue of a grouped launch (gate, up): give the group")
    if reasons:
        raise UsageError(f"config {config.label}{epilogue.label} cannot run {shape}: " + "; ".join(reasons))
    floats, counters = config.workspace(shape)
    kernels = tuple((str(k), tuple(g), tuple(b)) for k, g, b in config.kernels(shape))
    dynamic = getattr(config, "dynamic_smem", None)
    return LaunchSpec(config, shape, epilogue, kernels, max(1, int(floats)), max(1, int(counters)),
                      int(config.vec_elems) * 2, getattr(config, "pdl", "off") != "off",
                      int(dynamic(shape)) if dynamic is not None else 0, group, bool(shape.weights))
