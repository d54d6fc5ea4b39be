"""Measure chosen variants and the baselines of one or more shapes in one process."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from pathlib import Path

from ..kernels.compile import compile_variants
from ..kernels.gemv import LLAMA_CPP, GemvConfig
from ..kernels.shapes import Shape
from ..reports.report import gpu_slug, provenance, shape_table, write_csv
from ..runners.base import Measurement


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


def run_bench(shapes: list[Shape], pick: Callable[[Shape], list[GemvConfig]], out_dir: str | None,
              echo: Callable[[str], None] = print, spin_check: bool = True, tag: str = "bench") -> Path:
    runner, dev, ceil = _start(echo)
    rows: list[Measurement] = []
    tables = []
    for shape in shapes:
        configs = [c for c in pick(shape) if c != LLAMA_CPP]
        compile_variants([(c, shape) for c in configs if c.is_valid(shape)], arch=runner.arch)  # warms the cache
        ms = [runner.measure(LLAMA_CPP, shape, kind="llama.cpp")]
        if spin_check:
            ms.append(runner.measure_spin(LLAMA_CPP, shape))
        ms.append(runner.measure_cublas(shape))
        t = runner.measure_torch_linear(shape)
        if t is not None:
            ms.append(t)
        for c in configs:
            ms.append(runner.measure(c, shape))
        rows += ms
        tables.append(f"{shape} ({shape.weight_bytes / 1e6:.0f} MB, floor {shape.bytes_moved / (ceil['read_gbps'] * 1e3):.2f} µs)\n"
                      + shape_table(ms))
        echo(tables[-1])
        runner.release()
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    out = Path(out_dir) if out_dir else Path("results") / gpu_slug(dev["name"])
    name = f"{tag}-{stamp}.csv"
    path = write_csv(rows, out / name, provenance(dev, ceiling=ceil, shapes=[str(s) for s in shapes]))
    echo(f"wrote {path} ({len(rows)} rows) and {path.with_suffix('.json').name}")
    return path


def run_tuned_bench(shapes: list[Shape], table_path: str, out_dir: str | None, echo: Callable[[str], None] = print,
                    rounds: int = 3, dispatch: bool = True, tag: str = "bench-tuned") -> Path:
    """Per shape, in one process: the read ceiling, then the table's tuned kernel, the llama.cpp config
    and cuBLAS re-measured interleaved for ``rounds`` rounds; summary with ratios and geometric means,
    the dispatch overhead of ``table.gemv``; CSV (every measurement), summary CSV/markdown, bar chart."""
    import pandas as pd

    from ..reports.benchreport import bench_markdown, plot_bench, summary_row
    from ..runtime.table import load_table
    from .percall import dispatch_overhead

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
        for r in range(rounds):
            m = runner.measure(cfg, shape, kind="tuned", verify=(r == 0))
            ms.append(m)
            ms.append(runner.measure(LLAMA_CPP, shape, kind="llama.cpp", verify=(r == 0)))
            ms += runner.baselines(shape)
        row = summary_row(shape, ms, ceil["read_gbps"], how)
        if dispatch:
            row.update(dispatch_overhead(table, shape))
        summary.append(row)
        rows += ms
        echo(f"{shape!s:>14s} {row['tuned_us']:8.2f} µs {row['gbps']:6.0f} GB/s {row['pct_ceiling']:5.1f}%  "
             f"x{row['x_cublas']:.3f} cuBLAS  x{row['x_llama']:.3f} llama.cpp  ({row['tuned']}, {how})")
        runner.release()
    df = pd.DataFrame(summary)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    out = Path(out_dir) if out_dir else Path("results") / gpu_slug(dev["name"])
    path = write_csv(rows, out / f"{tag}-{stamp}.csv", provenance(dev, ceiling=ceil, table=str(table_path),
                                                               shapes=[str(s) for s in shapes], rounds=rounds))
    df.to_csv(out / f"{tag}-{stamp}-summary.csv", index=False, float_format="%.6g")
    md = bench_markdown(df, ceil)
    (out / f"{tag}-{stamp}-summary.md").write_text(md)
    plot_bench(df, out / f"{tag}-{stamp}.png", f"{dev['name']}: tuned vs llama.cpp config vs cuBLAS ({stamp})")
    echo(md)
    echo(f"wrote {path}, its -summary.csv/-summary.md and {tag}-{stamp}.png")
    return path
