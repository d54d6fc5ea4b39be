"""The cost model's training data: every verified, timed measurement a GPU's results folder records, from
the sweeps (``sweep-*.csv.gz``, the GEMV family's grids at n = 1) and the searches
(``search-*.csv[.gz]``, every family, batch, dtype and weight format), in ``measurements/`` (the committed data,
compressed; the searches packed in one archive, ``model.archive``) and in the ``sweeps/`` and ``searches/`` folders
runs write. One row per (source, config, shape): the config (any
template family), the shape, the µs and the time relative to that run's read floor (``100 / pct_ceiling``:
the floor is the weight bytes over the read ceiling measured in the same run), and where it came from.
Rows that failed (compile, launch, wrong answer), were pruned as invalid, or hold a library's algorithm are
left out; a file that cannot be read is skipped with its reason, never half-read."""

from __future__ import annotations

import io
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ..errors import UsageError
from ..kernels.families import DEFAULT_FAMILY, FAMILIES, config_from_dict
from ..kernels.shapes import Shape
from ..workspace import Workspace, model_group

_NAME = re.compile(r"^(?:sweep|search)-(\d+)x(\d+)x(\d+)(?:-(bf16))?(?:-(e4m3-row|e4m3-b128))?(?:-\d{8}-\d{6})?"
                   r"\.csv(?:\.gz)?$", re.ASCII)


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


def name_shape(name: str) -> Shape | None:
    """The shape a sweep's or search's file name names (``search-MxDxN[-bf16][-e4m3-row]-<stamp>.csv[.gz]``, as
    ``tuning.search_run`` writes it); None for any other name, or a shape that is not valid."""
    m = _NAME.match(name)
    if m is None:
        return None
    try:
        return Shape(int(m.group(1)), int(m.group(2)), int(m.group(3)), m.group(4) or "fp16", m.group(5) or "")
    except ValueError:   # (a UsageError is a ValueError)
        return None


def family_column(columns: Any) -> str | None:
    """The column naming each trial's family: ``family``, or ``p_family``; None in the first searches (GEMV only)."""
    return "family" if "family" in columns else ("p_family" if "p_family" in columns else None)


def _rows(name: str, raw: bytes, kind: str) -> list[dict[str, Any]]:
    shape = name_shape(name)
    if shape is None:
        raise ValueError("not a sweep or search CSV name, or not a valid shape")
    df = pd.read_csv(io.BytesIO(raw), low_memory=False)
    if "status" not in df or "pct_ceiling" not in df or "us_median" not in df:
        raise ValueError("no status, us_median or pct_ceiling column")
    df = df[(df["status"] == "ok") & (df["pct_ceiling"] > 0) & (df["us_median"] > 0)]
    pcols = [c for c in df.columns if c.startswith("p_") and c != "p_family"]
    fam_col = family_column(df.columns)
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
                    "rel": 100.0 / float(rec["pct_ceiling"]), "source": name, "kind": kind})
    return out




Source = tuple[str, Callable[[], bytes]]   # a file's name (no .gz) and how to read its bytes (decompressed)


def _reader(p: Path, what: str) -> Callable[[], bytes]:
    from ..userfile import SWEEP_BYTES, read_maybe_gz

    return lambda: read_maybe_gz(p, what, SWEEP_BYTES)   # a regular file, capped (a UsageError is a ValueError)


def _const(data: bytes) -> Callable[[], bytes]:
    return lambda: data


def _files(results: Path, kind: str, suffix: str = ".csv", skipped: list[str] | None = None) -> list[Source]:
    """A kind's files (``sweep``/``search``; ``.csv``/``.json`` or gzip-compressed) in its folders, and the
    searches packed in ``measurements/searches.json.xz``, by name (the order the fit sees them in), each base name
    once: the first copy wins (the archive, then measurements/, then the folder runs write). An archive that
    cannot be read is skipped whole, with its reason in ``skipped``."""
    from .archive import ARCHIVE, read_archive

    ws = Workspace(results)   # measurements/ (the committed data, compressed), then the folder a run writes
    seen: dict[str, Callable[[], bytes]] = {}
    if kind == "search" and (ws.measurements / ARCHIVE).exists():
        try:
            for name, data in read_archive(ws.measurements / ARCHIVE).items():
                if name.endswith(suffix):
                    seen.setdefault(name, _const(data))
        except UsageError as e:
            if skipped is not None:
                skipped.append(f"{ARCHIVE}: {e}")
    for folder in (ws.measurements, ws.sweeps if kind == "sweep" else ws.searches):
        for pattern in (f"{kind}-*{suffix}", f"{kind}-*{suffix}.gz"):
            for p in sorted(folder.glob(pattern)):
                seen.setdefault(p.name.removesuffix(".gz"), _reader(p, kind))
    return [(k, seen[k]) for k in sorted(seen)]


def _gpu(results: Path) -> tuple[int, str, float]:
    """The GPU's SM count and name (the first sidecar that records them, sweeps first) and the median of the
    read ceilings the sidecars record."""
    sm, name, ceilings = 0, "", []
    for _name, read in _files(results, "sweep", ".json") + _files(results, "search", ".json"):
        try:
            data = json.loads(read())
        except (UsageError, ValueError):   # not a regular file, too large, not JSON: not a sidecar to learn from
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


def load(results: str | Path, sweeps: bool = True, searches: bool = True, dtype: str = "fp16",
         weights: str = "") -> Dataset:
    """Every usable measurement of ``dtype`` inputs under a GPU's results folder (``results/<gpu>``) whose weights
    are of the model group ``weights`` ("": the input dtype; "fp8": either FP8 format, ``features.GROUPS``): one model
    per dtype and group (the model has no dtype feature; FP16 is what every recorded sweep measured)."""
    results = Path(results)
    sm, gpu, gbps = _gpu(results)
    rows: list[dict[str, Any]] = []
    skipped: list[str] = []
    files = ([(src, "sweep") for src in _files(results, "sweep", skipped=skipped)] if sweeps else []) + \
            ([(src, "search") for src in _files(results, "search", skipped=skipped)] if searches else [])
    for (name, read), kind in files:
        m = _NAME.match(name)
        if m is not None and ((m.group(4) or "fp16") != dtype or model_group(m.group(5) or "") != weights):
            continue
        try:
            rows += _rows(name, read(), kind)
        except (OSError, ValueError, UnicodeDecodeError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
            skipped.append(f"{name}: {e}")
    frame = pd.DataFrame(rows, columns=["config", "shape", "family", "us", "rel", "source", "kind"])
    return Dataset(frame, sm, gpu, gbps, skipped)


def training_set(results: str | Path, group: str = "") -> Dataset:
    """What the model of ``group`` is fitted on: the FP16 measurements of 16-bit weights, and for the FP8 model
    (``features.FP8``) the FP8 weights' measurements beside them (it describes FP8 configs as their 16-bit siblings,
    so the 16-bit data teach it what a config's shape of work costs)."""
    ds = load(results)
    if not group:
        return ds
    fp8 = load(results, weights=group)
    return Dataset(pd.concat([ds.frame, fp8.frame], ignore_index=True), ds.sm_count, ds.gpu, ds.read_gbps,
                   ds.skipped + [s for s in fp8.skipped if s not in ds.skipped])
