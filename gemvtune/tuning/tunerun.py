"""A whole model tuned under one wall-time budget (``gemvtune tune``, ``gemvtune.tune(..., budget=...)``).

The step's shapes (each with its launches per decode step) are planned with ``tuning.budget`` on what the run
knows: cuBLAS's time per shape (the table's, else measured now), each family's predicted optimum (the GPU's cost
model), the search-quality curve and the cost of a trial and of a shape's fixed work. The most valuable shape is
searched (its families at their planned trials, warm-started with the plan's predicted fastest configs, each study
stopped at its share of the time), confirmed and written to the table; then the rest is planned again on the time
left, with the costs this run measured. A killed run resumes from ``tunestate``. The end is the step's predicted
gain over cuBLAS, then the measured one: the search's own measurements, and on a GPU the independent harness of
``bench guard`` (stock ``nn.Linear`` against the swapped layers, one CUDA graph each)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..kernels.families import FAMILIES, families_for
from ..kernels.shapes import Shape
from ..workspace import model_group
from .budget import Item, Plan, allocate
from .search_options import SearchOptions
from .tuneplan import SHAPE_S, TRIAL_S, cublas_us, items_for, load_curve, plan_basis, predict
from .tunestate import NAME, TuneState, load_state

RESERVE_S = 15.0        # the end's fixed work on a GPU: the re-confirmation's process start, the table reloaded
RECONFIRM_ENTRY_S = 2.0   # and its work per entry (the route's kernels and cuBLAS over the confirmation's rounds)
LAST_S = 5.0            # a re-confirmation is not started with less of the budget left than this


@dataclass(frozen=True)
class Step:
    """A shape of the decode step and how often a step runs it."""

    shape: Shape
    calls: float
    layers: tuple[str, ...] = ()


@dataclass
class TuneResult:
    table: Path
    state: TuneState
    searched: list[Shape] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)      # shape key -> why it was not searched
    predicted_gain: float | None = None
    search_gain: float | None = None        # the table's route against cuBLAS, by the search's measurements
    measured_gain: float | None = None      # the independent harness's (a GPU only)
    lines: list[str] = field(default_factory=list)
    baseline: str = "cuBLAS"                # what the gains are against (FP8 weights: dequantize + F.linear)
    sixteen_bit_gain: float | None = None   # FP8 steps: against cuBLAS on the 16-bit weights, by the table's times
    lacking: str = ""                       # --budget 0: what runs the shapes the table lacks


def _tables(out: Path, gpu: str) -> list[Any]:
    """The tables to learn cuBLAS's times from: the results folder's, then the one gemvtune ships for this GPU."""
    from ..errors import UsageError
    from ..runtime.table import load_table
    from ..runtime.tables import shipped_root
    from ..workspace import gpu_slug

    root = shipped_root()
    tables = []
    for p in (out / "table.json", (root / gpu_slug(gpu) / "table.json") if root else None):
        if p is not None and p.is_file():
            try:
                tables.append(load_table(p, costmodel=None))
            except UsageError:
                continue
    return tables


def _model(out: Path, gpu: str, group: str = "") -> Any:
    """The cost model of ``group``'s weights ("" or "fp8"): the results folder's, else the one shipped for this GPU,
    else one shipped for another GPU (its predictions are relative to the read floor, which the plan takes at this
    GPU's measured ceiling: one fitted on its GPU's own data before one continued from another's, fit --prior);
    None where there is none or LightGBM is missing."""
    from ..errors import UsageError
    from ..model import costmodel as cm
    from ..runtime.tables import shipped_root
    from ..workspace import gpu_slug, model_beside

    root = shipped_root()
    mine = [f for f in (out, (root / gpu_slug(gpu)) if root else None) if f is not None]
    others = sorted({p.parent for p in root.glob("*/costmodel*.json*")} - set(mine)) if root else []
    continued = None
    for folder in (*mine, *others):   # another GPU's: the prior
        path = model_beside(folder, group)
        try:
            model = cm.load(path) if path.exists() else None
        except UsageError:
            continue
        if model is not None and model.group == group:   # (a file of the group's name may hold the other group's)
            if folder in mine or model.prior_gpu is None:
                return model
            continued = continued or model
    return continued


def route_gain(table: Any, steps: Sequence[Step], cublas: dict[Shape, float] | None = None) -> float | None:
    """Σ calls × cuBLAS / Σ calls × the route's time, over the steps the route can put a time on: a table entry's
    measured times, or for a shape it lacks the cost model's zero-trial pick against cuBLAS's prediction (a table
    loaded with its model). ``cublas``: cuBLAS's time where the table holds none (a replayed search)."""
    return _gain(table, steps, lambda s, r: r.cublas_us or (cublas or {}).get(s.shape), base_runs=True)


def sixteen_bit_gain(table: Any, steps: Sequence[Step]) -> float | None:
    """For FP8 steps: Σ calls × cuBLAS on the 16-bit weights of the same shape / Σ calls × the route's time, over the
    steps whose entry measured both (the search records cuBLAS on 16-bit weights beside every FP8 entry): what the
    FP8 step buys over the model it was quantised from. None where no FP8 step has both."""
    def base(s: Step, r: Any) -> float | None:
        e = table.entry(s.shape) if s.shape.weights else None
        return getattr(e.baselines.get("cublas-16bit") if e is not None else None, "ok_us", None)

    return _gain(table, steps, base, base_runs=False)


def _gain(table: Any, steps: Sequence[Step], base: Callable[[Step, Any], float | None], base_runs: bool
          ) -> float | None:
    """Σ calls × ``base(step, route)`` / Σ calls × the route's time (its tuned kernel's, else its baseline's; where
    the table records none, ``base`` itself where ``base_runs``: it is what runs without a kernel), over the steps
    with both."""
    from ..runtime.route import choose

    num = den = 0.0
    for s in steps:
        r = choose(table, s.shape.M, s.shape.d, s.shape.n, dtype=s.shape.dtype, weights=s.shape.weights)
        c = base(s, r)
        t = r.tuned_us if r.tuned and r.tuned_us else (r.cublas_us or (c if base_runs else None))
        if not c or not t:
            continue
        num += s.calls * c
        den += s.calls * t
    return num / den if den else None


def run_tune(runner: Any, steps: Sequence[Step], budget_s: float, opts: SearchOptions, out: Path, table: Path,
             echo: Callable[[str], None], *, reconfirm: bool = True, retune: bool = False,
             measure: Callable[[Path, Sequence[Step]], float | None] | None = None,
             key: dict[str, Any] | None = None, clock: Callable[[], float] = time.monotonic) -> TuneResult:
    """Tune ``steps`` within ``budget_s`` seconds (> 0; ``zero_trial`` is the budget of 0). ``measure``: the
    step gain in an independent harness, given the table (None: not measured). ``key``: what makes a tune resumable."""
    from ..runtime.keys import entry_key
    from ..runtime.table import load_table
    from .neighbours import merged, other_n_warm, other_shape_warm
    from .search_run import run_searches
    from .searcher import search_arch, trials_in_flight

    t0 = clock()
    dev = runner.device_info()
    state_path = out / NAME
    state, how = load_state(state_path, key or {"shapes": [s.shape.key for s in steps]}, budget_s)
    res = TuneResult(table, state, baseline=baseline_of(steps))
    if how != "new":
        echo(f"tune state {state_path}: {how}" + (f" ({state.spent_s:.0f} s of {budget_s:.0f} spent, "
                                                  f"{len(state.done)} shapes done)" if how == "resumed" else ""))
    ceiling = runner.ceiling()
    read_gbps = float(ceiling["read_gbps"])
    have = _tables(out, dev.get("name", ""))
    models = {g: _model(out, dev.get("name", ""), g) for g in {model_group(s.shape.weights) for s in steps}}
    own = _own_entries(table)
    basis = plan_basis(list(models.values()), str(dev.get("name", "")), fp8=any(s.shape.weights for s in steps))
    if basis.note:
        echo(basis.note)
    slug = _slug(dev)
    curve, sigma = load_curve(slug, warm=basis.warm), basis.sigma
    small = load_curve(slug, warm=False) if basis.warm else None   # (budget.SMALL_WEIGHT_BYTES says why)
    searchable = [f for f in opts.families if not FAMILIES[f].library]
    library = [f for f in opts.families if FAMILIES[f].library]
    spent0 = state.spent_s

    def spent() -> float:
        return spent0 + clock() - t0

    todo: dict[Shape, Step] = {}
    for s in steps:
        k = entry_key(s.shape)
        if k in state.done:
            res.skipped[k] = "done earlier in this tune"
        elif k in own and not retune:
            res.skipped[k] = "already in the table (--retune searches it again)"
        else:
            todo[s.shape] = s
    preds: dict[Shape, Any] = {}
    base: dict[Shape, float] = {}
    for st in steps:
        sh = st.shape
        base[sh], where = cublas_us(have, sh, read_gbps, runner)
        if sh in todo:
            preds[sh] = predict(models[model_group(sh.weights)], sh, searchable, read_gbps, arch=search_arch(runner))
            best = min((p.optimum_us for p in preds[sh].values()), default=None)
            echo(f"{sh}: {baseline_of([st])} {base[sh]:.2f} µs ({where})"
                 + (f", best predicted {best:.2f} µs" if best else ""))
    plan_first: Plan | None = None
    from ..progress import progress_bar

    bar = progress_bar(total=round(budget_s), desc="tune (budget)", unit="s", enabled=opts.progress)

    def tick() -> None:
        if bar is not None:
            bar.n = min(round(spent()), bar.total)
            bar.set_postfix_str(f"{max(0.0, budget_s - spent()):.0f} s left, {len(todo)} shapes to go")
            bar.refresh()

    try:
        while todo:
            tick()
            items: list[Item] = [it for sh, st in todo.items()
                                 for it in items_for(sh, st.calls, searchable, base[sh], preds[sh], sigma=sigma)]
            entries = len(res.searched) + len(todo)   # at most this many to re-confirm at the end
            left = budget_s - spent() - (reserve_s(entries) if reconfirm and not runner.replayed else 0.0)
            plan = allocate(items, max(left, 0.0), curve, state.trial_cost(TRIAL_S), state.shape_cost(SHAPE_S),
                            sigma=sigma, small_curve=small)
            if plan_first is None:
                plan_first = plan
                state.predicted_gain = state.predicted_gain or _whole_gain(plan, steps, todo, have, base)
            if not plan.shapes:
                break
            sh = _first(plan.shapes)
            fams = plan.families(sh)
            trials = {f: plan.trials[(sh, f)] for f in fams}
            have_t = load_table(table, costmodel=None) if table.is_file() else None
            near, like = (f(have_t, sh, fams, search_arch(runner)) for f in (other_n_warm, other_shape_warm))
            if near or like:
                echo(f"{sh}: warm start from " + "; ".join(
                    f"{what}: " + ", ".join(f"{f} {len(v)}" for f, v in got.items())
                    for what, got in (("the table's other batch sizes", near), (f"other weights at n = {sh.n}", like))
                    if got))
            warm = merged(merged(near, like), {f: preds[sh][f].warm for f in fams if preds[sh][f].warm})
            trial_s = state.trial_cost(TRIAL_S)
            libs = families_for(sh, library)   # (a library's algorithms read 16-bit weights only)
            sopts = dataclasses.replace(opts, families=(*fams, *libs), family_trials=trials, warm_k=0,
                                        warm_start=warm or None,
                                        timeout=search_timeout(trials, trial_s, left, state.shape_cost(SHAPE_S),
                                                               trials_in_flight(opts, runner)))
            echo(f"{sh}: {', '.join(f'{f} {t}' for f, t in trials.items())} trials"
                 f"{' + ' + ', '.join(libs) if libs else ''} ({spent():.0f} of {budget_s:.0f} s spent)")
            t1 = clock()
            run_searches(runner, [sh], sopts, str(out), str(table), echo=echo, writable=_writable)
            wall = clock() - t1
            e = load_entry(table, sh)
            srch = e.search if e is not None else None
            if srch is not None and srch.measured_trials and srch.search_s is not None:
                state.trials += int(srch.measured_trials)
                state.search_s += float(srch.search_s)
                state.shapes += 1
                state.shape_s += max(0.0, wall - float(srch.search_s))
            state.done.append(entry_key(sh))
            res.searched.append(sh)
            del todo[sh]
            state.spent_s = spent()
            state.save(state_path)
        for sh in todo:
            res.skipped[entry_key(sh)] = "not worth its time in the budget left: the zero-trial pick stands"
        if reconfirm and res.searched and not runner.replayed:
            from .reconfirm import reconfirm as again
            from .reconfirm import summary

            release = getattr(runner, "release", None)
            if callable(release):
                release()
            rest = budget_s - spent()
            if rest < LAST_S:
                echo(f"no time left in the budget to re-confirm the {len(res.searched)} entries in a fresh process "
                     f"({max(rest, 0.0):.0f} s): their routes rest on the search's measurements alone "
                     "(gemvtune check --reconfirm does it later)")
            else:
                echo(summary(again(table, res.searched, opts.rounds, False, echo=echo, timeout_s=rest)))
    finally:
        state.spent_s = spent()
        state.save(state_path)
        if bar is not None:
            bar.close()
    res.predicted_gain = state.predicted_gain
    if table.is_file():
        t = load_table(table, costmodel=None)
        res.search_gain = route_gain(t, steps, base)
        res.sixteen_bit_gain = sixteen_bit_gain(t, steps)
        if measure is not None:
            res.measured_gain = measure(table, steps)
    return res


def reserve_s(entries: int) -> float:
    """The end's share of the budget: the re-confirmation of ``entries`` entries in a fresh process."""
    return RESERVE_S + RECONFIRM_ENTRY_S * entries


def search_timeout(trials: dict[str, int], trial_s: float, left_s: float, shape_s: float, in_flight: int = 1) -> float:
    """Seconds of search for one shape: room for its planned trials (1.5x the measured cost of a trial), never
    past the budget left once the shape's fixed work (its confirmation and baselines, ``shape_s``) is counted, nor
    the ``in_flight`` trials compiled ahead that still end after the search's timeout (Optuna starts no trial past
    it, but lets those run: on an H100 beside five other test processes, 2026-12-05, a 60 s tune spent 61.4 s)."""
    return max(1.0, min(max(5.0, 1.5 * max(trials.values()) * trial_s), left_s - shape_s - in_flight * trial_s))


def zero_trial(table: Path, steps: Sequence[Step], measure: Callable[[Path, Sequence[Step]], float | None] | None
               ) -> TuneResult:
    """``--budget 0``: nothing searched; the route of ``table`` (its cost model's zero-trial picks for the shapes it
    lacks) is the predicted gain, and ``measure`` (a GPU) measures it."""
    from ..runtime.keys import entry_key
    from ..runtime.table import load_table

    res = TuneResult(table, TuneState({}, 0.0), baseline=baseline_of(steps))
    t = load_table(table)
    # a table copied without the cost model beside it (or read without LightGBM) makes no zero-trial picks: said,
    # never implied; FP8 calls it lacks follow the FP8 route's own rule (gemvtune.runtime.fp8route) either way
    res.lacking = ("its cost model's zero-trial picks where it lacks a 16-bit shape" if t.costmodel is not None else
                   "no cost model loaded (none beside it, costmodel.json[.gz], or no LightGBM): the 16-bit shapes it "
                   "lacks run cuBLAS")
    if any(s.shape.weights for s in steps):
        res.lacking += "; the FP8 shapes it lacks follow the FP8 route's rule"
    res.skipped = {entry_key(s.shape): f"--budget 0: the table's route; {res.lacking}" for s in steps}
    res.predicted_gain = route_gain(t, steps)
    res.sixteen_bit_gain = sixteen_bit_gain(t, steps)
    from ..runtime.route import choose, rival_of

    kinds: dict[str, int] = {}
    for s in steps:
        tabled = t.entry(s.shape) is not None
        r = choose(t, s.shape.M, s.shape.d, s.shape.n, dtype=s.shape.dtype, weights=s.shape.weights)
        k = ("the table's kernel" if tabled else "a zero-trial pick") if r.tuned else rival_of(s.shape)
        kinds[k] = kinds.get(k, 0) + 1
    res.lines.append("routes: " + ", ".join(f"{v} to {k}" for k, v in sorted(kinds.items())))
    if measure is not None:
        res.measured_gain = measure(table, steps)
    return res


def _first(shapes: Sequence[Shape]) -> Shape:
    """The shape to search next: the plan's most valuable one, or its weight's smallest n the plan also searches (a
    weight's n then run upwards, each warm-started with the nearest n searched before it: ``tuning.neighbours``)."""
    from .neighbours import weight_of

    return min((s for s in shapes if weight_of(s) == weight_of(shapes[0])), key=lambda s: s.n)


def baseline_of(steps: Sequence[Step]) -> str:
    """What a step's shapes run without a tuned kernel, the gains' denominator: cuBLAS, dequantize + F.linear for FP8
    weights (``route.rival_of``), or both named where the steps mix them."""
    from ..runtime.route import rival_of

    return " and ".join(dict.fromkeys(rival_of(s.shape) for s in steps)) or "cuBLAS"


def _whole_gain(plan: Plan, steps: Sequence[Step], todo: dict[Shape, Step], have: list[Any],
                base: dict[Shape, float]) -> float | None:
    """The step's predicted gain: the plan's expected savings over the shapes it searches; the shapes it does not
    search, as cuBLAS (their zero-trial picks are routed only where predicted well clear of it)."""
    from ..runtime.route import measured

    total = plan.step_cublas_us
    saved = plan.saving_us
    for s in steps:
        if s.shape in todo:
            continue
        e = next((e for t in have if (e := t.entry(s.shape)) is not None), None)
        if e is None:
            continue
        t, c, _ = measured(e, "torch", s.shape)
        c = c or base.get(s.shape)
        if c:
            total += s.calls * c
            saved += s.calls * max(0.0, c - (t or c))
    return total / (total - saved) if total > saved else None


def load_entry(table: Path, shape: Shape) -> Any:
    from ..runtime.table import load_table

    return load_table(table, costmodel=None).entry(shape) if table.is_file() else None


def _own_entries(table: Path) -> set[str]:
    """The keys of the entries the table to be written already holds."""
    if not table.is_file():
        return set()
    from ..runtime.keys import entry_key
    from ..runtime.table import load_table

    return {entry_key(Shape(*k)) for k in load_table(table, costmodel=None).keys()}


def _slug(dev: dict[str, Any]) -> str:
    from ..workspace import gpu_slug

    return gpu_slug(str(dev.get("name", "gpu")))


def _writable(path: str) -> Path:
    from ..workspace import writable_dir

    return writable_dir(path)


__all__ = ["LAST_S", "RECONFIRM_ENTRY_S", "RESERVE_S", "Step", "TuneResult", "reserve_s", "route_gain", "run_tune",
           "search_timeout", "zero_trial"]
