"""``gemvtune export``: a table as a standalone CUDA header for C++ engines (registered on the main group)."""

from __future__ import annotations

import click


@click.command()
@click.option("--table", "table_path", required=True, help="a table.json written by search")
@click.option("--format", "fmt", default="cuda", show_default=True, help="output format (cuda: one .cuh header)")
@click.option("--out", "out_path", required=True, help="the file to write, e.g. gemvtune_h200.cuh")
def export(table_path: str, fmt: str, out_path: str) -> None:
    """Write the table's tuned kernels, a generic fallback and host dispatch as one CUDA header."""
    from ..errors import UsageError
    from ..runtime.export import FORMATS
    from ..runtime.export import export as do_export
    from ..runtime.table import load_table

    if fmt not in FORMATS:  # before reading anything
        raise UsageError(f"unknown export format {fmt!r}; known: {', '.join(FORMATS)}")
    table = load_table(table_path)
    path = do_export(table, fmt, out_path)
    click.echo(f"wrote {path}: {len(table.shapes)} tuned shape(s) and the generic fallback")
