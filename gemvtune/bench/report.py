"""The tuned benchmark's summary: per shape the tuned kernel and every baseline measured in one process (the
llama.cpp config with d compiled in, the seed kernel as written with d at run time, cuBLAS, Inductor
max-autotune), their ratios, the best of cuBLAS and Inductor, and per batch n the geometric means with the
lowest row named and how the tuned time grows with n; as a table, markdown and a bar chart."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from ..baselines import BASELINES as REGISTRY
from ..runners.base import Measurement
from ..safefile import savefig

LLAMA_NAME = REGISTRY["llama.cpp"].label   # the GEMV family's llama.cpp point; its kind stays "llama.cpp"
# (column of µs, column of its ratio, label): every baseline a summary row carries
BASELINES = (("best_baseline_us", "x_best", "best(cuBLAS, Inductor)"), ("cublas_us", "x_cublas", "cuBLAS"),
             ("inductor_us", "x_inductor", "Inductor"), ("llama_us", "x_llama", "llama.cpp config"),
             ("seed_us", "x_seed", "seed kernel"))


def _median_of(ms: list[Measurement]) -> tuple[float, float, float]:
    """(median of the round medians, lowest, highest round median) over the correct measurements."""
    meds = [m.us_median for m in ms if m.ok]
    if not meds:
        return math.nan, math.nan, math.nan
    return statistics.median(meds), min(meds), max(meds)


def _finite(v: Any) -> bool:
    try:
        return v is not None and math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


def ratio(base_us: Any, tuned_us: Any) -> float:
    """base / tuned (above 1: the tuned kernel is faster); NaN where either is missing."""
    return float(base_us) / float(tuned_us) if _finite(base_us) and _finite(tuned_us) and float(tuned_us) > 0 else math.nan


def baseline_columns(tuned_us: float, llama_us: float, seed_us: float, cublas_us: float,
                     inductor_us: float) -> dict[str, Any]:
    """Every baseline's µs and ratio, and the best of cuBLAS and Inductor (the issue's targets are stated
    against it): empty (NaN) unless both were measured, so a skipped or failed Inductor never passes off
    cuBLAS alone as the best baseline."""
    both = _finite(cublas_us) and _finite(inductor_us)
    best = min(cublas_us, inductor_us) if both else math.nan
    which = ("cublas" if cublas_us <= inductor_us else "inductor") if both else ""
    us = {"llama_us": llama_us, "seed_us": seed_us, "cublas_us": cublas_us, "inductor_us": inductor_us,
          "best_baseline_us": best}
    out: dict[str, Any] = dict(us, best_baseline=which)
    for col, x, _ in BASELINES:
        out[x] = ratio(us[col], tuned_us)
    return out


def summary_row(shape: Any, ms: list[Measurement], ceiling_gbps: float, how: str) -> dict[str, Any]:
    """One shape: median over interleaved rounds of each contender, GB/s, % ceiling and ratios; Inductor's
    compile time and choice (from its first measurement) and, where it failed, why."""
    def of(kind: str) -> list[Measurement]:
        return [m for m in ms if m.kind == kind]

    t, t_lo, t_hi = _median_of(of("tuned"))
    cu_kind = "cublas-torch" if any(m.ok for m in of("cublas-torch")) else "cublas"
    ind = of("inductor")
    floor = shape.bytes_moved / (ceiling_gbps * 1e3)
    tuned = next((m for m in of("tuned") if m.ok), None)
    row = {"M": shape.M, "d": shape.d, "n": shape.n, "dtype": shape.dtype, "weight_mb": shape.weight_bytes / 1e6,
           "tuned": tuned.name if tuned else "", "lookup": how, "tuned_us": t,
           "tuned_spread": (t_hi - t_lo) / t if t else math.nan}
    row.update(baseline_columns(t, _median_of(of("llama.cpp"))[0], _median_of(of("seed"))[0],
                                _median_of(of(cu_kind))[0], _median_of(ind)[0]))
    row.update({"cublas_method": cu_kind, "floor_us": floor,
                "gbps": shape.bytes_moved / (t * 1e-6) / 1e9 if t == t else math.nan,
                "pct_ceiling": 100 * floor / t if t == t else math.nan,
                "inductor_compile_s": ind[0].compile_s if ind else math.nan,
                "inductor_kernel": ind[0].params.get("kernel", "") if ind else "",
                "baseline_errors": "; ".join(f"{m.kind}: {m.error}" for m in
                                             {m.kind: m for m in reversed(ms) if not m.ok and m.kind != "tuned"}.values()),
                "rounds": len([m for m in of("tuned") if m.ok])})
    return row


def geomean(values: Any) -> float:
    v = [float(x) for x in values if x == x and x > 0]
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else math.nan


def _f(v: Any, spec: str = ".2f") -> str:
    return format(float(v), spec) if _finite(v) else "-"


def _shape_name(r: Any) -> str:
    return f"{int(r.M)}x{int(r.d)}"


def _lowest(g: Any, col: str) -> str:
    """'geomean (lowest value, shape)' of a ratio column over the rows of ``g``; '-' where none was measured."""
    if col not in g:
        return "-"
    v = g[col].dropna()
    if len(v) == 0:
        return "-"
    worst = g.loc[v.idxmin()]
    return f"{geomean(v):.3f} (lowest {v.min():.3f}, {_shape_name(worst)})"


def scaling(df: Any) -> Any:
    """time(n) / time(n = 1) of the tuned kernel per row (NaN where the shape has no n = 1 row)."""
    base = {(int(r.M), int(r.d)): r.tuned_us for r in df.itertuples() if int(r.n) == 1}
    return df.apply(lambda r: ratio(r.tuned_us, base.get((int(r.M), int(r.d)))), axis=1)


def batch_markdown(df: Any) -> list[str]:
    """Per batch n: the geometric mean of each ratio over the shapes with the lowest row named, and (when the
    run held several n) the geomean of the tuned time over its own n = 1 time, with the worst named."""
    df = df.copy()
    several = df.n.nunique() > 1
    cols = [x for _, x, _ in BASELINES if x in df]
    head = ["n", "shapes"] + [f"×{label}" for _, x, label in BASELINES if x in cols]
    if several:
        df["scale"] = scaling(df)
        head.append("tuned time / its n = 1 time")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for n, g in df.groupby("n", sort=True):
        cells = [str(n), str(len(g))] + [_lowest(g, x) for x in cols]
        if several:
            s = g["scale"].dropna()
            cells.append("-" if len(s) == 0 else "1 (the reference)" if int(n) == 1 else
                         f"{geomean(s):.3f} (worst {s.max():.3f}, {_shape_name(g.loc[s.idxmax()])})")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def bench_markdown(df: Any, ceiling: dict[str, Any]) -> str:
    lines = [f"Read ceiling {ceiling['read_gbps']:.0f} GB/s, launch floor {ceiling['launch_floor_us']:.2f} µs (same run). "
             f"×X = X's time / the tuned time; best = the faster of cuBLAS and Inductor ({_INDUCTOR_NOTE}).", "",
             "| shape | n | MB | tuned µs | spread | GB/s | % ceiling | llama.cpp config µs | seed µs | cuBLAS µs | "
             "Inductor µs | ×best | ×cuBLAS | ×Inductor | ×llama.cpp | ×seed | tuned kernel |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for _, r in df.iterrows():
        dt = "" if r.get("dtype", "fp16") == "fp16" else f" {r['dtype']}"
        lines.append(f"| {r.M}x{r.d}{dt} | {r.n} | {r.weight_mb:.0f} | {_f(r.tuned_us)} | {_f(100 * r.tuned_spread, '.1f')}% | "
                     f"{_f(r.gbps, '.0f')} | {_f(r.pct_ceiling, '.1f')} | {_f(r.llama_us)} | {_f(r.seed_us)} | "
                     f"{_f(r.cublas_us)} | {_f(r.inductor_us)} | {_f(r.x_best, '.3f')} | {_f(r.x_cublas, '.3f')} | "
                     f"{_f(r.x_inductor, '.3f')} | {_f(r.x_llama, '.3f')} | {_f(r.x_seed, '.3f')} | `{r.tuned}` |")
    lines += ["", "Geometric means: " + ", ".join(
        f"×{label} {_f(geomean(df[x]), '.3f')} (lowest {_f(df[x].min(), '.3f')})"
        for _, x, label in BASELINES if x in df), "", "Per batch n (geomean over the shapes; the lowest row named):", ""]
    lines += batch_markdown(df)
    if "inductor_compile_s" in df and df.inductor_compile_s.notna().any():
        kinds = sorted({str(k) for k in df.get("inductor_kernel", []) if isinstance(k, str) and k})
        lines += ["", f"Inductor compiled each shape once (autotuning included) in {df.inductor_compile_s.median():.1f} s "
                      f"(median; at most {df.inductor_compile_s.max():.1f} s); it ran: {', '.join(kinds) or '-'}."]
    errors = [f"{r.M}x{r.d} n={r.n}: {r.baseline_errors}" for _, r in df.iterrows()
              if isinstance(r.get("baseline_errors"), str) and r.baseline_errors]
    if errors:
        lines += ["", "Baselines that failed (their ratios are left empty):"] + [f"- {e}" for e in errors]
    if "dispatch_ratio" in df and df.dispatch_ratio.notna().any():
        lines.append(f"Dispatch: `table.gemv` costs {df.dispatch_ratio.max():.2f}× the CPU time of a bare launch at worst "
                     f"(median {df.dispatch_ratio.median():.2f}×; bare {df.bare_launch_us.median():.2f} µs, "
                     f"table.gemv {df.table_gemv_us.median():.2f} µs per call).")
    return "\n".join(lines) + "\n"


_INDUCTOR_NOTE = "torch.compile(F.linear, mode=\"max-autotune-no-cudagraphs\") in the cuBLAS harness"


def plot_bench(df: Any, path: str | Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r.M}x{r.d}" + (f"@n{r.n}" if r.n != 1 else "") for _, r in df.iterrows()]
    x = range(len(df))
    series = [(col, name) for col, name in (("tuned_us", "gemvtune tuned"), ("llama_us", LLAMA_NAME),
                                            ("seed_us", "seed kernel (d at run time)"), ("cublas_us", "cuBLAS"),
                                            ("inductor_us", "Inductor max-autotune"))
              if col in df and df[col].notna().any()]
    fig, ax = plt.subplots(figsize=(max(6, 0.35 * len(series) * len(df) + 2), 4))
    w = 0.8 / max(len(series), 1)
    for i, (col, name) in enumerate(series):
        ax.bar([v + (i - (len(series) - 1) / 2) * w for v in x], 100 * df.floor_us / df[col], w, label=name)
    ax.axhline(100, color="k", lw=1)
    ax.set_xticks(list(x), labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("% of the measured read ceiling (floor / time)")
    ax.set_ylim(0, 105)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8, loc="upper center", ncol=3, bbox_to_anchor=(0.5, -0.22), frameon=False)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    savefig(fig, path, dpi=110)
    plt.close(fig)
    return Path(path)


def dtype_comparison(a: Any, b: Any, tolerance: float = 0.02) -> Any:
    """Two bench summaries (``-summary.csv`` frames) of the same shapes in two dtypes (say BF16 and FP16): per
    (M, d, n) each one's tuned µs, cuBLAS µs and ×cuBLAS (each measured in its own run, against its own dtype's
    cuBLAS), the ratio of the two ×cuBLAS and whether it is within ``tolerance`` of 1. Shapes in one only are
    left out."""
    import pandas as pd

    keep = ["M", "d", "n", "tuned", "tuned_us", "cublas_us", "x_cublas"]
    da, db = (str(f["dtype"].iloc[0]) if "dtype" in f and len(f) else "?" for f in (a, b))
    m = pd.merge(a[keep], b[keep], on=["M", "d", "n"], suffixes=(f"_{da}", f"_{db}"))
    m["x_cublas_ratio"] = m[f"x_cublas_{da}"] / m[f"x_cublas_{db}"]
    m["within"] = (m["x_cublas_ratio"] - 1).abs() <= tolerance
    return m.sort_values(["n", "M", "d"]).reset_index(drop=True)


def dtype_markdown(m: Any, tolerance: float = 0.02) -> str:
    """The comparison as a markdown table, with how many (M, d, n) are within the tolerance."""
    cols = [c for c in m.columns if c.startswith("x_cublas_") and c != "x_cublas_ratio"]
    da, db = (c.removeprefix("x_cublas_") for c in cols)
    lines = [f"| shape | n | {da} tuned µs | {da} cuBLAS µs | {da} ×cuBLAS | {db} tuned µs | {db} cuBLAS µs | "
             f"{db} ×cuBLAS | ratio | within {100 * tolerance:.0f}% |", "|---|---|---|---|---|---|---|---|---|---|"]
    for _, r in m.iterrows():
        lines.append(f"| {r.M}x{r.d} | {r.n} | {_f(r[f'tuned_us_{da}'])} | {_f(r[f'cublas_us_{da}'])} | "
                     f"{_f(r[f'x_cublas_{da}'], '.3f')} | {_f(r[f'tuned_us_{db}'])} | {_f(r[f'cublas_us_{db}'])} | "
                     f"{_f(r[f'x_cublas_{db}'], '.3f')} | {_f(r.x_cublas_ratio, '.3f')} | {'yes' if r.within else 'no'} |")
    lines += ["", f"{int(m.within.sum())} of {len(m)} within {100 * tolerance:.0f}% ({da} ×cuBLAS / {db} ×cuBLAS)."]
    return "\n".join(lines)
