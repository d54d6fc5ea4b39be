"""Measure chosen variants and the baselines of one or more shapes in one process."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Callable

from .compile import compile_variants
from .report import gpu_slug, provenance, shape_table, write_csv
from .runners.base import Measurement
from .shapes import Shape
from .space import LLAMA_CPP, GemvConfig


def run_bench(shapes: list[Shape], pick: Callable[[Shape], list[GemvConfig]], out_dir: str | None,
              echo: Callable[[str], None] = print, spin_check: bool = True, tag: str = "bench") -> Path:
    from .runners.cuda import CudaRunner

    runner = CudaRunner()
    dev = runner.device_info()
    echo(f"device: {dev['name']} (sm {dev['compute_capability']}, {dev['sm_count']} SMs, "
         f"L2 {dev['l2_bytes'] / 2**20:.0f} MiB, driver {dev['driver']})")
    ceil = runner.ceiling()
    echo(f"read ceiling: {ceil['read_gbps']:.0f} GB/s (min..max {ceil['read_gbps_min']:.0f}..{ceil['read_gbps_max']:.0f}); "
         f"launch floor {ceil['launch_floor_us']:.2f} µs")
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
