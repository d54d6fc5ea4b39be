"""Which implementation runs a call: the table's tuned kernel or cuBLAS, decided from the table's own
measurements (pure: no GPU). A table must never make a caller slower than what it replaces.

Per (M, d, n):
- the table holds the shape: the tuned winner (a gemvtune kernel or a cuBLASLt algorithm, whichever the
  search measured fastest) runs when its measured median beats the cuBLAS baseline
  measured in the same run (``cublas-torch``, torch ``F.linear``, for torch callers; ``cublas``,
  ``cupy.matmul``, for CuPy) by more than ``MARGIN``; otherwise cuBLAS runs;
- the table holds the same (M, d) at batch sizes on both sides of n, and the tuned kernel won at both:
  the winner of the nearer one runs (the time of every n <= 16 is the read of W, so a win on both
  sides is a measured reason); otherwise cuBLAS;
- with a cost model (``load_table``'s default: the one beside the table), a shape the table lacks runs the
  model's pick where it is predicted faster than cuBLAS's predicted time by ``zerotrial.MARGIN``
  (``gemvtune.model.zerotrial``); the route says so;
- anything else goes to cuBLAS ("not in the table"), unless the caller asks for the policy ``tuned``
  (always a gemvtune kernel: the tuned winner, else the nearest tuned shape's config, else the
  llama.cpp config), which is what the benchmarks and kernel tests use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..baselines import CUBLAS_FOR, cublas_of
from .entry import Entry, Measured

MARGIN = 0.01            # the tuned kernel must be this much faster than cuBLAS (the timing spread is 1-3%)
POLICIES = ("fastest", "tuned")


@dataclass(frozen=True)
class Route:
    kind: str                        # "tuned" (a gemvtune kernel) or "cublas"
    config: Any = None               # the config to launch when kind == "tuned"
    why: str = ""
    tuned_us: float | None = None    # the table's measurements behind the choice (None: not measured)
    cublas_us: float | None = None

    @property
    def tuned(self) -> bool:
        return self.kind == "tuned"


def _us(rec: Measured | None) -> float | None:
    return None if rec is None else rec.ok_us


def _candidates(entry: Entry, shape: Any, out: str) -> list[tuple[float, Any]]:
    """(µs, config) of the entry's measured kernels that can run ``shape`` with an ``out`` epilogue,
    fastest first: the winner (the search's confirmed choice, ties included) when it can, else each
    family's best that can (an FP16 output cannot come from an atomic split-K combine). A library's
    algorithm (cuBLASLt) counts only for the entry's own shape: it is not carried to another n."""
    from ..kernels.epilogue import Epilogue
    from ..kernels.families import FAMILIES

    epi = Epilogue(out)
    own = entry.shape == shape
    found: dict[Any, float] = {}
    for rec in entry.records():
        us = rec.ok_us
        if us is None or rec.config is None:
            continue
        try:
            cfg = rec.config_object()
        except Exception:
            continue
        if cfg.is_valid(shape) and not epi.invalid_reasons(cfg) and (own or not FAMILIES[cfg.family].library):
            if rec is entry.winner:
                return [(us, cfg)]
            found[cfg] = min(us, found.get(cfg, us))
    return sorted(((us, cfg) for cfg, us in found.items()), key=lambda p: p[0])


def measured(entry: Entry, framework: str, shape: Any = None, out: str = "fp32") -> tuple[float | None, float | None, Any]:
    """(tuned µs, cuBLAS µs, tuned config) of a table entry for callers of ``framework`` wanting an
    ``out`` output: the fastest measured kernel that can fuse it, and the cuBLAS baseline."""
    cublas = _us(cublas_of(entry.baselines, framework, ok=lambda rec: rec.ok_us is not None))
    if shape is None:
        shape = entry.shape
    cands = _candidates(entry, shape, out)
    return (cands[0][0], cublas, cands[0][1]) if cands else (None, cublas, None)


def _wins(tuned: float | None, cublas: float | None) -> bool:
    return tuned is not None and (cublas is None or tuned < cublas * (1.0 - MARGIN))


def predicted_cublas_us(table: Any, shape: Any, floor_of: Any, framework: str = "torch", k: int = 3) -> float | None:
    """cuBLAS's time for ``shape`` predicted from the table's measurements: the shape's read floor times the
    median cuBLAS time / read floor of the ``k`` tabled shapes nearest in weight bytes at the same n (at any n
    where it has none there): small shapes pay cuBLAS's fixed costs, large ones run near the floor. None: the
    table measured no cuBLAS time."""
    import math
    import statistics

    from ..kernels.shapes import Shape

    pts: dict[int, list[tuple[float, float]]] = {}
    keys = [k for k in table.keys() if k[3] == shape.dtype] or table.keys()   # the same dtype where measured
    for key in keys:
        s = Shape(*key)
        e = table.entry(s)
        c = measured(e, framework, s)[1] if e else None
        if c:
            pts.setdefault(s.n, []).append((abs(math.log(s.weight_bytes / shape.weight_bytes)), c / floor_of(s)))
    pool = pts.get(shape.n) or [p for v in pts.values() for p in v]
    if not pool:
        return None
    near = sorted(pool)[:k]
    return floor_of(shape) * statistics.median(r for _, r in near)


def _zero_trial(table: Any, shape: Any, framework: str, out: str) -> Route | None:
    """The cost model's pick for a shape the table lacks, where it predicts it faster than cuBLAS's predicted
    time by ``zerotrial.MARGIN``; None without a model (or a pick that cannot give an ``out`` output)."""
    model = getattr(table, "costmodel", None)
    if model is None:
        return None
    from ..model.zerotrial import MARGIN as ZMARGIN

    zero = table.predicted(shape, out)
    if zero is None:
        return None
    cfg, us = zero
    c = predicted_cublas_us(table, shape, model.floor_us, framework)
    if c is None:   # nothing to weigh the prediction against: cuBLAS, as without a model
        return None
    if us < c * (1.0 - ZMARGIN):
        return Route("tuned", cfg, f"not in the table: the cost model's pick {cfg.label}, predicted {us:.2f} µs "
                     f"against cuBLAS's predicted {c:.2f} µs", us, c)
    return Route("cublas", None, f"not in the table: the cost model's pick {cfg.label} is predicted at {us:.2f} µs, "
                 f"not {ZMARGIN:.0%} faster than cuBLAS's predicted {c:.2f} µs", us, c)


def choose(table: Any, M: int, d: int, n: int, framework: str = "torch", policy: str = "fastest",
           out: str = "fp32", dtype: str = "fp16") -> Route:
    """The route of one (M, d, n) call on ``dtype`` inputs through ``table`` (a ``gemvtune.runtime.table.Table``)
    for a caller of ``framework`` that wants an ``out`` result (``fp32`` or the input dtype). Entries of another
    dtype never serve it: a BF16 call where the table has only FP16 entries runs cuBLAS, and the route says so."""
    from ..kernels.epilogue import Epilogue
    from ..kernels.shapes import Shape

    if framework not in CUBLAS_FOR:
        raise ValueError(f"framework must be one of {', '.join(CUBLAS_FOR)}, got {framework!r}")
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    shape = Shape(M, d, n, dtype)
    if out not in ("fp32", dtype):
        raise ValueError(f"a {dtype} call's output is fp32 or {dtype}, not {out!r}")
    entry = table.entry(shape)
    if policy == "tuned":
        cfg, how = table.lookup(shape)
        if how != "tuned":
            table.config_for(shape)   # warns once: this shape runs a config tuned for another
        if Epilogue(out).invalid_reasons(cfg):
            t, c, alt = measured(entry, framework, shape, out) if entry else (None, None, None)
            if alt is None:
                return Route("cublas", None, f"{cfg.label} cannot give an {out} output and no other kernel is measured")
            return Route("tuned", alt, f"{how}; {cfg.label} cannot give an {out} output: the best that can", t, c)
        t, c, _ = measured(entry, framework, shape, out) if entry else (None, None, None)
        return Route("tuned", cfg, how, t, c)
    if entry is not None:
        t, c, cfg = measured(entry, framework, shape, out)
        if _wins(t, c):
            return Route("tuned", cfg, f"tuned {t:.2f} µs beats cuBLAS " + (f"{c:.2f} µs" if c else "(not measured)"), t, c)
        what = f"tuned {t:.2f} µs" if t else f"no measured kernel that gives an {out} output"
        return Route("cublas", None, f"cuBLAS {c:.2f} µs is faster than, or within {MARGIN:.0%} of, {what}"
                     if c else f"cuBLAS: {what}", t, c)
    same = {k[2]: table.entry(Shape(*k)) for k in table.keys() if (k[0], k[1], k[3]) == (M, d, dtype)}
    lo = max((m for m in same if m < n), default=None)
    hi = min((m for m in same if m > n), default=None)
    if lo is None or hi is None:
        near = f" (tuned at n={','.join(map(str, sorted(same)))} only)" if same else ""
        if not same and dtype != "fp16" and any(k[:2] == (M, d) for k in table.keys()):
            near = f" for {dtype} (its entries are of another dtype)"
        zero = _zero_trial(table, shape, framework, out)
        if zero is not None:
            return zero
        return Route("cublas", None, f"{M}x{d} at n={n} is not in the table{near}")
    low, high = measured(same[lo], framework, shape, out), measured(same[hi], framework, shape, out)
    if not (_wins(*low[:2]) and _wins(*high[:2])):
        return Route("cublas", None, f"n={n} is not in the table and cuBLAS won at n={lo} or n={hi}")
    t, c, cfg = low if n - lo <= hi - n else high
    near = lo if n - lo <= hi - n else hi
    return Route("tuned", cfg, f"n={n} lies between tuned n={lo} and n={hi}, where tuned beat cuBLAS; "
                 f"the n={near} kernel runs", t, c)
