"""The baselines of a shape of FP8 weights (``Shape.weights``), a part of the runner's ``Baselines``:

- ``dequant-torch``: what a model runs without a kernel, the codes dequantised to x's dtype then ``F.linear``
  (``gemvtune.runtime.fp8linear.fallback_linear``, the route's own fallback), verified against the float64 product
  of the exactly dequantised weights and timed in the torch harness over the shape's rotating FP8 copies;
- ``cublas-16bit``: cuBLAS (``F.linear``) on 16-bit weights of the same M, d, n and dtype, in the same harness (the
  speed FP8 must beat: reported beside the route, never its rival).

CuPy's cuBLAS takes no FP8 weights: ``measure_cublas`` records it INVALID with that reason."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...device._cupy import as_torch, from_torch
from ...kernels.shapes import Shape
from ..base import Measurement, Status
from ..timing import library_bound

DEQUANT_KIND = "dequant-torch"
SIXTEEN_KIND = "cublas-16bit"


def sixteen_bit(shape: Shape) -> Shape:
    """The shape with W in x's dtype (the FP16/BF16 twin of an FP8 shape)."""
    return Shape(shape.M, shape.d, shape.n, shape.dtype)


def measure_dequant_linear(h: Any, shape: Shape, time_torch: Callable[..., tuple[list[float], int]]) -> Measurement:
    """The ``dequant-torch`` baseline of an FP8 ``shape`` on runner ``h`` (its buffers hold ``DeviceFp8`` weights),
    timed with ``time_torch`` (``Baselines.time_torch``). A failure is a measurement with its reason."""
    from ...runtime.fp8linear import bound

    m = Measurement.of("dequantize + F.linear", DEQUANT_KIND, shape, Status.OK)
    m.bound = library_bound(shape) + bound(shape.dtype)
    try:
        import torch

        from ...runtime.fp8linear import fallback_linear
    except Exception as e:
        m.status, m.error = Status.LAUNCH_ERROR, f"torch cannot be imported: {(str(e).splitlines() or [''])[0]}"
        return m
    layout = shape.fp8_layout

    def linear(W: Any, x: Any) -> Any:   # W: DeviceFp8 (CuPy codes and scales), x: CuPy bits of x's dtype
        return fallback_linear(as_torch(torch, x, shape.dtype).view(shape.n, shape.d), as_torch(torch, W.codes, "u8"),
                               as_torch(torch, W.scales, "fp32"), layout)

    with h.on_stream():
        try:
            ok, m.relerr, m.rowerr, reason = h.verify(lambda W, x, y: from_torch(torch, linear(W, x)), shape, m.bound)
            if not ok:
                m.status, m.error = Status.WRONG, reason
                return m
            b = h.buffers(shape)
            codes = [as_torch(torch, w.codes, "u8") for w in b.W]
            scales = [as_torch(torch, w.scales, "fp32") for w in b.W]
            xt = [as_torch(torch, x, shape.dtype).view(shape.n, shape.d) for x in b.x]
            t, k = time_torch(torch, shape, b, lambda i: fallback_linear(xt[i % b.copies], codes[i % b.copies],
                                                                         scales[i % b.copies], layout))
        except Exception as e:
            m.status, m.error = Status.LAUNCH_ERROR, (str(e).splitlines() or [type(e).__name__])[0]
            return m
        h.fill_times(m, t, shape, "graph", k, b)
    return m


def measure_sixteen_bit(measure_torch_linear: Callable[[Shape], Measurement | None], shape: Shape) -> Measurement | None:
    """cuBLAS on the 16-bit twin of FP8 ``shape`` (``measure_torch_linear`` of it), as the ``cublas-16bit`` kind."""
    m = measure_torch_linear(sixteen_bit(shape))
    if m is not None:
        m.name, m.kind = "cublas on 16-bit weights (torch F.linear)", SIXTEEN_KIND
    return m
