"""Kernel Tuner's strategies on the same recorded sweeps and budget as gemvtune's study.
    pip install kernel_tuner; python scripts/kt_compare.py results/nvidia-h200/sweeps OUT_DIR [seeds] [budget]
Each sweep is exported to a Kernel Tuner cache file and replayed in its simulation mode with
max_fevals = budget (unique valid configurations, the same count gemvtune's study uses); reported:
measured trials to within 1/2/5% of the sweep's optimum, median and 90th percentile over seeds."""

import math
import random
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from gemvtune.kernels.gemv import GemvConfig
from gemvtune.reports.ktexport import KT_KERNEL_NAME, export_kt_cache, kt_problem_size
from gemvtune.runners.replay import Sweep, sweep_files
from gemvtune.tuning.study import THRESHOLDS, trials_to_within

STRATEGIES = ["random_sample", "genetic_algorithm", "simulated_annealing", "greedy_ils", "diff_evo", "pso",
              "firefly_algorithm", "mls"]


def run_one(sweep: Sweep, cache: Path, strategy: str, seed: int, budget: int) -> list[float]:
    import kernel_tuner

    shape = sweep.shape
    random.seed(seed)
    np.random.seed(seed)

    def restrict(p):
        return GemvConfig(**p).is_valid(shape)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results, _ = kernel_tuner.tune_kernel(
            KT_KERNEL_NAME, "// replayed", kt_problem_size(sweep), [], dict(sweep.grid), cache=str(cache),
            simulation_mode=True, strategy=strategy, strategy_options={"max_fevals": budget},
            restrictions=restrict, quiet=True)
    seen, best, out = set(), math.inf, []
    for r in results:
        if not r:
            continue
        key = tuple(r[k] for k in sweep.grid)
        if key in seen:
            continue
        seen.add(key)
        t = r.get("time")
        if isinstance(t, (int, float)):
            best = min(best, t * 1000.0)
        out.append(best)
    return out[:budget]


def main(sweeps: str, out_dir: str, seeds: int = 20, budget: int = 200) -> None:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for f in sweep_files(sweeps):
        sweep = Sweep(f)
        cache = export_kt_cache(sweep, out / f"kt-cache-{sweep.shape.M}x{sweep.shape.d}.json")
        opt = sweep.optimum()[1]
        for strategy in STRATEGIES:
            t0 = time.time()
            for seed in range(seeds):
                try:
                    best = run_one(sweep, cache, strategy, seed, budget)
                    err = ""
                except Exception as e:  # a strategy that fails is reported, not hidden
                    best, err = [], f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
                row = {"shape": str(sweep.shape), "sampler": f"kt:{strategy}", "seed": seed, "budget": budget,
                       "measured": len(best), "optimum": opt, "error": err}
                for p in THRESHOLDS:
                    row[f"to_{int(p * 100)}pct"] = trials_to_within(best, opt, p)
                rows.append(row)
            print(f"{sweep.shape} {strategy}: {seeds} seeds in {time.time() - t0:.0f} s", flush=True)
        cache.unlink()  # large and derived: rebuilt from the sweep on each run
    df = pd.DataFrame(rows)
    df.to_csv(out / "kt-runs.csv", index=False, float_format="%.6g")
    from gemvtune.tuning.study import summarize_runs

    s = summarize_runs(df)
    s.to_csv(out / "kt-summary.csv", index=False, float_format="%.6g")
    print(s[s["shape"] == "all"].to_string(index=False))


if __name__ == "__main__":
    a = sys.argv[1:]
    main(a[0], a[1], *(int(x) for x in a[2:4]))
