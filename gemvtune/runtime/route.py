"""Which implementation runs a call: the table's tuned kernel or cuBLAS, decided from the table's own
measurements (pure: no GPU). A table must never make a caller slower than what it replaces.

Per (M, d, n):
- the table holds the shape: the tuned winner (a gemvtune kernel or a cuBLASLt algorithm, whichever the
  search measured fastest) runs when its measured median beats the cuBLAS baseline
  measured in the same run (``cublas-torch``, torch ``F.linear``, for torch callers; ``cublas``,
  ``cupy.matmul``, for CuPy) by more than the measured noise of both: the relative win must exceed
  ``max(MARGIN, tuned spread + cuBLAS spread)``, each the record's spread of round medians over the
  confirmation's rounds (``gemvtune.runtime.noise``); where the entry was re-confirmed in a fresh process
  (``gemvtune check --reconfirm``), the re-confirmation must show that win too; for a caller under
  ``torch.compile`` (framework ``torch-compile``) the kernel must also beat the Inductor time the entry
  records (``gemvtune.runtime.verdict``); otherwise cuBLAS (``F.linear``) runs, and the route states every
  win and its noise;
- the table holds the same (M, d) only at other batch sizes: cuBLAS. A kernel measured at n' is not measured at
  n, and neither is cuBLAS (which picks another kernel per n): carried from the nearer tabled n, the kernels of
  the H200's table ran up to 27.8% slower than cuBLAS in an independent harness (``gemvtune bench guard``,
  2026-12-04: 4096x14336 at n = 12 from n = 8/16, 128256x4096 BF16 at n = 4 from n = 1/8), though they won at
  both neighbours. Only a measured n runs a tuned kernel (``search --batch`` measures more);
- with a cost model (``load_table``'s default: the one beside the table), a shape the table lacks runs the
  model's pick where it is predicted faster than cuBLAS's predicted time by ``zerotrial.MARGIN``
  (``gemvtune.model.zerotrial``), or by the largest noise (tuned + cuBLAS spreads) of the tabled neighbours
  that prediction rests on where that is more; the route says so;
- FP8 weights the table has not measured at (M, d, n) (``gemvtune.runtime.fp8route``): an FP8 kernel (the table's
  pick, never measured on the shape) where every FP8 entry of the format and dtype measured its kernel at least
  ``fp8route.EVIDENCE`` times faster than dequantize + F.linear, which it replaces; else dequantize + F.linear;
- anything else goes to cuBLAS ("not in the table"), unless the caller asks for the policy ``tuned``
  (always a gemvtune kernel: the tuned winner, else the nearest tuned shape's config, else the
  llama.cpp config), which is what the benchmarks and kernel tests use.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..baselines import COMPILER_FOR, CUBLAS_FOR, cublas_of
from .entry import Entry, Measured
from .noise import MARGIN, Contest, spread
from .verdict import Verdict, verdict

__all__ = ["MARGIN", "POLICIES", "Route", "choose", "contest", "judge", "measured", "passed_over",
           "predicted_cublas_us", "runnable", "tuned_config"]
POLICIES = ("fastest", "tuned")


@dataclass(frozen=True)
class Route:
    kind: str                        # "tuned" (a gemvtune kernel), "cublas", or "inductor" (a compiled caller's
    config: Any = None               # F.linear where Inductor beat the tuned kernel); the config when "tuned"
    why: str = ""
    tuned_us: float | None = None    # the search's measurements behind the choice (None: not measured)
    cublas_us: float | None = None
    noise: float | None = None       # the relative win the tuned kernel needed over cuBLAS (None: not weighed)
    again_tuned_us: float | None = None    # the re-confirmation's (None: not re-confirmed)
    again_cublas_us: float | None = None
    inductor_us: float | None = None       # Inductor's recorded time (compiled callers; None: not measured)

    @property
    def tuned(self) -> bool:
        return self.kind == "tuned"


def _us(rec: Measured | None) -> float | None:
    return None if rec is None else rec.ok_us


def passed_over(entry: Entry) -> str:
    """The route's words where it does not run the entry's winner because only a model's chain may choose it."""
    try:
        cfg = entry.winner_config()
    except Exception:
        return ""
    why = cfg.chain_only()
    return f"; the search's winner {cfg.label} is not run: {why}" if why else ""


def runnable(entry: Entry, shape: Any, out: str) -> list[tuple[float, Any, Measured]]:
    """(µs, config, record) of the entry's measured kernels that can run ``shape`` with an ``out`` epilogue,
    fastest first: the winner (the search's confirmed choice, ties included) when it can, else each
    family's best and each of the confirmation's candidates that can (an FP16 output cannot come from an
    atomic split-K combine). A config only a model's chain may choose (``ConfigBase.chain_only``: the programmatic
    dependent launch configs of searches before it left the searched space) never counts. A library's
    algorithm (cuBLASLt) counts only for the entry's own shape: it is not carried to another n."""
    from ..kernels.epilogue import Epilogue
    from ..kernels.families import FAMILIES

    epi = Epilogue(out)
    own = entry.shape == shape
    found: dict[Any, tuple[float, Measured]] = {}
    for rec in (*entry.records(), *entry.candidates):
        us = rec.ok_us
        if us is None or rec.config is None:
            continue
        try:
            cfg = rec.config_object()
        except Exception:
            continue
        if cfg.chain_only():   # (programmatic dependent launch: a model chain's choice)
            continue
        if cfg.is_valid(shape) and not epi.invalid_reasons(cfg) and (own or not FAMILIES[cfg.family].library):
            if rec is entry.winner:
                return [(us, cfg, rec)]
            if cfg not in found or us < found[cfg][0]:
                found[cfg] = (us, rec)
    return sorted(((us, cfg, rec) for cfg, (us, rec) in found.items()), key=lambda p: p[0])


def tuned_config(entry: Entry) -> Any:
    """The config a call of the entry's own shape runs under the policy ``tuned``: the winner, or where only a
    model's chain may choose it (``ConfigBase.chain_only``), the fastest other measured kernel (the winner where the entry
    measured none)."""
    win = entry.winner_config()
    if not win.chain_only():
        return win
    cands = runnable(entry, entry.shape, "fp32")
    return cands[0][1] if cands else win


def contest(entry: Entry, framework: str, shape: Any = None, out: str = "fp32") -> Contest:
    """The table entry's measurements for callers of ``framework`` wanting an ``out`` output: the fastest
    measured kernel that can fuse it and the cuBLAS baseline, each with its spread (``noise.spread``)."""
    base = cublas_of(entry.baselines, framework, ok=lambda rec: rec.ok_us is not None)
    cands = runnable(entry, entry.shape if shape is None else shape, out)
    us, cfg, rec = cands[0] if cands else (None, None, None)
    return Contest(us, _us(base), cfg, spread(rec), spread(base), rival_of(entry.shape))


def rival_of(shape: Any) -> str:
    """What a call of ``shape`` runs where its tuned kernel does not: cuBLAS, or for FP8 weights (no cuBLAS call takes
    them) their dequantisation then F.linear (``gemvtune.runtime.fp8linear``)."""
    return "dequantize + F.linear" if getattr(shape, "weights", "") else "cuBLAS"


def judge(entry: Entry, framework: str, shape: Any = None, out: str = "fp32") -> Verdict:
    """Every contest the tuned kernel of ``entry`` must win for callers of ``framework`` (``runtime.verdict``):
    cuBLAS in the search and in the re-confirmation, Inductor for a compiled caller."""
    return verdict(entry, framework, contest(entry, framework, shape, out))


def _route(v: Verdict, why: str) -> Route:
    s, a = v.search, v.again
    return Route(v.kind, v.config if v.wins else None, why, s.tuned_us, s.cublas_us, s.noise,
                 a.tuned_us if a else None, a.cublas_us if a else None, v.inductor_us)


def measured(entry: Entry, framework: str, shape: Any = None, out: str = "fp32") -> tuple[float | None, float | None, Any]:
    """(tuned µs, cuBLAS µs, tuned config) of ``contest``: its times without their noise."""
    c = contest(entry, framework, shape, out)
    return c.tuned_us, c.cublas_us, c.config


def predicted_cublas_us(table: Any, shape: Any, floor_of: Any, framework: str = "torch", k: int = 3) -> float | None:
    """cuBLAS's time for ``shape`` predicted from the table's measurements: the shape's read floor times the
    median cuBLAS time / read floor of the ``k`` tabled shapes nearest in weight bytes at the same n (at any n
    where it has none there): small shapes pay cuBLAS's fixed costs, large ones run near the floor. None: the
    table measured no cuBLAS time."""
    p = _predicted_cublas(table, shape, floor_of, framework, k)
    return None if p is None else p[0]


NEAR = 2.0   # a zero-trial route weighs its pick against cuBLAS predicted from tabled shapes this near in M and d


def _predicted_cublas(table: Any, shape: Any, floor_of: Any, framework: str, k: int = 3,
                      within: float | None = None) -> tuple[float, float] | None:
    """(``predicted_cublas_us``, the largest tuned + cuBLAS spread of the ``k`` neighbours it is predicted from).
    ``within``: only neighbours whose M and d are that near the shape's (the Euclidean distance of their logs at most
    log ``within``, at the same n; none: no prediction). On the H100's 8B-only table, 2026-12-06, a 21 MB shape at
    n = 8 was predicted from an 8 MB and a 1 GB weight, cuBLAS at 14.1 µs where it ran 9.9, and its zero-trial pick
    ran 11% slower than cuBLAS; cuBLAS ran 8192x2048 18% faster than 4096x4096, the same bytes (design notes)."""
    return _predict(_cublas_points(table, shape, floor_of, framework), shape, floor_of, k, within)


def _cublas_points(table: Any, shape: Any, floor_of: Any, framework: str) -> list[tuple[Any, float, float]]:
    """(tabled shape, its cuBLAS time / read floor, its tuned + cuBLAS spread) of every entry that measured cuBLAS:
    of the same dtype where there are any, and always of the same weights (an FP8 entry's baseline is dequantize +
    F.linear, no cuBLAS time: mixed in, 4096x4096's 107 µs would make cuBLAS look 10x slower than it is)."""
    from ..kernels.shapes import Shape

    same_w = [k for k in table.keys() if Shape(*k).weights == shape.weights]
    out = []
    for key in [k for k in same_w if k[3] == shape.dtype] or same_w:
        s = Shape(*key)
        e = table.entry(s)
        m = contest(e, framework, s) if e else None
        if m is not None and m.cublas_us:
            out.append((s, m.cublas_us / floor_of(s), m.spreads))
    return out


def _predict(points: list[tuple[Any, float, float]], shape: Any, floor_of: Any, k: int = 3,
             within: float | None = None) -> tuple[float, float] | None:
    """``_predicted_cublas`` from the points ``_cublas_points`` gathered."""
    import math
    import statistics

    pts: dict[int, list[tuple[float, float, float]]] = {}
    for s, ratio, z in points:
        if within is None or math.hypot(math.log(s.M / shape.M), math.log(s.d / shape.d)) <= math.log(within):
            pts.setdefault(s.n, []).append((abs(math.log(s.weight_bytes / shape.weight_bytes)), ratio, z))
    pool = pts.get(shape.n) or ([] if within is not None else [p for v in pts.values() for p in v])
    if not pool:
        return None
    near = sorted(pool)[:k]
    return floor_of(shape) * statistics.median(r for _, r, _ in near), max(z for _, _, z in near)


def _zero_trial(table: Any, shape: Any, framework: str, out: str) -> Route | None:
    """The cost model's pick for a shape the table lacks, where it predicts it faster than cuBLAS's predicted
    time by ``zerotrial.MARGIN``, or by the noise of the neighbours that prediction rests on (their largest tuned +
    cuBLAS spread) where that is more; None without a model (or a pick that cannot give an ``out`` output)."""
    model = getattr(table, "costmodel", None)
    if model is None:
        return None
    from ..model.zerotrial import MARGIN as ZMARGIN

    floor_b = int(getattr(model, "min_weight_bytes", 0) or 0)
    if shape.weight_bytes < floor_b:   # below its data, a held-out model mispredicted by up to 63% (design notes)
        return Route("cublas", None, f"not in the table: its {shape.weight_bytes / 1e6:.1f} MB of weights are fewer "
                     f"than the smallest the cost model was fitted on ({floor_b / 1e6:.1f} MB): no zero-trial pick")
    zero = table.predicted(shape, out)
    if zero is None:
        return None
    cfg, us = zero
    points = _cublas_points(table, shape, model.floor_us, framework)
    p = _predict(points, shape, model.floor_us, within=NEAR)
    if p is None:   # nothing near enough to weigh the prediction against: cuBLAS, said
        return Route("cublas", None, f"not in the table: no tabled shape near enough in M and d (within {NEAR:g}x) "
                     f"measured cuBLAS at n={shape.n}, to weigh the cost model's pick against")
    c, noisy = p
    wide = _predict(points, shape, model.floor_us)   # (the nearest by bytes, any aspect)
    if wide is not None and wide[0] < c:   # the lower of the two: the near rule only ever takes routes away
        c, noisy = wide[0], max(noisy, wide[1])
    need = max(ZMARGIN, noisy)
    pct = f"{need:.0%}" if noisy <= ZMARGIN else f"{need:.1%}"
    why = "" if noisy <= ZMARGIN else f" (the noise of the tabled neighbours it is predicted from: {noisy:.1%})"
    if (c - us) / c > need:
        return Route("tuned", cfg, f"not in the table: the cost model's pick {cfg.label}, predicted {us:.2f} µs "
                     f"against cuBLAS's predicted {c:.2f} µs, more than {pct} faster{why}", us, c, need)
    return Route("cublas", None, f"not in the table: the cost model's pick {cfg.label} is predicted at {us:.2f} µs, "
                 f"not {pct} faster than cuBLAS's predicted {c:.2f} µs{why}", us, c, need)


def _fp8_evidence(table: Any, shape: Any, framework: str, out: str) -> list[float]:
    """dequantize + F.linear µs / the route's kernel µs of every FP8 entry of ``shape``'s format and dtype whose
    contest measured both (``fp8route.untuned`` weighs them)."""
    from ..kernels.shapes import Shape

    ratios = []
    for key in table.keys():
        s = Shape(*key)
        e = table.entry(s) if (s.weights, s.dtype) == (shape.weights, shape.dtype) else None
        c = contest(e, framework, s, out) if e is not None else None
        if c is not None and c.tuned_us and c.cublas_us:
            ratios.append(float(c.cublas_us) / float(c.tuned_us))
    return ratios


def choose(table: Any, M: int, d: int, n: int, framework: str = "torch", policy: str = "fastest",
           out: str = "fp32", dtype: str = "fp16", weights: str = "") -> Route:
    """The route of one (M, d, n) call on ``dtype`` inputs through ``table`` (a ``gemvtune.runtime.table.Table``)
    for a caller of ``framework`` that wants an ``out`` result (``fp32`` or the input dtype). Entries of another
    dtype never serve it: a BF16 call where the table has only FP16 entries runs cuBLAS, and the route says so.
    ``weights`` ("e4m3-row", "e4m3-b128"): W is FP8 (``Shape.weights``); only entries of that format serve the call,
    a call they do not hold is weighed by ``fp8route.untuned``, and route kind "cublas" means the fallback of FP8
    weights, dequantize + F.linear."""
    from ..kernels.epilogue import Epilogue
    from ..kernels.shapes import Shape

    if framework not in CUBLAS_FOR:
        raise ValueError(f"framework must be one of {', '.join(CUBLAS_FOR)}, got {framework!r}")
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    shape = Shape(M, d, n, dtype, weights)
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
        v = judge(entry, framework, shape, out)
        return _route(v, v.says(out) + passed_over(entry))
    fmt = f" --weights {weights}" if weights else ""
    same = sorted(k[2] for k in table.keys() if (k[0], k[1], k[3], Shape(*k).weights) == (M, d, dtype, weights))
    tuned_at = f" (tuned at n={','.join(map(str, same))} only)" if same else ""
    if weights:   # (an FP8 call the table has not measured: fp8route weighs the table's FP8 entries)
        from .fp8route import untuned

        cfg, why = untuned(table, shape, out, f"{M}x{d} at n={n} with {weights} weights is not in the table"
                           f"{tuned_at}; gemvtune search --shape {M}x{d} --batch {n}{fmt} measures it",
                           _fp8_evidence(table, shape, framework, out))
        return Route("tuned", cfg, why) if cfg is not None else Route("cublas", None, why)
    if same:
        return Route("cublas", None, f"{M}x{d} at n={n} is not in the table{tuned_at}: a kernel runs only at a "
                     f"measured n (gemvtune search --shape {M}x{d} --batch {n})")
    near = f" for {dtype} (its entries are of another dtype)" if dtype != "fp16" and any(
        k[:2] == (M, d) for k in table.keys()) else ""
    zero = _zero_trial(table, shape, framework, out)
    if zero is not None and zero.tuned and framework in COMPILER_FOR:
        zero = dataclasses.replace(zero, why=zero.why + "; Inductor not measured")
    if zero is not None:
        return zero
    return Route("cublas", None, f"{M}x{d} at n={n} is not in the table{near}")
