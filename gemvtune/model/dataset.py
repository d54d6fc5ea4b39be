"""The cost model's training data: every verified, timed measurement a GPU's results folder records, from
the sweeps (``sweep-*.csv.gz``, the GEMV family's grids at n = 1) and the searches
(``search-*.csv[.gz]``, every family and batch), in ``measurements/`` (the committed data, compressed) and in the
``sweeps/`` and ``searches/`` folders runs write. One row per (source, config, shape): the config (any
template family), the shape, the µs and the time relative to that run's read floor (``100 / pct_ceiling``:
the floor is the weight bytes over the read ceiling measured in the same run), and where it came from.
Rows that failed (compile, launch, wrong answer), were pruned as invalid, or hold a library's algorithm are
left out; a file that cannot be read is skipped with its reason, never half-read."""

from __future__ import annotations

import io
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ..errors import UsageError
from ..kernels.families import DEFAULT_FAMILY, FAMILIES, config_from_dict
from ..kernels.shapes import Shape
from ..userfile import read_json
from ..workspace import Workspace

_NAME = re.compile(r"^(?:sweep|search)-(\d+)x(\d+)x(\d+)(?:-(bf16))?(?:-\d{8}-\d{6})?\.csv(?:\.gz)?$", re.ASCII)


@dataclass
class Dataset:
    """Measurements (``frame``: config, shape, us, rel (µs / read floor), source, kind) and the files skipped."""

    frame: pd.DataFrame
    sm_count: int
    gpu: str
    read_gbps: float                 # the median read ceiling the sidecars record (converts predictions to µs)
    skipped: list[str] = field(default_factory=list)

    @property
    def shapes(self) -> list[Shape]:
        return sorted(set(self.frame["shape"]), key=lambda s: (s.n, s.M, s.d))


def _rows(path: Path, kind: str) -> list[dict[str, Any]]:
    m = _NAME.match(path.name)
    if m is None:
        raise ValueError("not a sweep or search CSV name")
    shape = Shape(int(m.group(1)), int(m.group(2)), int(m.group(3)), m.group(4) or "fp16")
    from ..userfile import SWEEP_BYTES, read_bytes

    raw = read_bytes(path, kind, SWEEP_BYTES)   # a regular file, capped (a UsageError is a ValueError: skipped)
    df = pd.read_csv(io.BytesIO(raw), low_memory=False, compression="gzip" if path.name.endswith(".gz") else None)
    if "status" not in df or "pct_ceiling" not in df or "us_median" not in df:
        raise ValueError("no status, us_median or pct_ceiling column")
    df = df[(df["status"] == "ok") & (df["pct_ceiling"] > 0) & (df["us_median"] > 0)]
    pcols = [c for c in df.columns if c.startswith("p_") and c != "p_family"]
    fam_col = "family" if "family" in df.columns else ("p_family" if "p_family" in df.columns else None)
    out = []
    for rec in df.to_dict("records"):
        fam = rec.get(fam_col, DEFAULT_FAMILY) if fam_col else DEFAULT_FAMILY
        if not isinstance(fam, str) or fam not in FAMILIES or FAMILIES[fam].library:
            continue
        params = {c[2:]: rec[c] for c in pcols
                  if c[2:] in FAMILIES[fam].domains and not (isinstance(rec[c], float) and math.isnan(rec[c]))}
        params = {k: (int(v) if isinstance(FAMILIES[fam].domains[k][0], int) else str(v)) for k, v in params.items()}
        try:
            cfg = config_from_dict({"family": fam, **params})
        except Exception:   # a parameter the family no longer has (an older template): not this model's data
            continue
        if not cfg.is_valid(shape):
            continue
        out.append({"config": cfg, "shape": shape, "family": fam, "us": float(rec["us_median"]),
                    "rel": 100.0 / float(rec["pct_ceiling"]), "source": path.name, "kind": kind})
    return out




def _files(results: Path, kind: str, suffix: str = ".csv") -> list[Path]:
    """A kind's files (``sweep``/``search``; ``.csv``/``.json`` or gzip-compressed) in its folders, by name (the order
    the fit sees them in), each base name once: the first folder's copy wins (an archived run that a later run
    still keeps uncompressed is one run)."""
    ws = Workspace(results)   # measurements/ (the committed data, compressed), then the folder a run writes
    seen: dict[str, Path] = {}
    for folder in (ws.measurements, ws.sweeps if kind == "sweep" else ws.searches):
        for pattern in (f"{kind}-*{suffix}", f"{kind}-*{suffix}.gz"):
            for p in sorted(folder.glob(pattern)):
                seen.setdefault(p.name.removesuffix(".gz"), p)
    return [seen[k] for k in sorted(seen)]


def _gpu(results: Path) -> tuple[int, str, float]:
    """The GPU's SM count and name (the first sidecar that records them, sweeps first) and the median of the
    read ceilings the sidecars record."""
    sm, name, ceilings = 0, "", []
    for p in _files(results, "sweep", ".json") + _files(results, "search", ".json"):
        try:
            data = read_json(p, "sidecar")
        except UsageError:   # not a regular file, too large, not JSON: not a sidecar to learn from
            continue
        dev = data.get("device") if isinstance(data, dict) else None
        if not sm and isinstance(dev, dict) and isinstance(dev.get("sm_count"), int) and dev["sm_count"] > 0:
            sm, name = dev["sm_count"], str(dev.get("name", ""))
        ceil = data.get("ceiling") if isinstance(data, dict) else None
        g = ceil.get("read_gbps") if isinstance(ceil, dict) else None
        if isinstance(g, (int, float)) and math.isfinite(g) and g > 0:
            ceilings.append(float(g))
    if not sm or not ceilings:
        raise ValueError(f"no sidecar under {results} records the GPU's SM count and read ceiling")
    return sm, name, float(sorted(ceilings)[len(ceilings) // 2])


def load(results: str | Path, sweeps: bool = True, searches: bool = True, dtype: str = "fp16") -> Dataset:
    """Every usable measurement of ``dtype`` inputs under a GPU's results folder (``results/<gpu>``): one model
    per dtype (the model has no dtype feature; FP16 is what every recorded sweep measured)."""
    results = Path(results)
    sm, gpu, gbps = _gpu(results)
    rows: list[dict[str, Any]] = []
    skipped: list[str] = []
    files = ([(p, "sweep") for p in _files(results, "sweep")] if sweeps else []) + \
            ([(p, "search") for p in _files(results, "search")] if searches else [])
    for p, kind in files:
        m = _NAME.match(p.name)
        if m is not None and (m.group(4) or "fp16") != dtype:
            continue
        try:
            rows += _rows(p, kind)
        except (OSError, ValueError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
            skipped.append(f"{p.name}: {e}")
    frame = pd.DataFrame(rows, columns=["config", "shape", "family", "us", "rel", "source", "kind"])
    return Dataset(frame, sm, gpu, gbps, skipped)
