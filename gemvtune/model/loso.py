"""Leave-one-shape-out evaluation of the cost model on the recorded sweeps (or, for a model without sweeps such as
the FP8 one, its searches): for each such shape, a model fitted on every measurement except that M x d's (at any n)
ranks the configs measured there; the zero-trial pick is its first, judged by the time measured for it against the
fastest measured. The held-out model's top-k are also what a warm-started search of that shape enqueues
(``gemvtune study --costmodel``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from ..kernels.shapes import Shape
from ..workspace import model_group
from .costmodel import ROUNDS, CostModel, fit
from .dataset import Dataset


def sweep_shapes(ds: Dataset, kind: str = "sweep", group: str = "") -> list[Shape]:
    """The shapes of weights of ``group`` ("" or "fp8") the data hold ``kind`` ("sweep" or "search") measurements of."""
    fr = ds.frame[ds.frame["kind"] == kind]
    return sorted({s for s in fr["shape"] if model_group(s.weights) == group}, key=lambda s: (s.M, s.d, s.n))


def holdout_model(ds: Dataset, shape: Shape, rounds: int = ROUNDS, strict: bool = True,
                  prior: CostModel | None = None) -> CostModel:
    """A model of ``shape``'s weights that never saw its M x d (at any n): no measurement of it at all (``strict``),
    or none of its weights' group (the FP8 model keeping the M x d's 16-bit measurements); with ``prior`` (another
    GPU's model), that model continued on the rest of this GPU's data, as ``gemvtune costmodel fit --prior`` fits."""
    group = model_group(shape.weights)
    keep = [not (s.M == shape.M and s.d == shape.d and (strict or model_group(s.weights) == group))
            for s in ds.frame["shape"]]
    train = ds.frame[keep]
    if train.empty:
        raise ValueError(f"nothing left to fit without {shape.M}x{shape.d}")
    return fit(list(zip(train["config"], train["shape"])), train["rel"].to_numpy(), ds.sm_count, ds.gpu,
               ds.read_gbps, meta={"held_out": str(shape)}, rounds=rounds, group=group, prior=prior)


def evaluate(ds: Dataset, k: int = 5, rounds: int = ROUNDS, shapes: list[Shape] | None = None,
             echo: Callable[[str], None] = print, kind: str = "sweep", group: str = "", strict: bool = True,
             prior: CostModel | None = None) -> tuple[pd.DataFrame, dict[str, list[dict[str, Any]]]]:
    """(one row per held-out shape of ``group``'s ``kind`` measurements, {shape: the held-out model's top-k configs
    as parameter dicts}); a shape whose M x d is all the group's data is not held out (nothing would be left)."""
    rows, warm = [], {}
    sizes = {(s.M, s.d) for s in set(ds.frame["shape"]) if model_group(s.weights) == group}
    for shape in shapes or sweep_shapes(ds, kind, group):
        if sizes == {(shape.M, shape.d)}:
            continue
        sweep = ds.frame[(ds.frame["kind"] == kind) & (ds.frame["shape"] == shape)]
        by_label: dict[str, tuple[Any, float]] = {}
        for c, us in zip(sweep["config"], sweep["us"]):
            if c.label not in by_label or us < by_label[c.label][1]:
                by_label[c.label] = (c, float(us))
        configs = [c for c, _ in by_label.values()]
        true = np.array([us for _, us in by_label.values()])
        model = holdout_model(ds, shape, rounds, strict, prior)
        pred = model.predict_us([(c, shape) for c in configs])
        order = np.argsort(pred, kind="stable")   # (CostModel.rank's order, from the one prediction)
        opt = float(true.min())
        pick, pred_us = configs[order[0]], float(pred[order[0]])
        pick_us = by_label[pick.label][1]
        top = [configs[i] for i in order[:k]]
        best_top = min(by_label[c.label][1] for c in top)
        rows.append({"shape": str(shape), "configs": len(configs), "train_rows": int(model.meta["rows"]),
                     "optimum_us": opt, "optimum": configs[int(true.argmin())].label,
                     "weight_mb": shape.weight_bytes / 1e6,
                     "pick": pick.label, "pick_predicted_us": pred_us, "pick_us": pick_us,
                     "pick_error_pct": 100 * (pred_us / pick_us - 1),
                     "pick_gap_pct": 100 * (pick_us / opt - 1), "pick_rank": int(1 + (true < pick_us).sum()),
                     f"best_of_top{k}_gap_pct": 100 * (best_top / opt - 1),
                     "spearman": float(pd.Series(pred).rank().corr(pd.Series(true).rank()))})
        warm[str(shape)] = [c.to_dict() for c in top]
        echo(f"{shape}: zero-trial pick {pick.label} {pick_us:.2f} µs, {rows[-1]['pick_gap_pct']:.1f}% from the "
             f"optimum {opt:.2f} µs (rank {rows[-1]['pick_rank']} of {len(configs)}); best of the top {k} "
             f"{rows[-1][f'best_of_top{k}_gap_pct']:.1f}%")
    return pd.DataFrame(rows), warm
