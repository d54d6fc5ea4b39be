"""The whole-model tune's front: the decode step's shapes of what the user named (shapes, a model preset, Hugging
Face configs; tensor-parallel shards), the runner, the results folder and the table, the measured gain in the
independent harness on a GPU; then ``tunerun.run_tune``. What ``gemvtune tune`` and ``gemvtune.tune(...,
budget=...)`` call."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..kernels.shapes import Shape, parse_shape
from .search_options import SearchOptions
from .tunerun import Step, TuneResult, run_tune, zero_trial

DEFAULT_BATCHES = (1,)


def model_steps(shape_texts: Sequence[str] = (), model: str | None = None, hf_configs: Sequence[str | Path] = (),
                fused: bool = False, batches: Sequence[int] = DEFAULT_BATCHES, dtype: str = "fp16", tp: int = 1,
                weights: str = "") -> list[Step]:
    """Every distinct (shape, n) of one decode step with its launches per step: a model's (preset or config.json,
    at tensor-parallel degree ``tp``: the local shards), and each ``--shape`` once per step; ``weights``: an FP8
    format ("e4m3-row", "e4m3-b128") every shape's W is in (``Shape.weights``; "" for W in ``dtype``)."""
    from ..kernels.hfconfig import read_hf_config, read_preset

    models = ([read_preset(model)] if model else []) + [read_hf_config(str(p)) for p in hf_configs]
    if not (models or shape_texts):
        raise UsageError("tune needs --model (a preset), --hf-config (a config.json) or --shape")
    if fused and not models:
        raise UsageError("--fused picks the fused shapes of --model/--hf-config: give one of them")
    if tp != 1 and not models:
        raise UsageError("--tp shards a model's layers: give --model or --hf-config")
    out: dict[Shape, Step] = {}

    def add(shape: Shape, calls: float, layers: tuple[str, ...]) -> None:
        s = out.get(shape)
        out[shape] = Step(shape, calls + (s.calls if s else 0.0), tuple(dict.fromkeys((*s.layers, *layers)))
                          if s else layers)

    if models:
        from ..kernels.modelshapes import step_shapes
    for n in batches:
        for m in models:
            for st in step_shapes(m, n=n, tp=tp, fused=fused, dtype=dtype, weights=weights):
                add(st.shape, st.calls, tuple(st.layers))
        for t in shape_texts:
            add(parse_shape(t, n, dtype, weights), 1.0, (t,))
    return list(out.values())


def tune_key(model: str | None, hf_configs: Sequence[str | Path], shapes: Sequence[Any], fused: bool, tp: int,
             batches: Sequence[int], dtype: str, weights: str, budget_s: float, families: Sequence[str],
             rounds: int) -> dict[str, Any]:
    """What makes a tune resumable (``tunestate``): its settings; an FP8 format only where given (a 16-bit tune's key
    is what it was before FP8 weights)."""
    return {"model": model, "hf_configs": sorted(str(p) for p in hf_configs), "shapes": [str(t) for t in shapes],
            "fused": fused, "tp": tp, "batches": list(batches), "dtype": dtype, "budget_s": budget_s,
            **({"weights": weights} if weights else {}), "families": list(families), "rounds": rounds}


def tune_model(steps: Sequence[Step], budget_s: float, opts: SearchOptions, *, results: str | Path | None = None,
               table: str | Path | None = None, replay: str | Path | None = None, watchdog_s: float | None = None,
               reconfirm: bool = True, retune: bool = False,
               measure: Callable[[Path, Sequence[Step]], float | None] | None = None,
               key: dict[str, Any] | None = None, against: str | Path | None = None,
               echo: Callable[[str], None] = print) -> TuneResult:
    """Tune ``steps`` within ``budget_s`` (see ``tunerun.run_tune``); on a GPU, ``measure`` (the table, the steps)
    gives the step gain in an independent harness (the command line's: ``gemvtune.bench.tunegain``); ``against``: a
    table to re-measure the result beside, in this process (``compare``)."""
    from ..workspace import Workspace, writable_dir
    from .makerunner import make_runner
    from .search_run import preflight

    if against is not None:   # a table that cannot be read is one line before any work
        from ..runtime.table import load_table

        load_table(against, costmodel=None)
    if budget_s == 0:
        return zero_trial(_zero_table(table, results, replay), steps, measure if not replay and _gpu() else None)
    shapes = [s.shape for s in steps]
    runner, domains, default_results = make_runner(shapes, str(replay) if replay else None, watchdog_s)
    opts = dataclasses.replace(opts, domains=domains)
    if replay:   # a replayed tune searches the families its sweeps recorded
        opts = dataclasses.replace(opts, families=tuple(dict.fromkeys(runner.sweep(s).family for s in shapes)))
    dev = runner.device_info()
    out = writable_dir(str(results or default_results or Workspace.for_gpu(dev["name"]).root))
    path = Path(table) if table else out / "table.json"
    path = preflight(path, opts.storage or f"journal:{out / 'optuna-journal.log'}", dev) or path
    res = run_tune(runner, steps, budget_s, opts, out, path, echo, reconfirm=reconfirm, retune=retune,
                   measure=None if runner.replayed else measure, key=key)
    if against is not None and not runner.replayed and path.is_file():
        res.lines += compare(runner, path, Path(against), steps, echo)
    return res


def compare(runner: Any, table: Path, against: Path, steps: Sequence[Step], echo: Callable[[str], None]) -> list[str]:
    """The tuned table beside ``against`` (the committed one, say), the step's shapes both hold re-measured in this
    process (``tuning.against``), launches weighted: the lines of the tune's report."""
    from ..runtime.table import load_table
    from .against import WITHIN, side_by_side

    mine, other = load_table(table, costmodel=None), load_table(against, costmodel=None)
    # every step shape either table holds: one that a table lacks runs its route there (cuBLAS), so a shape the tune
    # left on cuBLAS where the other table has a faster kernel counts against the tune (the H200 8B tune of
    # 2026-12-05 left 9 such shapes out of its comparison); the shapes neither holds run cuBLAS on both sides
    either = {Shape(*k) for k in {*mine.keys(), *other.keys()}}
    common = [s for s in steps if s.shape in either]
    if not common:
        return [f"against {against}: neither table holds a shape of the step (both run cuBLAS)"]
    echo(f"against {against}: the {len(common)} of the step's {len(steps)} shapes either table holds, re-measured "
         "side by side (where one lacks a shape, its route: cuBLAS)")
    rows, total = side_by_side(runner, mine, other, [s.shape for s in common], 3,
                               {s.shape: s.calls for s in common}, echo)
    slow = [r["shape"] for r in rows if r["flags"]]
    return [f"against {against}: those {len(common)} shapes {total['table_us']:.1f} µs against "
            f"{total['against_us']:.1f} (x{total['ratio']:.3f}, {'within' if total['within'] else 'outside'} "
            f"{WITHIN:.0%}); {len(slow)} shapes more than {WITHIN:.0%} slower"
            + (f": {', '.join(slow[:8])}" if slow else "")]


def _gpu() -> bool:
    from ..runners.cuda import cuda_available

    return not cuda_available()


def _zero_table(table: str | Path | None, results: str | Path | None, replay: str | Path | None) -> Path:
    """The table whose route ``--budget 0`` weighs: ``table``, else the results folder's, else the one
    ``load_table()`` would load on this GPU (yours, else the shipped one)."""

    if table:
        return Path(table)
    if results and (Path(results) / "table.json").is_file():
        return Path(results) / "table.json"
    if replay:
        raise UsageError("--budget 0 with --replay: give the --table (or --results) whose route to weigh")
    from ..runtime.tables import current_gpu_name, find_table

    return find_table(current_gpu_name()).path


def report_lines(res: TuneResult, budget_s: float) -> list[str]:
    """The tune's closing lines: what was searched, skipped, the time, the predicted and the measured gains."""
    def x(v: float | None) -> str:
        return f"x{v:.3f}" if v else "-"

    st = res.state
    fp8 = ([f"the FP8 step against cuBLAS on the 16-bit weights (the table's measurements): "
            f"{x(res.sixteen_bit_gain)}"] if res.sixteen_bit_gain else [])
    harness = (f"measured {x(res.measured_gain)} in an independent harness (bench guard's)" if res.measured_gain else
               "not measured in an independent harness (it needs a GPU and torch)")
    if budget_s == 0:
        return [f"--budget 0: nothing searched; {len(res.skipped)} shapes run {res.table}'s route ({res.lacking})",
                f"decode step (linears) against {res.baseline}: predicted {x(res.predicted_gain)}; {harness}",
                *fp8, *res.lines]
    lines = [f"tuned {len(res.searched)} shapes in {st.spent_s:.0f} s of a {budget_s:.0f} s budget "
             f"({st.trials} measured trials, {st.trial_cost(0) or 0:.3f} s each) -> {res.table}"]
    why: dict[str, list[str]] = {}
    for k, w in res.skipped.items():
        why.setdefault(w, []).append(k)
    for w, keys in why.items():
        lines.append(f"  not searched ({w}): {', '.join(keys[:8])}{' ...' if len(keys) > 8 else ''}")
    lines.append(f"decode step (linears) against {res.baseline}: predicted {x(res.predicted_gain)}, measured "
                 f"{x(res.search_gain)} in the search; {harness}")
    return lines + fp8 + res.lines
