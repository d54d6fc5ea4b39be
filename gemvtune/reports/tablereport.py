"""A table's contents as a DataFrame and a terminal summary. Labels and families come from the entries'
validated configs, never from the table's own strings; every other string a table holds (GPU name,
sampler, ...) is escaped before it reaches a terminal (``tableschema.printable``)."""

from __future__ import annotations

import math
import numbers
import re
from typing import Any

import numpy as np

from ..baselines import cublas_of
from ..runtime.table import Table
from ..runtime.tableschema import SAMPLER_NAMES, printable

_NAN = float("nan")


def _num(v: Any) -> float:
    return float(v) if isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_)) else _NAN


def _ratio(a: Any, b: Any) -> float:
    a, b = _num(a), _num(b)
    return a / b if b > 0 else _NAN


def table_frame(t: Table) -> Any:
    import pandas as pd

    from ..runtime.route import tuned_config

    rows = []
    # numerically; an FP8 entry after the 16-bit one of its (M, d, n, dtype)
    for e in sorted(t.entries.values(), key=lambda e: (e.M, e.d, e.n or 1, e.dtype or "fp16", e.shape.weights)):
        w, b, s = e.winner, e.baselines, e.search
        cfg = e.winner_config()
        cub = cublas_of(b)
        lla = b.get("llama.cpp")
        cub_us, lla_us = (cub.us if cub else None), (lla.us if lla is not None else None)
        row = {"M": e.M, "d": e.d, "n": e.n or 1, "dtype": e.dtype or "fp16", "weights": e.shape.weights,
               "winner": cfg.label, "family": cfg.family, "runs": tuned_config(e).label,
               "us": _num(w.us), "us_min": _num(w.us_min), "us_max": _num(w.us_max),
               "spread": _num(w.spread), "gbps": _num(w.gbps), "pct_ceiling": _num(w.pct_ceiling),
               "llama_us": _num(lla_us), "cublas_us": _num(cub_us),
               "x_cublas": _ratio(cub_us, w.us), "x_llama": _ratio(lla_us, w.us),
               "tie": e.tie, "sampler": known_sampler(s.sampler), "trials": s.measured_trials,
               "seed": s.seed, "replayed": s.replayed is True, "updated": iso_time(e.updated)}
        row.update({f"p_{k}": v for k, v in cfg.to_dict().items()})
        rows.append(row)
    return pd.DataFrame(rows)


_ISO = re.compile(r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?(?:Z|[+-]\d{2}:?\d{2})?)?", re.ASCII)


def known_sampler(v: Any) -> str | None:
    """A search record's sampler as gemvtune writes it (one of SAMPLERS), else None: a table's other strings
    never reach a CSV cell or a terminal."""
    return v if isinstance(v, str) and v in SAMPLER_NAMES else None


def iso_time(v: Any) -> str | None:
    """An ISO 8601 date or time as gemvtune writes it (``2026-12-02T10:59:03Z``), else None."""
    return v if isinstance(v, str) and _ISO.fullmatch(v) else None


def _f(v: Any, spec: str) -> str:
    v = _num(v)
    return "-" if math.isnan(v) else format(v, spec)


def _trials(v: Any) -> str:
    v = _num(v)
    return "?" if math.isnan(v) else str(int(v))


def table_summary(t: Table) -> str:
    df = table_frame(t)
    g = t.gpu
    read = (t.data.get("ceiling") or {}).get("read_gbps")
    lines = [f"table {printable(t.path)}: {len(df)} entries; GPU {printable(g.get('name'))} (cc "
             f"{printable(g.get('compute_capability'))}, driver {printable(g.get('driver'))}); read ceiling "
             f"{_f(read, '.0f')} GB/s"]
    for _, r in df.iterrows():
        dt = "" if r["dtype"] == "fp16" else f" {printable(r['dtype'], 8)}"
        dt += f" {r['weights']}" if r["weights"] else ""   # (FP8 weights: their baseline is dequantize + F.linear)
        base = "dequant" if r["weights"] else "cuBLAS"
        theirs = "" if r["weights"] else f" x{_f(r.x_llama, '.3f')} llama.cpp"
        lines.append(f"  {r.M:>7d}x{r.d:<6d} n={r.n:<2d}{dt} {r.winner:44s} {_f(r.us, '8.2f'):>8s} µs "
                     f"{_f(r.pct_ceiling, '5.1f'):>5s}% x{_f(r.x_cublas, '.3f')} {base}{theirs} "
                     f"({r.sampler or '?'}, {_trials(r.trials)} trials"
                     f"{', REPLAYED' if r.replayed else ''})"
                     # (a PDL winner of an isolated search: ConfigBase.chain_only)
                     + (f"; runs {r.runs}: the winner's PDL is a model chain's choice" if r.runs != r.winner else ""))
    return "\n".join(lines)

