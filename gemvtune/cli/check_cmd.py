"""The check command: is a table still right on this GPU? Re-measures every entry's winner and its cuBLAS
baselines in one process and flags drift past 3% or a loss to cuBLAS; ``--stale-only`` (no GPU) lists the entries
worth re-tuning (searched with less than the default budget, or beaten by the cost model's predicted best);
``--reconfirm`` re-measures each entry's route in a fresh process and writes the result into the table, where the
route then requires the tuned win in both measurements (``tuning.reconfirm``)."""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path

import click

from ..cells import write_csv
from ..errors import GemvtuneError, UsageError
from ..kernels.shapes import parse_shape
from ..safefile import write_text
from .options import DTYPE
from .options import gpu_check as _gpu_check
from .options import writable_dir as _writable_dir


def _write(rows: list[dict], out: Path, tag: str, meta: dict) -> Path:
    import pandas as pd

    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    path = out / f"{tag}-{stamp}.csv"
    try:
        write_csv(pd.DataFrame(rows), path, float_format="%.6g")
        write_text(path.with_suffix(".json"), json.dumps(meta, indent=1, sort_keys=True, default=str) + "\n")
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror or e}") from None
    return path


@click.command("check")
@click.option("--table", "table_path", required=True, help="the table to check, e.g. results/nvidia-h200/table.json")
@click.option("--shape", "shape_texts", multiple=True, help="M x d[@n] entries to check (default: every entry)")
@click.option("--rounds", default=None, type=click.IntRange(1, 20),
              help="interleaved re-measurements (default: 2; with --reconfirm 5, as the search's confirmation)")
@click.option("--framework", type=click.Choice(["torch", "cupy"]), default="torch", show_default=True,
              help="whose cuBLAS path the winner must beat (torch F.linear, or cupy.matmul)")
@click.option("--stale-only", is_flag=True, default=False,
              help="no GPU: list the entries to re-tune (budget below the default, or the cost model beside the "
                   "table predicts a config more than 3% faster than the winner)")
@click.option("--out", "out_dir", default=None, help="folder for the CSV (default: <table folder>/check)")
@click.option("--reconfirm", is_flag=True, default=False,
              help="re-measure each entry's route (its kernels, cuBLAS) in a fresh process and write the result "
                   "into the table: the tuned kernel then runs only where both measurements show its win")
@click.option("--inductor", is_flag=True, default=False,
              help="with --reconfirm: time Inductor max-autotune too (best of 2 compiles; tens of seconds per "
                   "shape), which the route for callers under torch.compile must also beat")
@click.option("--against", "against_path", default=None, metavar="TABLE",
              help="re-measure this table's routes beside another table's, in one process, for the shapes both hold "
                   "(a re-tune against the table it should match); flags a shape more than 2% slower")
@click.option("--strict", is_flag=True, default=False,
              help="exit 1 when an entry is flagged (or stale, or its re-confirmation lost)")
@DTYPE
def check(table_path: str, shape_texts: tuple[str, ...], rounds: int | None, framework: str, stale_only: bool,
          out_dir: str | None, reconfirm: bool, inductor: bool, against_path: str | None, strict: bool,
          dtype: str) -> None:
    """Re-measure a table's winners and baselines on this GPU (one process, interleaved) and flag every entry
    whose winner drifted more than 3% from its record or lost to cuBLAS; with --stale-only, list the entries
    worth re-tuning, without a GPU; with --reconfirm, re-confirm each entry's route in a fresh process and write
    it into the table."""
    from ..reports.runcsv import provenance
    from ..runtime.table import load_table
    from ..tuning.check import recheck, stale

    if reconfirm and stale_only:
        raise UsageError("--reconfirm measures on the GPU and --stale-only does not: give one of them")
    if inductor and not reconfirm:
        raise UsageError("--inductor is timed by the re-confirmation: give --reconfirm too")
    if against_path and (reconfirm or stale_only):
        raise UsageError("--against re-measures two tables side by side: drop --reconfirm/--stale-only")
    table = load_table(table_path)
    other = load_table(against_path) if against_path else None
    keys = set(table.keys()) | (set(other.keys()) if other is not None else set())   # (--against: either table's)
    shapes = []
    for t in shape_texts:
        base, _, n = t.partition("@n")
        if n and not n.isdigit():
            raise UsageError(f"malformed --shape {t!r}: expected MxD or MxD@nN, e.g. 4096x4096@n8")
        shapes.append(parse_shape(base, int(n) if n else 1, dtype))
    missing = [str(s) for s in shapes if (s.M, s.d, s.n, s.dtype) not in keys]
    if missing:
        raise UsageError(f"not in the table {table_path}{' nor ' + against_path if against_path else ''}: "
                         f"{', '.join(missing)}")
    from ..kernels.shapes import Shape

    shapes = shapes or [Shape(*k) for k in sorted(table.keys())]
    out = _writable_dir(out_dir or str(Path(table_path).parent / "check"))
    if stale_only:
        rows = [r for r in stale(table, table.costmodel) if any(str(s) == r["shape"] for s in shapes)]
        for r in rows:
            click.echo(f"{r['shape']:>16s} {r['winner']:<44s} {r['why']}")
        path = _write(rows, out, "stale", provenance(None, table=str(table_path)))
        click.echo(f"{len(rows)} of {len(shapes)} entries to re-tune; wrote {path}")
        if strict and rows:
            raise GemvtuneError(f"{len(rows)} stale entries (--strict)")
        return
    if reconfirm:
        from ..tuning.reconfirm import DEFAULT_ROUNDS, summary
        from ..tuning.reconfirm import reconfirm as run_reconfirm

        rows = run_reconfirm(table_path, shapes, rounds or DEFAULT_ROUNDS, inductor, echo=click.echo)
        path = _write(rows, out, "reconfirm", provenance(None, table=str(table_path), rounds=rounds or DEFAULT_ROUNDS,
                                                         inductor=inductor))
        click.echo(f"{summary(rows)}; wrote {path}")
        lost = [r for r in rows if r["lost_again"]]
        if strict and lost:
            raise GemvtuneError(f"{len(lost)} entries lost their re-confirmation (--strict)")
        return
    rounds = rounds or 2
    _gpu_check()
    from ..bench.kernels import _start

    runner, dev, ceil = _start(click.echo)
    table._check_gpu(dev["name"])
    if other is not None:
        from ..tuning.against import WITHIN, side_by_side

        rows, total = side_by_side(runner, table, other, shapes, max(rounds, 3), echo=click.echo)
        path = _write(rows, out, "against", provenance(dev, ceiling=ceil, table=str(table_path),
                                                       against=str(against_path), rounds=max(rounds, 3), total=total))
        flagged = [r for r in rows if r["flags"]]
        click.echo(f"{len(shapes)} shapes: {total['table_us']:.1f} µs against {total['against_us']:.1f} "
                   f"(x{total['ratio']:.3f}; cuBLAS {total['cublas_us']:.1f}); {len(flagged)} more than "
                   f"{WITHIN:.0%} slower; wrote {path}")
        if strict and (flagged or not total["within"]):
            raise GemvtuneError(f"{len(flagged)} shapes slower than {against_path} by more than {WITHIN:.0%} (--strict)")
        return
    rows = recheck(runner, table, shapes, rounds, framework, echo=click.echo)
    path = _write(rows, out, "check", provenance(dev, ceiling=ceil, table=str(table_path), rounds=rounds,
                                                  framework=framework))
    flagged = [r for r in rows if r["flags"]]
    click.echo(f"{len(flagged)} of {len(rows)} entries flagged (drift > 3% or lost to cuBLAS); wrote {path}")
    if strict and flagged:
        raise GemvtuneError(f"{len(flagged)} flagged entries (--strict)")
