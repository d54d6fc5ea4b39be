"""Markdown summary of a bench CSV (what results/ READMEs and notes quote; never typed by hand).
Every string taken from the CSV or its JSON sidecar (device, command, date, variant names, shapes) is
escaped (``tableschema.printable``) before it reaches a terminal."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TypedDict

from ..runtime.tableschema import printable as esc


class _Reference(TypedDict):
    ceiling_gbps: float
    us: dict[tuple[int, int], tuple[float, float]]


# MEASURING.md (shared notes, H200, 2026-11-29): median µs per launch, graph replay, cold L2, for the
# seed kernel (block 256, half2, FP32 acc, 1 row/block) and cuBLAS via torch; its read ceiling.
MEASURING_REFERENCE: _Reference = {
    "ceiling_gbps": 4476.0,
    "us": {  # (M, d): (seed kernel, cuBLAS via torch)
        (4096, 4096): (11.4, 13.6), (14336, 4096): (33.1, 31.2), (4096, 14336): (29.5, 32.7),
        (28672, 4096): (63.3, 58.8), (128256, 4096): (273.3, 248.6), (1024, 16384): (10.6, 14.0),
    },
}


def _pct(a: float, b: float) -> str:
    return "-" if not (a == a and b == b) else f"{100 * (a / b - 1):+.1f}%"


def summarize_bench(csv_path: str | Path) -> str:
    import pandas as pd

    csv_path = Path(csv_path)
    df = pd.read_csv(csv_path)
    meta = json.loads(csv_path.with_suffix(".json").read_text())
    dev, ceil = meta.get("device", {}), meta.get("ceiling", {})
    out = [f"# Bench {esc(csv_path.name)}", "",
           f"- date: {esc(meta.get('date'))}", f"- GPU: {esc(dev.get('name'))} (cc {esc(dev.get('compute_capability'))}, "
           f"{esc(dev.get('sm_count'))} SMs, L2 {dev.get('l2_bytes', 0) / 2**20:.0f} MiB), driver {esc(dev.get('driver'))}, "
           f"CUDA runtime {esc(dev.get('cuda_runtime'))}, cupy {esc(dev.get('cupy'))}",
           f"- command: `{esc(meta.get('command'), 2000)}`",
           f"- read ceiling (streaming kernel, same run): {ceil.get('read_gbps', math.nan):.0f} GB/s "
           f"(min..max {ceil.get('read_gbps_min', math.nan):.0f}..{ceil.get('read_gbps_max', math.nan):.0f}); "
           f"launch floor {ceil.get('launch_floor_us', math.nan):.2f} µs", ""]
    out += ["## Per shape (median µs; ×cuBLAS against cuBLAS via torch in a graph, ×llama against the llama.cpp config)", "",
            "| M×d | MB | llama.cpp µs | cuBLAS torch µs | cuBLAS cupy (spin) µs | best sampled variant | µs | spread | % ceiling | ×cuBLAS | ×llama | variants ok/tried |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    agree = ["## Spin method against graph method (llama.cpp config, same run)", "",
             "| M×d | graph µs | spin µs | spin − graph µs | spin / graph |", "|---|---|---|---|---|"]
    ref = ["## Against MEASURING.md's reference numbers", "",
           f"Reference ceiling {MEASURING_REFERENCE['ceiling_gbps']:.0f} GB/s; this run's ceiling is "
           f"{_pct(ceil.get('read_gbps', math.nan), MEASURING_REFERENCE['ceiling_gbps'])} off it.", "",
           "| M×d | llama.cpp µs | ref seed µs | diff | cuBLAS torch µs | ref cuBLAS µs | diff |", "|---|---|---|---|---|---|---|"]
    for (M, d), g in df.groupby(["M", "d"], sort=False):
        md = f"{esc(M, 20)}×{esc(d, 20)}"
        def one(kind: str, g=g):
            r = g[(g.kind == kind) & (g.status == "ok")]
            return r.iloc[0] if len(r) else None
        llama, spin, cub, cut = one("llama.cpp"), one("spin-check"), one("cublas"), one("cublas-torch")
        base = cut if cut is not None else cub
        v = g[g.kind == "variant"]
        ok = v[v.status == "ok"].sort_values("us_median")
        best = ok.iloc[0] if len(ok) else None
        mb = M * d * 2 / 1e6
        lu = llama.us_median if llama is not None else math.nan
        bu = base.us_median if base is not None else math.nan
        if best is not None:
            out.append(f"| {md} | {mb:.0f} | {lu:.2f} | {bu:.2f} | "
                       f"{(cub.us_median if cub is not None else math.nan):.2f} | `{esc(best['name'])}` | {best.us_median:.2f} | "
                       f"{100 * best.spread:.1f}% | {best.pct_ceiling:.1f} | {bu / best.us_median:.3f} | {lu / best.us_median:.3f} | "
                       f"{len(ok)}/{len(v)} |")
        if llama is not None and spin is not None:
            agree.append(f"| {md} | {lu:.2f} | {spin.us_median:.2f} | {spin.us_median - lu:+.2f} | {spin.us_median / lu:.3f} |")
        r = MEASURING_REFERENCE["us"].get((int(M), int(d)))
        if r:
            ref.append(f"| {md} | {lu:.2f} | {r[0]} | {_pct(lu, r[0])} | {bu:.2f} | {r[1]} | {_pct(bu, r[1])} |")
    return "\n".join(out + [""] + agree + [""] + ref) + "\n"
