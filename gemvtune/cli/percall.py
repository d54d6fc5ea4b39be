"""The percall command: per-call CPU cost of every user-facing launch path beside F.linear (GPU)."""

from __future__ import annotations

import datetime as _dt
import json
import sys
from pathlib import Path

import click

from ..errors import UsageError
from ..kernels.shapes import parse_shape
from .options import DTYPE
from .options import gpu_check as _gpu_check
from .options import writable_dir as _writable_dir


@click.command()
@click.option("--shape", "shape_texts", multiple=True, help="M x d (repeatable; default 1024x4096 and 4096x4096)")
@click.option("--batch", "n", default=1, show_default=True, type=click.IntRange(1, 16))
@click.option("--table", "table_path", default=None, help="table (default results/<gpu>/table.json)")
@click.option("--calls", default=300, show_default=True, type=click.IntRange(10, 100000))
@click.option("--repeats", default=7, show_default=True, type=click.IntRange(1, 100))
@click.option("--out", "out_dir", default=None, help="output folder (default results/<gpu>/bench/)")
@DTYPE
def percall(shape_texts: tuple[str, ...], n: int, table_path: str | None, calls: int, repeats: int,
            out_dir: str | None, dtype: str) -> None:
    """GPU: µs per call of F.linear, nn.Linear, GemvLinear, the custom op, table.gemv (torch and CuPy)
    and a bare launch, side by side in one process; CSV and markdown."""
    shapes = [parse_shape(t, n, dtype) for t in (shape_texts or ("1024x4096", "4096x4096"))]
    try:
        import torch
    except ImportError:
        raise UsageError("percall measures PyTorch paths and needs torch: pip install 'gemvtune[torch]'") from None
    _gpu_check()
    import pandas as pd

    from ..clients.percall import measure_percall, percall_markdown
    from ..reports.report import gpu_slug
    from ..runtime.table import load_table

    name = torch.cuda.get_device_name()
    table = load_table(table_path or Path("results") / gpu_slug(name) / "table.json")
    table._check_gpu(name)
    out = _writable_dir(out_dir or str(Path("results") / gpu_slug(name) / "bench"))
    rows = [measure_percall(table, s, calls, repeats) for s in shapes]
    from ..runners.cuda import CudaRunner

    dev = {**CudaRunner().device_info(), "torch": torch.__version__}
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    command = "gemvtune " + " ".join(sys.argv[1:])
    base = out / f"percall-{stamp}"
    pd.DataFrame(rows).to_csv(f"{base}.csv", index=False, float_format="%.4g")
    Path(f"{base}.json").write_text(json.dumps({"device": dev, "command": command, "date": stamp,
                                                "table": str(table.path), "calls": calls, "repeats": repeats},
                                               indent=1, default=str))
    md = percall_markdown(rows, dev, command)
    Path(f"{base}.md").write_text(md)
    click.echo(md)
    click.echo(f"wrote {base}.csv, .json, .md")
