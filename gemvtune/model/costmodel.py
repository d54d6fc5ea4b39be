"""The learned cost model: LightGBM gradient-boosted trees from the features of a (config, shape) point
(``gemvtune.model.features``) to log(time / read floor), fitted on a GPU's recorded measurements
(``gemvtune.model.dataset``). The file is JSON holding LightGBM's own text format of the trees, the feature
columns, the GPU and the read ceiling it was fitted with: data that loading parses, never executes (a
serialized Python object or a malformed file is refused with one line). A model predicts one group of weights
(``features.GROUPS``): W in the input dtype (``costmodel.json``), or FP8 codes and scales (``costmodel-fp8.json``,
its file names the group as ``"weights": "fp8"``; a 16-bit model's file has no such key, as before FP8 came)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import UsageError
from ..kernels.shapes import Shape
from . import features
from .treecheck import check_model_text

FORMAT = "gemvtune-costmodel"
VERSION = 1
# LightGBM, deterministic: the same data give the same trees on any host. Huber loss (quadratic within 5% of the
# log-time, linear beyond): a noisy measurement pulls the fit less than under squared error, and the zero-trial
# pick (the argmin over thousands of predictions) is less often an over-optimistic outlier; leave-one-shape-out
# worst case 14.3% -> 1.7% on the data of 2026-12-02 (docs/design-notes.md#cost-model, where the variants tried are).
PARAMS: dict[str, Any] = {
    "objective": "huber", "alpha": 0.05, "learning_rate": 0.05, "num_leaves": 63, "min_data_in_leaf": 10,
    "feature_fraction": 0.9, "bagging_fraction": 0.9, "bagging_freq": 1, "lambda_l2": 1.0, "verbose": -1,
    "seed": 0, "deterministic": True, "force_row_wise": True, "num_threads": 2,
}
ROUNDS = 400
PRIOR_ROUNDS = 50   # boosting rounds over another GPU's model (the H100 on the H200's, held out by size, 2026-12-06:
                    # 50 rounds kept every pick of weights >= 16 MB within 2.9% of the fastest measured; 150 reached 21%)


def rounds_for(rounds: int | None, prior: Any) -> int:
    """Boosting rounds of a fit: those asked for, else ``PRIOR_ROUNDS`` over a prior and ``ROUNDS`` without one."""
    return rounds or (PRIOR_ROUNDS if prior is not None else ROUNDS)


def _lgb() -> Any:
    try:
        import lightgbm
    except (ImportError, OSError) as e:   # not installed, or its shared library cannot load (libgomp missing)
        raise UsageError(f"the cost model needs LightGBM: pip install 'gemvtune[model]' ({_first_line(e)})") from None
    return lightgbm


def _first_line(e: BaseException) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0][:120]


@dataclass
class CostModel:
    booster: Any
    gpu: str
    sm_count: int
    read_gbps: float
    meta: dict[str, Any]
    group: str = ""   # the weights it predicts: "" (the input dtype) or "fp8" (features.GROUPS)

    @property
    def min_weight_bytes(self) -> int:
        """The smallest weight it was fitted on (0: a file written before this was recorded)."""
        v = self.meta.get("min_weight_bytes", 0)
        return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 0

    @property
    def prior_gpu(self) -> str | None:
        """The GPU whose model this one continues (``fit``'s ``prior``), or None."""
        p = self.meta.get("prior")
        return str(p.get("gpu", "") or "another GPU")[:200] if isinstance(p, dict) else None

    @property
    def families(self) -> tuple[str, ...]:
        """The template families it has features for."""
        return features.families(self.group)

    def predict_rel(self, points: list[tuple[Any, Shape]]) -> np.ndarray:
        """Predicted time / read floor of each (config, shape)."""
        if not points:
            return np.zeros(0)
        X = features.frame(points, self.sm_count, self.group)
        return np.exp(self.booster.predict(X.to_numpy(), num_threads=PARAMS["num_threads"]))

    def floor_us(self, shape: Shape) -> float:
        return shape.weight_bytes / self.read_gbps * 1e-3

    def predict_us(self, points: list[tuple[Any, Shape]]) -> np.ndarray:
        rel = self.predict_rel(points)
        return rel * np.array([self.floor_us(s) for _, s in points])

    def rank(self, configs: list[Any], shape: Shape, k: int | None = None) -> list[tuple[Any, float]]:
        """(config, predicted µs) of ``configs`` on ``shape``, fastest first (ties: the input order)."""
        us = self.predict_us([(c, shape) for c in configs])
        order = np.argsort(us, kind="stable")
        picked = order if k is None else order[:k]
        return [(configs[i], float(us[i])) for i in picked]

    # ---- the file ------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "gpu": self.gpu, "sm_count": self.sm_count,
                "read_gbps": self.read_gbps, "columns": features.columns(self.group),
                "target": "log(us / read floor); floor = weight bytes / read_gbps", "params": PARAMS,
                "meta": self.meta, "lightgbm": self.booster.model_to_string(),
                **({"weights": self.group} if self.group else {})}

    def save(self, path: str | Path) -> None:
        from ..safefile import atomic_write

        text = json.dumps(self.to_json(), indent=1, sort_keys=True) + "\n"
        try:
            if str(path).endswith(".gz"):   # gzip, reproducible bytes (no name, no time in the header)
                import gzip

                data = gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0)
                atomic_write(Path(path), lambda f: f.write(data), binary=True, what="cost model")
            else:
                atomic_write(Path(path), lambda f: f.write(text), what="cost model")
        except OSError as e:   # a full disk, a read-only folder: the old file (if any) is kept whole
            raise UsageError(f"cost model {path}: cannot write it ({e.strerror or e})") from None


def fit(points: list[tuple[Any, Shape]], rel: np.ndarray, sm_count: int, gpu: str, read_gbps: float,
        meta: dict[str, Any] | None = None, rounds: int = ROUNDS, group: str = "",
        prior: CostModel | None = None) -> CostModel:
    """Fit the model of ``group`` on (config, shape) points and their measured time / read floor. ``prior``: another
    GPU's model of the same group and SM count, whose trees this fit continues (``rounds`` more, boosted on what it
    mispredicts here): a GPU with few measurements of its own keeps what the other GPU's data taught about configs
    it never measured, corrected where it did (``PRIOR_ROUNDS``; docs/design-notes.md#a-cost-model-for-another-gpu).
    The file records the smallest weight it was fitted on (``min_weight_bytes``): no zero-trial pick below it."""
    lgb = _lgb()
    if len(points) != len(rel) or not len(points):
        raise UsageError(f"cost model: {len(points)} points and {len(rel)} times: nothing to fit")
    if prior is not None and (prior.group != group or prior.sm_count != sm_count):
        raise UsageError(f"--prior: a model of {prior.gpu or 'another GPU'} with {prior.sm_count} SMs and weights "
                         f"{prior.group or '16-bit'}; this fit is of {sm_count} SMs and {group or '16-bit'} weights")
    X = features.frame(points, sm_count, group).to_numpy()
    data = lgb.Dataset(X, label=np.log(np.asarray(rel, dtype=np.float64)), feature_name=_safe_names(group),
                       free_raw_data=True)
    booster = lgb.train(PARAMS, data, num_boost_round=rounds,
                        init_model=prior.booster if prior is not None else None)
    info: dict[str, Any] = dict(meta or {}, rows=len(points), min_weight_bytes=min(s.weight_bytes for _, s in points))
    if prior is not None:
        info["prior"] = {"gpu": prior.gpu, "read_gbps": prior.read_gbps, "trees": prior.booster.num_trees(),
                         **{k: prior.meta[k] for k in ("rows", "shapes") if k in prior.meta}}
    return CostModel(booster, gpu, sm_count, float(read_gbps), info, group)


def _safe_names(group: str = "") -> list[str]:
    """LightGBM's feature names (no dots or special characters in them)."""
    return [c.replace(".", "__") for c in features.columns(group)]


def load(path: str | Path) -> CostModel:
    """A cost model file; UsageError (one line) for anything that is not one."""
    from ..userfile import MODEL_BYTES, decode_json, read_maybe_gz

    p = Path(path)
    raw = read_maybe_gz(p, "cost model", MODEL_BYTES)   # a regular file, capped (gzip: decompressed, capped)
    if raw[:1] == b"\x80" or raw[:2] in (b"PK", b"\x1f\x8b"):
        raise UsageError(f"cost model {p}: a binary file (a serialized Python object or an archive?); a model is JSON text, never code")
    data = decode_json(raw, f"cost model {p}")
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise UsageError(f"cost model {p}: not a gemvtune cost model (format is not {FORMAT!r})")
    if data.get("version") != VERSION:
        raise UsageError(f"cost model {p}: version {data.get('version')!r}, this gemvtune reads {VERSION}")
    group = data.get("weights", "")
    if group not in features.GROUPS:
        raise UsageError(f"cost model {p}: weights {str(group)[:40]!r} is not one this gemvtune models "
                         f"(none: 16-bit; {features.FP8!r})")
    cols = features.columns(group)
    if data.get("columns") != cols:
        raise UsageError(f"cost model {p}: fitted on other features than this gemvtune's; refit it "
                         f"(gemvtune costmodel fit)")
    sm, gbps, text = data.get("sm_count"), data.get("read_gbps"), data.get("lightgbm")
    if not isinstance(sm, int) or isinstance(sm, bool) or sm <= 0:
        raise UsageError(f"cost model {p}: sm_count {sm!r} is not a positive integer")
    if not isinstance(gbps, (int, float)) or isinstance(gbps, bool) or not math.isfinite(gbps) or gbps <= 0:
        raise UsageError(f"cost model {p}: read_gbps {gbps!r} is not a positive number")
    if not isinstance(text, str) or not text.startswith("tree\n"):
        raise UsageError(f"cost model {p}: the trees are missing or not LightGBM's text format")
    check_model_text(text, len(cols), f"cost model {p}")   # before LightGBM's C++ sees it
    lgb = _lgb()
    try:
        booster = lgb.Booster(model_str=text)
    except Exception as e:   # LightGBM's parser: LightGBMError or worse on a damaged text
        raise UsageError(f"cost model {p}: LightGBM cannot read its trees ({_first_line(e)})") from None
    if booster.num_feature() != len(cols):
        raise UsageError(f"cost model {p}: its trees take {booster.num_feature()} features, not {len(cols)}")
    meta: dict[str, Any] = data["meta"] if isinstance(data.get("meta"), dict) else {}
    return CostModel(booster, str(data.get("gpu", ""))[:200], sm, float(gbps), meta, group)
