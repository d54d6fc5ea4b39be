"""Measure chosen variants and the baselines of one or more shapes in one process: the llama.cpp config (d
compiled in), the seed kernel as written (d at run time), cuBLAS (cupy.matmul, torch F.linear) and, unless
skipped, Inductor max-autotune (each shape compiled once per process, autotuning included)."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..build.compile import compile_variants
from ..cells import write_csv as write_frame
from ..kernels.gemv import LLAMA_CPP, GemvConfig
from ..kernels.shapes import Shape
from ..reports.runcsv import provenance, shape_table, write_csv
from ..runners.base import Measurement
from ..safefile import write_text
from ..workspace import Workspace, replace_previous
from .report import LLAMA_NAME


def _start(echo: Callable[[str], None]) -> tuple:
    """The CUDA runner, its device description and the read ceiling of this run, announced."""
    from ..runners.cuda import CudaRunner

    runner = CudaRunner()
    dev = runner.device_info()
    echo(f"device: {dev['name']} (sm {dev.get('compute_capability')}, {dev.get('sm_count')} SMs, "
         f"L2 {dev.get('l2_bytes', 0) / 2**20:.0f} MiB, driver {dev['driver']})")
    ceil = runner.ceiling()
    echo(f"read ceiling: {ceil['read_gbps']:.0f} GB/s (min..max {ceil['read_gbps_min']:.0f}..{ceil['read_gbps_max']:.0f}); "
         f"launch floor {ceil['launch_floor_us']:.2f} µs")
    return runner, dev, ceil


def _llama(runner: Any, shape: Shape, verify: bool = True) -> Measurement:
    """The GEMV family's llama.cpp config, named for what it is (kind "llama.cpp", as older CSVs have it)."""
    m = runner.measure(LLAMA_CPP, shape, kind="llama.cpp", verify=verify)
    m.name = LLAMA_NAME
    return m


def _check(first: dict[str, Measurement], kind: str) -> bool:
    """Whether a contender is verified this round: in its first round, and again in every round after it
    failed (a kernel wrong in the first round is never timed unverified later)."""
    return kind not in first or not first[kind].ok


def _extra_lines(ms: list[Measurement]) -> str:
    """The seed kernel's and Inductor's rows, which the per-shape table leaves out."""
    out = []
    for m in ms:
        if m.kind in ("seed", "inductor"):
            out.append(f"  {m.name:46s} " + (f"{m.us_median:8.2f} µs  {m.pct_ceiling:5.1f}% of ceiling" if m.ok
                                              else f"{m.status}: {m.error[:90]}"))
    return "\n".join(out)


def run_bench(shapes: list[Shape], pick: Callable[[Shape], list[GemvConfig]], out_dir: str | None,
              echo: Callable[[str], None] = print, spin_check: bool = True, tag: str = "bench",
              inductor: bool = True) -> Path:
    runner, dev, ceil = _start(echo)
    rows: list[Measurement] = []
    tables = []
    for shape in shapes:
        configs = [c for c in pick(shape) if c != LLAMA_CPP]
        compile_variants([(c, shape) for c in configs if c.is_valid(shape)], arch=runner.arch)  # warms the cache
        ms = [_llama(runner, shape), runner.measure_seed(shape)]
        if spin_check:
            ms.append(runner.measure_spin(LLAMA_CPP, shape))
        ms.append(runner.measure_cublas(shape))
        t = runner.measure_torch_linear(shape)
        if t is not None:
            ms.append(t)
        if inductor:
            ms.append(runner.measure_inductor(shape))
        for c in configs:
            ms.append(runner.measure(c, shape))
        rows += ms
        tables.append(f"{shape} ({shape.weight_bytes / 1e6:.0f} MB, floor {shape.bytes_moved / (ceil['read_gbps'] * 1e3):.2f} µs)\n"
                      + shape_table(ms) + "\n" + _extra_lines(ms))
        echo(tables[-1])
        runner.release()
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    out = Path(out_dir) if out_dir else Workspace.for_gpu(dev["name"]).benchmarks
    name = f"{tag}-{stamp}.csv"
    path = write_csv(rows, out / name, provenance(dev, ceiling=ceil, shapes=[str(s) for s in shapes], inductor=inductor))
    echo(f"wrote {path} ({len(rows)} rows) and {path.with_suffix('.json').name}")
    if not out_dir:   # the workspace's benchmarks: the latest run of each benchmark is kept
        replace_previous(out, tag, stamp)
    return path


def run_tuned_bench(shapes: list[Shape], table_path: str, out_dir: str | None, echo: Callable[[str], None] = print,
                    rounds: int = 3, dispatch: bool = True, tag: str = "bench-tuned", inductor: bool = True) -> Path:
    """Per shape, in one process: the read ceiling, then the table's tuned kernel, the llama.cpp config, the
    seed kernel as written, cuBLAS and (``inductor``) Inductor max-autotune re-measured interleaved for
    ``rounds`` rounds (the correct ones verified in the first); summary with ratios, the best of cuBLAS and
    Inductor, geometric means per batch n, the dispatch overhead of ``table.gemv``; CSV (every measurement),
    summary CSV/markdown, bar chart."""
    import pandas as pd

    from ..runtime.table import load_table
    from .percall import dispatch_overhead
    from .report import bench_markdown, plot_bench, summary_row

    table = load_table(table_path)
    runner, dev, ceil = _start(echo)
    table._check_gpu(dev["name"])
    echo(f"table {table_path}")
    rows: list[Measurement] = []
    summary = []
    for shape in shapes:
        cfg, how = table.lookup(shape)
        compile_variants([(c, shape) for c in (cfg, LLAMA_CPP) if c.is_valid(shape)], arch=runner.arch)
        ms: list[Measurement] = []
        first: dict[str, Measurement] = {}   # each contender's first-round result
        for _ in range(rounds):
            got = [runner.measure(cfg, shape, kind="tuned", verify=_check(first, "tuned")),
                   _llama(runner, shape, verify=_check(first, "llama.cpp")),
                   runner.measure_seed(shape, verify=_check(first, "seed"))]
            got += runner.baselines(shape)
            if inductor:
                got.append(runner.measure_inductor(shape, verify=_check(first, "inductor")))
            for m in got:
                first.setdefault(m.kind, m)
            ms += got
        row = summary_row(shape, ms, ceil["read_gbps"], how)
        if dispatch and shape.dtype == "fp16":   # (table.gemv on CuPy arrays: CuPy has no bfloat16)
            row.update(dispatch_overhead(table, shape))
        summary.append(row)
        rows += ms
        echo(f"{shape!s:>14s} {row['tuned_us']:8.2f} µs {row['gbps']:6.0f} GB/s {row['pct_ceiling']:5.1f}%  "
             + "  ".join(f"x{row[x]:.3f} {label}" if row[x] == row[x] else f"x- {label}" for x, label in
                         (("x_best", "best"), ("x_cublas", "cuBLAS"), ("x_inductor", "Inductor"),
                          ("x_llama", "llama.cpp config"), ("x_seed", "seed")))
             + f"  ({row['tuned']}, {how})")
        runner.release()
    df = pd.DataFrame(summary)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    dtypes = {s.dtype for s in shapes}
    if len(dtypes) == 1:   # a BF16 run's files say so (bench-tuned-bf16-...); FP16 keeps the names from before
        tag += shapes[0].dtype_suffix("-") + shapes[0].weights_suffix("-")
    out = Path(out_dir) if out_dir else Workspace.for_gpu(dev["name"]).benchmarks
    path = write_csv(rows, out / f"{tag}-{stamp}.csv", provenance(dev, ceiling=ceil, table=str(table_path),
                                                               shapes=[str(s) for s in shapes], rounds=rounds,
                                                               inductor=inductor))
    write_frame(df, out / f"{tag}-{stamp}-summary.csv", float_format="%.6g")
    md = bench_markdown(df, ceil)
    write_text(out / f"{tag}-{stamp}-summary.md", md)
    plot_bench(df, out / f"{tag}-{stamp}.png", f"{dev['name']}: tuned vs its baselines ({stamp})")
    echo(md)
    echo(f"wrote {path}, its -summary.csv/-summary.md and {tag}-{stamp}.png")
    if not out_dir:
        replace_previous(out, tag, stamp)
    return path
