"""The tuned benchmark's summary: per shape the tuned kernel, the llama.cpp config and cuBLAS measured
in one process, their ratios and geometric means, as a table, markdown and a bar chart."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from ..runners.base import Measurement


def _median_of(ms: list[Measurement]) -> tuple[float, float, float]:
    """(median of the round medians, lowest, highest round median) over the correct measurements."""
    meds = [m.us_median for m in ms if m.ok]
    if not meds:
        return math.nan, math.nan, math.nan
    return statistics.median(meds), min(meds), max(meds)


def summary_row(shape: Any, ms: list[Measurement], ceiling_gbps: float, how: str) -> dict[str, Any]:
    """One shape: median over interleaved rounds of each contender, GB/s, % ceiling and ratios."""
    def of(kind: str) -> list[Measurement]:
        return [m for m in ms if m.kind == kind]

    t, t_lo, t_hi = _median_of(of("tuned"))
    ll, _, _ = _median_of(of("llama.cpp"))
    cu_kind = "cublas-torch" if any(m.ok for m in of("cublas-torch")) else "cublas"
    cu, _, _ = _median_of(of(cu_kind))
    floor = shape.bytes_moved / (ceiling_gbps * 1e3)
    tuned = next((m for m in of("tuned") if m.ok), None)
    return {"M": shape.M, "d": shape.d, "n": shape.n, "weight_mb": shape.weight_bytes / 1e6,
            "tuned": tuned.name if tuned else "", "lookup": how, "tuned_us": t, "tuned_spread": (t_hi - t_lo) / t if t else math.nan,
            "llama_us": ll, "cublas_us": cu, "cublas_method": cu_kind, "floor_us": floor,
            "gbps": shape.bytes_moved / (t * 1e-6) / 1e9 if t == t else math.nan,
            "pct_ceiling": 100 * floor / t if t == t else math.nan,
            "x_cublas": cu / t if t == t else math.nan, "x_llama": ll / t if t == t else math.nan,
            "rounds": len([m for m in of("tuned") if m.ok])}


def geomean(values: Any) -> float:
    v = [float(x) for x in values if x == x and x > 0]
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else math.nan


def bench_markdown(df: Any, ceiling: dict[str, Any]) -> str:
    lines = [f"Read ceiling {ceiling['read_gbps']:.0f} GB/s, launch floor {ceiling['launch_floor_us']:.2f} µs (same run).", "",
             "| shape | n | MB | tuned µs | spread | GB/s | % ceiling | llama.cpp µs | cuBLAS µs | ×cuBLAS | ×llama.cpp | tuned kernel |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for _, r in df.iterrows():
        lines.append(f"| {r.M}x{r.d} | {r.n} | {r.weight_mb:.0f} | {r.tuned_us:.2f} | {100 * r.tuned_spread:.1f}% | {r.gbps:.0f} | "
                     f"{r.pct_ceiling:.1f} | {r.llama_us:.2f} | {r.cublas_us:.2f} | {r.x_cublas:.3f} | {r.x_llama:.3f} | "
                     f"`{r.tuned}` |")
    lines += ["", f"Geometric means: ×cuBLAS {geomean(df.x_cublas):.3f} (lowest {df.x_cublas.min():.3f}), "
                  f"×llama.cpp {geomean(df.x_llama):.3f} (lowest {df.x_llama.min():.3f})."]
    if "dispatch_ratio" in df and df.dispatch_ratio.notna().any():
        lines.append(f"Dispatch: `table.gemv` costs {df.dispatch_ratio.max():.2f}× the CPU time of a bare launch at worst "
                     f"(median {df.dispatch_ratio.median():.2f}×; bare {df.bare_launch_us.median():.2f} µs, "
                     f"table.gemv {df.table_gemv_us.median():.2f} µs per call).")
    return "\n".join(lines) + "\n"


def plot_bench(df: Any, path: str | Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r.M}x{r.d}" + (f"@n{r.n}" if r.n != 1 else "") for _, r in df.iterrows()]
    x = range(len(df))
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(df)), 4))
    w = 0.27
    for i, (col, name) in enumerate((("tuned_us", "gemvtune tuned"), ("llama_us", "llama.cpp config"),
                                     ("cublas_us", "cuBLAS"))):
        ax.bar([v + (i - 1) * w for v in x], 100 * df.floor_us / df[col], w, label=name)
    ax.axhline(100, color="k", lw=1)
    ax.set_xticks(list(x), labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("% of the measured read ceiling (floor / time)")
    ax.set_ylim(0, 105)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8, loc="upper center", ncol=3, bbox_to_anchor=(0.5, -0.22), frameon=False)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
