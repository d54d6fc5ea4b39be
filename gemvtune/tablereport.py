"""A table's contents as a DataFrame and a terminal summary."""

from __future__ import annotations

from typing import Any

from .table import Table


def table_frame(t: Table) -> Any:
    import pandas as pd

    rows = []
    for key, e in sorted(t.data["entries"].items()):
        w, b, s = e["winner"], e.get("baselines", {}), e.get("search", {})
        cub = b.get("cublas-torch") or b.get("cublas") or {}
        row = {"M": e["M"], "d": e["d"], "n": e.get("n", 1), "winner": w.get("label"), "family": w.get("family"),
               "us": w.get("us"), "us_min": w.get("us_min"), "us_max": w.get("us_max"), "spread": w.get("spread"),
               "gbps": w.get("gbps"), "pct_ceiling": w.get("pct_ceiling"),
               "llama_us": b.get("llama.cpp", {}).get("us"), "cublas_us": cub.get("us"),
               "x_cublas": (cub.get("us") or float("nan")) / w["us"], "x_llama": (b.get("llama.cpp", {}).get("us")
                                                                                or float("nan")) / w["us"],
               "tie": e.get("tie"), "sampler": s.get("sampler"), "trials": s.get("measured_trials"),
               "seed": s.get("seed"), "replayed": s.get("replayed"), "updated": e.get("updated")}
        row.update({f"p_{k}": v for k, v in w.get("config", {}).items()})
        rows.append(row)
    return pd.DataFrame(rows)


def table_summary(t: Table) -> str:
    df = table_frame(t)
    g = t.gpu
    lines = [f"table {t.path}: {len(df)} entries; GPU {g.get('name')} (cc {g.get('compute_capability')}, driver "
             f"{g.get('driver')}); read ceiling {t.data.get('ceiling', {}).get('read_gbps', float('nan')):.0f} GB/s"]
    def x(v: float) -> str:
        return "-" if v != v else f"{v:.3f}"

    for _, r in df.iterrows():
        lines.append(f"  {r.M:>7d}x{r.d:<6d} n={r.n:<2d} {r.winner:44s} {r.us:8.2f} µs {r.pct_ceiling:5.1f}% "
                     f"x{x(r.x_cublas)} cuBLAS x{x(r.x_llama)} llama.cpp ({r.sampler}, {r.trials} trials"
                     f"{', REPLAYED' if r.replayed else ''})")
    return "\n".join(lines)


def table_markdown(t: Table, n: int | None = 1) -> str:
    """The table's winners (at batch n, or all) as a markdown table, as the README quotes them."""
    df = table_frame(t)
    if n is not None:
        df = df[df.n == n]
    lines = ["| M×d | n | family | winner | µs | % ceiling | ×cuBLAS | ×llama.cpp | trials |",
             "|---|---|---|---|---|---|---|---|---|"]
    for _, r in df.sort_values(["d", "M", "n"]).iterrows():
        lines.append(f"| {r.M}×{r.d} | {r.n} | {r.family} | `{r.winner}` | {r.us:.2f} | {r.pct_ceiling:.1f} | "
                     f"{r.x_cublas:.3f} | {r.x_llama:.3f} | {r.trials} |")
    return "\n".join(lines) + "\n"
