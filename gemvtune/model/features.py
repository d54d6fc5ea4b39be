"""Features of one (config, shape) point for the cost model: the shape (M, d, n, bytes), the family, every
parameter of every template family (numbers as numbers, choices as their index in the domain; NaN where the
family lacks the parameter) and derived values the hardware sees (threads and blocks, waves over the SMs and
the last wave's fill, rows per block, the split of d, bytes per load, W loads in flight per thread, W bytes
per thread, dynamic shared memory). Pure and deterministic: the same points give the same frame, column
order included."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..kernels.families import FAMILIES, family_of
from ..kernels.shapes import Shape

# The template families the model knows (a library family's algorithms have no parameters to learn from), those of
# FP16/BF16 weights: a family of FP8 weights only has no measurement to learn from yet (its columns would change the
# committed models' frame).
TEMPLATE_FAMILIES = tuple(name for name, fam in FAMILIES.items() if not fam.library and "" in fam.config_cls.WEIGHTS)


def modelled(family: str) -> bool:
    """Whether the model has features for configs of ``family``."""
    return family in TEMPLATE_FAMILIES


SHAPE_COLUMNS = ("M", "d", "n", "log2_bytes")
DERIVED_COLUMNS = ("threads", "blocks", "blocks_per_sm", "last_wave_fill", "rows_per_block", "split",
                   "bytes_per_load", "loads_in_flight", "w_bytes_per_thread", "dyn_smem", "n_tiles")


def param_columns() -> list[str]:
    """``family.param`` for every parameter of every template family, in registry then domain order."""
    return [f"{name}.{k}" for name in TEMPLATE_FAMILIES for k in FAMILIES[name].domains]


def columns() -> list[str]:
    return [*SHAPE_COLUMNS, "family", *param_columns(), *DERIVED_COLUMNS]


def _code(value: Any, domain: Sequence[Any]) -> float:
    """A numeric parameter as itself; a choice as its index in the domain."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return float(list(domain).index(value))


def row(config: Any, shape: Shape, sm_count: int) -> dict[str, float]:
    """The feature values of one point (a dict keyed by ``columns()``)."""
    fam = family_of(config)
    if fam.library or fam.name not in TEMPLATE_FAMILIES:
        raise ValueError(f"the cost model has no features for the {fam.kind} family {fam.name}")
    out: dict[str, float] = dict.fromkeys(columns(), math.nan)
    out.update(M=float(shape.M), d=float(shape.d), n=float(shape.n), log2_bytes=math.log2(shape.weight_bytes),
               family=float(TEMPLATE_FAMILIES.index(fam.name)))
    for k, domain in fam.domains.items():
        out[f"{fam.name}.{k}"] = _code(getattr(config, k), domain)
    grid = config.grid(shape)
    blocks = grid[0] * grid[1] * grid[2]
    threads = int(config.block)
    per_sm = blocks / sm_count
    dyn = getattr(config, "dynamic_smem", None)
    out.update(threads=float(threads), blocks=float(blocks), blocks_per_sm=per_sm,
               last_wave_fill=per_sm - math.floor(per_sm) if per_sm > 1 else per_sm,
               rows_per_block=float(config.rows_per_block), split=float(config.split),
               bytes_per_load=float(config.vec_elems * 2), loads_in_flight=float(config.loads_in_flight),
               w_bytes_per_thread=shape.weight_bytes / (blocks * threads),
               dyn_smem=float(dyn(shape)) if dyn is not None else 0.0, n_tiles=float(-(-shape.n // 8)))
    return out


def frame(points: Iterable[tuple[Any, Shape]], sm_count: int) -> pd.DataFrame:
    """The feature frame of (config, shape) points, one row each, columns in ``columns()`` order."""
    rows = [row(c, s, sm_count) for c, s in points]
    return pd.DataFrame(rows, columns=columns(), dtype=np.float64)
