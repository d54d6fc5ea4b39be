"""``gemvtune tune``: a whole model tuned under one wall-time budget (gemvtune.tuning.tunerun)."""

from __future__ import annotations

import click

from ..errors import UsageError
from ..kernels.shapes import DTYPES, parse_batches
from ..tuning.budget import SMALL_WEIGHT_BYTES
from ..tuning.search_options import ModelPreset, SearchOptions, parse_families
from .options import WEIGHTS_DECL, declared


@click.command()
@click.option("--model", type=ModelPreset(), help="a model preset")
@click.option("--hf-config", "hf_configs", multiple=True, metavar="PATH",
              help="a Hugging Face config.json (the file or its folder; local only; repeatable)")
@click.option("--shape", "shape_texts", multiple=True, help="M x d, once per step (repeatable)")
@click.option("--fused", is_flag=True, default=False, help="the fused shapes engines run (qkv, gate_up)")
@click.option("--tp", type=click.IntRange(1, 64), default=1, show_default=True,
              help="tensor-parallel degree: tune the shards one GPU runs")
@click.option("--batch", "batch_text", default="1", show_default=True, help="batch sizes n, e.g. 1,2,4,8,16")
@click.option("--dtype", type=click.Choice(DTYPES), default="fp16", show_default=True, help="dtype of W and x")
@declared({"weights": WEIGHTS_DECL}, "weights", weights={
    "help": "FP8 weights (W8A16): every shape's W in E4M3 with FP32 scales per output row (e4m3-row) or per 128x128 "
            "block (e4m3-b128), x and y in --dtype; tuned against dequantize + F.linear, the table keeps their entries "
            "apart (default: W in --dtype)"})
@click.option("--budget", "budget_text", default="5m", show_default=True,
              help="wall time for the whole model, e.g. 300, 5m, 1h30m; 0: no search, the cost model's "
                   "zero-trial picks only")
@click.option("--family", "family_text", default=None, help="kernel families, comma-separated (default: all)")
@click.option("--rounds", type=click.IntRange(1, 100), default=3, show_default=True,
              help="interleaved confirmation rounds per shape")
@click.option("--results", "results_dir", default=None, help="results folder (default results/<gpu>/)")
@click.option("--table", "table_path", default=None, help="table to write (default <results>/table.json)")
@click.option("--replay", "replay_path", default=None, help="search recorded sweeps instead of a GPU")
@click.option("--retune", is_flag=True, default=False, help="search shapes the table already holds too")
@click.option("--no-reconfirm", is_flag=True, default=False,
              help="do not re-confirm the new entries in a fresh process at the end")
@click.option("--no-measure", is_flag=True, default=False,
              help="do not measure the step gain in the independent harness at the end (bench guard's)")
@click.option("--against", "against_path", default=None, metavar="TABLE",
              help="at the end, re-measure the step's shapes beside this table's routes in the same process "
                   "(e.g. the committed table), launches weighted")
@click.option("--watchdog", "watchdog_s", type=click.FloatRange(min=1.0), default=None,
              help="run the GPU runner in a child process, a hanging call recorded as timeout")
def tune(model: str | None, hf_configs: tuple[str, ...], shape_texts: tuple[str, ...], fused: bool, tp: int,
         batch_text: str, dtype: str, weights: str | None, budget_text: str, family_text: str | None, rounds: int,
         results_dir: str | None, table_path: str | None, replay_path: str | None, retune: bool,
         no_reconfirm: bool, no_measure: bool, against_path: str | None, watchdog_s: float | None) -> None:
    """Tune a whole model's decode step within a wall-time budget: the budget is split across (shape, n, family) by
    the cost model's expected gain over cuBLAS, each shape's share of the step and the measured search-quality
    curve; the run resumes where a killed one stopped, and ends with the step's predicted, then measured, gain."""
    from ..tuning.budget import parse_budget
    from ..tuning.tunemodel import model_steps, report_lines, tune_key, tune_model

    budget_s = parse_budget(budget_text)
    batches = parse_batches(batch_text)
    steps = model_steps(shape_texts, model, hf_configs, fused, batches, dtype, tp, weights or "")
    opts = SearchOptions(rounds=rounds, progress=True)
    if family_text:
        opts.families = parse_families(family_text)
    key = tune_key(model, hf_configs, shape_texts, fused, tp, batches, dtype, weights or "", budget_s, opts.families,
                   rounds)
    click.echo(f"tune: {len(steps)} shapes (n = {','.join(map(str, batches))}, {dtype}"
               f"{f', {weights} weights' if weights else ''}"
               f"{f', TP {tp}' if tp > 1 else ''}), budget {budget_s:.0f} s")
    from ..bench.tunegain import guard_gain

    res = tune_model(steps, budget_s, opts, results=results_dir, table=table_path, replay=replay_path,
                     watchdog_s=watchdog_s, reconfirm=not no_reconfirm, retune=retune,
                     measure=None if no_measure else (lambda p, st: guard_gain(p, st, click.echo)),
                     key=key, against=against_path, echo=click.echo)
    for line in report_lines(res, budget_s):
        click.echo(line)


@click.command("convergence")
@click.argument("folders", nargs=-1, required=True)
@click.option("--table", "table_paths", multiple=True, metavar="TABLE",
              help="a table whose measured kernels count toward the fastest known (e.g. the committed one; repeatable)")
@click.option("--curve-gpu", default="nvidia-h200", show_default=True,
              help="the GPU whose search-quality curves to print beside (a results folder's, else the shipped ones)")
@click.option("--split-mb", default=SMALL_WEIGHT_BYTES / 1e6, show_default=True, type=click.FloatRange(0, 1e6),
              help="weights below this many MB are summarised apart (tiny ones are launch-bound)")
def convergence(folders: tuple[str, ...], table_paths: tuple[str, ...], curve_gpu: str, split_mb: float) -> None:
    """How the searches recorded in FOLDERS (e.g. a tune's results folders) converged: after t trials, how far each
    family's best found was above the fastest known for its shape (over the folders and --table), by weight size,
    beside the search-quality curves a tune's budget split plans with."""
    from ..runtime.table import load_table
    from ..tuning.convergence import TRIALS, best_known, read_runs, summarize
    from ..tuning.tuneplan import load_curve

    runs = [r for f in folders for r in read_runs(f)]
    tables = [load_table(p, costmodel=None) for p in table_paths]
    s = summarize(runs, best_known(runs, tables), split_mb)
    head = "  ".join(f"t={t:<3d}" for t in TRIALS)
    click.echo(f"{len(runs)} searches in {len(folders)} folder(s); gap of the best found over the fastest known, "
               "after t measured trials")
    click.echo(f"{'':22s} {'searches':>8s}  {'trials':>6s}  {'final mean/median/max':>22s}   {head}")
    for row in s:
        fin = f"{row.final_mean:6.1%} {row.final_median:6.1%} {row.final_max:6.1%}"
        click.echo(f"{row.label:22s} {row.searches:8d}  {row.trials_median:6.0f}  {fin:>22s}   "
                   + "  ".join(f"{row.at[t]:5.1%}" for t in TRIALS))
    for warm, name in ((False, "tpe (cold)"), (True, "tpe-warm")):
        try:
            c = load_curve(curve_gpu, warm=warm)
        except UsageError as e:
            click.echo(f"{'plan: ' + name:22s} none: {str(e)[:120]}")
            continue
        click.echo(f"{'plan: ' + name:22s} {'':8s}  {'':6s}  {'':22s}   " + "  ".join(f"{c.gap(t):5.1%}" for t in TRIALS))
