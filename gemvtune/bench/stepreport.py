"""The decode step benchmark's report (pure: no GPU): the names of its implementations and of the stand-in modes they
are timed with, the summary frame (medians, spreads, tokens/s, % of the read ceiling over the bytes each moves), the
ratios against cuBLAS and the tuned step, the markdown summary, the bar chart and the files. The measurement is
``gemvtune.bench.step``'s."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

from ..baselines import BASELINES, CUBLAS_FOR, cublas_of
from ..cells import write_csv
from ..safefile import savefig, write_text
from .gaps import BETWEEN
from .stepfused import FUSED, FUSED_PDL

# the step's implementations: the table's kernels (tuned, fused, fused with PDL), then the baselines by their names in
# gemvtune.baselines (cuBLAS is torch's F.linear where torch is installed, else cupy.matmul: the registry's chain)
BASELINE_IMPLS = ("llama.cpp", CUBLAS_FOR["torch"], CUBLAS_FOR["cupy"])
OURS = ("tuned", FUSED, FUSED_PDL)
IMPLS = (*OURS, *BASELINE_IMPLS)
LABELS = {"tuned": "gemvtune tuned", FUSED: "gemvtune fused (groups, residual, SwiGLU)",
          FUSED_PDL: "gemvtune fused, chain PDL", **{b: BASELINES[b].label for b in BASELINE_IMPLS}}
GAP_LABELS = {"plain": "plain stand-ins between", "pdl": "PDL stand-ins between"}
NOTE = ("Linear layers only (no attention, norms, rotary, sampling) unless stand-ins are between them (@plain, @pdl: "
        "kernels that read and write what those would); every linear reads its own fixed random x (the fused step's "
        "down reads the h its gate/up group wrote): the memory traffic and launch sequence of a real batch-1 step are "
        "what is reproduced.")


def key_of(impl: str, between: str) -> str:
    """The name an implementation is timed under with ``between`` stand-ins (``none``: the implementation's own)."""
    return impl if between == "none" else f"{impl}@{between}"


def split_key(key: str) -> tuple[str, str]:
    """(implementation, between) of a timed key."""
    impl, _, between = key.partition("@")
    return impl, between or "none"


def label_of(key: str) -> str:
    impl, between = split_key(key)
    return LABELS.get(impl, impl) + (f", {GAP_LABELS.get(between, between)}" if between != "none" else "")


def _order(keys: Any) -> list[str]:
    return sorted(set(keys), key=lambda k: (BETWEEN.index(split_key(k)[1]) if split_key(k)[1] in BETWEEN else 9,
                                            IMPLS.index(split_key(k)[0]) if split_key(k)[0] in IMPLS else 99, k))


def summary_frame(samples: Any, nbytes: int | dict[str, int], ceiling_gbps: float,
                  methods: dict[str, str] | None = None) -> Any:
    """Per timed key (from a frame of impl, round, us samples): median, min, max, spread of all replays and of the
    round medians, tokens/s, GB/s, % of the read ceiling (over ``nbytes``: one count, or one per key: the linears'
    bytes plus its stand-ins'), and time / the tuned time with the same stand-ins."""
    import pandas as pd

    rows = []
    for impl in _order(samples.impl):
        s = samples[samples.impl == impl]
        us = [float(v) for v in s.us]
        med = statistics.median(us)
        rmeds = [statistics.median(g.us) for _, g in s.groupby("round")]
        b = nbytes.get(impl, math.nan) if isinstance(nbytes, dict) else nbytes
        rows.append({"impl": impl, "method": (methods or {}).get(impl, ""), "us_median": med, "us_min": min(us),
                     "us_max": max(us), "spread": (max(us) - min(us)) / med, "round_spread":
                     (max(rmeds) - min(rmeds)) / med, "samples": len(us), "rounds": len(rmeds),
                     "tokens_per_s": 1e6 / med, "bytes": b, "gbps": b / (med * 1e-6) / 1e9,
                     "pct_ceiling": 100 * b / (med * 1e-6) / 1e9 / ceiling_gbps if ceiling_gbps else math.nan})
    df = pd.DataFrame(rows)
    t = dict(zip(df.impl, df.us_median))
    df["x_tuned"] = [m / t.get(key_of("tuned", split_key(k)[1]), math.nan) for k, m in zip(df.impl, df.us_median)]
    return df


def ratios(df: Any) -> dict[str, float]:
    """Speed-ups against cuBLAS with the same stand-ins (its time / ours) of every gemvtune implementation
    (``tuned_vs_cublas``, ``fused_vs_cublas``, ``fused-pdl_vs_cublas``, with ``@between`` for the stand-in runs),
    the tuned step against the llama.cpp config's (``tuned_vs_llama``), and the fused steps against the tuned one."""
    t = dict(zip(df.impl, df.us_median))
    out: dict[str, float] = {}
    for between in BETWEEN:
        mine = {split_key(k)[0]: v for k, v in t.items() if split_key(k)[1] == between}
        if not mine:
            continue
        cublas = cublas_of(mine, ok=math.isfinite)   # the registry's chain: torch's F.linear, else cupy.matmul
        at = "" if between == "none" else f"@{between}"
        for impl in OURS:
            if impl in mine:
                out[f"{impl}_vs_cublas{at}"] = (cublas if cublas is not None else math.nan) / mine[impl]
                if impl != "tuned" and "tuned" in mine:
                    out[f"{impl}_vs_tuned{at}"] = mine["tuned"] / mine[impl]
        if "tuned" in mine:
            out[f"tuned_vs_llama{at}"] = mine.get("llama.cpp", math.nan) / mine["tuned"]
    return out


def decode_markdown(df: Any, meta: dict[str, Any]) -> str:
    ceil = meta.get("ceiling", {})
    floor_us = meta["step_bytes"] / (ceil["read_gbps"] * 1e3) if ceil.get("read_gbps") else math.nan
    r = ratios(df)
    lines: list[str] = [f"Decode step of {meta['model']}, {meta['layers']} layers + LM head: {meta['ops']} linear layers, "
             f"{meta['step_bytes'] / 1e9:.2f} GB moved per step (weights {meta['weight_bytes'] / 1e9:.2f} GB, all "
             f"resident); one CUDA graph per implementation, {meta.get('rounds')} interleaved rounds of "
             f"{meta.get('replays')} replays.",
             f"Read ceiling {ceil.get('read_gbps', math.nan):.0f} GB/s (same run): the linears cannot take less than "
             f"{floor_us:.1f} µs.", "",
             "| implementation | µs per token | min..max | spread | rounds spread | tokens/s | GB/s "
             "| % ceiling | × tuned time | method |", "|---|---|---|---|---|---|---|---|---|---|"]
    for _, x in df.iterrows():
        lines.append(f"| {label_of(x.impl)} | {x.us_median:.1f} | {x.us_min:.1f}..{x.us_max:.1f} | "
                     f"{100 * x.spread:.1f}% | {100 * x.round_spread:.1f}% | {x.tokens_per_s:.1f} | {x.gbps:.0f} | "
                     f"{x.pct_ceiling:.1f} | {x.x_tuned:.3f} | {x.method} |")
    lines.append("")
    if "tuned_vs_cublas" in r:
        lines.append(f"Tuned step vs cuBLAS: ×{r['tuned_vs_cublas']:.3f}; vs the llama.cpp config: "
                     f"×{r['tuned_vs_llama']:.3f} (time of the other / time of the tuned step).")
    for between in BETWEEN:
        at = "" if between == "none" else f"@{between}"
        for impl in (FUSED, FUSED_PDL):
            if f"{impl}_vs_cublas{at}" in r:
                lines.append(f"{label_of(key_of(impl, between))}: ×{r[f'{impl}_vs_cublas{at}']:.3f} cuBLAS's step, "
                             f"×{r.get(f'{impl}_vs_tuned{at}', math.nan):.3f} the tuned step's.")
    if meta.get("depths"):
        lines.append("Chain PDL variants (chainK: the next kernel released after the last W load, earlyK: at the "
                     "block's start; K W vectors per thread loaded before the wait; off: no PDL), picked in this "
                     "step's graph: " + "; ".join(f"{b}: " + ", ".join(f"{s} {d}" for s, d in ds.items())
                                                 for b, ds in meta["depths"].items()) + ".")
    if meta.get("fused_kernels"):
        lines.append("Fused step kernels: " + "; ".join(f"{s} {k}" for s, k in meta["fused_kernels"].items()) + ".")
    bad = [k for k, v in meta.get("verified", {}).items() if not v]
    lines.append("Every kernel timed was verified against a float64 reference first." if not bad else
                 f"**Verification failed** for: {', '.join(bad)} (their times are not comparable).")
    wrong = [f"{k} {name}" for k, rows in meta.get("fused_checked", {}).items() for name, ok, *_ in rows if not ok]
    if meta.get("fused_checked"):
        lines.append("After the replays, the fused steps' last layer and LM head matched float64 of their inputs."
                     if not wrong else f"**Wrong after the replays**: {', '.join(wrong)}.")
    off = [f"{k} op {i}" for k, rows in meta.get("checked", {}).items() for i, (ok, *_) in enumerate(rows) if not ok]
    if meta.get("checked"):
        lines.append("After the replays, every unfused step's first layer matched float64 of its W and x."
                     if not off else f"**Wrong after the replays** (first layer): {', '.join(off)}.")
    unwritten = [k for k, v in meta.get("written", {}).items() if not v]
    if unwritten:
        lines.append(f"**Outputs left unwritten** (NaN poison) by: {', '.join(unwritten)}.")
    diff = meta.get("max_rel_diff_vs_cublas") or {}
    if diff:
        lines.append("Outputs of the step against cuBLAS's, worst op (relative L2): "
                     + ", ".join(f"{label_of(k)} {v:.1e}" for k, v in diff.items()) + ".")
    if meta.get("not_tuned"):
        lines.append(f"Not in the table (fallback config used): {', '.join(meta['not_tuned'])}.")
    lines += ["", NOTE]
    return "\n".join(lines) + "\n"


def plot_decode(df: Any, path: str | Path, title: str, floor_us: float = math.nan) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(df)), 4.5))
    xs = list(range(len(df)))
    err = [df.us_median - df.us_min, df.us_max - df.us_median]
    bars = ax.bar(xs, df.us_median, yerr=err, capsize=4, color=[f"C{i}" for i in range(len(df))])
    for b, (_, x) in zip(bars, df.iterrows()):
        ax.text(b.get_x() + b.get_width() / 2, x.us_max * 1.02, f"{x.tokens_per_s:.0f} tok/s\n{x.pct_ceiling:.0f}% of ceiling",
                ha="center", va="bottom", fontsize=8)
    if floor_us == floor_us:
        ax.axhline(floor_us, color="k", lw=1, ls="--", label=f"read-ceiling floor {floor_us:.0f} µs")
        ax.legend(fontsize=8, loc="lower right")
    ax.set_xticks(xs, [label_of(i) for i in df.impl], rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("µs per decode step (linear layers)")
    ax.set_ylim(0, float(df.us_max.max()) * 1.25)
    ax.set_title(title, fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    savefig(fig, path, dpi=110)
    plt.close(fig)
    return Path(path)


def key_bytes(keys: Any, linears: int, gap_bytes: dict[str, dict[str, int]]) -> dict[str, int]:
    """The bytes each timed key moves: the linears', plus its stand-ins' (the fused implementations have the fused
    gaps, the others the unfused ones)."""
    out = {}
    for k in keys:
        impl, b = split_key(k)
        g = gap_bytes.get(b, {}).get("fused" if impl in (FUSED, FUSED_PDL) else "unfused", 0)
        out[k] = linears + g
    return out


def write_reports(samples: Any, info: dict[str, Any], meta: dict[str, Any], out: Path, stem: str,
                  device: dict[str, Any], ceiling: dict[str, Any]) -> tuple[Path, str]:
    """CSV of every replay + JSON provenance, summary CSV/markdown, bar chart; returns (csv, markdown)."""
    from ..reports.runcsv import provenance

    out.mkdir(parents=True, exist_ok=True)
    nbytes = key_bytes(set(samples.impl), meta["step_bytes"], info.get("gap_bytes", {}))
    df = summary_frame(samples, nbytes, ceiling.get("read_gbps", math.nan), info.get("methods"))
    meta = {**meta, "ceiling": ceiling, **{k: info[k] for k in ("verified", "not_tuned", "written", "depths",
                                                                 "fused_kernels", "fused_checked", "checked",
                                                                 "max_rel_diff_vs_cublas") if k in info}}
    path = out / f"{stem}.csv"
    write_csv(samples, path, float_format="%.6g")
    prov = provenance(device, **meta, **{k: v for k, v in info.items() if k not in meta}, ratios=ratios(df), note=NOTE)
    write_text(path.with_suffix(".json"), json.dumps(prov, indent=2, sort_keys=True, default=str) + "\n")
    write_csv(df, out / f"{stem}-summary.csv", float_format="%.6g")
    md = decode_markdown(df, meta)
    write_text(out / f"{stem}-summary.md", md)
    floor = meta["step_bytes"] / (ceiling["read_gbps"] * 1e3) if ceiling.get("read_gbps") else math.nan
    plot_decode(df, out / f"{stem}.png", f"{device.get('name', '')}: {meta['model']} decode step, "
                f"{meta['layers']} layers + LM head", floor)
    return path, md
