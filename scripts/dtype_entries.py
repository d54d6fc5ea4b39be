"""BF16 entries of a table against the same table before a change and against its FP16 entries (issue 21): per BF16
entry of the family asked for, the winner before and after, after/before, and BF16/FP16 (each entry's confirmed
search time; the FP16 entries come from their own searches, other leases). Markdown on stdout.

    git show main:results/nvidia-h200/table.json > /tmp/before.json
    python3 scripts/dtype_entries.py /tmp/before.json results/nvidia-h200/table.json --family gemv
"""

from __future__ import annotations

import argparse
import json
import statistics


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--family", default="gemv", help="only BF16 entries whose winner is of this family")
    a = ap.parse_args()
    before = json.load(open(a.before))["entries"]
    after = json.load(open(a.after))["entries"]
    print("| BF16 entry | before | µs | after | µs | after / before | FP16 entry µs | BF16 / FP16 |")
    print("|---|---|---|---|---|---|---|---|")
    moves, gaps = [], []
    keys = [k for k, e in after.items() if k.endswith(".bf16") and e["winner"].get("family", "gemv") == a.family]
    for k in sorted(keys, key=lambda k: after[k]["winner"]["us"]):
        w, o = after[k]["winner"], (before.get(k) or {}).get("winner")
        f = (after.get(k[: -len(".bf16")]) or {}).get("winner")
        move = w["us"] / o["us"] if o else float("nan")
        gap = w["us"] / f["us"] if f else float("nan")
        moves += [move] if o else []
        gaps += [gap] if f else []
        print(f"| {k} | `{o['label'] if o else '-'}` | {o['us'] if o else float('nan'):.2f} | `{w['label']}` | "
              f"{w['us']:.2f} | {move:.3f} | {f['us'] if f else float('nan'):.2f} | {gap:.3f} |")
    if moves and gaps:
        print(f"\n{len(keys)} entries; after / before: median {statistics.median(moves):.3f}, "
              f"{min(moves):.3f}..{max(moves):.3f}; BF16 / FP16: median {statistics.median(gaps):.3f}, "
              f"{min(gaps):.3f}..{max(gaps):.3f}")


if __name__ == "__main__":
    main()
