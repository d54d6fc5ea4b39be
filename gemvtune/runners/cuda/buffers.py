"""The CUDA runner's timing buffers: one shape's rotating weight copies (FP8 ones: codes and scales, ``DeviceFp8``),
inputs and NaN-poisoned outputs,
as many copies as keep the working set >= 3x L2 (gemvtune.runners.timing.copies_for), or MAX_COPIES of them and
an L2 flush before each sample (``flush``) for a weight too small for that."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...device._cupy import cp, rand_elems
from ...kernels.shapes import Shape
from ..timing import copies_for, flushes_l2
from .verify import DeviceFp8, fp8_device, x_shape, y_shape


@dataclass
class ShapeBuffers:
    """One shape's rotating weight copies, inputs and NaN-poisoned outputs (``CudaRunner.buffers``)."""

    shape: Shape
    W: list
    x: list
    y: list
    copies: int
    flush: bool = False   # copies < 3x L2: each sample is one pass after an L2 flush
    x_block: Any = None   # with flush: the x copies, contiguous (read back into L2 after each flush)


def weights(shape: Shape, rng: Any, copies: int) -> list:
    """``copies`` weights of ``shape``: random 16-bit ones, or copies of one random FP8 weight (codes and scales, each
    copy its own allocation: the rotation reads each from HBM)."""
    if not shape.weights:
        return [rand_elems((shape.M, shape.d), rng, shape.dtype) for _ in range(copies)]
    w, _ = fp8_device(shape, rng)
    return [w] + [DeviceFp8(w.codes.copy(), w.scales.copy()) for _ in range(copies - 1)]


def make_buffers(shape: Shape, rng: Any, l2_bytes: int) -> ShapeBuffers:
    """The shape's buffers, drawn from ``rng`` and allocated on the current stream (the caller makes the
    runner's current)."""
    c = copies_for(shape.weight_bytes, l2_bytes)
    flush = flushes_l2(shape.weight_bytes, c, l2_bytes)
    xs = x_shape(shape)
    size = shape.d * shape.n
    stride = -(-size // 128) * 128   # each copy 256-byte aligned, like its own allocation
    x_block = rand_elems((c, stride), rng, shape.dtype) if flush else None
    return ShapeBuffers(
        shape,
        weights(shape, rng, c),
        ([x_block[i, :size].reshape(xs) for i in range(c)] if x_block is not None
         else [rand_elems(xs, rng, shape.dtype) for _ in range(c)]),
        [cp.full(y_shape(shape), cp.nan, dtype=cp.float32) for _ in range(c)],
        c,
        flush,
        x_block,
    )
