"""The percall command: per-call CPU cost of every user-facing launch path beside F.linear (GPU)."""

from __future__ import annotations

import datetime as _dt
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ..cells import write_csv
from ..errors import UsageError
from ..kernels.shapes import parse_shape
from ..safefile import write_text
from ..workspace import replace_previous
from .options import DTYPE
from .options import gpu_check as _gpu_check
from .options import writable_dir as _writable_dir


@click.command()
@click.option("--shape", "shape_texts", multiple=True, help="M x d (repeatable; default 1024x4096 and 4096x4096)")
@click.option("--batch", "n", default=1, show_default=True, type=click.IntRange(1, 16))
@click.option("--table", "table_path", default=None, help="table (default results/<gpu>/table.json)")
@click.option("--calls", default=None, type=click.IntRange(1, 100000),
              help="calls per timed loop (default 300; with --hf-config, forwards per block: 10)")
@click.option("--repeats", default=None, type=click.IntRange(1, 1000),
              help="interleaved repeats (default 7; with --hf-config 20)")
@click.option("--out", "out_dir", default=None, help="output folder (default results/<gpu>/benchmarks/)")
@click.option("--hf-config", default=None, help="a Hugging Face config.json (or its folder): time one-token forwards "
              "of that model in eager PyTorch, stock against swap_linears, instead of single layers (needs gemvtune[hf])")
@click.option("--layers", "layers_text", default=None, help="with --hf-config: build the model with N layers "
              "(default: the config's)")
@DTYPE
def percall(shape_texts: tuple[str, ...], n: int, table_path: str | None, calls: int | None, repeats: int | None,
            out_dir: str | None, dtype: str, hf_config: str | None, layers_text: str | None) -> None:
    """GPU: µs per call of F.linear, nn.Linear, GemvLinear, the custom op, table.gemv (torch and CuPy)
    and a bare launch, side by side in one process; or, with --hf-config, ms per eager forward of a
    Hugging Face model stock against gemvtune. CSV and markdown."""
    if hf_config is None and layers_text is not None:
        raise UsageError("--layers needs --hf-config")
    if hf_config is not None:
        _percall_hf(hf_config, layers_text, shape_texts, n, table_path, calls or 10, repeats or 20, out_dir, dtype)
        return
    calls, repeats = calls or 300, repeats or 7
    shapes = [parse_shape(t, n, dtype) for t in (shape_texts or ("1024x4096", "4096x4096"))]
    try:
        import torch  # noqa: F401  (the check only: the measurement imports it where it needs it)
    except ImportError:
        raise UsageError("percall measures PyTorch paths and needs torch: pip install 'gemvtune[torch]'") from None
    _gpu_check()
    import pandas as pd

    from ..bench.percall import measure_percall, percall_markdown

    table, out = _table_and_out(table_path, out_dir)
    rows = [measure_percall(table, s, calls, repeats) for s in shapes]
    _write(out, "percall", pd.DataFrame(rows), {"table": str(table.path), "calls": calls, "repeats": repeats},
           lambda dev, command: percall_markdown(rows, dev, command), "%.4g", out_dir is None)


def _table_and_out(table_path: str | None, out_dir: str | None) -> tuple[Any, Path]:
    """The table (default results/<gpu>/table.json, checked against the GPU torch sees) and the output folder."""
    import torch

    from ..runtime.table import load_table
    from ..workspace import Workspace

    name = torch.cuda.get_device_name()
    ws = Workspace.for_gpu(name)
    table = load_table(table_path or ws.table)
    table._check_gpu(name)
    return table, _writable_dir(out_dir or str(ws.benchmarks))


def _write(out: Path, prefix: str, df: Any, meta: dict[str, Any], markdown: Callable[[dict, str], str],
           fmt: str, keep_latest: bool) -> None:
    """<prefix>-<date>.csv, .json (device, command, date, ``meta``) and .md (``markdown(device, command)``),
    the markdown echoed; ``keep_latest`` (the workspace's benchmarks, not a folder the user named): the
    previous run of the same prefix there goes."""
    import torch

    from ..runners.cuda import CudaRunner

    dev = {**CudaRunner().device_info(), "torch": torch.__version__}
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    command = "gemvtune " + " ".join(sys.argv[1:])
    base = out / f"{prefix}-{stamp}"
    write_csv(df, f"{base}.csv", float_format=fmt)
    write_text(Path(f"{base}.json"), json.dumps({"device": dev, "command": command, "date": stamp, **meta},
                                                indent=1, default=str))
    md = markdown(dev, command)
    write_text(Path(f"{base}.md"), md)
    click.echo(md)
    click.echo(f"wrote {base}.csv, .json, .md")
    if keep_latest:
        replace_previous(out, prefix, stamp)


def _percall_hf(hf_config: str, layers_text: str | None, shape_texts: tuple[str, ...], n: int, table_path: str | None,
                calls: int, repeats: int, out_dir: str | None, dtype: str) -> None:
    """percall --hf-config: the checks that need no GPU first (options, the config, transformers, the table),
    then the GPU check, then gemvtune.hf.percall; CSV, JSON and markdown under --out."""
    from ..hf.bench import positive_int
    from ..hf.model import build_config, check_transformers, file_name, read_config
    from ..runtime.table import load_table

    clash = [opt for opt, given in (("--shape", shape_texts), ("--batch", n != 1)) if given]
    if clash:
        raise UsageError(f"--hf-config times one-token forwards of the model (batch 1): drop {', '.join(clash)}")
    layers = positive_int(layers_text, "--layers") if layers_text is not None else None
    fields, name, cfg_file = read_config(hf_config)      # a bad config.json: one line
    check_transformers()
    build_config(fields, layers, where=f"config {cfg_file}")
    if table_path is not None:
        load_table(table_path)                           # a missing or corrupt table fails before any GPU work
    _gpu_check()
    import pandas as pd

    from ..hf.percall import forward_markdown, measure_hf_forward

    table, out = _table_and_out(table_path, out_dir)
    row = measure_hf_forward(hf_config, table, layers, {"fp16": "float16", "bf16": "bfloat16"}[dtype], calls, repeats)
    _write(out, f"percall-hf-{file_name(name)}-L{row['layers']}-{row['dtype']}", pd.DataFrame([row]),
           {"table": str(table.path), "row": row}, lambda dev, command: forward_markdown(row, dev, command), "%.5g",
           out_dir is None)
