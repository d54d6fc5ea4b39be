"""Export a recorded sweep as a Kernel Tuner cache file (its simulation mode replays it)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from ..runners.replay import Sweep
from ..safefile import write_text

KT_KERNEL_NAME = "gemv"


def kt_problem_size(sweep: Sweep) -> list[int]:
    return [sweep.shape.M, sweep.shape.d]


def export_kt_cache(sweep: Sweep, path: str | Path) -> Path:
    """Kernel Tuner 1.x cache JSON: tune_params (the sweep grid, in order), and one entry per recorded
    config keyed by its values joined with ','; time in ms (objective), failures as KT's error names."""
    keys = list(sweep.grid)
    cache: dict[str, Any] = {}
    for row in sweep.rows.values():
        params = {k: row[f"p_{k}"] for k in keys}
        key = ",".join(str(params[k]) for k in keys)
        entry: dict[str, Any] = dict(params)
        if row["status"] == "ok" and not math.isnan(row["us_median"]):
            entry.update(time=row["us_median"] / 1000.0, times=[row["us_median"] / 1000.0],
                         compile_time=0.0, verification_time=0.0, benchmark_time=0.0)
        else:
            entry.update(time="CompilationFailedConfig" if row["status"] == "compile_error" else "RuntimeFailedConfig")
        cache[key] = entry
    data = {"device_name": sweep.meta.get("device", {}).get("name", "gpu"), "kernel_name": KT_KERNEL_NAME,
            "problem_size": kt_problem_size(sweep), "tune_params_keys": keys, "tune_params": sweep.grid,
            "objective": "time", "cache": cache}
    path = Path(path)
    write_text(path, json.dumps(data))
    return path
