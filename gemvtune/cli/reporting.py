"""``gemvtune summarize`` (a bench CSV as markdown) and ``gemvtune report`` (a table as a terminal summary, CSV
and crossover plots): the commands that read results and write reports (registered on the main group)."""

from __future__ import annotations

from pathlib import Path

import click

from ..cells import write_csv
from ..errors import UsageError
from ..safefile import write_text
from .options import sort_shape_lines, writable_file
from .options import writable_dir as _writable_dir


@click.command()
@click.argument("csv_path", type=click.Path(exists=True, dir_okay=False))
@click.option("--md", "md_path", default=None, help="also write the markdown here")
def summarize(csv_path: str, md_path: str | None) -> None:
    """Summarize a bench CSV (baselines, best variant per shape, spin vs graph, reference numbers)."""
    from ..bench.summary import summarize_bench

    if md_path is not None:
        writable_file(md_path, "--md file")
    try:
        text = summarize_bench(csv_path)
    except (ValueError, KeyError, OSError, TypeError, AttributeError) as e:  # not a bench CSV with its JSON
        raise UsageError(f"cannot summarize {csv_path}: {' '.join(str(e).split())}") from None
    click.echo(text, nl=False)
    if md_path is not None:
        try:
            write_text(Path(md_path), text)
        except OSError as e:
            raise UsageError(f"cannot write --md file {md_path}: {e.strerror or e}") from None


@click.command()
@click.option("--table", "table_path", required=True, help="a table.json written by search")
@click.option("--csv", "csv_path", default=None, help="write the table's contents as CSV here")
@click.option("--crossover", "cross_dir", default=None,
              help="write crossover.csv and one µs-against-n plot per shape (entries at several n) here")
def report(table_path: str, csv_path: str | None, cross_dir: str | None) -> None:
    """Render a table's contents (shapes in numeric order) as CSV and a short terminal summary."""
    from ..reports.tablereport import table_frame, table_summary
    from ..runtime.table import load_table

    t = load_table(table_path)
    if csv_path is not None:
        writable_file(csv_path, "--csv file")       # before any output
    if cross_dir == "":
        raise UsageError("--crossover: the path is empty")
    out = _writable_dir(cross_dir) if cross_dir else None
    click.echo(sort_shape_lines(table_summary(t)))
    if csv_path is not None:
        df = table_frame(t)
        if len(df):
            df = df.sort_values(["M", "d", "n"], kind="stable")
        try:
            write_csv(df, csv_path, float_format="%.6g")
        except OSError as e:
            raise UsageError(f"cannot write --csv file {csv_path}: {e.strerror or e}") from None
        click.echo(f"wrote {csv_path}")
    if out is not None:
        from ..transition.crossover import crossover_frame, crossover_markdown, crossovers, plot_crossover

        df = crossover_frame(t)
        write_csv(df, out / "crossover.csv", float_format="%.6g")
        write_text(out / "crossover.md", crossover_markdown(df))
        paths = plot_crossover(df, out, t.gpu.get("name", ""))
        for (M, d), n in crossovers(df).items():
            click.echo(f"  {M}x{d}: " + (f"split-K GEMM wins from n={n}" if n else "the GEMV wins at every tuned n"))
        click.echo(f"wrote {out / 'crossover.csv'} and {len(paths)} plot(s)")


@click.command("which-table")
@click.option("--gpu", default=None, help="a GPU name as the driver reports it, e.g. 'NVIDIA H200' (default: this "
                                          "machine's GPU)")
def which_table(gpu: str | None) -> None:
    """Which table `load_table()` with no path loads on this GPU (or on --gpu): your own results/<gpu>/table.json
    if there is one, else the one shipped with gemvtune. Needs no GPU with --gpu."""
    from ..runtime.tables import current_gpu_name, find_table, shipped_gpus

    if gpu is not None and (not gpu.strip() or not gpu.isprintable() or len(gpu) > 200):
        raise UsageError("--gpu: give a GPU's name, e.g. 'NVIDIA H200'")
    found = find_table(gpu if gpu is not None else current_gpu_name())
    click.echo(str(found))
    click.echo(f"shipped tables: {', '.join(shipped_gpus()) or 'none'}")
