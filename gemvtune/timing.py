"""Pure statistics of timings and the numbers derived from them (no GPU here)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class Stats:
    median: float
    min: float
    max: float
    n: int

    @property
    def spread(self) -> float:
        """(max - min) / median: the relative width of what was seen."""
        return (self.max - self.min) / self.median if self.median > 0 else float("nan")


def summarize(samples: Sequence[float]) -> Stats:
    if not samples:
        raise ValueError("no samples")
    return Stats(statistics.median(samples), min(samples), max(samples), len(samples))


def gbps(bytes_moved: int, us: float) -> float:
    return bytes_moved / (us * 1e-6) / 1e9


def launches_for(est_us: float, copies: int, target_us: float = 2000.0, cap: int = 4000) -> int:
    """Launches per graph: about target_us of GPU work, a whole number of passes over the copies."""
    n = max(copies, min(cap, int(target_us / max(est_us, 0.5))))
    return max(copies, (n // copies) * copies)


def copies_for(weight_bytes: int, l2_bytes: int, factor: float = 3.0, minimum: int = 2) -> int:
    """Weight copies so that one pass over all of them is >= factor x L2 (cold L2 like real decode)."""
    need = -(-int(factor * l2_bytes) // max(weight_bytes, 1))
    return max(minimum, need)


def error_bound(acc: str, d: int) -> float:
    """Bound on ||y - ref|| / ||ref|| for a correct kernel, by accumulation type and d.

    fp32: the FP16 x FP16 products are exact in FP32, so only the additions round (unit roundoff
    u = 2^-24); for a chain of L additions of random terms the relative error is ~u*sqrt(L) with
    L <= d. We allow 8*u*sqrt(d) (3e-5 at d = 4096), loose for any summation order and still orders
    of magnitude under what one wrong element (~1/sqrt(d)) or one wrong row (~1/sqrt(M)) gives.
    fp16: each __hfma2 rounds to FP16 (u = 2^-11). For a chain of L sequential additions of random
    terms the relative error is ~u*sqrt(L/6). llama.cpp's point (256 threads x half2) makes chains of
    L = d/512; we allow 4x that error with chains up to 16x longer: 4*u*sqrt(1 + d/3072). A variant
    whose FP16 chains are much longer than llama.cpp's (few threads per row) exceeds this and is
    recorded as wrong: its answer is measurably less accurate than the reference kernel's.
    """
    if acc == "fp32":
        return 8 * 2.0**-24 * max(d, 1) ** 0.5
    if acc == "fp16":
        return 4 * 2.0**-11 * (1 + d / 3072) ** 0.5
    raise ValueError(f"unknown accumulation {acc!r}")


ROW_FACTOR = 5.0  # per-row check: max_i |y_i - ref_i| / ||W_i * x|| <= ROW_FACTOR * bound
