"""Optuna glue: one study per (M, d, n), the llama.cpp config first, invalid configs pruned without GPU
time, duplicates served from the study; then the confirmation (gemvtune.tuning.confirm) picks the winner."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import logging
import math
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import optuna

from ..errors import UsageError
from ..kernels.families import DEFAULT_FAMILY, FAMILIES, FAMILY_NAMES, get_family
from ..kernels.shapes import Shape
from ..runners.base import Measurement, Status
from .confirm import SearchResult, confirm
from .coord import Coordinator
from .samplers import make_sampler
from .search_options import SearchOptions, study_record
from .spacebound import STALL_PROPOSALS, candidates, enqueue_rest
from .storage import HEARTBEAT_S, Store

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
    return get_family(family).study_name(f"gemvtune-{gpu_slug}-{shape.M}x{shape.d}x{shape.n}{shape.dtype_suffix('-')}")


def family_domains(opts: SearchOptions, family: str) -> dict[str, Any]:
    """The space a search of ``family`` covers: opts.domains' for it, else the family's whole space."""
    return (opts.domains or {}).get(family) or FAMILIES[family].domains


_ATTRS = ("status", "us_median", "us_min", "us_max", "gbps", "pct_ceiling", "relerr", "rowerr", "bound",
          "registers", "spill_bytes", "smem_bytes", "compile_s", "launches", "samples", "copies", "launch_bound", "error")


def _attrs(m: Measurement) -> dict[str, Any]:
    out = {}
    for k in _ATTRS:
        v = getattr(m, k)
        out[k] = None if isinstance(v, float) and math.isnan(v) else v
    out["label"] = m.name
    return out


def local_coordinator(storage: Any) -> Coordinator:
    """A coordinator for one process (a thread lock around the storage): still fails and retries the
    running trials a killed earlier run left behind."""
    return Coordinator(Store("memory:", "memory", storage, HEARTBEAT_S))


@quiet_optuna()
def run_search(runner: Any, shape: Shape, opts: SearchOptions, storage: Any, name: str,
               echo: Callable[[str], None] = print, coord: Coordinator | None = None,
               joiner: bool = False, incumbents: tuple[Any, ...] = ()) -> SearchResult | None:
    """Search every family of opts.families (one study each, ``name`` for gemv and ``name-<family>``
    for the others), then confirm the best of all families against each other and the baselines.
    With several workers on one study (``coord``), only the worker that claims the confirmation
    confirms; the others return None. ``incumbents`` join the confirmation (``confirm``)."""
    coord = coord or local_coordinator(storage)
    opts = searchable(runner, opts, echo)
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
        enqueue_seed(study, fam, family_domains(opts, fam))
        enqueue_warm(study, (opts.warm_start or {}).get(fam, ()), family_domains(opts, fam))
        study.set_user_attr("shape", [shape.M, shape.d, shape.n, shape.dtype])
        study.set_user_attr("family", fam)
        if not studies:   # the first study describes the search, for workers that join by name
            study.set_user_attr("search_options", study_record(opts))
            info = runner.device_info()
            study.set_user_attr("gpu", info.get("name", ""))
        per_family[fam] = optimize(study, runner, shape, opts, known, len(known), family=fam, coord=coord, echo=echo)
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


def searchable(runner: Any, opts: SearchOptions, echo: Callable[[str], None] | None = None) -> SearchOptions:
    """``opts`` without the library families ``runner`` cannot ask (no nvmath-python, a replayed sweep):
    each left out with a line when the families are the default (every registered one); one UsageError
    when one was asked for by name. Template families are always searchable."""
    keep = []
    for f in opts.families:
        fam = FAMILIES[f]
        why = fam.runner_problem(runner) if fam.library and fam.runner_problem is not None else None
        if why is None:
            keep.append(f)
        elif opts.families != FAMILY_NAMES:
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
    """Warm start: the cost model's predicted-fastest configs (parameter dicts, best first) enqueued after the
    seed, each once (a config already in the study, measured or waiting, is not enqueued again). They are trials
    like any other: each one the search measures counts in its budget. Returns how many were enqueued."""
    have = [t.params for t in study.get_trials(deepcopy=False)] + \
           [t.system_attrs.get("fixed_params", {}) for t in study.get_trials(deepcopy=False)]
    n = 0
    for i, params in enumerate(configs):
        p = {k: v for k, v in params.items() if domains is None or k in domains}
        if p in have:
            continue
        study.enqueue_trial(p, user_attrs={"enqueued": f"cost model #{i + 1}"})
        have.append(p)
        n += 1
    return n


def trials_in_flight(opts: SearchOptions, runner: Any) -> int:
    """opts.jobs, else the runner's compile_jobs; 1 for a runner that cannot compile ahead."""
    jobs = opts.jobs or int(runner.compile_jobs)
    return jobs if hasattr(runner, "precompile") else 1


def _answer_duplicate(trial: optuna.Trial, seen: tuple[int, str, float | None]) -> float:
    """A config the study already measured: its value, or pruned with its status. No GPU time."""
    num, status, value = seen
    trial.set_user_attr("duplicate_of", num)
    trial.set_user_attr("status", status)
    if status == Status.OK and value is not None:
        return value
    raise optuna.TrialPruned(f"same config as trial {num} ({status})")


def optimize(study: optuna.Study, runner: Any, shape: Shape, opts: SearchOptions,
             known: dict[str, tuple[int, str, float | None]] | None = None, measured0: int | None = None,
             family: str = DEFAULT_FAMILY, coord: Coordinator | None = None,
             echo: Callable[[str], None] | None = None) -> int:
    """The trial loop: until the study holds opts.trials measured trials, counted over every worker
    sharing it (or the timeout), or the search can measure nothing new: every config of the space (or of
    the replayed sweep) is measured, or STALL_PROPOSALS proposals in a row measured nothing (each
    invalid, already measured, or not recorded); ``echo`` says why it stopped early. Returns how many
    measured trials the study holds."""
    coord = coord or local_coordinator(study._storage)
    if known is None:
        known = Coordinator.state(study)[2]
    if measured0 is None:
        measured0 = len(known)
    counter: dict[str, Any] = {"measured": measured0, "full": False, "idle": 0, "stop": ""}
    fam = FAMILIES[family]
    domains = family_domains(opts, family)
    # a library family (cuBLASLt): its space is what the library proposes for the shape, measured in its
    # order, one at a time (nothing to compile ahead); the sampler proposes nothing of its own
    space = library_space(runner, shape, family, echo) if fam.library else candidates(runner, shape, family, domains)
    jobs = 1 if fam.library else trials_in_flight(opts, runner)
    gpu_lock = threading.Lock() if jobs > 1 else contextlib.nullcontext()

    def exhausted() -> bool:
        return space is not None and all(label in known for label in space)

    def idle(trial: optuna.Trial) -> None:
        """A proposal that measured nothing new: after too many in a row, or with the space spent, stop."""
        counter["idle"] += 1
        if counter["stop"]:
            return
        if exhausted():
            where = "sweep" if runner.replayed else "space"
            counter["stop"] = f"all {len(space)} valid configs of the {where} are measured"  # type: ignore[arg-type]
            study.set_user_attr("space_measured", len(space))  # type: ignore[arg-type]
        elif counter["idle"] >= STALL_PROPOSALS:
            counter["stop"] = (f"{STALL_PROPOSALS} proposals in a row measured nothing new (invalid, already "
                               "measured or not recorded): the sampler has nothing left to try")
        if counter["stop"]:
            trial.study.stop()

    def measured_trial(trial: optuna.Trial) -> float:
        try:
            if fam.library:   # (integer ranges: the enqueued candidates' values, never a sampled grid)
                cfg = fam.config_cls(**{k: trial.suggest_int(k, lo, hi) for k, (lo, hi) in domains.items()})
            else:
                cfg = fam.config_cls(**{k: trial.suggest_categorical(k, list(v)) for k, v in domains.items()})
        except Exception as e:   # the sampler failed (not the config): this trial is lost, the search goes on
            trial.set_user_attr("status", "sampler_error")
            trial.set_user_attr("error", f"{type(e).__name__}: {e}"[:300])
            raise optuna.TrialPruned(f"sampler error: {e}") from None
        trial.set_user_attr("label", cfg.label)
        why = cfg.invalid_reasons(shape)
        if why:
            trial.set_user_attr("status", Status.INVALID)
            trial.set_user_attr("error", "; ".join(why))
            if opts.sampler == "gp":  # infeasible, with a value worse than anything measured (see make_sampler)
                trial.set_user_attr("infeasible", 1.0)
                return 2.0 * max((v for _, st, v in known.values() if st == Status.OK and v), default=1e3)
            raise optuna.TrialPruned(why[0])
        if fam.library and space is not None and cfg.label not in space:   # the sampler's own proposal
            trial.set_user_attr("status", "not_a_candidate")
            raise optuna.TrialPruned(f"{cfg.label} is not one of the library's candidates for {shape}")
        if cfg.label in known:
            return _answer_duplicate(trial, known[cfg.label])
        if jobs > 1:  # compile outside the GPU lock, while another trial measures (errors: measure records them)
            runner.precompile(cfg, shape)
        with gpu_lock:
            verdict, info = coord.claim(study, trial, cfg.label, opts.trials)
            if verdict == "dup":   # measured meanwhile, by another thread or worker
                known[cfg.label] = info
                return _answer_duplicate(trial, info)
            if verdict in ("busy", "full"):
                trial.set_user_attr("status", "unmeasured")
                if verdict == "full":
                    counter["full"] = True
                    study.stop()
                    raise optuna.TrialPruned("trial budget reached (counting every worker's trials)")
                raise optuna.TrialPruned(f"the same config is being measured by trial {info}")
            m = runner.measure(cfg, shape)
            if m.status == "not_in_sweep":  # replay: nothing was recorded, nothing is made up or counted
                trial.set_user_attr("status", m.status)
                trial.set_user_attr("error", m.error)
                raise optuna.TrialPruned(m.error)
            for k, v in _attrs(m).items():
                trial.set_user_attr(k, v)
            trial.set_user_attr("measured", True)
            counter["measured"] = max(counter["measured"] + 1, info + 1)
            known[cfg.label] = (trial.number, m.status, m.us_median if m.ok else None)
        if not m.ok:
            raise optuna.TrialPruned(f"{m.status}: {m.error[:200]}")
        return m.us_median

    def objective(trial: optuna.Trial) -> float:
        coord.start_trial(trial)
        before = counter["measured"]
        try:
            return measured_trial(trial)
        finally:
            if counter["measured"] == before:
                idle(trial)
            else:
                counter["idle"] = 0
                if exhausted():
                    idle(trial)
            coord.end_trial(trial)

    bar = None
    if opts.progress and sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=opts.trials, initial=min(measured0, opts.trials), desc=f"{shape} {family}", unit="trial",
                   file=sys.stderr, leave=False)

    def callback(st: optuna.Study, t: optuna.trial.FrozenTrial) -> None:
        if bar is not None and t.user_attrs.get("measured"):
            bar.update(1)
            try:
                bar.set_postfix_str(f"best {st.best_value:.2f} µs")
            except ValueError:
                pass
        if counter["measured"] >= opts.trials:
            st.stop()

    deadline = time.monotonic() + opts.timeout if opts.timeout else None
    done = measured0
    if exhausted():
        counter["stop"] = f"all {len(space)} valid configs are measured"  # type: ignore[arg-type]
        study.set_user_attr("space_measured", len(space))  # type: ignore[arg-type]
    elif fam.library and space is not None:
        n = enqueue_candidates(study, space, known, limit=opts.trials - measured0)
        log.info("%s %s: %d of the library's %d candidates queued, in its order", shape, family, n, len(space))
    elif space is not None and opts.trials - measured0 >= sum(label not in known for label in space):
        n = enqueue_rest(study, space, known, family)
        log.info("%s %s: the budget covers the %d valid configs of the space: %d queued, each measured once",
                 shape, family, len(space), n)
    while done < opts.trials and not counter["stop"]:
        before, counter["full"] = done, False
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            break
        cap = 10 * (opts.trials - done) + 50  # invalid/duplicate proposals cost no GPU time, but are bounded
        study.optimize(objective, n_trials=cap, timeout=left, callbacks=[callback], catch=(), n_jobs=jobs)
        done, finished = coord.wait_budget(study, opts.trials, deadline)
        counter["measured"] = done
        if finished or (done == before and not counter["full"]):
            break   # the budget is spent (by every worker), the time is up, or nothing new can be proposed
    if bar is not None:
        bar.close()
    if counter["stop"] and done < opts.trials:
        (echo or log.warning)(f"{shape} {family}: stopped at {done} of {opts.trials} measured trials: {counter['stop']}")
    return done


def library_space(runner: Any, shape: Shape, family: str, echo: Callable[[str], None] | None = None
                  ) -> dict[str, dict[str, Any]]:
    """A library family's candidates for ``shape`` (``Family.candidates``: cuBLASLt's heuristic on the runner's
    device), best first, as label -> parameters. A library that gives none is a line (its reason), not an error:
    the other families' searches go on."""
    try:
        configs = FAMILIES[family].candidates(runner, shape)   # type: ignore[misc]
        why = "" if configs else "the library proposed none"
    except Exception as e:
        configs, why = [], " ".join(str(e).split())[:300] or type(e).__name__
    if why:
        (echo or log.warning)(f"{shape} {family}: no candidates: {why}")
    return {c.label: c.to_dict() for c in configs}


def enqueue_candidates(study: optuna.Study, space: dict[str, dict[str, Any]], known: dict[str, Any],
                       limit: int | None = None) -> int:
    """Queue the candidates of a library's ``space`` not measured (nor queued) yet, in the library's order
    (its heuristic ranks them), at most ``limit`` (what the budget leaves: its first ones are measured)."""
    waiting = {tuple(sorted(t.params.items())) for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))}
    rest = [p for label, p in space.items() if label not in known]
    rest = rest[:max(0, limit)] if limit is not None else rest
    rest = [p for p in rest if tuple(sorted(p.items())) not in waiting]
    for p in rest:
        study.enqueue_trial(p, user_attrs={"enqueued": "library"}, skip_if_exists=False)
    return len(rest)


def trial_rows(study: optuna.Study, family: str = DEFAULT_FAMILY) -> list[dict[str, Any]]:
    rows = []
    for t in study.get_trials(deepcopy=False):
        r: dict[str, Any] = {"family": family, "trial": t.number, "state": t.state.name, "value": t.value}
        r.update({f"p_{k}": v for k, v in t.params.items()})
        r.update(t.user_attrs)
        rows.append(r)
    return rows
