"""Search quality on recorded sweeps: how many measured trials each sampler needs to come within
1%, 2% and 5% of the sweep's optimum, over many seeds, per shape and overall."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from ..kernels.families import DEFAULT_FAMILY
from ..progress import progress
from ..safefile import savefig

log = logging.getLogger("gemvtune")

THRESHOLDS = (0.01, 0.02, 0.05)

# name -> (Optuna sampler kind, options); "tpe" is the product's default.
SAMPLER_VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "tpe": ("tpe", {"n_startup": 10}),
    "tpe-s5": ("tpe", {"n_startup": 5}),
    "tpe-s20": ("tpe", {"n_startup": 20}),
    "tpe-indep": ("tpe-indep", {"n_startup": 10}),
    "random": ("random", {}),
    "gp": ("gp", {"n_startup": 10}),
    # TPE warm-started by the cost model: its top-k for the shape enqueued after the llama.cpp seed (counted in
    # the budget); needs ``warm`` configs per shape (``gemvtune study --costmodel``, leave-one-shape-out)
    "tpe-warm": ("tpe", {"n_startup": 10, "warm": True}),
}


def _sampler(variant: str, seed: int):
    import optuna

    from .samplers import make_sampler

    kind, o = SAMPLER_VARIANTS[variant]
    if kind == "tpe-indep":
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=o["n_startup"], multivariate=False)
    return make_sampler(kind, seed, o.get("n_startup", 10))


def usable_samplers(samplers: list[str], echo: Callable[[str], None] = print) -> list[str]:
    """The samplers that can run here. GP needs torch and scipy (the ``gp`` extra), which gemvtune
    does not require: without them it is left out of a list with others, saying so, and refused
    alone; every other sampler needs only the declared dependencies."""
    from ..errors import UsageError
    from .samplers import gp_missing

    gp = [s for s in samplers if SAMPLER_VARIANTS.get(s, ("",))[0] == "gp"]
    why = gp_missing(load=False) if gp else None
    if not why:
        return list(samplers)
    rest = [s for s in samplers if s not in gp]
    if not rest:
        raise UsageError(why)
    echo(f"left out {', '.join(gp)}: {why}")
    return rest


def one_run(args: tuple) -> dict[str, Any]:
    """One simulated search: (sweep file, sampler variant, seed, budget[, warm configs]) -> best-so-far per
    measured trial."""
    import warnings

    import optuna

    path, variant, seed, budget = args[:4]
    warm = [dict(c) for c in args[4]] if len(args) > 4 else []   # (pairs: the task is hashable and picklable)
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)   # for this run only: restored below
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return _one_run(path, variant, seed, budget, warm)
    finally:
        optuna.logging.set_verbosity(verbosity)


def _one_run(path: str, variant: str, seed: int, budget: int, warm: Any = ()) -> dict[str, Any]:
    import optuna

    from ..runners.replay import ReplayRunner
    from .search import SearchOptions, enqueue_seed, enqueue_warm, make_searcher

    runner = ReplayRunner(path)
    (shape, sweep), = runner.sweeps.items()
    study = optuna.create_study(direction="minimize", sampler=_sampler(variant, seed),
                                storage=optuna.storages.InMemoryStorage())
    enqueue_seed(study, DEFAULT_FAMILY, sweep.grid or None)
    if warm:
        enqueue_warm(study, warm, sweep.grid or None)
    opts = SearchOptions(sampler=SAMPLER_VARIANTS[variant][0].replace("tpe-indep", "tpe"), trials=budget, seed=seed,
                         progress=False,
                         domains={DEFAULT_FAMILY: sweep.grid} if sweep.grid else None)
    make_searcher(study, runner, shape, opts).run()
    vals = [t.value if t.state == optuna.trial.TrialState.COMPLETE else math.inf
            for t in study.get_trials(deepcopy=False) if t.user_attrs.get("measured")]
    best = np.minimum.accumulate(np.array(vals, dtype=float)) if vals else np.array([])
    return {"shape": str(shape), "sampler": variant, "seed": seed, "budget": budget, "best": best.tolist(),
            "proposals": len(study.trials), "optimum": sweep.optimum()[1]}


def trials_to_within(best: list[float], optimum: float, p: float) -> float:
    """1-based index of the first measured trial within p of the optimum; inf if never."""
    for i, b in enumerate(best, 1):
        if b <= optimum * (1 + p):
            return float(i)
    return math.inf


def run_study(sweep_paths: list[Path], samplers: list[str], seeds: int, budget: int, jobs: int,
              echo: Callable[[str], None] = print, budgets: dict[str, int] | None = None,
              journal: Path | None = None, warm: dict[str, list[dict[str, Any]]] | None = None) -> tuple[Any, Any]:
    """(curves, runs) DataFrames: curves has best/optimum per trial; runs one row per search.
    With a journal (JSON lines), every finished search is appended as it ends, and searches already
    in it are not run again: a stopped study resumes. ``warm`` (sweep file name -> configs) is what the
    warm-started samplers enqueue after the seed."""
    import json

    import pandas as pd

    budgets = budgets or {}
    samplers = usable_samplers(samplers, echo)
    needs = [s for s in samplers if SAMPLER_VARIANTS[s][1].get("warm")]
    missing = [p.name for p in sweep_paths if needs and p.name not in (warm or {})]
    if missing:
        from ..errors import UsageError

        raise UsageError(f"{', '.join(needs)} needs the cost model's configs for every sweep (--costmodel); "
                         f"none for {', '.join(missing[:3])}")
    tasks = [(str(p), s, seed, budgets.get(s, budget),
              tuple(tuple(sorted(c.items())) for c in (warm or {}).get(p.name, [])) if s in needs else ())
             for p in sweep_paths for s in samplers for seed in range(seeds)]
    tasks.sort(key=lambda t: -t[3] * (20 if t[1] == "gp" else 1))  # slowest first
    used = {s: budgets.get(s, budget) for s in samplers}
    echo(f"{len(tasks)} simulated searches ({len(sweep_paths)} shapes x {len(samplers)} samplers x {seeds} seeds; "
         f"budgets {used}) on {jobs} processes")
    done: dict[tuple, dict[str, Any]] = {}
    if journal is not None and journal.exists():
        for line in journal.read_text().splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue  # a line cut short by a kill
            done[(Path(r["path"]).name, r["sampler"], r["seed"], r["budget"])] = r
        if not journal.read_text().endswith("\n"):
            with open(journal, "a") as f:
                f.write("\n")  # close a line a kill cut short, so appends start clean
    todo = [t for t in tasks if (Path(t[0]).name, t[1], t[2], t[3]) not in done]
    if done:
        echo(f"{len(tasks) - len(todo)} searches already in {journal}; running {len(todo)}")
    new = []
    log.info("study: running %d simulated searches on %d processes", len(todo), jobs)
    with ProcessPoolExecutor(max_workers=jobs) as ex:
        for t, r in zip(todo, progress(ex.map(one_run, todo, chunksize=1), total=len(todo), desc="study",
                                       unit="search")):
            r["path"] = t[0]
            new.append(r)
            if journal is not None:
                with open(journal, "a") as f:
                    f.write(json.dumps(r, default=float) + "\n")
    log.info("study: searches done; tabulating %d", len(tasks))
    keys = {(Path(t[0]).name, t[1], t[2], t[3]) for t in tasks}
    results = [r for k, r in done.items() if k in keys] + new
    runs, curves = [], []
    for r in results:
        row = {k: r[k] for k in ("shape", "sampler", "seed", "budget", "proposals", "optimum")}
        row["measured"] = len(r["best"])
        for p in THRESHOLDS:
            row[f"to_{int(p * 100)}pct"] = trials_to_within(r["best"], r["optimum"], p)
        runs.append(row)
        for i, b in enumerate(r["best"], 1):
            curves.append({"shape": r["shape"], "sampler": r["sampler"], "seed": r["seed"], "trial": i,
                           "gap": b / r["optimum"] - 1})
    return pd.DataFrame(curves), pd.DataFrame(runs)


def summarize_runs(runs: Any) -> Any:
    """Median and 90th percentile of trials-to-within per (shape, sampler) and overall (inf = not reached)."""
    import pandas as pd

    out = []
    for (shape, sampler), g in list(runs.groupby(["shape", "sampler"])) + [(("all", s), g) for s, g in runs.groupby("sampler")]:
        row = {"shape": shape, "sampler": sampler, "runs": len(g)}
        for p in THRESHOLDS:
            col = g[f"to_{int(p * 100)}pct"].to_numpy()
            row[f"within{int(p * 100)}_median"] = float(np.median(col))
            row[f"within{int(p * 100)}_p90"] = float(np.quantile(col, 0.9, method="higher"))
            row[f"within{int(p * 100)}_reached"] = float(np.isfinite(col).mean())
        out.append(row)
    return pd.DataFrame(out)


def llama_position(sweep_paths: list[Path]) -> Any:
    """Where the llama.cpp config sits in each sweep: its time over the optimum and its rank."""
    import pandas as pd

    from ..kernels.gemv import LLAMA_CPP
    from ..runners.replay import Sweep

    rows = []
    for p in sweep_paths:
        s = Sweep(Path(p))
        label, opt = s.optimum()
        ok = sorted(r["us_median"] for r in s.rows.values() if r["status"] == "ok")
        lu = s.rows[LLAMA_CPP.label]["us_median"]
        rows.append({"shape": str(s.shape), "optimum_config": label, "optimum_us": opt, "llama_us": lu,
                     "llama_over_optimum": lu / opt, "llama_rank": 1 + sum(v < lu for v in ok), "configs": len(ok)})
    return pd.DataFrame(rows)


def plot(curves: Any, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for sampler, g in curves.groupby("sampler"):
        med = g.groupby("trial").gap.median()
        p90 = g.groupby("trial").gap.quantile(0.9)
        line, = ax.plot(med.index, 100 * med.values, label=f"{sampler} (median)")
        ax.plot(p90.index, 100 * p90.values, ls=":", color=line.get_color(), lw=1)
    for p in THRESHOLDS:
        ax.axhline(100 * p, color="grey", lw=0.5)
    ax.set_yscale("symlog", linthresh=1)
    ax.set_xlabel("measured trials")
    ax.set_ylabel("best so far over the sweep optimum (%)")
    ax.set_title("Search convergence on recorded H200 sweeps (all shapes; dotted: 90th percentile)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    savefig(fig, path, dpi=120)
    plt.close(fig)


def study_markdown(out_dir: Path) -> str:
    """Markdown of a study folder: samplers overall, the default per shape, the llama.cpp config
    against each optimum, and Kernel Tuner's strategies where kt-summary.csv is present."""
    import pandas as pd

    out_dir = Path(out_dir)
    s = pd.read_csv(out_dir / "study-summary.csv")
    runs = pd.read_csv(out_dir / "study-runs.csv")

    def fmt(v: float) -> str:
        return ">budget" if not np.isfinite(v) else f"{v:g}"

    def table(df: Any, label: str) -> list[str]:
        lines = [f"| {label} | runs | budget | ≤1% median | ≤1% p90 | ≤2% median | ≤2% p90 | ≤5% median | ≤5% p90 | reached ≤2% |",
                 "|---|---|---|---|---|---|---|---|---|---|"]
        for _, r in df.iterrows():
            lines.append(f"| {r[label]} | {r.runs} | {r.budget} | {fmt(r.within1_median)} | {fmt(r.within1_p90)} | "
                         f"{fmt(r.within2_median)} | {fmt(r.within2_p90)} | {fmt(r.within5_median)} | "
                         f"{fmt(r.within5_p90)} | {100 * r.within2_reached:.0f}% |")
        return lines

    budgets = runs.groupby("sampler").budget.max()
    s["budget"] = s.sampler.map(budgets)
    md = ["# Search quality on the recorded H200 sweeps", "",
          "Measured trials (the llama.cpp config is trial 1) until the best found is within 1/2/5% of the "
          "sweep's optimum; median and 90th percentile over seeds (`>budget`: not reached within the budget).", "",
          "## Samplers, all shapes pooled", ""]
    md += table(s[s["shape"] == "all"].sort_values("within2_median"), "sampler")
    md += ["", "## The default (tpe) per shape", ""]
    md += table(s[(s["sampler"] == "tpe") & (s["shape"] != "all")], "shape")
    llama = pd.read_csv(out_dir / "llama-vs-optimum.csv")
    md += ["", "## The llama.cpp config against each sweep's optimum", "",
           "| shape | optimum config | optimum µs | llama.cpp µs | llama / optimum | llama rank of configs |", "|---|---|---|---|---|---|"]
    for _, r in llama.iterrows():
        md.append(f"| {r['shape']} | `{r.optimum_config}` | {r.optimum_us:.2f} | {r.llama_us:.2f} | "
                  f"{r.llama_over_optimum:.3f} | {r.llama_rank} of {r.configs} |")
    kt = out_dir / "kt-summary.csv"
    if kt.exists():
        k = pd.read_csv(kt)
        k = k[k["shape"] == "all"].copy()
        k["budget"] = int(pd.read_csv(out_dir / "kt-runs.csv").budget.max())
        both = pd.concat([s[s["shape"] == "all"], k]).sort_values("within2_median")
        md += ["", "## Against Kernel Tuner's strategies (same sweeps, same budget rule: unique valid configs measured)", ""]
        md += table(both, "sampler")
    return "\n".join(md) + "\n"
