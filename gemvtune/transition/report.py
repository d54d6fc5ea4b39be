"""The GEMV -> GEMM transition as measured by ``gemvtune transition``: per (M, d), time, TFLOP/s and
GB/s against batch n for each series (the table's tuned kernel, cuBLAS, ...), beside the two measured
ceilings (read bandwidth, FP16 tensor-core throughput) and the ridge point where they meet. Pure
functions of a pandas DataFrame: the roofline arithmetic, the CSV (with its provenance sidecar), the
three-panel PNG and a short markdown table.

Bytes moved are the house's (``Shape.bytes_moved``): W once and x once in FP16, y once in FP32 (what
the tuned kernels write). cuBLAS writes y in FP16, so at large n its GB/s is overstated by at most
2·n·M bytes over the total (under 6% at 4096x4096, n = 256)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..cells import write_csv
from ..safefile import savefig, write_text

# One row per (series, n); the raw columns a measurement loop gives, then what is derived here.
RAW_COLUMNS = ["M", "d", "n", "series", "status", "reason", "us_median", "us_min", "us_max", "samples",
               "verified", "detail"]
DERIVED_COLUMNS = ["spread", "tflops", "gbps", "pct_read_ceiling", "bytes_moved", "flops", "read_floor_us",
                   "compute_floor_us", "read_gbps", "peak_tflops", "ridge_n"]
COLUMNS = RAW_COLUMNS + DERIVED_COLUMNS


def flops(M: int, d: int, n: int) -> int:
    """Multiply-adds of y[n, M] = x[n, d] . W[M, d]^T, counted as 2 FLOP each."""
    return 2 * M * d * n


def bytes_moved(M: int, d: int, n: int) -> int:
    """The fewest bytes the call moves: W and x once in FP16, y once in FP32 (as ``Shape.bytes_moved``,
    for any n)."""
    return 2 * M * d + 2 * n * d + 4 * n * M


def intensity(M: int, d: int, n: int) -> float:
    """Arithmetic intensity, FLOP per byte moved."""
    return flops(M, d, n) / bytes_moved(M, d, n)


def ridge_n(M: int, d: int, peak_tflops: float, read_gbps: float) -> float:
    """The batch n* where the intensity 2Mdn / (2Md + 2dn + 4Mn) equals peak FLOP/s over read bytes/s
    (r): n* = r·M·d / (M·d - r·d - 2r·M). Above it the call is compute-bound, below it read-bound.
    inf where the intensity never gets there (it tends to M·d / (d + 2M) as n grows); nan for a
    ceiling that is not a positive number."""
    if not (peak_tflops > 0 and read_gbps > 0):   # (False for nan too)
        return math.nan
    r = peak_tflops * 1e12 / (read_gbps * 1e9)
    den = M * d - r * d - 2 * r * M
    return r * M * d / den if den > 0 else math.inf


def transition_frame(rows: list[dict[str, Any]], read_gbps: float, peak_tflops: float) -> Any:
    """The measured rows (``RAW_COLUMNS``) with every derived column, in ``COLUMNS`` order, sorted by
    (M, d, n, series). Rows without a time (skipped, failed) keep NaN in the derived rates."""
    import pandas as pd

    df = pd.DataFrame(rows, columns=RAW_COLUMNS)
    for c in ("us_median", "us_min", "us_max"):
        df[c] = pd.to_numeric(df[c], errors="coerce").astype(float)
    for c in ("M", "d", "n", "samples"):
        df[c] = pd.to_numeric(df[c], errors="coerce").fillna(0).astype(int)
    df["reason"] = df["reason"].fillna("").astype(str)
    df["spread"] = (df.us_max - df.us_min) / df.us_median
    df["bytes_moved"] = [bytes_moved(M, d, n) for M, d, n in zip(df.M, df.d, df.n, strict=True)]
    df["flops"] = [flops(M, d, n) for M, d, n in zip(df.M, df.d, df.n, strict=True)]
    df["tflops"] = df.flops / (df.us_median * 1e-6) / 1e12
    df["gbps"] = df.bytes_moved / (df.us_median * 1e-6) / 1e9
    df["pct_read_ceiling"] = 100.0 * df.gbps / read_gbps
    df["read_floor_us"] = df.bytes_moved / (read_gbps * 1e3)
    df["compute_floor_us"] = df.flops / (peak_tflops * 1e6)
    df["read_gbps"] = float(read_gbps)
    df["peak_tflops"] = float(peak_tflops)
    df["ridge_n"] = [ridge_n(M, d, peak_tflops, read_gbps) for M, d in zip(df.M, df.d, strict=True)]
    df = df.sort_values(["M", "d", "n", "series"], kind="stable").reset_index(drop=True)
    return df[COLUMNS]


def file_stem(M: int, d: int, stamp: str) -> str:
    return f"transition-{M}x{d}-{stamp}"


def write_transition_csv(df: Any, path: str | Path, meta: dict[str, Any]) -> Path:
    """The frame as CSV (atomically) and ``meta`` (provenance: date, device, command, ceilings) as a
    .json sidecar beside it, as ``reports.report.write_csv`` does for measurements."""

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_csv(df, path, "transition CSV", float_format="%.6g")
    write_text(path.with_suffix(".json"), json.dumps(meta, indent=2, sort_keys=True, default=str) + "\n")
    return path


def _finite(v: Any) -> bool:
    try:
        return math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


def plot_transition(df: Any, path: str | Path, title: str = "") -> Any:
    """Three panels against n (log2 x, log y): µs per call, TFLOP/s, GB/s; one line per series (its
    measured points only), the ridge point as a vertical line on each, the read floor (and the
    compute floor) on the time panel, the compute ceiling and the roofline on the TFLOP/s panel, the
    read ceiling on the GB/s panel. One (M, d) per frame. Saves a PNG; returns the (closed) figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    shapes = df[["M", "d"]].drop_duplicates()
    if len(shapes) != 1:
        raise ValueError(f"plot_transition draws one (M, d), got {len(shapes)}")
    M, d = (int(v) for v in shapes.iloc[0])
    read, peak = float(df.read_gbps.iloc[0]), float(df.peak_tflops.iloc[0])
    ridge = ridge_n(M, d, peak, read)
    ns = sorted({int(v) for v in df.n})
    lo, hi = min(ns), max(ns)
    grid = np.unique(np.geomspace(lo, hi, 200).tolist() + ns) if hi > lo else np.array([float(lo)])
    floor_us = np.array([bytes_moved(M, d, n) / (read * 1e3) for n in grid])
    comp_us = np.array([flops(M, d, n) / (peak * 1e6) for n in grid]) if peak > 0 else None
    roof = np.array([min(peak, intensity(M, d, n) * read / 1e3) for n in grid]) if peak > 0 else None

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6))
    ax_t, ax_f, ax_b = axes
    markers = "os^vDx*P"
    for i, (name, g) in enumerate(df[df.status == "ok"].groupby("series", sort=False)):
        g = g.sort_values("n")
        style = dict(marker=markers[i % len(markers)], label=str(name))
        ax_t.plot(g.n, g.us_median, "-", **style)
        ax_f.plot(g.n, g.tflops, "-", **style)
        ax_b.plot(g.n, g.gbps, "-", **style)
    ax_t.plot(grid, floor_us, "k-", lw=1, label=f"read floor (bytes / {read:.0f} GB/s)")
    measured = df.us_median[(df.status == "ok") & (df.us_median > 0)]
    t_lo = 0.7 * min([float(floor_us.min())] + [float(v) for v in measured])   # (the compute floor is far below at n = 1)
    if comp_us is not None:
        ax_t.plot(grid, comp_us, "k:", lw=1, label=f"compute floor (FLOP / {peak:.0f} TFLOP/s)")
        ax_f.axhline(peak, color="k", lw=1, label=f"compute ceiling {peak:.0f} TFLOP/s (measured GEMM)")
        ax_f.plot(grid, roof, "k:", lw=1, label="roofline min(peak, intensity x read)")
    ax_b.axhline(read, color="k", lw=1, label=f"read ceiling {read:.0f} GB/s (measured)")
    ax_t.set_ylim(bottom=t_lo)
    for ax, ylabel in ((ax_t, "µs per call (median)"), (ax_f, "TFLOP/s (2·M·d·n / t)"),
                       (ax_b, "GB/s (W + x + y bytes / t)")):
        if math.isfinite(ridge) and ridge > 0:
            ax.axvline(ridge, color="tab:red", ls="--", lw=1, label=f"ridge n* = {ridge:.0f}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(ns, [str(v) for v in ns])
        ax.set_xlabel("batch n (columns of x)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    ridge_text = f"ridge n* = {ridge:.0f}" if math.isfinite(ridge) else "no ridge point (never compute-bound)"
    fig.suptitle(f"{M}x{d}: GEMV -> GEMM transition; {ridge_text}" + (f" ({title})" if title else ""), fontsize=10)
    fig.tight_layout()
    savefig(fig, Path(path), dpi=110)
    plt.close(fig)
    return fig


def _cell(r: Any) -> str:
    if r.status != "ok":
        return r.status
    return f"{r.us_median:.2f} µs, {r.tflops:.2f} TF/s, {r.pct_read_ceiling:.0f}%"


def transition_markdown(df: Any) -> str:
    """Per (M, d): the ceilings and ridge point, then per n the read floor and each series' µs,
    TFLOP/s and % of the read ceiling (or its status); skipped and failed rows' reasons after it."""
    lines: list[str] = []
    for (M, d), g in df.groupby(["M", "d"], sort=True):
        series = list(dict.fromkeys(g.series))
        r0 = g.iloc[0]
        rn = float(r0.ridge_n)
        lines += [f"{M}x{d}: read ceiling {r0.read_gbps:.0f} GB/s, compute ceiling {r0.peak_tflops:.0f} TFLOP/s, "
                  + (f"ridge n* = {rn:.1f}" if _finite(rn) else "no ridge point"), "",
                  "| n | read floor µs | " + " | ".join(series) + " |",
                  "|---|---|" + "---|" * len(series)]
        for n, gn in g.groupby("n", sort=True):
            by = {s: r for s, r in zip(gn.series, gn.itertuples(index=False), strict=True)}
            cells = [_cell(by[s]) if s in by else "-" for s in series]
            lines.append(f"| {n} | {gn.read_floor_us.iloc[0]:.2f} | " + " | ".join(cells) + " |")
        notes = {(r.series, r.status, r.reason) for r in g.itertuples(index=False) if r.status != "ok"}
        if notes:
            lines.append("")
            for s, st, why in sorted(notes):
                ns = ",".join(str(v) for v in sorted(g[(g.series == s) & (g.status == st) & (g.reason == why)].n))
                lines.append(f"- {s} {st} at n={ns}: {why}")
        lines.append("")
    return "\n".join(lines)
