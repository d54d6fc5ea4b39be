"""Optuna glue: one study per (M, d, n) and family, the family's seed first, each searched by its kind of
searcher (gemvtune.tuning.searcher: invalid configs pruned without GPU time, duplicates served from the study);
then the confirmation (gemvtune.tuning.confirm) picks the winner."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import logging
import time
from collections.abc import Callable
from typing import Any

import optuna

from ..errors import UsageError
from ..kernels.families import DEFAULT_FAMILY, FAMILIES, FAMILY_NAMES, families_for, get_family
from ..kernels.shapes import Shape
from .confirm import SearchResult, confirm
from .coordination.coord import Coordinator
from .coordination.optuna_adapter import fixed_params
from .samplers import make_sampler
from .search_options import SearchOptions, study_record
from .searcher import (  # noqa: F401 (family_domains, make_searcher, search_arch: re-exported for search_run and study)
    Known,
    Searcher,
    family_domains,
    local_coordinator,
    make_searcher,
    search_arch,
    trials_in_flight,
)

log = logging.getLogger("gemvtune")


@contextlib.contextmanager
def quiet_optuna():
    """Optuna's INFO lines (one per trial) off while a search runs, restored after: never changed at
    import time, nor left changed for the caller (``-v`` sets the level the caller wants)."""
    logger = logging.getLogger("optuna")
    before = logger.level
    if not log.isEnabledFor(logging.INFO):   # (with -v, Optuna's lines are shown)
        logger.setLevel(max(logging.WARNING, log.getEffectiveLevel()))
    try:
        yield
    finally:
        logger.setLevel(before)


def study_name(shape: Shape, gpu_slug: str, family: str = DEFAULT_FAMILY) -> str:
    return get_family(family).study_name(f"gemvtune-{gpu_slug}-{shape.M}x{shape.d}x{shape.n}{shape.dtype_suffix('-')}{shape.weights_suffix('-')}")


@quiet_optuna()
def run_search(runner: Any, shape: Shape, opts: SearchOptions, storage: Any, name: str,
               echo: Callable[[str], None] = print, coord: Coordinator | None = None,
               joiner: bool = False, incumbents: tuple[Any, ...] = ()) -> SearchResult | None:
    """Search every family of opts.families (one study each, ``name`` for gemv and ``name-<family>``
    for the others), then confirm the best of all families against each other and the baselines.
    With several workers on one study (``coord``), only the worker that claims the confirmation
    confirms; the others return None. ``incumbents`` join the confirmation (``confirm``)."""
    coord = coord or local_coordinator(storage)
    opts = searchable(runner, opts, echo, shape)
    started = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    t_start = time.time()
    studies: dict[str, optuna.Study] = {}
    measured0 = measured = 0
    per_family: dict[str, int] = {}
    t0 = time.perf_counter()
    for fam in opts.families:
        sname = FAMILIES[fam].study_name(name)
        jobs = trials_in_flight(opts, runner)
        study = optuna.create_study(study_name=sname, storage=storage, direction="minimize",
                                    sampler=make_sampler(opts.sampler, opts.seed + coord.worker.index, opts.n_startup,
                                                         constant_liar=jobs > 1),
                                    load_if_exists=True)
        known = Coordinator.state(study)[2]
        measured0 += len(known)
        enqueue_seed(study, fam, family_domains(opts, fam, search_arch(runner)))
        enqueue_warm(study, (opts.warm_start or {}).get(fam, ()), family_domains(opts, fam, search_arch(runner)))
        study.set_user_attr("shape", [shape.M, shape.d, shape.n, shape.dtype])
        study.set_user_attr("family", fam)
        if not studies:   # the first study describes the search, for workers that join by name
            study.set_user_attr("search_options", study_record(opts))
            info = runner.device_info()
            study.set_user_attr("gpu", info.get("name", ""))
        per_family[fam] = make_searcher(study, runner, shape, opts.for_family(fam), known, len(known), fam, coord,
                                        echo).run()
        measured += per_family[fam]
        studies[fam] = study
    search_s = time.perf_counter() - t0

    base = studies[opts.families[0]]
    key = f"{opts.trials}:{','.join(opts.families)}"
    mine, who = coord.claim_confirm(base, key, since=t_start, joiner=joiner and measured == measured0)
    if not mine:
        echo(f"{shape}: {measured} measured trials in the study; the confirmation is by worker {who}")
        return None
    try:
        result = confirm(runner, shape, studies, opts, echo, incumbents)
    finally:
        coord.finish_confirm(base, key)   # (if this process dies before its table write, a re-run confirms again)
    trials = [r for fam, st in studies.items() for r in trial_rows(st, fam)]
    result.trials = trials
    result.study_name = name
    result.measured = measured
    result.new_measured = measured - measured0
    result.entry["search"] = {
        "sampler": opts.sampler, "seed": opts.seed, "trials_budget": opts.trials, "families": list(opts.families),
        **({"family_budgets": dict(opts.family_trials)} if opts.family_trials else {}),
        "measured_trials": measured, "total_trials": len(trials), "study": name,
        "started": started, "finished": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "search_s": round(search_s, 2), "confirm_rounds": opts.rounds, "top_k": opts.top_k,
        "replayed": bool(runner.replayed),
        # per family: its study's measured trials, and whether they are its whole valid space (then fewer trials
        # than the budget is no reason to re-tune; gemvtune check --stale-only)
        "family_trials": per_family,
        "space_measured": [f for f, st in studies.items() if st.user_attrs.get("space_measured")],
    }
    return result


def searchable(runner: Any, opts: SearchOptions, echo: Callable[[str], None] | None = None,
               shape: Shape | None = None) -> SearchOptions:
    """``opts`` without the library families ``runner`` cannot ask (no nvmath-python, a replayed sweep):
    each left out with a line when the families are the default (every registered one); one UsageError
    when one was asked for by name. Template families are always searchable. With ``shape``, also without the
    families that cannot read its weights (``families_for``: FP8 weights or not): silently when the families are the
    default, with a line when one was asked for by name; none left is one UsageError."""
    if shape is not None:
        fams = families_for(shape, opts.families)
        if opts.families != FAMILY_NAMES:
            for f in opts.families:
                if f not in fams:
                    (echo or log.warning)(f"the {f} family is not searched for {shape}: "
                                          + FAMILIES[f].config_cls.weights_reasons(shape)[0])
        if not fams:
            raise UsageError(f"no family of {', '.join(opts.families)} reads the weights of {shape}")
        if fams != opts.families:
            opts = dataclasses.replace(opts, families=fams)
    keep = []
    for f in opts.families:
        fam = FAMILIES[f]
        why = fam.runner_problem(runner) if fam.library and fam.runner_problem is not None else None
        if why is None:
            keep.append(f)
        elif opts.families != families_for(shape, FAMILY_NAMES) if shape is not None else opts.families != FAMILY_NAMES:
            raise UsageError(f"the {f} family cannot be searched here: {why}")
        else:
            (echo or log.warning)(f"the {f} family is not searched: {why}")
    return opts if len(keep) == len(opts.families) else dataclasses.replace(opts, families=tuple(keep))


def enqueue_seed(study: optuna.Study, family: str = DEFAULT_FAMILY, domains: dict[str, Any] | None = None) -> None:
    """The family's seed is the first trial of every study (for gemv: the llama.cpp config), over the
    parameters searched (a replay grid or a test may leave some out)."""
    if FAMILIES[family].seed is None:   # a library family: its first trial is its library's first candidate
        return
    seed = FAMILIES[family].seed.to_dict()
    if domains is not None:
        seed = {k: v for k, v in seed.items() if k in domains}
    if not any(t.params == seed for t in study.get_trials(deepcopy=False)):
        study.enqueue_trial(seed, user_attrs={"enqueued": FAMILIES[family].seed_name})


def enqueue_warm(study: optuna.Study, configs: Any, domains: dict[str, Any] | None = None) -> int:
    """Warm start: the cost model's predicted-fastest configs (parameter dicts, best first; a dict's ``_from``, where
    a tune took it from the table's other batch sizes, ``tuning.neighbours``, is its record) enqueued after the
    seed, each once (a config already in the study, measured or waiting, is not enqueued again). They are trials
    like any other: each one the search measures counts in its budget. Returns how many were enqueued."""
    have = [t.params for t in study.get_trials(deepcopy=False)] + \
           [fixed_params(t) for t in study.get_trials(deepcopy=False)]
    n = i = 0
    for params in configs:
        i += "_from" not in params   # (the cost model's rank)
        p = {k: v for k, v in params.items() if k != "_from" and (domains is None or k in domains)}
        if p in have or (domains is not None and any(v not in domains[k] for k, v in p.items())):
            continue   # (measured or queued already; or a value outside the space this search covers)
        study.enqueue_trial(p, user_attrs={"enqueued": str(params.get("_from") or f"cost model #{i}")})
        have.append(p)
        n += 1
    return n


def optimize(study: optuna.Study, runner: Any, shape: Shape, opts: SearchOptions, known: Known | None = None,
             measured0: int | None = None, family: str = DEFAULT_FAMILY, coord: Coordinator | None = None,
             echo: Callable[[str], None] | None = None) -> int:
    """The trial loop of ``family``'s study (the family's kind of ``Searcher``); returns how many measured
    trials the study holds."""
    return make_searcher(study, runner, shape, opts, known, measured0, family, coord, echo).run()


def trial_rows(study: optuna.Study, family: str = DEFAULT_FAMILY) -> list[dict[str, Any]]:
    rows = []
    for t in study.get_trials(deepcopy=False):
        r: dict[str, Any] = {"family": family, "trial": t.number, "state": t.state.name, "value": t.value}
        r.update({f"p_{k}": v for k, v in t.params.items()})
        r.update(t.user_attrs)
        rows.append(r)
    return rows
