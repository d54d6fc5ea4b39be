"""Issue 21's target: BF16 × cuBLAS within 2% of the FP16 ratio, shape by shape. Reads two bench summaries
(``gemvtune bench --dtype bf16 ...`` and ``--dtype fp16``, each tuned kernel against its own dtype's cuBLAS in one
process) and writes the comparison as markdown (stdout, and --out).

    python3 scripts/dtype_compare.py results/nvidia-h200/bench/bench-tuned-bf16-STAMP-summary.csv \\
        results/nvidia-h200/bench/bench-tuned-STAMP-summary.csv --out results/nvidia-h200/bench/bf16-vs-fp16.md
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gemvtune.reports.benchreport import dtype_comparison, dtype_markdown  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("first", help="a bench -summary.csv (e.g. the BF16 run)")
    ap.add_argument("second", help="a bench -summary.csv of the same shapes in the other dtype")
    ap.add_argument("--tolerance", type=float, default=0.02)
    ap.add_argument("--out")
    a = ap.parse_args()
    import pandas as pd

    try:
        m = dtype_comparison(pd.read_csv(a.first), pd.read_csv(a.second), a.tolerance)
    except (OSError, KeyError, ValueError) as e:
        sys.exit(f"dtype_compare: {e}")
    md = f"{a.first} against {a.second}\n\n" + dtype_markdown(m, a.tolerance) + "\n"
    print(md, end="")
    if a.out:
        Path(a.out).write_text(md)


if __name__ == "__main__":
    main()
