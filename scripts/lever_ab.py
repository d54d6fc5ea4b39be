"""A/B of one GEMV lever on the table's tuned configs (issue 7): per shape, the tuned GEMV config with
the lever at each value, interleaved for --rounds in one process, each verified before it is timed;
CSV of every measurement and a markdown summary (µs, % of ceiling, registers, gain over the first value).

    python3 scripts/lever_ab.py --table results/nvidia-h200/table.json --lever occ --values auto,half,full --out DIR
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
from pathlib import Path

from gemvtune.kernels.families import config_from_dict
from gemvtune.kernels.gemv import DOMAINS
from gemvtune.kernels.shapes import DECODE_SUITE, Shape, parse_shape
from gemvtune.reports.report import provenance, write_csv
from gemvtune.runners.cuda import CudaRunner
from gemvtune.runtime.table import load_table


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--table", required=True)
    ap.add_argument("--lever", required=True, choices=sorted(DOMAINS))
    ap.add_argument("--values", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--shape", action="append", default=[])
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    kind = type(DOMAINS[a.lever][0])
    values = [kind(v) for v in a.values.split(",")]
    shapes = [parse_shape(s) for s in a.shape] or [Shape(M, d) for M, d in DECODE_SUITE]
    table = load_table(a.table)
    r = CudaRunner()
    dev, ceil = r.device_info(), r.ceiling()
    print(f"{dev['name']} driver {dev.get('driver')}: read ceiling {ceil['read_gbps']:.0f} GB/s; lever {a.lever}")
    rows, lines = [], []
    for s in shapes:
        tuned = config_from_dict({"family": "gemv", **table.entry(s)["gemv"]["config"]})
        variants = [dataclasses.replace(tuned, **{a.lever: v}) for v in values]
        us = {v: [] for v in values}
        regs = {}
        for i in range(a.rounds):
            for v, c in zip(values, variants):
                m = r.measure(c, s, kind=f"{a.lever}={v}", verify=(i == 0))
                rows.append(m)
                if m.ok:
                    us[v].append(m.us_median)
                    regs[v] = m.registers
                elif i == 0:
                    print(f"  {s} {c.label}: {m.status} {m.error[:120]}")
        r.release()
        med = {v: statistics.median(x) if x else float("nan") for v, x in us.items()}
        base = med[values[0]]
        cells = " | ".join(f"{med[v]:.2f} ({100 * s.bytes_moved / (med[v] * 1e3) / ceil['read_gbps']:.1f}%, "
                           f"{regs.get(v, '-')} regs, ×{base / med[v]:.3f})" for v in values)
        lines.append(f"| {s} | `{variants[0].label}` | {cells} |")
        print(lines[-1], flush=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(rows, out / f"lever-{a.lever}.csv", provenance(dev, ceiling=ceil, table=a.table, rounds=a.rounds,
                                                             lever=a.lever, values=values))
    head = " | ".join(f"{a.lever}={v}: µs (% ceiling, registers, × vs {values[0]})" for v in values)
    md = (f"# lever {a.lever} on the tuned GEMV configs — {dev['name']}, driver {dev.get('driver')}\n\n"
          f"Read ceiling {ceil['read_gbps']:.0f} GB/s (same run); medians of {a.rounds} interleaved rounds.\n\n"
          f"| shape | tuned config ({a.lever}={values[0]}) | {head} |\n|---|---|" + "---|" * len(values) + "\n"
          + "\n".join(lines) + "\n")
    (out / f"lever-{a.lever}.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
