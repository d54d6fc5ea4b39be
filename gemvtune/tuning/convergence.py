"""How searches converged, read from their records (no GPU): for each search of a template family (a tune's, or
any), the excess of the best config found after t measured trials over the fastest known for that shape and family
(the best any of the searches read, or the given tables' entries, measured), beside the search-quality curve a tune
plans its budget with (``tuning.budget.Curve``). A tune's split trusts that curve for every shape; this says where it
holds. Library families (a handful of candidates, all measured) and configs only a model's chain may choose are left
out."""

from __future__ import annotations

import io
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..kernels.shapes import Shape

TRIALS = (5, 10, 25, 35, 55, 95)   # where the curves are compared
_CAP = 64 * 2**20


@dataclass(frozen=True)
class Run:
    """One family's measured trials of one search, in trial order (inf: a trial that failed)."""

    source: str
    shape: Shape
    family: str
    us: tuple[float, ...]

    def gaps(self, best: float) -> list[float]:
        """After each trial, the best found so far over ``best``, less 1."""
        out, b = [], math.inf
        for u in self.us:
            b = min(b, u)
            out.append(b / best - 1.0)
        return out


def shape_of(name: str) -> Shape | None:
    """The shape a search file's name (``search-MxDxN[-bf16][-e4m3-row]-<stamp>.csv[.gz]``) names; None for any
    other name (a sweep's included)."""
    from ..model.dataset import name_shape

    return name_shape(name) if name.startswith("search-") else None


def read_runs(folder: str | Path) -> list[Run]:
    """The template families' runs of every search file in ``folder`` (not its subfolders), and of its packed
    searches (``measurements/searches.json.xz``, ``gemvtune costmodel pack``). A folder without one, or a file that
    is not a search's CSV, is one UsageError."""
    from ..model.archive import ARCHIVE, read_archive
    from ..userfile import read_maybe_gz

    root = Path(folder)
    if not root.is_dir():
        raise UsageError(f"{folder}: not a folder")
    out: list[Run] = []
    for p in sorted(root.iterdir()):
        if p.name == ARCHIVE and p.is_file():
            for name, raw in sorted(read_archive(p).items()):
                out += _runs(f"{p}:{name}", name, raw)
        elif p.is_file() and shape_of(p.name) is not None:
            out += _runs(str(p), p.name, read_maybe_gz(p, "search file", _CAP))
    if not out:
        raise UsageError(f"{folder}: no search file (search-<shape>-<date>.csv[.gz], or {ARCHIVE}) with measured "
                         "trials")
    return out


def _runs(where: str, name: str, raw: bytes) -> list[Run]:
    import pandas as pd

    from ..kernels.families import DEFAULT_FAMILY, FAMILIES
    from ..model.dataset import family_column

    shape = shape_of(name)
    if shape is None:   # (an archive's JSON record of a search, or another file)
        return []
    out = []
    try:
        df = pd.read_csv(io.BytesIO(raw))
        df = df[df["measured"].astype(str).str.lower() == "true"].sort_values("trial")
        fam_col = family_column(df.columns)
        df = df.assign(_family=df[fam_col] if fam_col else DEFAULT_FAMILY)   # (the first searches: GEMV only)
        for fam, g in df.groupby("_family", sort=True):
            if fam not in FAMILIES or FAMILIES[fam].library:
                continue
            for k, vals in FAMILIES[fam].config_cls.CHAIN_ONLY.items():   # (a model's chain chooses those)
                if f"p_{k}" in g.columns:
                    g = g[~g[f"p_{k}"].astype(str).isin([str(v) for v in vals])]
            us = tuple(float(u) if s == "ok" and math.isfinite(float(u)) and float(u) > 0 else math.inf
                       for u, s in zip(g["us_median"], g["status"]))
            if us:
                out.append(Run(where, shape, str(fam), us))
    except (KeyError, ValueError, pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise UsageError(f"{where}: not a search's CSV ({type(e).__name__}: {str(e)[:80]})") from None
    return out


def best_known(runs: Iterable[Run], tables: Sequence[Any] = ()) -> dict[tuple[Shape, str], float]:
    """The fastest measured time per (shape, family): over the runs, and the tables' entries (their winner and each
    family's best), leaving out what only a model's chain may choose (``ConfigBase.chain_only``: PDL, whose isolated
    timing overlaps launches, and which no per-shape search proposes)."""
    from ..kernels.families import DEFAULT_FAMILY

    best: dict[tuple[Shape, str], float] = {}

    def see(k: tuple[Shape, str], us: Any) -> None:
        if isinstance(us, (int, float)) and math.isfinite(us) and us > 0:
            best[k] = min(best.get(k, math.inf), float(us))

    for r in runs:
        see((r.shape, r.family), min(r.us))
    for t in tables:
        for s in t.shapes:
            e = t.entry(s)
            if e is None:
                continue
            for fam, rec in (*e.best.items(), (e.winner.family or DEFAULT_FAMILY, e.winner)):
                try:
                    if rec.config_object().chain_only():
                        continue
                except Exception:   # (a record without a readable config: its time still counts)
                    pass
                see((s, fam), rec.us)
    return best


@dataclass(frozen=True)
class Summary:
    label: str
    searches: int
    final_mean: float
    final_median: float
    final_max: float
    trials_median: float
    at: dict[int, float]      # the mean gap after t trials (a shorter run holds its last value)


def summarize(runs: Sequence[Run], best: dict[tuple[Shape, str], float], split_mb: float = 16.0,
              trials: Sequence[int] = TRIALS) -> list[Summary]:
    """Per class of weight size (below ``split_mb`` MB, then the rest; a class without a run is left out), then
    all: how far the searches ended above the fastest known, and the mean curve at ``trials``."""
    import statistics

    classes = [(f"weights < {split_mb:g} MB", [r for r in runs if r.shape.weight_bytes < split_mb * 1e6]),
               (f"weights >= {split_mb:g} MB", [r for r in runs if r.shape.weight_bytes >= split_mb * 1e6]),
               ("all", list(runs))]
    out = []
    for label, rs in classes:
        curves = [r.gaps(best[(r.shape, r.family)]) for r in rs if math.isfinite(min(r.us))]
        if not curves:
            continue
        final = [c[-1] for c in curves]
        at = {t: statistics.fmean(c[min(t, len(c)) - 1] for c in curves) for t in trials}
        out.append(Summary(label, len(curves), statistics.fmean(final), statistics.median(final), max(final),
                           statistics.median(len(c) for c in curves), at))
    return out
