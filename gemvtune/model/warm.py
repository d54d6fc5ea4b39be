"""Warm start of a search: the cost model's predicted-fastest valid configs of each template family searched,
over the space the search covers, for ``SearchOptions.warm_start`` (enqueued after the family's seed)."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..kernels.families import FAMILIES
from ..kernels.shapes import Shape


def warm_start(model_path: Path, shape: Shape, families: tuple[str, ...], domains: Callable[[str], dict[str, Any]],
               k: int, echo: Callable[[str], None], arch: str | None = None
               ) -> dict[str, tuple[dict[str, Any], ...]] | None:
    """{family: the model's top-k configs valid on ``arch`` (None: sm_90) as parameter dicts} for ``shape``; None
    (said in one line) where there is no model, LightGBM is missing or the file is not a model: a search then starts
    from its seed alone."""
    if k <= 0 or not os.path.lexists(model_path):   # (a dangling link or a FIFO there: load's one line)
        return None
    from . import costmodel as cm

    try:
        model = cm.load(model_path)   # its trees checked before LightGBM parses them (model.treecheck)
    except UsageError as e:
        echo(f"{shape}: no warm start: {_one_line(str(e))}")
        return None
    except Exception as e:   # not a UsageError, still a bad model: the search goes on from its seed
        echo(f"{shape}: no warm start: cost model {model_path}: {_one_line(f'{type(e).__name__}: {e}')}")
        return None
    out = {}
    for fam in families:
        f = FAMILIES[fam]
        if f.library or not f.config_cls.reads(shape) or fam not in model.families:
            continue
        space = domains(fam)
        names = list(space)
        configs = []
        for values in itertools.product(*space.values()):
            c = f.config_cls(**dict(zip(names, values)))
            if c != f.seed and c.is_valid(shape, arch):   # (the seed: the search enqueues it first anyway)
                configs.append(c)
        if configs:
            out[fam] = tuple({n: getattr(c, n) for n in names} for c, _ in model.rank(configs, shape, k))
    return out or None


def _one_line(text: str) -> str:
    return " ".join(text.split("\n"))[:500]
