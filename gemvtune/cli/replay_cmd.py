"""Commands for recorded sweeps and the search-quality study (registered on the main group)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import click

from ..cells import write_csv
from ..errors import UsageError
from ..kernels.families import DEFAULT_FAMILY, FAMILIES
from ..kernels.shapes import Shape, parse_shape
from ..safefile import write_text
from .options import gpu_check as _gpu_check
from .options import writable_dir as _writable_dir

log = logging.getLogger("gemvtune")


class _Ticking:
    """The runner, as run_sweep sees it, with a bar counting its measurements from the first (the
    compiles are done by then; one INFO line says so). Every other attribute is the runner's."""

    def __init__(self, runner: Any, shape: Shape, total: int) -> None:
        self._runner, self._shape, self._total, self._started, self.bar = runner, shape, total, False, None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runner, name)

    def measure(self, *args: Any, **kwargs: Any) -> Any:
        if not self._started:
            from ..progress import progress_bar

            self._started = True
            log.info("sweep %s: compiled; measuring %d configs", self._shape, self._total)
            self.bar = progress_bar(self._total, desc=f"sweep {self._shape}", unit="config")
        try:
            return self._runner.measure(*args, **kwargs)
        finally:
            if self.bar is not None:
                self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def echo(self, text: str) -> None:
        self.close()   # the bar's line is cleared before a line goes to stdout
        click.echo(text)


@click.command()
@click.option("--shape", "shape_texts", multiple=True, help="M x d (repeatable)")
@click.option("--suite", type=click.Choice(["decode"]), default=None)
@click.option("--out", "out_dir", default=None, help="default results/<gpu>/sweeps/")
@click.option("--replays", default=7, show_default=True, type=click.IntRange(3, 100))
@click.option("--target-us", default=1000.0, show_default=True, type=float, help="GPU time per graph replay")
@click.option("--family", type=click.Choice(list(FAMILIES)), default=DEFAULT_FAMILY, show_default=True,
              help="the kernel family whose sweep grid is measured")
def sweep(shape_texts, suite, out_dir, replays, target_us, family) -> None:
    """GPU: measure every valid config of a family's sweep grid for each shape (for the replay runner)."""
    from ..kernels.shapes import DECODE_SUITE

    shapes = [parse_shape(t) for t in shape_texts] + ([Shape(M, d) for M, d in DECODE_SUITE] if suite else [])
    if not shapes:
        raise UsageError("sweep needs --shape or --suite")
    _gpu_check()
    from ..runners.cuda import CudaRunner
    from ..tuning.sweep import grid_configs, run_sweep
    from ..workspace import Workspace

    r = CudaRunner(replays=replays, warmup=1, target_us=target_us)
    ceil = r.ceiling()
    out = _writable_dir(out_dir or str(Workspace.for_gpu(r.device_info()["name"]).sweeps))
    click.echo(f"read ceiling {ceil['read_gbps']:.0f} GB/s; writing to {out}")
    shapes = list(dict.fromkeys(shapes))
    for i, s in enumerate(shapes, 1):
        n = sum(c.is_valid(s) for c in grid_configs(family=family))
        log.info("sweep %s (shape %d of %d): compiling %d valid configs of the grid", s, i, len(shapes), n)
        ticking = _Ticking(r, s, n)
        try:
            run_sweep(ticking, s, out, echo=ticking.echo, ceiling=ceil, family=family)
        finally:
            ticking.close()
        r.release()


@click.command()
@click.option("--sweeps", "sweeps_path", required=True, help="a folder of sweep-*.csv.gz (or one file)")
@click.option("--samplers", default="tpe,tpe-s5,tpe-s20,tpe-indep,random,gp", show_default=True)
@click.option("--seeds", default=20, show_default=True, type=click.IntRange(1, 1000))
@click.option("--budget", default=200, show_default=True, type=click.IntRange(1, 100000),
              help="measured trials per simulated search")
@click.option("--gp-budget", default=60, show_default=True, type=click.IntRange(1, 100000),
              help="budget of the (slow) GP sampler")
@click.option("--jobs", default=None, type=click.IntRange(1, 256), help="processes (default: cores)")
@click.option("--out", "out_dir", required=True, help="folder for the CSVs and the PNG")
@click.option("--costmodel", "costmodel_results", default=None,
              help="a GPU's results folder (e.g. results/nvidia-h200): evaluate the cost model leave-one-shape-out "
                   "on the sweeps (costmodel-loso.csv) and run the warm-started sampler tpe-warm beside the others")
@click.option("--warm-k", default=5, show_default=True, type=click.IntRange(1, 100),
              help="configs the cost model enqueues after the seed (tpe-warm)")
@click.option("--model-rounds", default=400, show_default=True, type=click.IntRange(10, 5000),
              help="boosting rounds of each held-out model")
def study(sweeps_path, samplers, seeds, budget, gp_budget, jobs, out_dir, costmodel_results, warm_k,
          model_rounds) -> None:
    """Search quality on recorded sweeps: trials to within 1/2/5% of the optimum per sampler (no GPU). With
    --costmodel: the cost model's zero-trial pick per swept shape, from a model that never saw that shape, and
    TPE warm-started by that model's top-k (tpe-warm) against TPE alone."""
    import os

    from ..runners.replay import sweep_files
    from ..tuning.study import SAMPLER_VARIANTS, llama_position, plot, run_study, summarize_runs

    names = [s.strip() for s in samplers.split(",") if s.strip()]
    bad = [s for s in names if s not in SAMPLER_VARIANTS]
    if bad or not names:
        raise UsageError(f"unknown sampler(s) {', '.join(bad) or '(none)'}; known: {', '.join(SAMPLER_VARIANTS)}")
    files = sweep_files(sweeps_path)
    out = _writable_dir(out_dir)
    warm = None
    if costmodel_results is not None:
        from ..model import dataset, loso

        try:
            ds = dataset.load(costmodel_results)
        except ValueError as e:
            raise UsageError(f"--costmodel {costmodel_results}: {e}") from None
        by_shape = {f"{s.M}x{s.d}": s for s in loso.sweep_shapes(ds)}
        held = []
        for f in files:
            key = f.name.split("-")[1].rsplit("x", 1)[0] if f.name.count("x") >= 2 else ""
            if key not in by_shape:
                raise UsageError(f"--costmodel {costmodel_results} records no sweep of {f.name}'s shape")
            held.append(by_shape[key])
        table, top = loso.evaluate(ds, k=warm_k, rounds=model_rounds, shapes=held, echo=click.echo)
        write_csv(table, out / "costmodel-loso.csv", float_format="%.6g")
        click.echo(f"zero-trial pick, leave-one-shape-out: median {table.pick_gap_pct.median():.2f}%, worst "
                   f"{table.pick_gap_pct.max():.2f}% from the sweep optimum (costmodel-loso.csv)")
        warm = {f.name: top[str(s)] for f, s in zip(files, held)}
        if "tpe-warm" not in names:
            names.append("tpe-warm")
    elif "tpe-warm" in names:
        raise UsageError("the tpe-warm sampler needs --costmodel RESULTS (the recorded measurements to fit on)")
    curves, runs = run_study(files, names, seeds, budget, jobs or os.cpu_count() or 1, echo=click.echo,
                             budgets={"gp": gp_budget}, journal=out / "study-journal.jsonl", warm=warm)
    log.info("study: summarizing %d searches; writing the CSVs, the plot and summary.md to %s", len(runs), out)
    summary = summarize_runs(runs)
    llama = llama_position(files)
    write_csv(runs, out / "study-runs.csv", float_format="%.6g")
    write_csv(summary, out / "study-summary.csv", float_format="%.6g")
    write_csv(curves, out / "study-curves.csv.gz", float_format="%.6g", compression="gzip")
    write_csv(llama, out / "llama-vs-optimum.csv", float_format="%.6g")
    plot(curves, out / "convergence.png")
    click.echo(summary[summary["shape"] == "all"].to_string(index=False))
    click.echo(llama.to_string(index=False))
    from ..tuning.study import study_markdown

    write_text(out / "summary.md", study_markdown(out))
    click.echo(f"wrote {out}/study-*.csv, llama-vs-optimum.csv, convergence.png, summary.md")


@click.command("study-report")
@click.argument("out_dir", type=click.Path(exists=True, file_okay=False))
def study_report(out_dir: str) -> None:
    """(Re)write DIR/summary.md from a study folder (and Kernel Tuner's results if present)."""
    from ..tuning.study import study_markdown

    text = study_markdown(Path(out_dir))
    write_text(Path(out_dir) / "summary.md", text)
    click.echo(text, nl=False)


@click.command("plot-study")
@click.option("--storage", required=True, help="the storage a search wrote, e.g. journal:results/nvidia-h200/optuna-journal.log")
@click.option("--study", "names", multiple=True, required=True,
              help="a search's study name (its other families' studies, "
                   + ", ".join(f.study_name("NAME") for f in FAMILIES.values() if f.study_suffix)
                   + ", are added when present); repeatable")
@click.option("--out", "out_dir", required=True, help="folder for the PNGs and CSVs")
def plot_study(storage: str, names: tuple[str, ...], out_dir: str) -> None:
    """Pictures of searches: convergence (every measured trial, best so far, the seed config) and the
    parameter importance of each family's study; CSVs of both beside them."""
    import optuna
    import pandas as pd

    from ..reports.studyplots import convergence_rows, importances, plot_convergence, plot_importance
    from ..tuning.coordination.storage import open_store

    st = open_store(storage).storage
    have = {s.study_name for s in optuna.get_all_study_summaries(st, include_best_trial=False)}
    out = _writable_dir(out_dir)
    for name in names:
        if name not in have:
            raise UsageError(f"no study {name!r} in {storage}")
        studies = {fam: optuna.load_study(study_name=f.study_name(name), storage=st)
                   for fam, f in FAMILIES.items() if f.study_name(name) in have}
        curves = {fam: convergence_rows(s) for fam, s in studies.items()}
        write_csv(pd.DataFrame([{"family": f, **r} for f, rows in curves.items() for r in rows]),
                  out / f"{name}-convergence.csv", float_format="%.6g")
        plot_convergence(curves, out / f"{name}-convergence.png", f"{name}: measured trials and best so far")
        imp, how = {}, {}
        for fam, s in studies.items():
            try:
                imp[fam], how[fam] = importances(s)
            except ValueError as e:
                click.echo(f"{name} {fam}: {e}")
        if imp:
            write_csv(pd.DataFrame([{"family": f, "evaluator": how[f], "param": k, "importance": v}
                                    for f, vals in imp.items() for k, v in vals.items()]),
                      out / f"{name}-importance.csv", float_format="%.4g")
            plot_importance({f"{f} ({how[f]})": v for f, v in imp.items()}, out / f"{name}-importance.png",
                            f"{name}: parameter importance over correct measured trials")
        click.echo(f"{name}: {', '.join(f'{f} {len(c)} measured' for f, c in curves.items())} -> {out}/{name}-*.png")
