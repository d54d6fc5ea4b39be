"""The split of a whole-model tune's wall-time budget across (shape, n, family) studies (pure: no GPU, no Optuna).

Each study is an :class:`Item`: a shape of the model at one n, one kernel family, how often a decode step runs it
(``calls``), cuBLAS's time for it and the family's predicted optimum (the cost model's, or a prior where there is no
model). What ``t`` trials of that study buy is read off the measured search-quality curve (:class:`Curve`: the best
found after ``t`` trials is, on average, ``gap(t)`` above the optimum). The value of a shape's trials is the decode
step time they are expected to save against cuBLAS,

    calls × max(0, cuBLAS − min over its families of optimum_f × (1 + gap(t_f))),

so a shape that is a large share of the step's bytes, a family predicted well below cuBLAS, and the first trials
(where the curve falls fastest) come first. The predicted optimum is uncertain (``sigma``: the spread of log(measured
best / predicted optimum)); with ``sigma > 0`` the saving is its expectation over a log-normal error, the max above
an option's payoff, so a large shape predicted a little above cuBLAS is still worth a few trials where budget is left
(the measured optimum of 14336x4096 at n = 2 on the H200 is 4.8% below its prediction and 3.0% below cuBLAS). Each
searched family's error is its own (independent), so the min over families is taken inside the expectation: a
family predicted a little slower than another is still worth a few trials, for the chance that it is the faster
one. (On an H100, 2026-12-06, the H200's FP8 model predicted fp8gemv 14.7 µs and fp8mma 15.2 µs for 4096x4096 at
n = 8; with the min outside the expectation the plan bought fp8gemv alone, whose best measured 20.2 µs, and no fp8mma
trial; fp8mma's best, searched alone afterwards, was 9.7 µs.)
:func:`allocate` hands out trials in chunks, greedily by value per second,
with each shape's fixed cost (its confirmation and re-confirmation) paid when its first chunk is bought. A shape's
value is zero until its expected best drops below cuBLAS, then concave, so each purchase weighs 1, 2, 4, ... chunks
at once and buys the one that saves the most per second."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from statistics import NormalDist

from ..errors import UsageError
from ..kernels.shapes import Shape

CHUNK = 5   # trials bought at a time: the first chunk is the seed and the cost model's warm start (warm_k = 4 more)
_UNITS = {"s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(h|min|m|sec|s)", re.ASCII)
MAX_BUDGET_S = 7 * 24 * 3600.0
# the spread (RMS) of log(measured best / predicted optimum) over a table's entries: 0.075 for the committed H200
# table's 85 16-bit entries of at least 16 MB and its cost model (`gemvtune costmodel spread`, 2026-12-06; mean
# -0.031, from -0.208 to +0.427: the model, which predicts a sample's best, is slightly pessimistic on large shapes)
OPTIMUM_SIGMA = 0.075
# the same for another GPU's model: 0.103 for the H200's model on the committed H100 table's 15 16-bit entries
# (`gemvtune costmodel spread` on a folder holding both, 2026-12-06; mean -0.035, from -0.161 to +0.206)
FOREIGN_SIGMA = 0.10
# the spread for FP8 weights, per (entry, family): each family's measured best against its own predicted optimum, the
# error expected_saving_min prices per family. `gemvtune costmodel spread --fp8 --min-mb 0` (2026-12-06): RMS 0.402 on
# the H200's 20 pairs with its own FP8 model (mean +0.136, from -0.436 to +0.805: fp8gemv at n = 8 predicted near the
# read floor, measured FMA-bound at 2x that), 0.258 on the H100's 27 with its model (continued on those very
# searches). With 0.10, the H100's plan bought fp8gemv alone at 1024x4096 n = 16 (predicted 4.95 µs, measured 11.54;
# fp8mma's best searched was 6.36)
FP8_SIGMA = 0.40


def fp8_sigma(sigma: float) -> float:
    """The spread an FP8 shape's predicted optima plan with where the plan's is ``sigma``: at least ``FP8_SIGMA``."""
    return max(sigma, FP8_SIGMA)


MIN_GAIN = 1e-4     # a purchase must be expected to save this share of the step's cuBLAS time at least
# weights below this plan with ``allocate``'s ``small_curve``: the curves were measured on weights of 32 MB and more,
# and the searches of 8 MB weights stay several % above them (`gemvtune convergence` over the H100's searches,
# 2026-12-06: 6.6% above the fastest known after 25 trials, 4.7% after 35, where the warm curve says 0.7% and 0.5%,
# the cold one 2.0% and 1.1%; 0.7% and 0.6% for the weights of 16 MB and more)
SMALL_WEIGHT_BYTES = 16e6


def parse_budget(text: str | float | int) -> float:
    """Seconds of a budget: ``"0"`` (the zero-trial picks only: nothing searched), ``"300"``/``"300s"``, ``"5m"``,
    ``"1h30m"``, ``"90sec"``, ``"2min"``. A number is seconds. Anything else, a negative or non-finite value, a
    budget above a week, or a zero written with a unit ("0s": ambiguous, write 0 for zero-trial picks) is one
    UsageError."""
    if isinstance(text, bool):
        raise UsageError(f"malformed budget {text!r}: expected seconds or e.g. 5m, 1h30m, 0")
    if isinstance(text, (int, float)):
        v = float(text)
        if not math.isfinite(v) or v < 0 or v > MAX_BUDGET_S:
            raise UsageError(f"budget must be 0 (zero-trial picks) or positive seconds up to a week, got {text!r}")
        return v
    s = str(text).strip().lower().replace(" ", "")
    if re.fullmatch(r"[0-9]+(\.[0-9]+)?", s, re.ASCII):
        return parse_budget(float(s))
    pos, total = 0, 0.0
    for m in _PART.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2)]
        pos = m.end()
    if not s or pos != len(s):
        raise UsageError(f"malformed budget {str(text)[:40]!r}: expected seconds or a time like 5m, 1h30m, 90s "
                         "(units h, m/min, s/sec), or 0 for the zero-trial picks")
    if total == 0:
        raise UsageError(f"a budget of {str(text)[:20]!r} is 0 s, which tunes nothing: give --budget 0 for the "
                         "cost model's zero-trial picks, or a positive time")
    return parse_budget(total)


@dataclass(frozen=True)
class Curve:
    """The expected relative excess of the best config found over the space's optimum after t measured trials
    (t = 1: the family's seed alone), from the search-quality study of the recorded sweeps (the mean over its runs,
    non-increasing); past the last trial measured, the last value."""

    gaps: tuple[float, ...]            # gaps[t - 1]: after t trials
    source: str = ""

    def __post_init__(self) -> None:
        if not self.gaps or any(not math.isfinite(g) or g < 0 for g in self.gaps):
            raise UsageError(f"search-quality curve {self.source or ''}: gaps must be finite and >= 0")

    def gap(self, t: int) -> float:
        """Excess after ``t`` trials; ``t = 0`` is inf (a family not searched has no candidate)."""
        if t <= 0:
            return math.inf
        return self.gaps[min(t, len(self.gaps)) - 1]

    @classmethod
    def from_runs(cls, runs: Iterable[Sequence[float]], source: str = "") -> Curve:
        """The mean curve of runs (each run: its gap after trial 1, 2, ...; shorter runs hold their last value),
        made non-increasing (the best found never gets worse)."""
        runs = [list(r) for r in runs if len(r)]
        if not runs:
            raise UsageError(f"search-quality curve {source}: no runs")
        length = max(len(r) for r in runs)
        mean = [sum(r[min(i, len(r) - 1)] for r in runs) / len(runs) for i in range(length)]
        out: list[float] = []
        for g in mean:
            out.append(min(g, out[-1]) if out else g)
        return cls(tuple(out), source)


@dataclass(frozen=True)
class Item:
    """One (shape, family) study of the tune."""

    shape: Shape
    family: str
    calls: float               # launches of the shape per decode step
    cublas_us: float           # cuBLAS's time of one call (measured or predicted)
    optimum_us: float          # the family's predicted optimum for the shape
    max_trials: int = 10_000   # the family's space (a library's candidates: a handful)
    done: int = 0              # trials already measured (a resumed study)
    sigma: float | None = None  # the spread of this shape's predicted optima (None: the plan's; e.g. FP8_SIGMA)

    def __post_init__(self) -> None:
        for name in ("calls", "cublas_us", "optimum_us"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise UsageError(f"budget item {self.shape} {self.family}: {name} must be a positive number, got {v!r}")


@dataclass
class Plan:
    """Trials per item (0: not searched), what the plan is expected to cost and save."""

    trials: dict[tuple[Shape, str], int]
    cost_s: float
    saving_us: float                 # expected decode-step µs saved against cuBLAS, over all shapes
    step_cublas_us: float            # the step's linears on cuBLAS (Σ calls × cuBLAS)
    shapes: list[Shape] = field(default_factory=list)   # shapes searched, most valuable first

    @property
    def predicted_gain(self) -> float:
        """The step's linears on cuBLAS / their expected time after the tune."""
        return self.step_cublas_us / max(self.step_cublas_us - self.saving_us, 1e-9)

    def families(self, shape: Shape) -> tuple[str, ...]:
        return tuple(f for (s, f), t in self.trials.items() if s == shape and t > 0)


def expected_saving(cublas_us: float, best_us: float, sigma: float = 0.0) -> float:
    """E[max(0, cuBLAS - B)] where log B is normal around log ``best_us`` with spread ``sigma`` (0: the plain
    difference): a put's value at strike cuBLAS on a log-normal best."""
    if not math.isfinite(best_us):
        return 0.0
    if sigma <= 0:
        return max(0.0, cublas_us - best_us)
    phi = NormalDist().cdf
    d2 = math.log(best_us / cublas_us) / sigma
    return max(0.0, cublas_us * phi(-d2) - best_us * math.exp(sigma * sigma / 2) * phi(-d2 - sigma))


def expected_saving_min(cublas_us: float, bests: Sequence[float], sigma: float = 0.0, points: int = 48) -> float:
    """E[max(0, cuBLAS - min_f B_f)] where each log B_f is normal around log ``bests[f]`` with spread ``sigma``,
    independently (inf: a family not searched). One family, or ``sigma = 0``: ``expected_saving`` of the lowest. More:
    that, plus the integral over t in (0, cuBLAS) of P(min B <= t) - P(B_1 <= t) = P(B_1 > t) (1 - prod over the
    others of P(B_f > t)) (family 1 the lowest), which is never negative and vanishes for families far above it:
    the chance that another family beats it (midpoint rule on log t, ``points`` points, over ±6 sigma)."""
    finite = sorted(b for b in bests if math.isfinite(b))
    if not finite:
        return 0.0
    base = expected_saving(cublas_us, finite[0], sigma)
    if sigma <= 0 or len(finite) == 1:
        return base
    lb = [math.log(b / cublas_us) for b in finite]
    lo, hi = lb[1] - 6 * sigma, min(0.0, lb[0] + 6 * sigma)
    if lo >= hi:
        return base
    step, root2 = (hi - lo) / points, math.sqrt(2.0) * sigma
    extra = 0.0
    for k in range(points):
        u = lo + (k + 0.5) * step   # log(t / cuBLAS)
        above = [0.5 * math.erfc((u - m) / root2) for m in lb]   # P(B_f > t)
        rest = math.prod(above[1:])
        extra += math.exp(u) * above[0] * (1.0 - rest)
    return base + cublas_us * extra * step


def shape_value(items: Sequence[Item], trials: dict[str, int], curve: Curve, sigma: float = 0.0) -> float:
    """µs per step a shape's searches are expected to save against cuBLAS (``items``: its families), the predicted
    optimum's error spread ``sigma`` included, each family's error its own (``expected_saving_min``)."""
    if not items:
        return 0.0
    bests = [it.optimum_us * (1.0 + curve.gap(trials.get(it.family, 0))) for it in items]
    it0 = items[0]
    return it0.calls * expected_saving_min(it0.cublas_us, bests, sigma)


def _steps(chunk: int, room: int) -> list[int]:
    """The trials one purchase may add: a chunk, and 2, 4, 8, ... chunks (a family whose first chunk saves nothing
    may still pay off after more: its value is zero until its expected best drops below cuBLAS), within ``room``."""
    out, k = [], chunk
    while k < room:
        out.append(k)
        k *= 2
    return out + [room] if room > 0 else out


def allocate(items: Sequence[Item], budget_s: float, curve: Curve, trial_s: float, shape_s: float,
             chunk: int = CHUNK, sigma: float = 0.0, small_curve: Curve | None = None) -> Plan:
    """Trials per item within ``budget_s`` seconds: a trial costs ``trial_s``, a searched shape ``shape_s`` once
    (its confirmation, its re-confirmation). Greedy by expected µs saved per second (the predicted optimum's error
    spread ``sigma`` included, or a shape's own, ``Item.sigma``); a purchase expected to save less than ``MIN_GAIN``
    of the step's cuBLAS time is never bought (with ``sigma = 0``: a family predicted no faster than cuBLAS is not
    searched). Resumed trials (``Item.done``) are counted as already bought and cost nothing. A shape whose weights
    are under ``SMALL_WEIGHT_BYTES`` is valued on ``small_curve`` where one is given, every other on ``curve``."""
    if trial_s <= 0 or shape_s < 0:
        raise UsageError(f"trial cost {trial_s} s and shape cost {shape_s} s must be positive")
    by_shape: dict[Shape, list[Item]] = {}
    for it in items:
        by_shape.setdefault(it.shape, []).append(it)
    trials: dict[Shape, dict[str, int]] = {s: {it.family: it.done for it in its} for s, its in by_shape.items()}
    curves = {s: small_curve if small_curve is not None and s.weight_bytes < SMALL_WEIGHT_BYTES else curve
              for s in by_shape}
    sig = {s: its[0].sigma if its[0].sigma is not None else sigma for s, its in by_shape.items()}
    opened = {s for s, t in trials.items() if any(t.values())}
    step = sum(its[0].calls * its[0].cublas_us for its in by_shape.values())
    floor_gain = MIN_GAIN * step if max(sig.values(), default=sigma) > 0 else 0.0
    left = float(budget_s) - shape_s * len(opened)   # a resumed shape still has its confirmation ahead
    order: list[Shape] = list(opened)
    memo: dict[tuple[Shape, tuple[tuple[str, int], ...]], float] = {}

    def value(s: Shape, t: dict[str, int]) -> float:   # (each purchase changes one shape: the others' values repeat)
        key = (s, tuple(sorted(t.items())))
        if key not in memo:
            memo[key] = shape_value(by_shape[s], t, curves[s], sig[s])
        return memo[key]

    while True:
        best: tuple[float, Shape, str, int, float] | None = None
        for s, its in by_shape.items():
            now = value(s, trials[s])
            for it in its:
                have = trials[s][it.family]
                for k in _steps(chunk, it.max_trials - have):
                    cost = k * trial_s + (0.0 if s in opened else shape_s)
                    if cost > left:
                        break
                    gain = value(s, {**trials[s], it.family: have + k}) - now
                    rate = gain / cost
                    if gain > floor_gain and (best is None or rate > best[0]):
                        best = (rate, s, it.family, k, cost)
        if best is None:
            break
        _, s, fam, k, cost = best
        trials[s][fam] += k
        left -= cost
        if s not in opened:
            opened.add(s)
            order.append(s)
    flat = {(s, f): t for s, fam in trials.items() for f, t in fam.items()}
    saving = sum(value(s, trials[s]) for s in by_shape)
    return Plan(flat, budget_s - left, saving, step, order)
