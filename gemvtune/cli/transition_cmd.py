"""The transition command: the GEMV -> GEMM transition of one or more shapes measured on the GPU (time,
TFLOP/s and GB/s against batch n, beside the measured read and compute ceilings); CSV and PNG per shape."""

from __future__ import annotations

import click

from ..errors import UsageError
from ..kernels.shapes import DECODE_SUITE, MAX_BATCH, parse_shape
from .options import gpu_check as _gpu_check
from .options import writable_dir as _writable_dir


@click.command()
@click.option("--shape", "shape_texts", multiple=True, help="M x d (repeatable), e.g. 4096x4096")
@click.option("--suite", type=click.Choice(["decode"]), default=None, help="the decode suite of shapes")
@click.option("--batch", "batch_text", default="1..256", show_default=True,
              help="batches n: a power-of-two range a..b, a list 1,2,3,8,64, or both (1..16,24); n in 1..4096")
@click.option("--table", "table_path", default=None,
              help="table of the tuned kernels, used for n <= 16 (default results/<gpu>/table.json)")
@click.option("--out", "out_dir", default=None, help="output folder (default results/<gpu>/benchmarks/transition/)")
@click.option("--peak-size", default=8192, show_default=True, type=click.IntRange(1024, 16384),
              help="side of the square FP16 GEMM timed as the compute ceiling")
def transition(shape_texts: tuple[str, ...], suite: str | None, batch_text: str, table_path: str | None,
               out_dir: str | None, peak_size: int) -> None:
    """GPU: the GEMV -> GEMM transition. Per shape and batch n, interleaved in one process: the table's
    tuned kernel (n <= 16), cuBLAS (F.linear in a CUDA graph, cold L2), beside the read ceiling and the
    FP16 tensor-core ceiling measured in the same run and the ridge point between them; a CSV, a
    three-panel PNG (µs, TFLOP/s, GB/s against n) and a markdown table per shape."""
    from ..transition.measure import parse_batch_list, run_transition

    ns = parse_batch_list(batch_text)
    shapes = [parse_shape(t) for t in shape_texts]
    if suite == "decode":
        shapes += [parse_shape(f"{M}x{d}") for M, d in DECODE_SUITE]
    if not shapes:
        raise UsageError("transition needs --shape or --suite")
    pairs = list(dict.fromkeys((s.M, s.d) for s in shapes))
    if table_path is not None and any(n <= MAX_BATCH for n in ns):
        from ..runtime.table import load_table

        load_table(table_path)        # a missing or corrupt table fails before any GPU work
    if out_dir is not None:
        _writable_dir(out_dir)
    try:
        import torch  # noqa: F401  (cuBLAS and the compute ceiling are timed through it)
    except ImportError:
        raise UsageError("transition times cuBLAS through PyTorch and needs torch: pip install 'gemvtune[torch]'") from None
    _gpu_check()
    run_transition(pairs, ns, table_path, out_dir, echo=click.echo, peak_size=peak_size)
