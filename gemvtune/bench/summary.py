"""Markdown summary of a bench CSV (what results/ READMEs and notes quote; never typed by hand).
Every string taken from the CSV or its JSON sidecar (device, command, date, variant names, shapes) is
escaped for a terminal (``tableschema.printable``) and for markdown (``cells.md_cell``) before it is written."""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import TypedDict

from ..cells import md_cell
from ..errors import UsageError
from ..runtime.tableschema import printable
from .report import baseline_columns, batch_markdown


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


def esc(v: object, limit: int = 200) -> str:
    """A string from the CSV or its sidecar as markdown text: escaped for a terminal (no control characters),
    then for markdown (no ``|`` that adds a cell, no backtick, no HTML)."""
    return md_cell(printable(v, limit))


def _f(v: float, spec: str = ".2f") -> str:
    return "-" if v != v else format(v, spec)


def summarize_bench(csv_path: str | Path) -> str:
    import pandas as pd

    csv_path = Path(csv_path)
    from ..userfile import JSON_BYTES, SWEEP_BYTES, read_bytes, read_json

    df = pd.read_csv(io.BytesIO(read_bytes(csv_path, "bench CSV", SWEEP_BYTES)))
    meta = read_json(csv_path.with_suffix(".json"), "bench sidecar", JSON_BYTES)
    if not isinstance(meta, dict):
        raise UsageError(f"bench sidecar {csv_path.with_suffix('.json')} is not a JSON object")
    dev, ceil = meta.get("device", {}), meta.get("ceiling", {})
    out = [f"# Bench {esc(csv_path.name)}", "",
           f"- date: {esc(meta.get('date'))}", f"- GPU: {esc(dev.get('name'))} (cc {esc(dev.get('compute_capability'))}, "
           f"{esc(dev.get('sm_count'))} SMs, L2 {dev.get('l2_bytes', 0) / 2**20:.0f} MiB), driver {esc(dev.get('driver'))}, "
           f"CUDA runtime {esc(dev.get('cuda_runtime'))}, cupy {esc(dev.get('cupy'))}",
           f"- command: `{esc(meta.get('command'), 2000)}`",
           f"- read ceiling (streaming kernel, same run): {ceil.get('read_gbps', math.nan):.0f} GB/s "
           f"(min..max {ceil.get('read_gbps_min', math.nan):.0f}..{ceil.get('read_gbps_max', math.nan):.0f}); "
           f"launch floor {ceil.get('launch_floor_us', math.nan):.2f} µs", ""]
    out += ["## Per shape (median µs; ×X = X's time / the variant's: ×cuBLAS against cuBLAS via torch in a graph, "
            "×Inductor against torch.compile max-autotune in that harness, ×best against the faster of the two, "
            "×llama against the llama.cpp config with d compiled in, ×seed against the seed kernel as written, d at run time)", "",
            "| M×d | n | MB | llama.cpp config µs | seed µs | cuBLAS torch µs | cuBLAS cupy (spin) µs | Inductor µs | "
            "best sampled variant | µs | spread | % ceiling | ×best | ×cuBLAS | ×Inductor | ×llama | ×seed | variants ok/tried |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    agree = ["## Spin method against graph method (llama.cpp config, same run)", "",
             "| M×d | n | graph µs | spin µs | spin − graph µs | spin / graph |", "|---|---|---|---|---|---|"]
    ref = ["## Against MEASURING.md's reference numbers", "",
           f"Reference ceiling {MEASURING_REFERENCE['ceiling_gbps']:.0f} GB/s; this run's ceiling is "
           f"{_pct(ceil.get('read_gbps', math.nan), MEASURING_REFERENCE['ceiling_gbps'])} off it. The reference's seed "
           "kernel reads d at run time: it is compared with this run's seed kernel (the llama.cpp config, d compiled "
           "in, where the run has no seed row).", "",
           "| M×d | compared | µs | ref seed µs | diff | cuBLAS torch µs | ref cuBLAS µs | diff |",
           "|---|---|---|---|---|---|---|---|"]
    rows = []
    keys = ["M", "d", "n"] if "n" in df else ["M", "d"]
    for key, g in df.groupby(keys, sort=False):
        M, d, n = (key + (1,))[:3]
        md = f"{esc(M, 20)}×{esc(d, 20)}"

        def us(kind: str, g=g) -> float:
            r = g[(g.kind == kind) & (g.status == "ok")].us_median
            return float(r.median()) if len(r) else math.nan

        lu, su, spin, cub, cut, iu = (us(k) for k in ("llama.cpp", "seed", "spin-check", "cublas", "cublas-torch", "inductor"))
        bu = cut if cut == cut else cub
        v = g[g.kind == "variant"]
        ok = v[v.status == "ok"].sort_values("us_median")
        tuned = g[(g.kind == "tuned") & (g.status == "ok")]
        best = ok.iloc[0] if len(ok) else (tuned.sort_values("us_median").iloc[len(tuned) // 2] if len(tuned) else None)
        if best is not None:
            t = best.us_median if len(ok) else us("tuned")
            cols = baseline_columns(t, lu, su, bu, iu)
            rows.append(dict(cols, M=int(M), d=int(d), n=int(n), tuned_us=t))
            tried = f"{len(ok)}/{len(v)}" if len(v) else f"tuned ({len(tuned)} rounds)"
            out.append(f"| {md} | {esc(n, 20)} | {M * d * 2 / 1e6:.0f} | {_f(lu)} | {_f(su)} | {_f(bu)} | {_f(cub)} | {_f(iu)} | "
                       f"`{esc(best['name'])}` | {t:.2f} | {_f(100 * best.spread, '.1f')}% | {_f(best.pct_ceiling, '.1f')} | "
                       + " | ".join(_f(cols[x], ".3f") for x in ("x_best", "x_cublas", "x_inductor", "x_llama", "x_seed"))
                       + f" | {tried} |")
        if lu == lu and spin == spin:
            agree.append(f"| {md} | {esc(n, 20)} | {lu:.2f} | {spin:.2f} | {spin - lu:+.2f} | {spin / lu:.3f} |")
        r = MEASURING_REFERENCE["us"].get((int(M), int(d)))
        if r and int(n) == 1:
            which, mine = ("seed kernel", su) if su == su else ("llama.cpp config", lu)
            ref.append(f"| {md} | {which} | {_f(mine)} | {r[0]} | {_pct(mine, r[0])} | {_f(bu)} | {r[1]} | {_pct(bu, r[1])} |")
    if rows:
        import pandas as pd

        out += ["", "### Per batch n (geomean over the shapes; the lowest row named)", ""]
        out += batch_markdown(pd.DataFrame(rows))
    return "\n".join(out + [""] + agree + [""] + ref) + "\n"
