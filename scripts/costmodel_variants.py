"""Leave-one-shape-out zero-trial picks of cost-model variants (LightGBM parameters, or an average of K seeds),
on the recorded sweeps and searches of a GPU's results folder: what chose the committed model's loss. Prints one
line per variant: the median and worst gap of the pick to the sweep optimum, the best of the top 5, per shape.

    python3 scripts/costmodel_variants.py --results results/nvidia-h200 base huber l31 "ens5=base*5"
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gemvtune.model import costmodel, loso  # noqa: E402
from gemvtune.model.dataset import load  # noqa: E402

VARIANTS = {   # changes to costmodel.PARAMS
    "base": {"objective": "regression"},
    "leaf30": {"objective": "regression", "min_data_in_leaf": 30},
    "l31": {"objective": "regression", "num_leaves": 31, "min_data_in_leaf": 20},
    "ff07": {"objective": "regression", "feature_fraction": 0.7},
    "huber": {"objective": "huber", "alpha": 0.05},
    "l1": {"objective": "l1"},
}


class _Mean:
    """K models' geometric-mean prediction (the seeds of bagging and feature sampling differ)."""

    def __init__(self, models):
        self.models, self.meta = models, models[0].meta

    def predict_us(self, points):
        return np.exp(np.mean([np.log(m.predict_us(points)) for m in self.models], axis=0))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--results", default="results/nvidia-h200")
    ap.add_argument("variants", nargs="+", help=f"{', '.join(VARIANTS)}, or NAME*K for the mean of K seeds")
    a = ap.parse_args()
    ds = load(a.results)
    base, fit = dict(costmodel.PARAMS), costmodel.fit
    for v in a.variants:
        name, _, k = v.partition("*")
        if name not in VARIANTS or (k and not k.isdigit()):
            sys.exit(f"unknown variant {v!r}: one of {', '.join(VARIANTS)}, optionally *K")
        seeds = int(k or 1)

        def fit_k(points, rel, sm, gpu, gbps, meta=None, rounds=costmodel.ROUNDS, _n=name, _k=seeds):
            models = []
            for s in range(_k):
                costmodel.PARAMS.clear()
                costmodel.PARAMS.update(base, **VARIANTS[_n], seed=s)
                models.append(fit(points, rel, sm, gpu, gbps, meta, rounds))
            return models[0] if _k == 1 else _Mean(models)

        loso.fit = fit_k
        t = time.time()
        df, _ = loso.evaluate(ds, echo=lambda s: None)
        gaps = dict(zip(df["shape"], df["pick_gap_pct"].round(2)))
        print(f"{v}: median {df.pick_gap_pct.median():.2f}% worst {df.pick_gap_pct.max():.2f}% "
              f"(best of top 5: worst {df['best_of_top5_gap_pct'].max():.2f}%) {gaps} [{time.time() - t:.0f} s]",
              flush=True)
    costmodel.PARAMS.clear()
    costmodel.PARAMS.update(base)
    loso.fit = fit


if __name__ == "__main__":
    main()
