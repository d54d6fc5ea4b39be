"""Pictures of one search's studies: convergence (each measured trial's time and the best so far, with
the llama.cpp seed as the reference line) and parameter importance (Optuna's fANOVA evaluator, or
PED-ANOVA where fANOVA cannot run), from any storage the search wrote."""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import optuna

from ..safefile import savefig


def convergence_rows(study: optuna.Study) -> list[dict[str, Any]]:
    """Measured trials in trial order: their µs (None if not a correct, timed variant) and the best so far."""
    rows: list[dict[str, Any]] = []
    best = math.inf
    for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
        a = t.user_attrs
        if not a.get("measured") or t.state not in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED):
            continue
        us = t.value if t.state == optuna.trial.TrialState.COMPLETE and a.get("status") == "ok" else None
        if us is not None:
            best = min(best, us)
        rows.append({"measured": len(rows) + 1, "trial": t.number, "label": a.get("label"), "status": a.get("status"),
                     "us": us, "best_us": best if best < math.inf else None, "seed": bool(a.get("enqueued")),
                     "worker": a.get("worker"), "device": a.get("device")})
    return rows


def importances(study: optuna.Study) -> tuple[dict[str, float], str]:
    """Parameter importances over the study's correct measured trials, and the evaluator used."""
    ok = [t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
          if t.user_attrs.get("status") == "ok" and t.user_attrs.get("measured")]
    if len(ok) < 2:
        raise ValueError(f"study {study.study_name} has {len(ok)} correct measured trial(s); importance needs 2 or more")
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)   # (create_study's INFO line) for this call only
    try:
        view = optuna.create_study(direction="minimize")
    finally:
        optuna.logging.set_verbosity(verbosity)
    view.add_trials(ok)   # only real measurements (duplicates and infeasible answers left out)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for make in (lambda: optuna.importance.FanovaImportanceEvaluator(seed=0),   # needs scikit-learn
                     optuna.importance.PedAnovaImportanceEvaluator):
            try:
                ev = make()
                imp = optuna.importance.get_param_importances(view, evaluator=ev)
                return {k: float(v) for k, v in imp.items()}, type(ev).__name__.replace("ImportanceEvaluator", "")
            except Exception:   # e.g. a parameter with a single value everywhere
                continue
    raise ValueError(f"no importance evaluator could run on study {study.study_name}")


def plot_convergence(curves: dict[str, list[dict[str, Any]]], path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, (name, rows) in enumerate(curves.items()):
        color = f"C{i}"
        xs = [r["measured"] for r in rows if r["us"] is not None]
        ax.scatter(xs, [r["us"] for r in rows if r["us"] is not None], s=9, alpha=0.35, color=color)
        ax.step([r["measured"] for r in rows if r["best_us"] is not None],
                [r["best_us"] for r in rows if r["best_us"] is not None], where="post", color=color,
                label=f"{name}: best so far")
        seed = [r for r in rows if r["seed"] and r["us"] is not None]
        if seed:
            ax.axhline(seed[0]["us"], color=color, ls=":", lw=1, label=f"{name}: seed ({seed[0]['label']})")
    ys = [r["us"] for rows in curves.values() for r in rows if r["us"] is not None]
    if ys:
        lo = min(ys)
        ax.set_ylim(lo * 0.97, min(max(ys), lo * 2.0) * 1.02)
    ax.set_xlabel("measured trial")
    ax.set_ylabel("µs per call (graph median)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    savefig(fig, path, dpi=110)
    plt.close(fig)
    return path


def plot_importance(imp: dict[str, dict[str, float]], path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(imp), figsize=(4.2 * len(imp), 3.6), squeeze=False)
    for ax, (name, vals) in zip(axes[0], imp.items()):
        items = sorted(vals.items(), key=lambda kv: kv[1])
        ax.barh([k for k, _ in items], [v for _, v in items], color="C0")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("importance")
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    savefig(fig, path, dpi=110)
    plt.close(fig)
    return path
