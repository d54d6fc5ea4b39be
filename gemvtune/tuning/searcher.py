"""The trial loop of one (shape, family) study, as an object: a ``Searcher`` holds the loop's state (the configs
measured, proposals in a row that measured nothing, why it stops) and its parts (the objective, the callback,
stopping). Two kinds, by the family's kind (``Family.kind``): ``TemplateSearcher`` for rendered and compiled
families (the sampler proposes configs from the family's domains; a space small enough to list is known, and a
budget that covers it measures each config once) and ``LibrarySearcher`` for a library's algorithms (cuBLASLt: its
space is what the library proposes for the shape, measured in the library's order, one at a time)."""

from __future__ import annotations

import contextlib
import logging
import math
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, ClassVar

import optuna

from ..kernels.families import DEFAULT_FAMILY, FAMILIES
from ..kernels.shapes import Shape
from ..runners.base import Measurement, Status
from .coordination.coord import Coordinator
from .coordination.optuna_adapter import study_storage
from .coordination.storage import HEARTBEAT_S, Store
from .search_options import SearchOptions
from .spacebound import STALL_PROPOSALS, candidates, enqueue_rest

log = logging.getLogger("gemvtune")

Known = dict[str, tuple[int, str, float | None]]   # label -> (trial number, status, value) of measured trials

_ATTRS = ("status", "us_median", "us_min", "us_max", "gbps", "pct_ceiling", "relerr", "rowerr", "bound",
          "registers", "spill_bytes", "smem_bytes", "compile_s", "launches", "samples", "copies", "launch_bound", "error")


def _attrs(m: Measurement) -> dict[str, Any]:
    out = {}
    for k in _ATTRS:
        v = getattr(m, k)
        out[k] = None if isinstance(v, float) and math.isnan(v) else v
    out["label"] = m.name
    return out


def family_domains(opts: SearchOptions, family: str, arch: str | None = None) -> dict[str, Any]:
    """The space a search of ``family`` covers on ``arch`` (None: sm_90): opts.domains' for it, else the family's
    whole space, without the values that need a feature ``arch`` lacks and those only a model's chain chooses
    (``ConfigBase.search_domains``: never proposed by a per-shape search)."""
    domains = (opts.domains or {}).get(family) or FAMILIES[family].domains
    return FAMILIES[family].config_cls.search_domains(domains, arch)


def search_arch(runner: Any) -> str | None:
    """The architecture a search on ``runner`` validates its configs for: the runner's device's; None (sm_90, the
    H200 the sweeps were recorded on) for a replayed sweep, whose ``arch`` names no device."""
    return None if runner.replayed else runner.arch


def trials_in_flight(opts: SearchOptions, runner: Any) -> int:
    """opts.jobs, else the runner's compile_jobs; 1 for a runner that cannot compile ahead."""
    jobs = opts.jobs or int(runner.compile_jobs)
    return jobs if hasattr(runner, "precompile") else 1


def local_coordinator(storage: Any) -> Coordinator:
    """A coordinator for one process (a thread lock around the storage): still fails and retries the
    running trials a killed earlier run left behind."""
    return Coordinator(Store("memory:", "memory", storage, HEARTBEAT_S))


def _answer_duplicate(trial: optuna.Trial, seen: tuple[int, str, float | None]) -> float:
    """A config the study already measured: its value, or pruned with its status. No GPU time."""
    num, status, value = seen
    trial.set_user_attr("duplicate_of", num)
    trial.set_user_attr("status", status)
    if status == Status.OK and value is not None:
        return value
    raise optuna.TrialPruned(f"same config as trial {num} ({status})")


class Searcher:
    """The trial loop: until the study holds opts.trials measured trials, counted over every worker
    sharing it (or the timeout), or the search can measure nothing new: every config of the space (or of
    the replayed sweep) is measured, or STALL_PROPOSALS proposals in a row measured nothing (each
    invalid, already measured, or not recorded); ``echo`` says why it stopped early. ``run`` returns how
    many measured trials the study holds. A kind of family says what its space is (``make_space``), how many
    trials run at once (``in_flight``), how a trial's config is proposed (``suggest``), what is refused before
    measuring (``refuse``) and what is queued before the loop (``enqueue``)."""

    kind: ClassVar[str] = ""

    def __init__(self, study: optuna.Study, runner: Any, shape: Shape, opts: SearchOptions,
                 known: Known | None = None, measured0: int | None = None, family: str = DEFAULT_FAMILY,
                 coord: Coordinator | None = None, echo: Callable[[str], None] | None = None) -> None:
        self.study, self.runner, self.shape, self.opts, self.family, self.echo = study, runner, shape, opts, family, echo
        self.coord = coord or local_coordinator(study_storage(study))
        self.known: Known = Coordinator.state(study)[2] if known is None else known
        self.measured0 = len(self.known) if measured0 is None else measured0
        self.measured = self.measured0   # measured trials in the study, as this worker last counted them
        self.full = False                # the global budget was reached in this round of study.optimize
        self.idle_count = 0              # proposals in a row that measured nothing new
        self.stop_reason = ""            # why the search stops before its budget ("" while it goes on)
        self.fam = FAMILIES[family]
        self.arch = search_arch(runner)
        self.domains = family_domains(opts, family, self.arch)
        self.space = self.make_space()
        self.jobs = self.in_flight()
        self.gpu_lock: Any = threading.Lock() if self.jobs > 1 else contextlib.nullcontext()
        self.bar: Any = None

    # ---- what a kind of family says ------------------------------------------------------------------
    def make_space(self) -> dict[str, dict[str, Any]] | None:
        """Every config the search can measure, as label -> parameters; None when it is too large to list."""
        raise NotImplementedError

    def in_flight(self) -> int:
        return 1

    def suggest(self, trial: optuna.Trial) -> Any:
        """The trial's config, from the parameters the sampler (or the queue) gives it."""
        raise NotImplementedError

    def refuse(self, trial: optuna.Trial, cfg: Any) -> None:
        """Prune a valid config the search does not measure (by default none)."""

    def enqueue(self) -> None:
        """What is queued before the loop, once the space is known not to be spent."""

    # ---- the loop ------------------------------------------------------------------------------------
    def exhausted(self) -> bool:
        return self.space is not None and all(label in self.known for label in self.space)

    def idle(self, trial: optuna.Trial) -> None:
        """A proposal that measured nothing new: after too many in a row, or with the space spent, stop."""
        self.idle_count += 1
        if self.stop_reason:
            return
        if self.exhausted():
            assert self.space is not None
            where = "sweep" if self.runner.replayed else "space"
            self.stop_reason = f"all {len(self.space)} valid configs of the {where} are measured"
            self.study.set_user_attr("space_measured", len(self.space))
        elif self.idle_count >= STALL_PROPOSALS:
            self.stop_reason = (f"{STALL_PROPOSALS} proposals in a row measured nothing new (invalid, already "
                                "measured or not recorded): the sampler has nothing left to try")
        if self.stop_reason:
            trial.study.stop()

    def measured_trial(self, trial: optuna.Trial) -> float:
        study, runner, shape, opts, known = self.study, self.runner, self.shape, self.opts, self.known
        try:
            cfg = self.suggest(trial)
        except Exception as e:   # the sampler failed (not the config): this trial is lost, the search goes on
            trial.set_user_attr("status", "sampler_error")
            trial.set_user_attr("error", f"{type(e).__name__}: {e}"[:300])
            raise optuna.TrialPruned(f"sampler error: {e}") from None
        trial.set_user_attr("label", cfg.label)
        why = cfg.invalid_reasons(shape, self.arch)
        if why:
            trial.set_user_attr("status", Status.INVALID)
            trial.set_user_attr("error", "; ".join(why))
            if opts.sampler == "gp":  # infeasible, with a value worse than anything measured (see make_sampler)
                trial.set_user_attr("infeasible", 1.0)
                return 2.0 * max((v for _, st, v in known.values() if st == Status.OK and v), default=1e3)
            raise optuna.TrialPruned(why[0])
        self.refuse(trial, cfg)
        if cfg.label in known:
            return _answer_duplicate(trial, known[cfg.label])
        if self.jobs > 1:  # compile outside the GPU lock, while another trial measures (errors: measure records them)
            runner.precompile(cfg, shape)
        with self.gpu_lock:
            verdict, info = self.coord.claim(study, trial, cfg.label, opts.trials)
            if verdict == "dup":   # measured meanwhile, by another thread or worker
                known[cfg.label] = info
                return _answer_duplicate(trial, info)
            if verdict in ("busy", "full"):
                trial.set_user_attr("status", "unmeasured")
                if verdict == "full":
                    self.full = True
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
            self.measured = max(self.measured + 1, info + 1)
            known[cfg.label] = (trial.number, m.status, m.us_median if m.ok else None)
        if not m.ok:
            raise optuna.TrialPruned(f"{m.status}: {m.error[:200]}")
        return m.us_median

    def objective(self, trial: optuna.Trial) -> float:
        self.coord.start_trial(trial)
        before = self.measured
        try:
            return self.measured_trial(trial)
        finally:
            if self.measured == before:
                self.idle(trial)
            else:
                self.idle_count = 0
                if self.exhausted():
                    self.idle(trial)
            self.coord.end_trial(trial)

    def callback(self, st: optuna.Study, t: optuna.trial.FrozenTrial) -> None:
        if self.bar is not None and t.user_attrs.get("measured"):
            self.bar.update(1)
            try:
                self.bar.set_postfix_str(f"best {st.best_value:.2f} µs")
            except ValueError:
                pass
        if self.measured >= self.opts.trials:
            st.stop()

    def run(self) -> int:
        study, opts = self.study, self.opts
        if opts.progress and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=opts.trials, initial=min(self.measured0, opts.trials),
                            desc=f"{self.shape} {self.family}", unit="trial", file=sys.stderr, leave=False)
        deadline = time.monotonic() + opts.timeout if opts.timeout else None
        done = self.measured0
        if self.exhausted():
            assert self.space is not None
            self.stop_reason = f"all {len(self.space)} valid configs are measured"
            study.set_user_attr("space_measured", len(self.space))
        else:
            self.enqueue()
        while done < opts.trials and not self.stop_reason:
            before, self.full = done, False
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            cap = 10 * (opts.trials - done) + 50  # invalid/duplicate proposals cost no GPU time, but are bounded
            study.optimize(self.objective, n_trials=cap, timeout=left, callbacks=[self.callback], catch=(),
                           n_jobs=self.jobs)
            done, finished = self.coord.wait_budget(study, opts.trials, deadline)
            self.measured = done
            if finished or (done == before and not self.full):
                break   # the budget is spent (by every worker), the time is up, or nothing new can be proposed
        if self.bar is not None:
            self.bar.close()
        if self.stop_reason and done < opts.trials:
            (self.echo or log.warning)(f"{self.shape} {self.family}: stopped at {done} of {opts.trials} measured "
                                       f"trials: {self.stop_reason}")
        return done


class TemplateSearcher(Searcher):
    """A rendered and compiled family: the sampler proposes from the family's domains (categorical), several
    trials in flight where the runner compiles ahead; a space small enough to list is known, and a budget
    that covers what is left of it queues it whole (``enqueue_rest``), each config measured once."""

    kind = "template"

    def make_space(self) -> dict[str, dict[str, Any]] | None:
        return candidates(self.runner, self.shape, self.family, self.domains, self.arch)

    def in_flight(self) -> int:
        return trials_in_flight(self.opts, self.runner)

    def suggest(self, trial: optuna.Trial) -> Any:
        return self.fam.config_cls(**{k: trial.suggest_categorical(k, list(v)) for k, v in self.domains.items()})

    def enqueue(self) -> None:
        space, known = self.space, self.known
        if space is not None and self.opts.trials - self.measured0 >= sum(label not in known for label in space):
            n = enqueue_rest(self.study, space, known, self.family)
            log.info("%s %s: the budget covers the %d valid configs of the space: %d queued, each measured once",
                     self.shape, self.family, len(space), n)


class LibrarySearcher(Searcher):
    """A library family (cuBLASLt): its space is what the library proposes for the shape (``library_space``),
    queued in its order (``enqueue_candidates``) and measured one at a time (nothing to compile ahead); the
    sampler proposes nothing of its own (a proposal that is not a candidate is pruned)."""

    kind = "library"

    def make_space(self) -> dict[str, dict[str, Any]]:
        return library_space(self.runner, self.shape, self.family, self.echo)

    def suggest(self, trial: optuna.Trial) -> Any:
        # (integer ranges: the enqueued candidates' values, never a sampled grid)
        return self.fam.config_cls(**{k: trial.suggest_int(k, lo, hi) for k, (lo, hi) in self.domains.items()})

    def refuse(self, trial: optuna.Trial, cfg: Any) -> None:
        if self.space is not None and cfg.label not in self.space:   # the sampler's own proposal
            trial.set_user_attr("status", "not_a_candidate")
            raise optuna.TrialPruned(f"{cfg.label} is not one of the library's candidates for {self.shape}")

    def enqueue(self) -> None:
        if self.space is not None:
            n = enqueue_candidates(self.study, self.space, self.known, limit=self.opts.trials - self.measured0)
            log.info("%s %s: %d of the library's %d candidates queued, in its order", self.shape, self.family, n,
                     len(self.space))


SEARCHERS: dict[str, type[Searcher]] = {s.kind: s for s in (TemplateSearcher, LibrarySearcher)}


def searcher_for(family: str) -> type[Searcher]:
    """The kind of searcher a family's kind (``FAMILIES[family].kind``) takes."""
    return SEARCHERS[FAMILIES[family].kind]


def make_searcher(study: optuna.Study, runner: Any, shape: Shape, opts: SearchOptions, known: Known | None = None,
                  measured0: int | None = None, family: str = DEFAULT_FAMILY, coord: Coordinator | None = None,
                  echo: Callable[[str], None] | None = None) -> Searcher:
    """The searcher of ``family``'s study (see ``Searcher``), ready to ``run``."""
    return searcher_for(family)(study, runner, shape, opts, known, measured0, family, coord, echo)


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
