"""The percall commands (a group, registered on the main group): ``percall ops``, the per-call CPU cost of every
user-facing launch path beside F.linear, and ``percall hf``, the host cost of a Hugging Face model's eager
forward, stock against gemvtune (GPU). The old spelling without a subcommand (``percall --shape ...``,
``percall --hf-config PATH``) runs the same code for one release, saying so in one line on stderr."""

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
from .options import DTYPE_DECL, Decl, declared, given_options, old_spelling
from .options import gpu_check as _gpu_check
from .options import writable_dir as _writable_dir

# Every option of the percall commands, declared once (keys: the click parameter's name).
OPTS: dict[str, Decl] = {
    "shape_texts": (("--shape", "shape_texts"), {"multiple": True,
                                                 "help": "M x d (repeatable; default 1024x4096 and 4096x4096)"}),
    "n": (("--batch", "n"), {"default": 1, "show_default": True, "type": click.IntRange(1, 16), "help": "batch n (columns of x)"}),
    "table_path": (("--table", "table_path"), {"help": "table (default results/<gpu>/table.json)"}),
    "calls": (("--calls",), {"type": click.IntRange(1, 100000),
                             "help": "calls per timed loop (default 300; with --hf-config, forwards per block: 10)"}),
    "repeats": (("--repeats",), {"type": click.IntRange(1, 1000),
                                 "help": "interleaved repeats (default 7; with --hf-config 20)"}),
    "out_dir": (("--out", "out_dir"), {"help": "output folder (default results/<gpu>/benchmarks/)"}),
    "hf_config": (("--hf-config", "hf_config"), {"help": "a Hugging Face config.json (or its folder)"}),
    "layers_text": (("--layers", "layers_text"), {"metavar": "N",
                                                  "help": "build the model with N layers (default: the config's)"}),
    "dtype": DTYPE_DECL,
}
OPS = "shape_texts n table_path calls repeats out_dir dtype"
HF = "layers_text table_path calls repeats out_dir dtype"   # after the CONFIG argument


@click.group(invoke_without_command=True)
@declared(OPTS, "shape_texts n table_path calls repeats out_dir hf_config layers_text dtype", hidden=True)   # (old)
@click.pass_context
def percall(ctx: click.Context, **params: Any) -> None:
    """GPU: the host cost of gemvtune's calls in eager PyTorch: µs per call of every launch path beside
    F.linear (percall ops), or ms per eager forward of a Hugging Face model, stock against gemvtune
    (percall hf).

    The old spelling without a subcommand (percall --shape ..., percall --hf-config PATH) still runs,
    deprecated: it is removed in the next release."""
    if params["hf_config"] is not None:
        old, new = "percall --hf-config", "percall hf"
    else:
        old, new = " ".join(["percall", *given_options(ctx)[:1]]), "percall ops"
    if not old_spelling(ctx, old, new):
        return
    p = params
    if p["hf_config"] is None and p["layers_text"] is not None:
        raise UsageError("--layers needs --hf-config")
    if p["hf_config"] is not None:
        clash = [opt for opt, given in (("--shape", p["shape_texts"]), ("--batch", p["n"] != 1)) if given]
        if clash:
            raise UsageError(f"--hf-config times one-token forwards of the model (batch 1): drop {', '.join(clash)}")
        run_hf(p["hf_config"], p["layers_text"], p["table_path"], p["calls"] or 10, p["repeats"] or 20, p["out_dir"],
               p["dtype"])
        return
    run_ops(p["shape_texts"], p["n"], p["table_path"], p["calls"] or 300, p["repeats"] or 7, p["out_dir"], p["dtype"])


@percall.command("ops", short_help="µs per call of every launch path beside F.linear, per shape")
@declared(OPTS, OPS, calls={"default": 300, "show_default": True, "help": "calls per timed loop"},
          repeats={"default": 7, "show_default": True, "help": "interleaved repeats"})
def ops(**params: Any) -> None:
    """µs per call of F.linear, nn.Linear, GemvLinear, the custom op, table.gemv (torch and CuPy) and a bare
    launch, side by side in one process, per shape; CSV and markdown."""
    run_ops(**params)


@percall.command("hf", short_help="ms per eager forward of a Hugging Face model, stock against gemvtune")
@click.argument("hf_config", metavar="CONFIG")
@declared(OPTS, HF, calls={"default": 10, "show_default": True, "help": "forwards per timed block"},
          repeats={"default": 20, "show_default": True, "help": "interleaved blocks of each"})
def hf(**params: Any) -> None:
    """ms per one-token eager forward of the model of CONFIG (a Hugging Face config.json or its folder,
    random weights), stock against swap_linears, interleaved in short blocks; CSV and markdown (needs
    gemvtune[hf])."""
    run_hf(**params)


def run_ops(shape_texts: tuple[str, ...], n: int, table_path: str | None, calls: int, repeats: int,
            out_dir: str | None, dtype: str) -> None:
    """percall ops: the shapes and torch checked, then the GPU check, then gemvtune.bench.percall."""
    shapes = [parse_shape(t, n, dtype) for t in (shape_texts or ("1024x4096", "4096x4096"))]
    try:
        import torch  # noqa: F401  (the check only: the measurement imports it where it needs it)
    except ImportError:
        raise UsageError("percall measures PyTorch paths and needs torch: pip install 'gemvtune[torch]'") from None
    _gpu_check()
    import pandas as pd

    from ..bench.percall import measure_percall, percall_markdown

    table, out = _table_and_out(table_path, out_dir)
    if table.foreign:   # (the GPU check above made it so: another GPU model's table never launches a kernel here)
        raise UsageError(f"percall ops times the table's kernels, and {table.foreign} (gemvtune.runtime.tablegpu); "
                         f"give --table a table tuned on this GPU (gemvtune tune ... writes one)")
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


def run_hf(hf_config: str, layers_text: str | None, table_path: str | None, calls: int, repeats: int,
           out_dir: str | None, dtype: str) -> None:
    """percall hf: the checks that need no GPU first (the layers, the config, transformers, the table), then
    the GPU check, then gemvtune.hf.percall; CSV, JSON and markdown under --out."""
    from ..hf.bench import positive_int
    from ..hf.model import build_config, check_transformers, file_name, read_config
    from ..runtime.table import load_table

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
