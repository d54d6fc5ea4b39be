"""Compare two tables of the same GPU model entry by entry (issue 10: the table a multi-GPU search wrote
against the single-GPU one), and count which worker and device measured each trial of a results folder.

    python3 scripts/compare_tables.py A/table.json B/table.json [--trials-dir A]
"""

from __future__ import annotations

import argparse
import collections
import glob
import json


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--trials-dir", default=None)
    args = ap.parse_args()
    ea = json.load(open(args.a))["entries"]
    eb = json.load(open(args.b))["entries"]
    print("| entry | A winner | A µs | A spread | B winner | B µs | B spread | B/A | within spread |")
    print("|---|---|---|---|---|---|---|---|---|")
    ok = 0
    for k in sorted(set(ea) & set(eb), key=lambda s: [int(x) for x in s.split("x")]):
        wa, wb = ea[k]["winner"], eb[k]["winner"]
        sa, sb = wa.get("spread") or 0.0, wb.get("spread") or 0.0
        r = wb["us"] / wa["us"]
        tol = max(sa, sb, 0.01)   # the larger measured spread (at least 1%: two different GPUs)
        inside = abs(r - 1) <= tol
        ok += inside
        print(f"| {k} | `{wa['label']}` | {wa['us']:.2f} | {100 * sa:.1f}% | `{wb['label']}` | {wb['us']:.2f} | "
              f"{100 * sb:.1f}% | {r:.3f} | {'yes' if inside else 'NO'} (±{100 * tol:.1f}%) |")
    print(f"\n{ok} of {len(set(ea) & set(eb))} entries within the measured spread; only in A: "
          f"{sorted(set(ea) - set(eb))}, only in B: {sorted(set(eb) - set(ea))}")
    if args.trials_dir:
        import pandas as pd

        frames = [pd.read_csv(f) for f in glob.glob(f"{args.trials_dir}/search-*.csv")]
        df = pd.concat(frames)
        m = df[df.measured == True]  # noqa: E712
        keys = [k for k in ("M", "d", "n", "family", "label") if k in m]
        src = pd.concat([pd.read_csv(f).assign(csv=f) for f in glob.glob(f"{args.trials_dir}/search-*.csv")])
        ms = src[src.measured == True]  # noqa: E712
        per_study = ms.groupby(["csv", "family"]).label.agg(["count", "nunique"])
        print(f"\ntrials in {args.trials_dir}: {len(df)} rows, {len(m)} measured; per study (shape, family) "
              f"measured {per_study['count'].sum()}, distinct configs {per_study['nunique'].sum()} "
              f"(equal: no config measured twice in a study){'' if keys else ''}")
        print("measured trials per (worker, device):")
        for (w, d), c in sorted(collections.Counter(zip(m.worker, m.device)).items()):
            print(f"  {w:24s} {d:40s} {c}")


if __name__ == "__main__":
    main()
