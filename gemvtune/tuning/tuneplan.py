"""What a whole-model tune plans with (``gemvtune tune``): the search-quality curve, each family's predicted optimum
and warm start for a shape (the cost model over a seeded sample of the family's valid space), cuBLAS's time for a
shape (the table's measurement, else its prediction from the table's neighbours, else the read floor), and the
:class:`~gemvtune.tuning.budget.Item` of every (shape, family) to search. Pure but for the files it reads."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..kernels.families import FAMILIES
from ..kernels.shapes import Shape
from .budget import FOREIGN_SIGMA, OPTIMUM_SIGMA, Curve, Item, fp8_sigma

CURVE_FILE = "study-curves.csv.gz"     # what ``gemvtune study`` writes: per sampler, seed and trial, the gap
# Where a GPU's results keep the curves of each sampler the tune plans with: the search's default (TPE from its seed)
# in the search-quality study, TPE warm-started by the cost model (what a tune with a model runs) in the
# leave-one-shape-out study, whose held-out models never saw the shape they warm-start.
CURVES = {"tpe": "search-quality", "tpe-warm": "costmodel-loso"}
SAMPLE = 2048                          # valid configs per family the cost model ranks for a shape's plan
WARM_K = 4                             # of them, the predicted fastest enqueued after the seed (the first chunk)
# Starting estimates of what a trial and a shape's fixed work cost, before the run measures its own: on the H200
# (2026-12-02, issue 36) a whole-model search of 5 shapes x 408 trials (every family, confirmations included) took
# 259 s, 0.127 s a trial; a shape's confirmation and re-confirmation, a few seconds. The tune re-estimates both
# from what it measured after every shape (``TuneState``).
TRIAL_S = 0.127
SHAPE_S = 6.0


@dataclass(frozen=True)
class Basis:
    """What a tune's plan trusts its cost models for: the search curve of TPE warm-started by them (``warm``), and the
    spread of their predicted optimum (``sigma``), with the line that says so (``note``, "" when there is none)."""

    warm: bool
    sigma: float
    note: str = ""


def plan_basis(models: Sequence[Any], gpu: str, fp8: bool = False) -> Basis:
    """A model of this GPU: the warm curve (measured with held-out models of the same GPU) and ``OPTIMUM_SIGMA``. Only
    another GPU's model (the one gemvtune ships, say): it still warm-starts each search, but the plan counts on the
    cold curve and the wider ``FOREIGN_SIGMA`` (on an H100 with the H200's model, 2026-12-06, 5 warm-started trials
    left 1024x4096 at n = 2, 4 and 16 3-14% behind the H100 table). A model of this GPU continued from another's
    (``costmodel fit --prior``: one tune's searches over the other GPU's trees) counts as the other's: the warm curve
    was measured with models fitted on a GPU's whole data. No model: the cold curve, the read floor as a bound (no
    spread). ``fp8``: the steps hold FP8 shapes, whose spread is at least ``FP8_SIGMA`` (``budget.fp8_sigma``); the note
    says so."""
    have = [m for m in models if m is not None]
    if not have:
        return Basis(False, 0.0)
    if any(str(getattr(m, "gpu", "")) == gpu and getattr(m, "prior_gpu", None) is None for m in have):
        return Basis(True, OPTIMUM_SIGMA)
    other = ", ".join(sorted({str(getattr(m, "gpu", "") or "an unknown GPU")
                              + (f" (continued from {m.prior_gpu}'s)" if getattr(m, "prior_gpu", None) else "")
                              for m in have}))
    mine = any(str(getattr(m, "gpu", "")) == gpu for m in have)
    none = "" if mine else f", none of {gpu or 'this GPU'}"
    return Basis(False, FOREIGN_SIGMA, f"cost model of {other}{none}: it warm-starts the searches, the plan counts on "
                 f"the cold search curve and a spread of {FOREIGN_SIGMA:g}"
                 + (f" ({fp8_sigma(FOREIGN_SIGMA):g} for the FP8 shapes)" if fp8 else ""))


def curve_paths(gpu_slug: str, sampler: str) -> list[Path]:
    """Where a GPU's search-quality curve of ``sampler`` may be: its results' benchmarks, then the ones gemvtune
    ships for it, then any shipped (the curve measures the sampler on the space, replayed: the prior for a GPU with
    none of its own)."""
    from ..runtime.tables import shipped_root
    from ..workspace import Workspace

    rel = Path("benchmarks") / CURVES[sampler] / CURVE_FILE
    out = [Workspace.for_gpu(gpu_slug).root / rel]
    root = shipped_root()
    if root is not None:
        out += [root / gpu_slug / rel] + sorted(root.glob(f"*/{rel.as_posix()}"))
    return list(dict.fromkeys(out))


def load_curve(gpu_slug: str, warm: bool, path: str | Path | None = None) -> Curve:
    """The search-quality curve a tune plans with: TPE warm-started by the cost model (``warm``), else TPE from its
    seed, read from ``path`` or the first of ``curve_paths``; one UsageError if there is none."""
    sampler = "tpe-warm" if warm else "tpe"
    paths = [Path(path)] if path is not None else curve_paths(gpu_slug, sampler)
    for p in paths:
        if p.is_file():
            return read_curve(p, sampler)
    raise UsageError(f"no search-quality curve of {sampler} to split a budget by (gemvtune study --sweeps ... "
                     f"{'--costmodel RESULTS ' if warm else ''}writes {CURVE_FILE}); looked in "
                     f"{', '.join(str(p) for p in paths[:3])}")


def read_curve(path: Path, sampler: str) -> Curve:
    """The mean curve of ``sampler``'s runs in a ``study-curves.csv.gz`` (shape, sampler, seed, trial, gap)."""
    import io

    import pandas as pd

    from ..userfile import read_maybe_gz

    raw = read_maybe_gz(path, "search-quality curve", 64 * 2**20)
    try:
        df = pd.read_csv(io.BytesIO(raw))
        df = df[df["sampler"] == sampler].sort_values(["shape", "seed", "trial"])
        runs = [g["gap"].astype(float).tolist() for _, g in df.groupby(["shape", "seed"], sort=True)]
    except (KeyError, ValueError, pd.errors.ParserError) as e:
        raise UsageError(f"search-quality curve {path}: not a study's curves ({str(e)[:80]})") from None
    if not runs:
        raise UsageError(f"search-quality curve {path}: no runs of {sampler}")
    return Curve.from_runs(runs, f"{path} ({sampler})")


def sample_valid(family: str, shape: Shape, k: int = SAMPLE, seed: int = 0, arch: Any = None) -> list[Any]:
    """Up to ``k`` distinct configs of a template family valid for ``shape`` on ``arch`` (None: sm_90), drawn
    uniformly over the domains the search proposes there (seeded), with its seed and fallbacks first."""
    fam = FAMILIES[family]
    out: dict[Any, None] = {}
    for c in [fam.seed, *(c for c, _ in fam.fallbacks)]:
        if c is not None and c.is_valid(shape, arch):
            out[c] = None
    domains = fam.config_cls.search_domains(fam.domains, arch)
    names, values = list(domains), list(domains.values())
    rng = random.Random(f"{seed}:{family}:{shape.key}")
    for _ in range(20 * k):
        if len(out) >= k:
            break
        c = fam.config_cls(**{n: rng.choice(v) for n, v in zip(names, values)})
        if c not in out and c.is_valid(shape, arch):
            out[c] = None
    return list(out)


@dataclass(frozen=True)
class Prediction:
    """A family's predicted optimum for a shape, and its predicted fastest configs (the warm start)."""

    optimum_us: float
    warm: tuple[dict[str, Any], ...]


def predict(model: Any, shape: Shape, families: Sequence[str], read_gbps: float, k: int = SAMPLE,
            arch: Any = None) -> dict[str, Prediction]:
    """Per template family, the cost model's fastest over a sample of its valid space, as a multiple of the read floor
    at this GPU's measured ceiling ``read_gbps``; ``model`` is the one of the shape's weights (16-bit or FP8:
    ``features.GROUPS``). Without any model, or for a family the model has no features for, the family's optimum is
    taken as the read floor with no warm start: the plan then favours the shapes where the baseline is furthest from
    the floor."""
    out = {}
    for f in families:
        if FAMILIES[f].library or not FAMILIES[f].config_cls.reads(shape):   # (FP8 weights or not: another family's)
            continue
        if model is None or f not in model.families:
            out[f] = Prediction(shape.weight_bytes / read_gbps * 1e-3, ())
            continue
        configs = sample_valid(f, shape, k, arch=arch)
        if not configs:
            continue
        # time / read floor, as the model learned it, times this GPU's floor: a model of another GPU (the one
        # gemvtune ships, where this GPU has none) still ranks the families and configs by what it learned
        rel = model.predict_rel([(c, shape) for c in configs])
        order = sorted(range(len(configs)), key=lambda i: rel[i])
        floor = shape.weight_bytes / read_gbps * 1e-3
        # the warm start: WARM_K configs beside the seed, which the search enqueues first anyway (on the H200,
        # 2026-12-05, 4096x4096 n = 16 ranked the seed third: 3 of the 4 were new)
        warm = [configs[i] for i in order if configs[i] != FAMILIES[f].seed][:WARM_K]
        out[f] = Prediction(float(rel[order[0]]) * floor, tuple(c.to_dict() for c in warm))
    return out


def cublas_us(tables: Sequence[Any], shape: Shape, read_gbps: float, runner: Any = None) -> tuple[float, str]:
    """(cuBLAS's µs for one call of ``shape``, where it comes from): the first table's measurement of the shape
    that has one, else the runner's (``runner.baselines``: a few tenths of a second), else its prediction from a
    table's neighbours (``route.predicted_cublas_us``), else the read floor."""
    from ..baselines import cublas_of
    from ..runtime.route import measured, predicted_cublas_us

    def floor(s: Shape) -> float:
        return s.weight_bytes / read_gbps * 1e-3

    for t in tables:
        e = t.entry(shape)
        if e is not None:
            _, c, _ = measured(e, "torch", shape)
            if c:
                return float(c), "measured"
    if runner is not None:
        b = cublas_of({m.kind: m for m in runner.baselines(shape)}, "torch", ok=lambda m: m.ok)
        if b is not None:
            return float(b.us_median), "measured now"
    for t in tables:
        p = predicted_cublas_us(t, shape, floor)
        if p:
            return float(p), "predicted from the table"
    return float(floor(shape)), "the read floor"


def items_for(shape: Shape, calls: float, families: Sequence[str], cublas: float, predictions: dict[str, Prediction],
              done: dict[str, int] | None = None, sigma: float = 0.0) -> list[Item]:
    """The searchable (shape, family) items: every template family with a prediction (none predicted: cuBLAS's time
    is the only guess, and nothing is expected from a search of it). FP8 weights, where the plan has a spread
    (``sigma`` > 0: a model predicted them): ``budget.fp8_sigma``, the FP8 model's wider error per family."""
    done = done or {}
    own = fp8_sigma(sigma) if shape.weights and sigma > 0 else None
    return [Item(shape, f, calls, cublas, predictions[f].optimum_us, done=done.get(f, 0), sigma=own)
            for f in families if f in predictions]
