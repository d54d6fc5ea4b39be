"""Pure statistics of timings and the numbers derived from them (no GPU here)."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


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


MAX_COPIES = 256   # rotating weight copies at most: a tiny weight needs another way to a cold L2


def copies_for(weight_bytes: int, l2_bytes: int, factor: float = 3.0, minimum: int = 2,
               cap: int = MAX_COPIES) -> int:
    """Weight copies so that one pass over all of them is >= factor x L2 (cold L2 like real decode),
    at most ``cap``: below factor x L2 / cap bytes a weight is timed with an L2 flush (``flushes_l2``)."""
    need = -(-int(factor * l2_bytes) // max(weight_bytes, 1))
    return min(cap, max(minimum, need))


def flushes_l2(weight_bytes: int, copies: int, l2_bytes: int, factor: float = 3.0) -> bool:
    """Whether the copies fall short of factor x L2, so that rotating them cannot keep L2 cold: then a
    timed sample is one pass over them (each read once) after a streaming read that evicts them."""
    return copies * weight_bytes < factor * l2_bytes


def launch_bound(bytes_moved: int, read_gbps: float, launch_floor_us: float) -> bool:
    """A kernel whose bytes stream at the read ceiling in less time than an empty kernel's launch (the
    launch floor, measured): its time is the launch's, not the memory's, whatever its config."""
    return bytes_moved / (read_gbps * 1e3) < launch_floor_us


def error_bound(acc: str, d: int, out: str = "fp32") -> float:
    """Bound on ||y - ref|| / ||ref|| for a correct kernel, by accumulation type, d and output dtype.

    fp32: the FP16 x FP16 products are exact in FP32, so only the additions round (unit roundoff
    u = 2^-24); for a chain of L additions of random terms the relative error is ~u*sqrt(L) with
    L <= d. We allow 8*u*sqrt(d) (3e-5 at d = 4096), loose for any summation order and still orders
    of magnitude under what one wrong element (~1/sqrt(d)) or one wrong row (~1/sqrt(M)) gives.
    fp16: each __hfma2 rounds to FP16 (u = 2^-11). For a chain of L sequential additions of random
    terms the relative error is ~u*sqrt(L/6). llama.cpp's point (256 threads x half2) makes chains of
    L = d/512; we allow 4x that error with chains up to 16x longer: 4*u*sqrt(1 + d/3072). A variant
    whose FP16 chains are much longer than llama.cpp's (few threads per row) exceeds this and is
    recorded as wrong: its answer is measurably less accurate than the reference kernel's.

    out="fp16" (the epilogue stores y in FP16): the accumulated sum t_i (error bounded above) is
    rounded once more, to nearest FP16: |fl16(t_i) - t_i| <= u |t_i| with u = 2^-11 (relative to the
    value stored, and FP32 -> FP16 is one rounding; the FP16 bias, when there is one, is exact in
    FP32 and one FP32 addition adds ~2^-24, negligible). Summed over rows, ||fl16(t) - t|| <= u ||t||,
    and ||t|| ~ ||s||, the row scales the check divides by (s_i^2 = sum_k (W_ik x_k)^2 [+ b_i^2] is
    E[t_i^2] for random data). The errors add (triangle inequality), so the bound grows by u with 2x
    margin: + 2^-10. Per row, |t_i| / s_i is about a standard normal's size (rarely above 5 over
    M rows; never above sqrt(d + 1)), and the row check allows ROW_FACTOR x 2^-10 = 10 u.

    BF16 inputs (8 significant bits) change nothing above for FP32 accumulation: a BF16 x BF16 product has
    at most 16 significant bits and is exact in FP32, so only the FP32 additions round, as for FP16 (the
    inputs' own rounding is not an error: the reference is computed from the rounded values). A BF16
    accumulator is not offered (its u = 2^-8 loses the sum). out="bf16" stores y rounded to nearest BF16,
    u = 2^-8, so the store term is 2^-7 by the same argument as out="fp16".
    """
    if out not in ("fp32", "fp16", "bf16"):
        raise ValueError(f"unknown output dtype {out!r}")
    store = {"fp32": 0.0, "fp16": 2.0**-10, "bf16": 2.0**-7}[out]
    if acc == "fp32":
        return 8 * 2.0**-24 * max(d, 1) ** 0.5 + store
    if acc == "fp16":
        return 4 * 2.0**-11 * (1 + d / 3072) ** 0.5 + store
    raise ValueError(f"unknown accumulation {acc!r}")


def library_bound(shape: Any) -> float:
    """The bound of a library's answer (cuBLAS, Inductor): FP32 accumulation, output in the input's dtype;
    FP16 outputs keep the looser FP16-accumulation bound they always had (cuBLAS may accumulate in halves)."""
    return error_bound("fp16", shape.d) if shape.dtype == "fp16" else error_bound("fp32", shape.d, out=shape.dtype)


ROW_FACTOR = 5.0  # per-row check: max_i |y_i - ref_i| / ||W_i * x|| <= ROW_FACTOR * bound
