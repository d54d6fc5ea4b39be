"""Leave-one-shape-out evaluation of the cost model on the recorded sweeps: for each swept shape, a model
fitted on every measurement except that M x d's (at any n) ranks the sweep's configs; the zero-trial pick is
its first, judged by the time the sweep measured for it against the sweep's optimum. The held-out model's
top-k are also what a warm-started search of that shape enqueues (``gemvtune study --costmodel``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from ..kernels.shapes import Shape
from .costmodel import ROUNDS, CostModel, fit
from .dataset import Dataset


def sweep_shapes(ds: Dataset) -> list[Shape]:
    return sorted(set(ds.frame.loc[ds.frame["kind"] == "sweep", "shape"]), key=lambda s: (s.M, s.d))


def holdout_model(ds: Dataset, shape: Shape, rounds: int = ROUNDS) -> CostModel:
    """A model that never saw ``shape``'s M x d (at any n)."""
    keep = [not (s.M == shape.M and s.d == shape.d) for s in ds.frame["shape"]]
    train = ds.frame[keep]
    return fit(list(zip(train["config"], train["shape"])), train["rel"].to_numpy(), ds.sm_count, ds.gpu,
               ds.read_gbps, meta={"held_out": str(shape)}, rounds=rounds)


def evaluate(ds: Dataset, k: int = 5, rounds: int = ROUNDS, shapes: list[Shape] | None = None,
             echo: Callable[[str], None] = print) -> tuple[pd.DataFrame, dict[str, list[dict[str, Any]]]]:
    """(one row per held-out sweep shape, {shape: the held-out model's top-k configs as parameter dicts})."""
    rows, warm = [], {}
    for shape in shapes or sweep_shapes(ds):
        sweep = ds.frame[(ds.frame["kind"] == "sweep") & (ds.frame["shape"] == shape)]
        by_label: dict[str, tuple[Any, float]] = {}
        for c, us in zip(sweep["config"], sweep["us"]):
            if c.label not in by_label or us < by_label[c.label][1]:
                by_label[c.label] = (c, float(us))
        configs = [c for c, _ in by_label.values()]
        true = np.array([us for _, us in by_label.values()])
        model = holdout_model(ds, shape, rounds)
        pred = model.predict_us([(c, shape) for c in configs])
        order = np.argsort(pred, kind="stable")   # (CostModel.rank's order, from the one prediction)
        opt = float(true.min())
        pick, pred_us = configs[order[0]], float(pred[order[0]])
        pick_us = by_label[pick.label][1]
        top = [configs[i] for i in order[:k]]
        best_top = min(by_label[c.label][1] for c in top)
        rows.append({"shape": str(shape), "configs": len(configs), "train_rows": int(model.meta["rows"]),
                     "optimum_us": opt, "optimum": configs[int(true.argmin())].label,
                     "pick": pick.label, "pick_predicted_us": pred_us, "pick_us": pick_us,
                     "pick_gap_pct": 100 * (pick_us / opt - 1), "pick_rank": int(1 + (true < pick_us).sum()),
                     f"best_of_top{k}_gap_pct": 100 * (best_top / opt - 1),
                     "spearman": float(pd.Series(pred).rank().corr(pd.Series(true).rank()))})
        warm[str(shape)] = [c.to_dict() for c in top]
        echo(f"{shape}: zero-trial pick {pick.label} {pick_us:.2f} µs, {rows[-1]['pick_gap_pct']:.1f}% from the "
             f"optimum {opt:.2f} µs (rank {rows[-1]['pick_rank']} of {len(configs)}); best of the top {k} "
             f"{rows[-1][f'best_of_top{k}_gap_pct']:.1f}%")
    return pd.DataFrame(rows), warm
