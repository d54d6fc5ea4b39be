"""Zero-trial dispatch: for a shape a table lacks, the cost model's fastest predicted config among the
candidates a table can vouch for (every template config the table holds, each family's seed and fallbacks, and
the GEMV family's sweep grid). The route (``gemvtune.runtime.route``) weighs it against cuBLAS's predicted time
with ``MARGIN``."""

from __future__ import annotations

import itertools
from typing import Any

from ..kernels.families import DEFAULT_FAMILY, FAMILIES
from ..kernels.shapes import Shape

MARGIN = 0.10   # a prediction must beat predicted cuBLAS by this much (model error: median 2%, worst 9%, LOSO)


def candidates(table: Any, shape: Shape) -> list[Any]:
    """Valid template configs for ``shape``: the table's own, each family's seed and fallbacks, the GEMV sweep grid."""
    out: dict[Any, None] = {}
    for k in table.keys():
        e = table.entry(Shape(*k))
        for rec in e.records() if e is not None else ():   # (the table's gemvtune.runtime.entry.Entry)
            if rec.config is not None:
                try:
                    out[rec.config_object()] = None
                except Exception:   # a record the schema let through that is not a config: not a candidate
                    continue
    for fam in FAMILIES.values():
        if fam.library:
            continue
        if fam.seed is not None:
            out[fam.seed] = None
        for cfg, _ in fam.fallbacks:
            out[cfg] = None
    gemv = FAMILIES[DEFAULT_FAMILY]   # (the GEMV family: its sweep grid)
    names = list(gemv.sweep_grid)
    for values in itertools.product(*gemv.sweep_grid.values()):
        out[gemv.config_cls(**dict(zip(names, values)))] = None
    return [c for c in out if not FAMILIES[c.family].library and c.is_valid(shape)]


def pick(table: Any, model: Any, shape: Shape, out: str = "fp32") -> tuple[Any, float] | None:
    """(config, predicted µs) of the model's fastest candidate that can give an ``out`` output, or None when
    no candidate is valid."""
    from ..kernels.epilogue import Epilogue

    ep = Epilogue(out)
    cands = [c for c in candidates(table, shape) if not ep.invalid_reasons(c)]
    if not cands:
        return None
    (cfg, us), = model.rank(cands, shape, 1)
    return cfg, us
