"""The same configs in both dtypes (issue 21): which configs to measure in FP16 and in BF16 for one (M, d, n), and
the markdown of the result. The measuring is ``scripts/dtype_probe.py`` (GPU); this part is pure.

A shape's FP16 and BF16 table entries each name a winner and the best few candidates of every family. Measuring
each of them in both dtypes, interleaved in one process, separates what BF16 costs (the same config slower in BF16)
from what the searches picked (different configs) and from cuBLAS's own FP16/BF16 difference. A config with an FP16
accumulator has no BF16 form (BF16 accumulates in FP32 only): its BF16 twin is the same config with ``acc=fp32``.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from ..kernels.families import for_dtype, record_config
from ..kernels.shapes import Shape


def probe_configs(entries: list[dict[str, Any] | None], shape: Shape, k: int = 3) -> list[tuple[Any, Any]]:
    """(FP16 config, its BF16 twin) pairs for ``shape`` (M, d, n; any dtype): from each entry (the FP16 and BF16
    entries of the shape; None where absent) its winner, then its fastest ``k`` candidates. Pairs that either dtype
    cannot run are left out; each pair once, in that order."""
    pairs: list[tuple[Any, Any]] = []
    fp, bf = Shape(shape.M, shape.d, shape.n, "fp16"), Shape(shape.M, shape.d, shape.n, "bf16")
    for e in entries:
        if not e:
            continue
        picks = [e["winner"]] + sorted(e.get("candidates", []), key=lambda c: c.get("us") or math.inf)[:k]
        for p in picks:
            c = record_config(p)
            pair = (c, for_dtype(c, "bf16"))
            if pair not in pairs and c.is_valid(fp) and pair[1].is_valid(bf):
                pairs.append(pair)
    return pairs


def probe_markdown(shape: Shape, rows: list[tuple[str, str]], times: dict[tuple[str, str], list[float]],
                   ceiling_gbps: float) -> str:
    """One shape's table: per row (the label measured in FP16, the label measured in BF16: a config and its twin,
    or cuBLAS in each dtype) the median µs of the rounds in each dtype, % of the read ceiling, and BF16 / FP16;
    ``times`` maps (label, dtype) to the rounds' medians."""
    def med(key: tuple[str, str]) -> float:
        xs = times.get(key) or []
        return statistics.median(xs) if xs else math.nan

    def pct(us: float) -> str:
        return "-" if math.isnan(us) else f"{100 * shape.bytes_moved / (us * 1e3) / ceiling_gbps:.1f}"

    lines = [f"| {shape.M}x{shape.d} n={shape.n}: FP16 | µs | % ceiling | BF16 | µs | % ceiling | BF16 / FP16 |",
             "|---|---|---|---|---|---|---|"]
    for a, b in rows:
        ua, ub = med((a, "fp16")), med((b, "bf16"))
        lines.append(f"| `{a}` | {ua:.2f} | {pct(ua)} | `{b}` | {ub:.2f} | {pct(ub)} | {ub / ua:.3f} |")
    return "\n".join(lines)
