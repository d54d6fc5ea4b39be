"""Issue 7 on the H200: what programmatic dependent launch buys, and what a read of the same size can
reach at all. Per shape, in one process: the full read ceiling (1 GiB), a read ceiling of exactly the
shape's weight bytes (same streaming kernel, rotating copies, cold L2), then the table's tuned GEMV
config with pdl off and on and the llama.cpp config with pdl off and on, interleaved for ``--rounds``.
Every variant is verified before it is timed. Writes a CSV of every measurement and a markdown summary.

    python3 scripts/pdl_ab.py --table results/nvidia-h200/table.json --out DIR [--shape MxD ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
from pathlib import Path

import pandas as pd

from gemvtune import LLAMA_CPP
from gemvtune.kernels.families import config_from_dict
from gemvtune.kernels.shapes import DECODE_SUITE, Shape, parse_shape
from gemvtune.reports.report import provenance, write_csv
from gemvtune.runners.cuda import CudaRunner
from gemvtune.runners.timing import copies_for
from gemvtune.runtime.table import load_table


def _markdown(df: pd.DataFrame) -> str:
    cell = lambda v: f"{v:.3f}" if isinstance(v, float) else str(v)  # noqa: E731
    lines = ["| " + " | ".join(df.columns) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--table", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--shape", action="append", default=[])
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    shapes = [parse_shape(s) for s in a.shape] or [Shape(M, d) for M, d in DECODE_SUITE]
    table = load_table(a.table)
    r = CudaRunner()
    dev = r.device_info()
    full = r.ceiling()
    big = full["read_gbps"]
    print(f"{dev['name']} driver {dev.get('driver')}: read ceiling {big:.0f} GB/s (1 GiB), "
          f"launch floor {full['launch_floor_us']:.2f} µs")
    rows, summary = [], []
    for s in shapes:
        entry = table.entry(s)
        tuned = config_from_dict({"family": "gemv", **entry["gemv"]["config"]})
        variants = {"tuned": dataclasses.replace(tuned, pdl="off"), "tuned+pdl": dataclasses.replace(tuned, pdl="on"),
                    "llama": LLAMA_CPP, "llama+pdl": dataclasses.replace(LLAMA_CPP, pdl="on")}
        same = r.ceiling(gib=s.weight_bytes / 2**30, copies=copies_for(s.weight_bytes, r.l2_bytes))
        r.ceiling_gbps = big           # percentages stay against the full ceiling
        us = {k: [] for k in variants}
        for i in range(a.rounds):
            for k, c in variants.items():
                m = r.measure(c, s, kind=k, verify=(i == 0))
                rows.append(m)
                if m.ok:
                    us[k].append(m.us_median)
                else:
                    print(f"  {s} {k} {m.status}: {m.error[:120]}")
        r.release()
        med = {k: statistics.median(v) if v else float("nan") for k, v in us.items()}
        row = {"shape": str(s), "MB": s.weight_bytes / 1e6, "tuned": variants["tuned"].label,
               "same_size_read_gbps": same["read_gbps"], "same_size_pct": 100 * same["read_gbps"] / big,
               "same_size_floor_us": s.weight_bytes / (same["read_gbps"] * 1e3)}
        for k, v in med.items():
            row[f"{k}_us"] = v
            row[f"{k}_spread"] = (max(us[k]) - min(us[k])) / v if us[k] else float("nan")
            row[f"{k}_pct"] = 100 * s.bytes_moved / (v * 1e3) / big
        row["pdl_gain_tuned"] = med["tuned"] / med["tuned+pdl"]
        row["pdl_gain_llama"] = med["llama"] / med["llama+pdl"]
        summary.append(row)
        print(f"{s!s:>12s} {row['MB']:6.1f} MB  same-size read {row['same_size_pct']:5.1f}% of full "
              f"({row['same_size_floor_us']:.2f} µs)  tuned {med['tuned']:.2f} / +pdl {med['tuned+pdl']:.2f} µs "
              f"(x{row['pdl_gain_tuned']:.3f})  llama {med['llama']:.2f} / +pdl {med['llama+pdl']:.2f} µs "
              f"(x{row['pdl_gain_llama']:.3f})", flush=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(rows, out / "pdl-ab.csv", provenance(dev, ceiling=full, table=a.table, rounds=a.rounds,
                                                   shapes=[str(s) for s in shapes]))
    df = pd.DataFrame(summary)
    df.to_csv(out / "pdl-ab-summary.csv", index=False, float_format="%.6g")
    cols = ["shape", "MB", "same_size_pct", "same_size_floor_us", "tuned_us", "tuned_pct", "tuned+pdl_us",
            "tuned+pdl_pct", "pdl_gain_tuned", "llama_us", "llama+pdl_us", "pdl_gain_llama"]
    md = (f"# pdl on/off and the same-size read ceiling — {dev['name']}, driver {dev.get('driver')}\n\n"
          f"Full read ceiling {big:.0f} GB/s (1 GiB). Medians of {a.rounds} interleaved rounds; "
          f"% are of the full ceiling.\n\n" + _markdown(df[cols]) + "\n")
    (out / "pdl-ab-summary.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
