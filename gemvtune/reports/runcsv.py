"""CSV reports of every variant tried, their provenance, and short terminal tables."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..provenance import provenance  # noqa: F401  (re-exported: where every report's provenance comes from)
from ..runners.base import Measurement
from ..safefile import write_text


def write_csv(rows: Iterable[Measurement], path: str | Path, meta: dict[str, Any]) -> Path:
    """One row per measurement (all parameters, status, times, errors) and a .json sidecar."""
    import pandas as pd

    from ..cells import write_csv as write_frame

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    df = pd.DataFrame([m.row() for m in rows])
    write_frame(df, path, "measurements CSV", float_format="%.6g")   # atomic, neutral cells
    side = path.with_suffix(".json")
    write_text(side, json.dumps(meta, indent=2, sort_keys=True, default=str) + "\n")
    return path


def _fmt(v: float, spec: str) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def shape_table(ms: list[Measurement], top: int = 5) -> str:
    """Baselines, then the fastest correct variants, with ratios against cuBLAS and llama.cpp."""
    def by_kind(kind: str) -> Measurement | None:
        return next((m for m in ms if m.kind == kind and m.ok), None)

    cublas = by_kind("cublas-torch") or by_kind("cublas")
    llama = by_kind("llama.cpp")
    variants = sorted((m for m in ms if m.kind == "variant" and m.ok), key=lambda m: m.us_median)
    rows = [m for m in ms if m.kind in ("llama.cpp", "cublas", "cublas-torch", "spin-check")] + variants[:top]
    lines = [f"{'':2s}{'name':46s} {'µs':>8s} {'spread':>7s} {'GB/s':>7s} {'%ceil':>6s} {'×cuBLAS':>8s} {'×llama':>7s}"]
    for m in rows:
        if not m.ok:
            lines.append(f"  {m.name:46s} {m.status}: {m.error[:60]}")
            continue
        xc = cublas.us_median / m.us_median if cublas else math.nan
        xl = llama.us_median / m.us_median if llama else math.nan
        lines.append(f"  {m.name:46s} {m.us_median:8.2f} {100 * m.spread:6.1f}% {m.gbps:7.0f} {m.pct_ceiling:6.1f} "
                     f"{_fmt(xc, '8.3f')} {_fmt(xl, '7.3f')}")
    counts: dict[str, int] = {}
    for m in ms:
        if m.kind == "variant":
            counts[m.status] = counts.get(m.status, 0) + 1
    lines.append("  variants: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return "\n".join(lines)
