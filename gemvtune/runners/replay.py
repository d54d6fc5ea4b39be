"""The replay runner: serves what a sweep recorded on a GPU, so the search, the table and the reports
run unchanged on a machine with no GPU. A config the sweep did not measure is answered with the status
``not_in_sweep``, never with a made-up number."""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..shapes import Shape
from ..space import GemvConfig
from .base import Measurement, Status

NOT_IN_SWEEP = "not_in_sweep"
_FIELDS = ("us_median", "us_min", "us_max", "gbps", "pct_ceiling", "relerr", "rowerr", "bound", "registers",
           "spill_bytes", "smem_bytes", "compile_s", "launches", "samples", "copies")


def sweep_files(path: str | Path) -> list[Path]:
    p = Path(path)
    if p.is_dir():
        files = sorted(p.glob("sweep-*.csv.gz"))
    elif p.is_file():
        files = [p]
    else:
        raise UsageError(f"replay sweep {p} does not exist")
    if not files:
        raise UsageError(f"no sweep-*.csv.gz files in {p}")
    return files


class Sweep:
    """One recorded sweep: rows by config label, and its sidecar (device, ceiling, grid)."""

    def __init__(self, path: Path):
        import pandas as pd

        side = path.with_name(path.name.replace(".csv.gz", ".json"))
        try:
            self.meta = json.loads(side.read_text())
            df = pd.read_csv(path)
        except FileNotFoundError as e:
            raise UsageError(f"sweep {path}: missing {e.filename}") from None
        except (ValueError, OSError) as e:
            raise UsageError(f"sweep {path} cannot be read: {e}") from None
        need = {"name", "M", "d", "n", "status", "us_median"}
        if not need <= set(df.columns) or df.empty:
            raise UsageError(f"sweep {path} is not a gemvtune sweep (columns {sorted(need - set(df.columns))} missing)")
        self.path = path
        self.shape = Shape(int(df.M.iloc[0]), int(df.d.iloc[0]), int(df.n.iloc[0]))
        self.rows: dict[str, dict[str, Any]] = {r["name"]: r for r in df.to_dict("records")}
        self.grid: dict[str, list[Any]] = {k: list(v) for k, v in self.meta.get("grid", {}).items()}

    def optimum(self) -> tuple[str, float]:
        ok = [(r["us_median"], k) for k, r in self.rows.items() if r["status"] == Status.OK]
        us, label = min(ok)
        return label, us


class ReplayRunner:
    replayed = True
    arch = "replay"

    def __init__(self, path: str | Path):
        self.sweeps: dict[Shape, Sweep] = {}
        for f in sweep_files(path):
            s = Sweep(f)
            self.sweeps[s.shape] = s
        first = next(iter(self.sweeps.values()))
        self._device = {**first.meta.get("device", {}), "replayed_from": [str(s.path) for s in self.sweeps.values()]}
        self._ceiling = first.meta.get("ceiling") or {}
        self.calls = 0
        # Seconds each measurement takes, to stand in for GPU time (tests of several workers use it so the
        # workers really overlap); 0 by default.
        self.delay_s = float(os.environ.get("GEMVTUNE_REPLAY_DELAY", "0") or 0)

    def sweep(self, shape: Shape) -> Sweep:
        if shape not in self.sweeps:
            have = ", ".join(str(s) for s in self.sweeps)
            raise UsageError(f"no recorded sweep for {shape} (have: {have})")
        return self.sweeps[shape]

    def device_info(self) -> dict[str, Any]:
        return dict(self._device)

    def ceiling(self) -> dict[str, Any]:
        return dict(self._ceiling)

    def release(self) -> None:
        pass

    def baselines(self, shape: Shape) -> list[Measurement]:
        return []  # sweeps record GEMV variants only; cuBLAS is not replayed

    def measure(self, config: GemvConfig, shape: Shape, kind: str = "variant", verify: bool = True,
                timed: bool = True, **_: Any) -> Measurement:
        self.calls += 1
        m = Measurement(config.label, kind, shape.M, shape.d, shape.n, Status.OK, params=config.to_dict(),
                        method="replay")
        why = config.invalid_reasons(shape)
        if why:
            m.status, m.error = Status.INVALID, "; ".join(why)
            return m
        row = self.sweep(shape).rows.get(config.label)
        if self.delay_s > 0:
            time.sleep(self.delay_s)
        if row is None:
            m.status, m.error = NOT_IN_SWEEP, f"{config.label} was not measured in the sweep of {shape}"
            return m
        m.status = row["status"]
        m.error = "" if not isinstance(row.get("error"), str) else row["error"]
        for k in _FIELDS:
            v = row.get(k)
            if v is not None and not (isinstance(v, float) and math.isnan(v)):
                setattr(m, k, type(getattr(m, k))(v))
        return m
