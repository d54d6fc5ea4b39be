"""How far the cost model's predicted optimum of a shape is from the fastest kernel a table measured for it (no
GPU): per 16-bit entry, log(measured best / predicted optimum), the predicted optimum being the one a whole-model
tune plans with (``tuning.tuneplan.predict``: the model's best over a sample of each family's valid space, at the
table's read ceiling). The spread (RMS) of that error is ``budget.OPTIMUM_SIGMA``, the uncertainty the tune's budget
split prices in."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..kernels.shapes import Shape


@dataclass(frozen=True)
class Row:
    key: str
    predicted_us: float
    best_us: float
    cublas_us: float | None

    @property
    def log_error(self) -> float:
        return math.log(self.best_us / self.predicted_us)


def optimum_errors(model: Any, table: Any, min_bytes: float = 0.0, shapes: list[Shape] | None = None,
                   fp8: bool = False) -> list[Row]:
    """One row per 16-bit entry of ``table`` (a loaded ``runtime.table.Table``) with measured candidates and at least
    ``min_bytes`` of weights (``shapes``: only those), in the table's key order. ``fp8``: the FP8 entries instead, one
    row per (entry, family) with measured candidates, each family's best against its own predicted optimum (the
    error the plan prices per family: ``budget.expected_saving_min``)."""
    from ..kernels.families import DEFAULT_FAMILY, FAMILIES
    from ..runtime.keys import entry_key
    from ..runtime.route import measured
    from .tuneplan import predict

    read_gbps = float((table.data.get("ceiling") or {}).get("read_gbps") or model.read_gbps)
    families = [f for f in model.families if f in FAMILIES]   # the model's own (a family it lacks: the read floor)
    rows = []
    for shape in table.shapes:
        if bool(shape.weights) != fp8 or shape.weight_bytes < min_bytes or (shapes is not None and shape not in shapes):
            continue
        e = table.entry(shape)
        best: dict[str, float] = {}
        for c in (e.candidates if e is not None else ()):
            if (c.status or "ok") == "ok" and c.us:
                f = (c.family or DEFAULT_FAMILY) if fp8 else ""
                best[f] = min(best.get(f, math.inf), float(c.us))
        if not best:
            continue
        preds = predict(model, shape, families, read_gbps)
        cub = measured(e, "torch", shape)[1] if e is not None else None
        cub = float(cub) if cub else None
        if not fp8:
            if preds:
                rows.append(Row(entry_key(shape), min(p.optimum_us for p in preds.values()), best[""], cub))
            continue
        rows += [Row(f"{entry_key(shape)} {f}", preds[f].optimum_us, t, cub) for f, t in sorted(best.items())
                 if f in preds]
    return rows


def summary(rows: list[Row]) -> dict[str, float]:
    """n, mean, RMS, worst of the log errors (NaN where there is no row)."""
    errs = [r.log_error for r in rows]
    if not errs:
        return {"n": 0, "mean": math.nan, "rms": math.nan, "min": math.nan, "max": math.nan}
    return {"n": len(errs), "mean": sum(errs) / len(errs), "rms": math.sqrt(sum(x * x for x in errs) / len(errs)),
            "min": min(errs), "max": max(errs)}
