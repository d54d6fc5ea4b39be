"""Verification, a part of the CUDA runner: fresh random inputs, a float64 reference, and the check
every variant (and baseline) must pass before it is timed. ``CudaRunner`` owns a ``Verifier`` made with
its device, stream and random generator."""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from ...device._cupy import cp, rand_elems, scope
from ...device.elems import nan_fill, to_float64
from ...kernels.epilogue import DEFAULT, Epilogue
from ...kernels.shapes import Shape
from ..timing import ROW_FACTOR


@dataclass
class DeviceFp8:
    """FP8 weights on the device: ``codes`` uint8 [M, d] (E4M3) and ``scales`` float32 (the shape's layout).
    ``data`` is the codes' (the kernel's W pointer: ``W.data.ptr``, as for a 16-bit W)."""

    codes: Any
    scales: Any

    @property
    def data(self) -> Any:
        return self.codes.data

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.codes.shape)


def fp8_device(shape: Shape, rng: Any) -> tuple[DeviceFp8, Any]:
    """(the random FP8 weight of ``shape`` on the device, its host ``Fp8Weight``), seeded from ``rng`` (CuPy's)."""
    from ..fp8data import fp8_weight

    q = fp8_weight(shape, int(float(rng.random((1,), dtype=cp.float32)[0]) * 2**24))   # (CuPy's draws: 24 bits)
    return DeviceFp8(cp.asarray(q.codes), cp.asarray(q.scales)), q


def x_shape(shape: Shape) -> tuple[int, ...]:
    """x is [d] for n = 1 (plain decode) and [n, d] otherwise; y is [M] or [n, M]."""
    return (shape.d,) if shape.n == 1 else (shape.n, shape.d)


def y_shape(shape: Shape) -> tuple[int, ...]:
    return (shape.M,) if shape.n == 1 else (shape.n, shape.M)


class Verifier:
    """Checks answers on ``stream`` (a CuPy stream: every allocation, random draw and launch of a check
    is ordered on it) of ``device`` (made current for each check, the caller's restored after; None:
    the caller's), drawing inputs from ``rng``; with ``no_pool`` its arrays bypass CuPy's memory pool
    (for that block only). Keeps one random W per shape with its float64 copies."""

    def __init__(self, stream: Any, rng: Any, device: int | None = None, no_pool: bool = False):
        self.stream, self.rng, self.device, self.no_pool = stream, rng, device, no_pool
        self._vmat: tuple | None = None

    def _scope(self) -> AbstractContextManager[None]:
        """The device (when given) and the stream current for the block; the caller's back after."""
        return scope(self.device, self.stream, self.no_pool)

    def release(self) -> None:
        """Drop the kept W and its float64 copies."""
        self._vmat = None

    def reference(self, W, x, dtype: str = "fp16") -> tuple[Any, Any]:
        """float64 y = W x and the per-row scale ||W_i * x|| (row-chunked to bound memory); for
        X [n, d], both are [n, M] (one column at a time)."""
        with self._scope():
            if x.ndim == 2:
                cols = [self.reference(W, x[i], dtype) for i in range(x.shape[0])]
                return cp.stack([c[0] for c in cols]), cp.stack([c[1] for c in cols])
            M, d = W.shape
            ref = cp.empty(M, dtype=cp.float64)
            scale = cp.empty(M, dtype=cp.float64)
            x64 = to_float64(x, dtype)
            rows = max(1, (1 << 26) // d)
            for r0 in range(0, M, rows):
                p = to_float64(W[r0:r0 + rows], dtype) * x64
                ref[r0:r0 + rows] = p.sum(axis=1)
                scale[r0:r0 + rows] = cp.sqrt((p * p).sum(axis=1))
            return ref, scale

    @staticmethod
    def check(y, ref, scale, bound: float) -> tuple[bool, float, float, str]:
        """(passed, relerr, rowerr, reason). NaN anywhere (the poison) fails. Runs on the current stream.

        relerr = ||y - ref|| / ||s||, where s_i = ||W_i * x|| is each row's root-sum-square of terms:
        for random data E[ref_i^2] = s_i^2, so this is the usual relative L2 error, but it stays
        well-conditioned when a few rows (M = 1, 7) happen to cancel to near zero."""
        y64 = y.astype(cp.float64).ravel()
        bad = int((~cp.isfinite(y64)).sum())
        if bad:
            return False, math.nan, math.nan, f"{bad} of {y64.size} outputs NaN/inf (unwritten or overflow)"
        diff = y64 - ref.ravel()
        relerr = float(cp.linalg.norm(diff) / cp.linalg.norm(scale))
        rowerr = float(cp.max(cp.abs(diff) / cp.maximum(scale.ravel(), 1e-30)))
        if relerr > bound:
            return False, relerr, rowerr, f"relative error {relerr:.3g} above the bound {bound:.3g}"
        if rowerr > ROW_FACTOR * bound:
            worst = int(cp.argmax(cp.abs(diff) / cp.maximum(scale.ravel(), 1e-30)))
            return False, relerr, rowerr, f"row {worst}: error {rowerr:.3g} x its scale, above {ROW_FACTOR * bound:.3g}"
        return True, relerr, rowerr, ""

    def verify(self, run: Callable[..., Any], shape: Shape, bound: float,
               epilogue: Epilogue = DEFAULT) -> tuple[bool, float, float, str]:
        """Random W (fresh per shape, kept with its float64 copies; FP8 weights: E4M3 codes and scales, the float64
        copies their exact dequantisation, ``runners.fp8data``), fresh random x (and bias[M] when
        the epilogue has one) per call, y poisoned with NaN in the epilogue's dtype, one launch,
        float64 reference (two float64 GEMVs against the resident copies, plus the bias).

        ``run(W, x, y)`` for the default epilogue (FP32 out, no bias), else ``run(W, x, y, bias)``
        (bias None without one; with a residual epilogue, r [n, M] of y's dtype in its place); it may return its
        own output instead of writing y. The bias (or r) is one more term of each output: ref += b and
        s^2 += b^2."""
        with self._scope():
            W, W64, W64sq = self._verify_matrix(shape)
            x = rand_elems(x_shape(shape), self.rng, shape.dtype)
            bias = rand_elems((shape.M,), self.rng, shape.dtype) if epilogue.bias else None
            if epilogue.residual:   # r [n, M] of y's dtype, through the bias slot
                bias = rand_elems(y_shape(shape), self.rng, epilogue.out)
            y = nan_fill(cp, y_shape(shape), epilogue.out)
            out = run(W, x, y) if epilogue == DEFAULT else run(W, x, y, bias)
            self.stream.synchronize()
            x64 = to_float64(x, shape.dtype).reshape(shape.n, shape.d)
            ref, sq = x64 @ W64.T, (x64 * x64) @ W64sq.T   # [n, M], like y
            if bias is not None:
                b64 = (to_float64(bias, epilogue.out).reshape(shape.n, shape.M) if epilogue.residual
                       else to_float64(bias, shape.dtype))   # a bias [M] is broadcast over the n columns
                ref, sq = ref + b64, sq + b64 * b64
            if out is None:
                got = to_float64(y, epilogue.out)
            else:   # a baseline's own output (a uint16 one is BF16 bits: CuPy has no bfloat16)
                got = to_float64(out, "bf16" if out.dtype == cp.uint16 else "fp32")
            return self.check(got, ref, cp.sqrt(sq), bound)

    def _verify_matrix(self, shape: Shape) -> tuple[Any, Any, Any]:
        """W of ``shape`` and its float64 values: random 16-bit elements, or FP8 weights (``buffers.DeviceFp8``: codes
        and scales of ``runners.fp8data.fp8_weight``) whose float64 values are the exactly dequantised codes."""
        if self._vmat is None or self._vmat[0] != shape:
            self._vmat = None
            if shape.weights:
                from ..fp8data import dequantized64

                W, _ = fp8_device(shape, self.rng)
                W64 = dequantized64(W.codes, W.scales, shape.fp8_layout, cp)
            else:
                W = rand_elems((shape.M, shape.d), self.rng, shape.dtype)
                W64 = to_float64(W, shape.dtype)
            self._vmat = (shape, W, W64, W64 * W64)
        return self._vmat[1:]

