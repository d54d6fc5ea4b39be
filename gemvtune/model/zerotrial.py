"""Zero-trial dispatch: for a shape a table lacks, the cost model's fastest predicted config among the
candidates a table can vouch for (every template config the table holds, each family's seed and fallbacks, and
the GEMV family's sweep grid). The route (``gemvtune.runtime.route``) weighs it against cuBLAS's predicted time
with ``MARGIN``."""

from __future__ import annotations

import itertools
import os
import warnings
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..kernels.families import DEFAULT_FAMILY, FAMILIES
from ..kernels.shapes import Shape

MARGIN = 0.10   # a prediction must beat predicted cuBLAS by this much (model error: median 2%, worst 9%, LOSO)


def candidates(table: Any, shape: Shape) -> list[Any]:
    """Template configs valid for ``shape`` on the table's architecture: the table's own, each family's seed and
    fallbacks, the GEMV sweep grid; never one only a model's chain may choose (``ConfigBase.chain_only``)."""
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
    arch = getattr(table, "arch", None)   # (the table's routes run on that architecture: gemvtune.runtime.tablegpu)
    return [c for c in out if not FAMILIES[c.family].library and not c.chain_only() and c.is_valid(shape, arch)]


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


def table_model(table_path: Path, which: str | Path | None) -> Any:
    """The cost model a table loads (``gemvtune.runtime.table.load_table``'s ``costmodel``): None, or a loader called
    when an untabled shape first needs it (a named file is read now, so that a bad one fails ``load_table`` with its
    line)."""
    if which is None:
        return None
    auto = isinstance(which, str) and which == "auto"
    from . import model_beside

    p = model_beside(table_path.parent) if auto else Path(which)
    if not auto:
        from .costmodel import load

        return load(p)
    import importlib.util

    try:
        if not os.path.lexists(p) or importlib.util.find_spec("lightgbm") is None:
            return None
    except Exception:   # (find_spec of a broken install raises): as without LightGBM
        return None

    def lazy() -> Any:
        # a file that is not a model (its trees are checked before LightGBM parses them), LightGBM failing to
        # import or to read it: one line of warning, never an error, and the table goes on without zero-trial picks
        try:
            from .costmodel import load

            return load(p)
        except Exception as e:
            why = str(e) if isinstance(e, UsageError) else f"cost model {p}: {type(e).__name__}: {e}"
            why = " ".join(why.split("\n"))[:500]
            warnings.warn(f"gemvtune: {why}; shapes the table lacks run cuBLAS", stacklevel=4)
            return None
    return lazy
