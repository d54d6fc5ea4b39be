"""The shapes command (registered on the main group): the distinct GEMV shapes of one decode step of a model on one
GPU (its tensor-parallel shards), the linears that run each, their launches, weight bytes and share of the step.
No GPU; the computation is ``gemvtune.kernels.modelshapes.step_shapes``."""

from __future__ import annotations

import csv
from typing import Any

import click

from ..errors import UsageError
from ..kernels.shapes import parse_batches
from ..tuning.search_options import ModelPreset
from .options import DTYPE, WEIGHTS_OPT, writable_file

CSV_COLUMNS = ("model", "tp", "fused", "dtype", "weights", "batch", "M", "d", "n", "layers", "calls", "weight_bytes", "share")


@click.command()
@click.option("--hf-config", "hf_config", metavar="PATH",
              help="the model's Hugging Face config.json (the file or its folder; local only)")
@click.option("--model", "model", type=ModelPreset(), help="a model preset instead of a config.json")
@click.option("--tp", "tp", type=click.IntRange(min=1), default=1, show_default=True,
              help="tensor-parallel GPUs: list one GPU's shards, as vLLM and SGLang split the model")
@click.option("--fused", is_flag=True, default=False,
              help="the fused linears engines run (qkv, gate_up) instead of transformers' unfused ones")
@click.option("--batch", "batch_text", default="1", show_default=True, help="decode batch sizes n, e.g. 1,4")
@DTYPE
@WEIGHTS_OPT
@click.option("--csv", "csv_path", metavar="FILE", help="also write the rows as CSV here")
def shapes(hf_config: str | None, model: str | None, tp: int, fused: bool, batch_text: str, dtype: str,
           weights: str | None, csv_path: str | None) -> None:
    """List the distinct GEMV shapes of one decode step of a model on one GPU: the linears that run each, how
    many times per step, the weight bytes they read and their share of the step (largest first). No GPU."""
    from ..kernels.hfconfig import read_hf_config, read_preset
    from ..kernels.modelshapes import routing, step_shapes

    if (hf_config is None) == (model is None):
        raise UsageError("shapes needs one model: --model PRESET or --hf-config PATH")
    batches = parse_batches(batch_text)
    if csv_path is not None:
        writable_file(csv_path, "--csv file")            # before any output
    m = read_preset(model) if model else read_hf_config(str(hf_config))
    tables = [(n, step_shapes(m, n, tp, fused, dtype, weights or "")) for n in batches]   # a bad TP: one line first
    rows: list[dict[str, Any]] = []
    click.echo(f"{m.name} ({m.model_type}): {m.num_hidden_layers} layers, "
               + (f"TP {tp}: one GPU's shards" if tp > 1 else "one GPU") + f", {'fused' if fused else 'unfused'}, "
               + dtype + (f", {weights} weights (codes and scales)" if weights else ""))
    if m.note:
        click.echo(f"note: {m.note}")
    if m.moe:
        click.echo(f"experts: {m.moe.top_k} of {m.moe.experts} per token in {m.moe.sparse_layers} sparse layers; at "
                   "batch n a sparse layer reads E(1-(1-k/E)^n) experts, each on ceil(n*k / that) tokens "
                   "(uniform routing)")
    for n, table in tables:
        click.echo("")
        line = f"batch n = {n}"
        if m.moe:
            r = routing(m.moe.experts, m.moe.top_k, n)
            line += f": {float(r.active):.2f} experts read per sparse layer, {r.tokens} token(s) each"
        click.echo(line)
        click.echo(f"{'M x d':>14s} {'n':>3s} {'calls':>8s} {'MB/step':>10s} {'share':>7s}  layers")
        for s in sorted(table, key=lambda s: -s.weight_bytes):
            calls = f"{s.calls:.0f}" if s.calls == int(s.calls) else f"{s.calls:.2f}"
            click.echo(f"{s.shape.M:>7d}x{s.shape.d:<6d} {s.shape.n:>3d} {calls:>8s} {s.weight_bytes / 1e6:>10.1f} "
                       f"{100 * s.share:>6.2f}%  {', '.join(s.layers)}")
            rows.append({"model": m.name, "tp": tp, "fused": fused, "dtype": dtype, "weights": weights or "", "batch": n, "M": s.shape.M,
                         "d": s.shape.d, "n": s.shape.n, "layers": " ".join(s.layers), "calls": f"{s.calls:.6g}",
                         "weight_bytes": f"{s.weight_bytes:.0f}", "share": f"{s.share:.6g}"})
        total = sum(s.weight_bytes for s in table)
        click.echo(f"total: {total / 1e9:.2f} GB of weights read per step on each GPU, {len(table)} shapes")
    if csv_path is not None:
        from ..cells import csv_cell
        from ..safefile import write_with

        def write(f: Any) -> None:
            w = csv.DictWriter(f, CSV_COLUMNS, lineterminator="\n")
            w.writeheader()
            w.writerows({k: csv_cell(v) for k, v in row.items()} for row in rows)

        write_with(csv_path, write, "--csv file")
        click.echo(f"wrote {csv_path}")
