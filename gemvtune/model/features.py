"""Features of one (config, shape) point for the cost model: the shape (M, d, n, bytes), the family, every
parameter of every template family (numbers as numbers, choices as their index in the domain; NaN where the
family lacks the parameter) and derived values the hardware sees (threads and blocks, waves over the SMs and
the last wave's fill, rows per block, the split of d, bytes per load, W loads in flight per thread, W bytes
per thread, dynamic shared memory). Pure and deterministic: the same points give the same frame, column
order included.

Two models, two frames (``GROUPS``). The 16-bit one ("") knows the template families reading W in the input dtype;
its columns are the committed model's, unchanged since FP8 came. The FP8 one ("fp8") is fitted on the 16-bit
measurements and the FP8 ones together: an FP8 config is described as its 16-bit sibling reading the same bytes per
load (``ConfigBase.sixteen_bit``: fp8mma as mma, whose 16-byte pieces it shares; fp8gemv as a GEMV of the same block,
threads per row, bytes per load, unroll and hint), with two more columns saying the weights are FP8 and the d one
scale covers. Held out shape by shape, that transfer is what makes the FP8 model usable at all
(docs/design-notes.md#cost-model)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..kernels.families import FAMILIES, family_of
from ..kernels.shapes import FP8_LAYOUTS, Shape
from ..workspace import model_group

# The template families of the 16-bit model (a library family's algorithms have no parameters to learn from)
TEMPLATE_FAMILIES = tuple(name for name, fam in FAMILIES.items() if not fam.library and "" in fam.config_cls.WEIGHTS)
FP8 = "fp8"
FP8_FAMILIES = tuple(name for name, fam in FAMILIES.items()
                     if not fam.library and any(w in FP8_LAYOUTS for w in fam.config_cls.WEIGHTS))
GROUPS = ("", FP8)


def families(group: str = "") -> tuple[str, ...]:
    """The template families the model of ``group`` ("" or "fp8") has features for."""
    if group not in GROUPS:
        raise ValueError(f"no cost model of weights {group!r} (one of: 16-bit, fp8)")
    return (*TEMPLATE_FAMILIES, *FP8_FAMILIES) if group else TEMPLATE_FAMILIES


SHAPE_COLUMNS = ("M", "d", "n", "log2_bytes")
FP8_COLUMNS = ("fp8", "scale_d")   # 1 for FP8 weights; the d one FP32 scale covers (row: d, b128: 128; 16-bit: 0)
DERIVED_COLUMNS = ("threads", "blocks", "blocks_per_sm", "last_wave_fill", "rows_per_block", "split",
                   "bytes_per_load", "loads_in_flight", "w_bytes_per_thread", "dyn_smem", "n_tiles")


def param_columns() -> list[str]:
    """``family.param`` for every parameter of every 16-bit template family, in registry then domain order."""
    return [f"{name}.{k}" for name in TEMPLATE_FAMILIES for k in FAMILIES[name].domains]


def columns(group: str = "") -> list[str]:
    families(group)   # (an unknown group: ValueError)
    return [*SHAPE_COLUMNS, *(FP8_COLUMNS if group else ()), "family", *param_columns(), *DERIVED_COLUMNS]


_COLUMNS = {g: columns(g) for g in GROUPS}   # (built once: ``row`` runs for every point a fit or a ranking sees)


def _code(value: Any, domain: Sequence[Any]) -> float:
    """A numeric parameter as itself; a choice as its index in the domain."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return float(list(domain).index(value))


def scale_d(shape: Shape) -> int:
    """The d one FP32 scale of FP8 weights covers (0 for W in the input dtype)."""
    return {"row": shape.d, "block128": 128}.get(shape.fp8_layout, 0)


def row(config: Any, shape: Shape, sm_count: int, group: str = "") -> dict[str, float]:
    """The feature values of one point for the model of ``group`` (a dict keyed by ``columns(group)``). The 16-bit
    model has no features for FP8 weights (ValueError: a model never predicts outside its data)."""
    fam = family_of(config)
    if model_group(shape.weights) and not group:
        raise ValueError(f"the 16-bit cost model has no features for {shape} ({shape.weights} weights): the FP8 "
                         f"model predicts them")
    if fam.library or fam.name not in families(group):
        raise ValueError(f"the cost model has no features for the {fam.kind} family {fam.name}"
                         + ("" if group else " (the FP8 model has)" if fam.name in FP8_FAMILIES else ""))
    name, params = config.sixteen_bit()
    out: dict[str, float] = dict.fromkeys(_COLUMNS[group], math.nan)
    out.update(M=float(shape.M), d=float(shape.d), n=float(shape.n), log2_bytes=math.log2(shape.weight_bytes),
               family=float(TEMPLATE_FAMILIES.index(name)))
    if group:
        out.update(fp8=1.0 if shape.weights else 0.0, scale_d=float(scale_d(shape)))
    for k, domain in FAMILIES[name].domains.items():
        out[f"{name}.{k}"] = _code(params[k], domain)
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


def frame(points: Iterable[tuple[Any, Shape]], sm_count: int, group: str = "") -> pd.DataFrame:
    """The feature frame of (config, shape) points of ``group``, one row each, columns in ``columns(group)`` order."""
    rows = [row(c, s, sm_count, group) for c, s in points]
    return pd.DataFrame(rows, columns=_COLUMNS[group], dtype=np.float64)
