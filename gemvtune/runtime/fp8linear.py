"""What a linear layer of FP8 weights runs where no tuned kernel does: the weights dequantised to the input's dtype,
then ``F.linear`` (the route's fallback for FP8 entries, and the ``dequant-torch`` baseline the route weighs a
tuned FP8 kernel against: ``gemvtune.baselines``). The runner times this very function, so the route compares what
a model would run.

The dequantisation is transformers' own (``integrations/finegrained_fp8.py``, ``_dequantize_fp8_weight``): codes
cast to the dtype, times the scales cast to the dtype, one product per element (exact for the codes: every E4M3
value is an FP16 and a BF16 value; the scale's cast and the product round once each, 2u relative with u = 2^-11
for FP16, 2^-8 for BF16: ``bound``). 128x128 blocks broadcast through a view where M and d are multiples of 128,
else through the scales repeated to [M, d] (ragged edge blocks)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..kernels.fp8 import BLOCK
from ..kernels.shapes import UNIT_ROUNDOFF
from .fp8torch import expand_scales


def dequantized(codes: torch.Tensor, scales: torch.Tensor, layout: str, dtype: torch.dtype) -> torch.Tensor:
    """[M, d] of ``dtype``: each E4M3 code (``codes`` uint8 or float8_e4m3fn) times its scale, in ``dtype``."""
    w = (codes.view(torch.float8_e4m3fn) if codes.dtype == torch.uint8 else codes).to(dtype)
    s = scales.to(dtype)
    if layout not in ("row", "block128"):
        raise ValueError(f"unknown FP8 layout {layout!r}")
    M, d = w.shape
    if layout == "block128" and M % BLOCK == 0 and d % BLOCK == 0:   # whole blocks: broadcast through a view
        return (w.view(M // BLOCK, BLOCK, d // BLOCK, BLOCK) * s.view(M // BLOCK, 1, d // BLOCK, 1)).view(M, d)
    return w * expand_scales(s, layout, 0, M, d)


def fallback_linear(x: torch.Tensor, codes: torch.Tensor, scales: torch.Tensor, layout: str,
                    bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, dequantized(...), bias)`` in x's dtype."""
    return F.linear(x, dequantized(codes, scales, layout, x.dtype), bias)


def bound(dtype: str) -> float:
    """The relative error of the dequantised weights against the exact code x scale: 2u of ``dtype`` (the scale's
    cast and the product), added to a library's bound when the fallback is verified (``runners.cuda.fp8base``)."""
    return 2.0 * UNIT_ROUNDOFF[dtype]
