"""Issue 19 probe (H200): a tensor-core GEMV family (mma, or ring with --family ring) against the table's winner
and cuBLAS, per (shape, n).

For each shape and n, in one process: the table's kernel for (M, d, n) (what a user gets today), a seeded random
sample of valid mma configs plus its seed, and cuBLAS through torch F.linear; every variant verified against
float64 before timing (CUDA graphs over rotating weight copies, the runner's method). Prints one line per
(shape, n) with the best mma config, its time, time(n)/time(1) of the best mma and of the table, and writes every
measurement as CSV.

    python3 scripts/probe_mma.py --shape 4096x4096 --batch 1,8,16 --sample 24 [--family ring] --out DIR
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gemvtune.kernels.compile import compile_variants  # noqa: E402
from gemvtune.kernels.families import get_family  # noqa: E402
from gemvtune.kernels.shapes import Shape, parse_shape  # noqa: E402
from gemvtune.reports.report import provenance, write_csv  # noqa: E402
from gemvtune.runners.cuda import CudaRunner  # noqa: E402
from gemvtune.runtime.table import load_table  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", action="append", required=True)
    ap.add_argument("--batch", default="1,8,16")
    ap.add_argument("--sample", type=int, default=24)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--table", default="results/nvidia-h200/table.json")
    ap.add_argument("--family", default="mma")
    ap.add_argument("--oat", action="store_true", help="also every valid one-at-a-time change of the family's seed")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    fam = get_family(a.family)
    seed_cfg = fam.seed
    runner = CudaRunner()
    dev = runner.device_info()
    ceil = runner.ceiling()
    print(f"{dev['name']} driver {dev['driver']} read ceiling {ceil['read_gbps']:.0f} GB/s", flush=True)
    table = load_table(a.table)
    rows = []
    best1: dict[tuple[int, int], tuple[float, float]] = {}
    for text in a.shape:
        base = parse_shape(text)
        for n in (int(v) for v in a.batch.split(",")):
            shape = Shape(base.M, base.d, n)
            valid = [c for c in fam.all_configs() if c.is_valid(shape)]
            rng = random.Random(a.seed)
            configs = [seed_cfg] if seed_cfg in valid else []
            if a.oat:   # each parameter's effect alone, from the seed
                configs += [c for c in (dataclasses.replace(seed_cfg, **{k: v}) for k, vs in fam.domains.items()
                                        for v in vs if v != getattr(seed_cfg, k)) if c.is_valid(shape)]
            configs += rng.sample([c for c in valid if c not in configs], min(a.sample, len(valid) - len(configs)))
            t0 = time.time()
            compile_variants([(c, shape) for c in configs], arch=runner.arch)
            tc = time.time() - t0
            cfg, how = table.lookup(shape)
            tab = runner.measure(cfg, shape, kind="table")
            ms = [tab] + runner.baselines(shape) + [runner.measure(c, shape) for c in configs]
            rows += ms
            ok = [m for m in ms if m.kind == "variant" and m.ok]
            bad = [m for m in ms if m.kind == "variant" and not m.ok]
            best = min(ok, key=lambda m: m.us_median) if ok else None
            cub = min((m.us_median for m in ms if m.kind.startswith("cublas") and m.ok), default=float("nan"))
            if n == 1 and best is not None:
                best1[(shape.M, shape.d)] = (best.us_median, tab.us_median)
            b1 = best1.get((shape.M, shape.d), (float("nan"), float("nan")))
            print(f"{shape!s:>16s} table {tab.us_median:7.2f} ({cfg.label}) cuBLAS {cub:7.2f} | best {a.family} "
                  f"{best.us_median if best else float('nan'):7.2f} {best.pct_ceiling if best else 0:5.1f}% "
                  f"({best.name if best else '-'}) x{cub / best.us_median if best else 0:.3f} cuBLAS | "
                  f"{a.family} t(n)/t(1) {best.us_median / b1[0] if best else 0:.3f} table t(n)/t(1) {tab.us_median / b1[1]:.3f} | "
                  f"{len(ok)} ok {len(bad)} bad, compile {tc:.0f}s", flush=True)
            for m in bad[:3]:
                print(f"    {m.status}: {m.name}: {m.error[:160]}")
            runner.release()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    write_csv(rows, out / f"probe-{a.family}.csv", provenance(dev, ceiling=ceil, shapes=a.shape, script="scripts/probe_mma.py " + " ".join(sys.argv[1:])))


if __name__ == "__main__":
    main()
