"""The GEMV -> GEMM transition from a table: per (M, d), time against batch n for the best GEMV, the
best split-K GEMM, cuBLAS, the llama.cpp config and the read floor; the crossover n; one PNG per shape."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from ..baselines import cublas_of
from ..runtime.entry import Measured
from ..runtime.table import Table
from ..safefile import savefig


def _us(rec: Measured | None) -> float:
    v = rec.us if rec is not None else None
    return float(v) if isinstance(v, (int, float)) else math.nan


def crossover_frame(t: Table) -> Any:
    import pandas as pd

    read = float(t.data.get("ceiling", {}).get("read_gbps") or math.nan)
    rows = []
    for e in t.entries.values():
        b = e.baselines
        shape = e.shape
        cub = cublas_of(b)
        w, cfg = e.winner, e.winner_config()   # the label and family of the validated config, not the table's words
        rows.append({"M": shape.M, "d": shape.d, "n": shape.n, "dtype": shape.dtype, "gemv_us": _us(e.best.get("gemv")),
                     "splitk_us": _us(e.best.get("splitk")), "cublas_us": _us(cub), "llama_us": _us(b.get("llama.cpp")),
                     "floor_us": shape.bytes_moved / (read * 1e3), "winner_family": cfg.family,
                     "winner": cfg.label, "winner_us": _us(w), "x_cublas": _us(cub) / _us(w)})
    df = pd.DataFrame(rows)
    return df.sort_values(["M", "d", "n"]).reset_index(drop=True) if len(df) else df


def crossovers(df: Any) -> dict[tuple[int, int], int | None]:
    """Per (M, d): the smallest tuned n from which the table's winner is the split-K GEMM at every
    tuned n (None: the GEMV wins somewhere at the largest n). A tie within the spread goes to the GEMV."""
    out: dict[tuple[int, int], int | None] = {}
    for (M, d), g in df.groupby(["M", "d"]):
        g = g.sort_values("n")
        wins = list(g.winner_family == "splitk")
        ns = list(g.n)
        out[(int(M), int(d))] = next((int(ns[i]) for i in range(len(ns)) if all(wins[i:])), None)
    return out


def plot_crossover(df: Any, out_dir: str | Path, gpu: str = "") -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out, paths = Path(out_dir), []
    cross = crossovers(df)
    for (M, d), g in df.groupby(["M", "d"]):
        g = g.sort_values("n")
        if len(g) < 2:
            continue
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.plot(g.n, g.gemv_us, "o-", label="best GEMV (gemvtune)")
        ax.plot(g.n, g.splitk_us, "s-", label="best split-K GEMM (gemvtune)")
        ax.plot(g.n, g.cublas_us, "^--", label="cuBLAS")
        ax.plot(g.n, g.llama_us, "x:", label="llama.cpp config")
        ax.plot(g.n, g.floor_us, "k-", lw=1, label="read floor (measured ceiling)")
        c = cross[(int(M), int(d))]
        ax.set_title(f"{M}x{d} on {gpu}: " + (f"split-K wins from n={c}" if c else "GEMV wins at every n"), fontsize=9)
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(g.n), [str(v) for v in g.n])
        ax.set_xlabel("batch n (columns of x)")
        ax.set_ylabel("µs per call (median)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        p = out / f"crossover-{M}x{d}.png"
        savefig(fig, p, dpi=110)
        plt.close(fig)
        paths.append(p)
    return paths


def crossover_markdown(df: Any) -> str:
    """Per (M, d, n) the four times and the winner, then per n the winner's x over cuBLAS."""
    import numpy as np

    def f(v: float) -> str:
        return "-" if v != v else f"{v:.2f}"

    lines = ["| shape | n | best GEMV µs | best split-K µs | cuBLAS µs | llama.cpp µs | read floor µs | winner | x cuBLAS |",
             "|---|---|---|---|---|---|---|---|---|"]
    for _, r in df.iterrows():
        lines.append(f"| {r.M}x{r.d} | {r.n} | {f(r.gemv_us)} | {f(r.splitk_us)} | {f(r.cublas_us)} | {f(r.llama_us)} "
                     f"| {f(r.floor_us)} | {r.winner_family} | {r.x_cublas:.3f} |")
    lines += ["", "| n | x cuBLAS, geometric mean over shapes | lowest | highest |", "|---|---|---|---|"]
    for n, g in df.groupby("n"):
        x = g.x_cublas.astype(float)
        lines.append(f"| {n} | {float(np.exp(np.log(x).mean())):.3f} | {x.min():.3f} | {x.max():.3f} |")
    cross = crossovers(df)
    lines += ["", "Crossover (the split-K GEMM is the winner from this n on): " + "; ".join(
        f"{M}x{d}: " + (f"n={c}" if c else "never") for (M, d), c in cross.items()) + "."]
    return "\n".join(lines) + "\n"
