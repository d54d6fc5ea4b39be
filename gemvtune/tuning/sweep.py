"""Sweeps: measure a whole grid of one family's space for a shape once, into a compressed CSV that the
replay runner serves. Each family's grid (``Family.sweep_grid``) is the affordable part of its space
(``Family.sweep_note`` says what it leaves out); the sidecar names the family (a sidecar that names
none, as the sweeps recorded before split-K, holds the default family's)."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..build.compile import compile_variants
from ..cells import write_csv
from ..errors import UsageError
from ..kernels.families import DEFAULT_FAMILY, get_family
from ..kernels.shapes import Shape
from ..provenance import provenance
from ..safefile import write_text

__all__ = ["grid_configs", "run_sweep", "sweep_path"]


def grid_configs(grid: dict[str, tuple[Any, ...]] | None = None, family: str = DEFAULT_FAMILY) -> list[Any]:
    """Every point of ``grid`` (default: the family's sweep grid) as configs of ``family``."""
    fam = get_family(family)
    if fam.library:
        raise UsageError(f"the {fam.name} family has no sweep: {fam.sweep_note}")
    grid = fam.sweep_grid if grid is None else grid
    assert set(grid) == set(fam.domains)
    return [fam.config_cls(**dict(zip(grid, v))) for v in itertools.product(*grid.values())]


def sweep_path(out_dir: str | Path, shape: Shape, family: str = DEFAULT_FAMILY) -> Path:
    """``sweep-MxDxN.csv.gz``; another family's sweep has its study suffix (``sweep-MxDxN-splitk.csv.gz``)."""
    return Path(out_dir) / (f"sweep-{shape.M}x{shape.d}x{shape.n}{shape.dtype_suffix('-')}{shape.weights_suffix('-')}"
                            f"{get_family(family).study_suffix}.csv.gz")


def run_sweep(runner: Any, shape: Shape, out_dir: str | Path, echo: Callable[[str], None] = print,
              ceiling: dict[str, Any] | None = None, family: str = DEFAULT_FAMILY) -> Path:
    import pandas as pd

    fam = get_family(family)
    t0 = time.perf_counter()
    grid = grid_configs(family=family)
    configs = [c for c in grid if c.is_valid(shape, None if runner.replayed else runner.arch)]   # (on its arch)
    compile_variants([(c, shape) for c in configs], arch=runner.arch)
    t1 = time.perf_counter()
    rows = []
    for c in configs:
        rows.append(runner.measure(c, shape, kind="sweep").row())
    t2 = time.perf_counter()
    df = pd.DataFrame(rows)
    path = sweep_path(out_dir, shape, family)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_csv(df, path, float_format="%.6g", compression="gzip")
    counts = df.status.value_counts().to_dict()
    meta = provenance(runner.device_info(), ceiling=ceiling, shape=[shape.M, shape.d, shape.n], family=fam.name,
                      grid=fam.sweep_grid, grid_points=len(grid), valid_in_grid=len(configs), left_out=fam.sweep_note,
                      statuses=counts, compile_s=round(t1 - t0, 1), measure_s=round(t2 - t1, 1),
                      runner={"replays": runner.replays, "warmup": runner.warmup, "target_us": runner.target_us})
    write_text(path.with_name(path.name.replace(".csv.gz", ".json")), json.dumps(meta, indent=1, default=str) + "\n")
    best = df[df.status == "ok"].sort_values("us_median").head(1)
    echo(f"{shape}: {len(configs)} configs in {t2 - t0:.0f} s (compile {t1 - t0:.0f} s); {counts}; best "
         + (f"{best.name.iloc[0]} {best.us_median.iloc[0]:.2f} µs" if len(best) else "none"))
    return path
