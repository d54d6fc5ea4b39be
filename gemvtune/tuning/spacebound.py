"""What bounds a search besides its budget: the configs it can still measure. A grid small enough to
list is enumerated (and, on replay, cut to what the sweep recorded), so a search knows when its space
is spent; a budget that covers the whole space measures each config once, in order of simplicity."""

from __future__ import annotations

import itertools
import math
from typing import Any

import optuna

from ..kernels.families import DEFAULT_FAMILY, FAMILIES
from ..kernels.shapes import Shape
from ..runners.base import Runner

STALL_PROPOSALS = 200     # proposals in a row that measure nothing new (invalid, repeated, not recorded): stop
ENUMERATE_LIMIT = 50_000  # grids up to this many points are listed, to know when the space is spent


def candidates(runner: Runner, shape: Shape, family: str, domains: dict[str, Any],
               arch: str | None = None) -> dict[str, dict[str, Any]] | None:
    """Every config valid on ``arch`` (None: sm_90) a search of ``family`` over ``domains`` can measure for ``shape``, as label ->
    the searched parameters: the grid's valid points when it has at most ENUMERATE_LIMIT of them, and of
    those only what the runner can answer (a replayed sweep: what it recorded). None when the grid is
    too large to list (no budget could spend it)."""
    fam = FAMILIES[family]
    have = runner.recorded(shape, family)   # the runner contract: None answers any config
    keys = list(domains)
    if math.prod(len(domains[k]) for k in keys) > ENUMERATE_LIMIT:
        return None
    out = {}
    for vals in itertools.product(*(domains[k] for k in keys)):
        params = dict(zip(keys, vals))
        try:
            cfg = fam.config_cls(**params)
        except (TypeError, ValueError):
            continue
        if not cfg.invalid_reasons(shape, arch) and (have is None or cfg.label in have):
            out[cfg.label] = params
    return out


def enqueue_rest(study: optuna.Study, space: dict[str, dict[str, Any]], known: dict[str, Any],
                 family: str = DEFAULT_FAMILY) -> int:
    """Queue every config of ``space`` not measured yet (nor already queued), simplest first: when the
    budget covers the whole space, measuring each once is the search (no sampler would do better, and
    a sampler asked for the last few configs of a space proposes repeats). Returns how many it queued."""
    waiting = {tuple(sorted(t.params.items())) for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))}
    fam = FAMILIES[family]
    rest = [p for label, p in space.items() if label not in known and tuple(sorted(p.items())) not in waiting]
    rest.sort(key=lambda p: fam.config_cls(**p).complexity())
    for p in rest:
        study.enqueue_trial(p, user_attrs={"enqueued": "space"}, skip_if_exists=False)
    return len(rest)
