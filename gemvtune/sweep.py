"""Sweeps: measure a whole grid of the GEMV space for a shape once, into a compressed CSV that the
replay runner serves. The grid below is the affordable part of the space (see GRID_NOTE)."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path
from typing import Any, Callable

from .compile import compile_variants
from .report import provenance
from .shapes import Shape
from .space import DOMAINS, GemvConfig

# A sweep measures every valid config of this grid (5,184 points before validity).
SWEEP_GRID: dict[str, tuple[Any, ...]] = {
    "block": (64, 128, 256, 512),
    "vec": ("half2", "half4", "half8"),
    "acc": ("fp32", "fp16"),
    "tpr": (8, 16, 32, 64, 128, 256),
    "unroll": (1, 2, 4, 8),
    "split_k": (1, 2, 4),
    "hint": ("default", "nc", "evict_first"),
    "x_load": ("ldg",),
    "pdl": ("off",),
    "occ": ("auto",),
}
GRID_NOTE = (
    "Left out of the full space (57,600 points before pdl was added) to fit one session's GPU time: block 32 and 1024, "
    "scalar half loads, tpr 2, 4, 512 and 1024, split_k 8 and 16, and x staged in shared memory; "
    "programmatic dependent launch (pdl=on) and the occupancy lever (occ=half/full), both added later, "
    "are not in the recorded sweeps. "
    "In the 200-config random samples of the decode suite (2026-11-29) none of these won a shape."
)


def grid_configs(grid: dict[str, tuple[Any, ...]] = SWEEP_GRID) -> list[GemvConfig]:
    assert set(grid) == set(DOMAINS)
    return [GemvConfig(**dict(zip(grid, v))) for v in itertools.product(*grid.values())]


def sweep_path(out_dir: str | Path, shape: Shape) -> Path:
    return Path(out_dir) / f"sweep-{shape.M}x{shape.d}x{shape.n}.csv.gz"


def run_sweep(runner: Any, shape: Shape, out_dir: str | Path, echo: Callable[[str], None] = print,
              ceiling: dict[str, Any] | None = None) -> Path:
    import pandas as pd

    t0 = time.perf_counter()
    configs = [c for c in grid_configs() if c.is_valid(shape)]
    compile_variants([(c, shape) for c in configs], arch=runner.arch)
    t1 = time.perf_counter()
    rows = []
    for c in configs:
        rows.append(runner.measure(c, shape, kind="sweep").row())
    t2 = time.perf_counter()
    df = pd.DataFrame(rows)
    path = sweep_path(out_dir, shape)
    path.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(path, index=False, float_format="%.6g", compression="gzip")
    counts = df.status.value_counts().to_dict()
    meta = provenance(runner.device_info(), ceiling=ceiling, shape=[shape.M, shape.d, shape.n], grid=SWEEP_GRID,
                      grid_points=len(grid_configs()), valid_in_grid=len(configs), left_out=GRID_NOTE,
                      statuses=counts, compile_s=round(t1 - t0, 1), measure_s=round(t2 - t1, 1),
                      runner={"replays": runner.replays, "warmup": runner.warmup, "target_us": runner.target_us})
    path.with_name(path.name.replace(".csv.gz", ".json")).write_text(json.dumps(meta, indent=1, default=str) + "\n")
    best = df[df.status == "ok"].sort_values("us_median").head(1)
    echo(f"{shape}: {len(configs)} configs in {t2 - t0:.0f} s (compile {t1 - t0:.0f} s); {counts}; best "
         + (f"{best.name.iloc[0]} {best.us_median.iloc[0]:.2f} µs" if len(best) else "none"))
    return path
