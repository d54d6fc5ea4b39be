"""The fastest ok config of one family for one (M, d, n) in a probe or report CSV, as the JSON object a config
loads from (its ``p_`` columns): what scripts/ncu_small.py --config takes.

    python3 scripts/best_config.py PROBE.csv --family ring --shape 14336x4096 --batch 16
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gemvtune.kernels.families import config_from_dict, get_family  # noqa: E402
from gemvtune.kernels.shapes import parse_shape  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--family", required=True)
    ap.add_argument("--shape", required=True)
    ap.add_argument("--batch", type=int, default=1)
    a = ap.parse_args()
    s = parse_shape(a.shape, a.batch)
    d = pd.read_csv(a.csv, comment="#")
    d = d[(d.p_family == a.family) & (d.status == "ok") & (d.M == s.M) & (d.d == s.d) & (d.n == s.n)]
    if d.empty:
        sys.exit(f"best_config: no ok {a.family} row for {s} in {a.csv}")
    row = d.loc[d.us_median.idxmin()]
    cfg = {"family": a.family}
    for k, values in get_family(a.family).domains.items():
        v = row["p_" + k]
        cfg[k] = type(values[0])(v) if not isinstance(values[0], str) else str(v)
    config_from_dict(cfg)   # it loads (else this exits with the reason)
    print(json.dumps(cfg))


if __name__ == "__main__":
    main()
