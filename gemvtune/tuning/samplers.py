"""The Optuna samplers a search can use, by name: TPE (the default: multivariate, constant liar with
trials in flight), random, GP (invalid configs come back infeasible) and exhaustive."""

from __future__ import annotations

import optuna

from ..errors import UsageError
from ..runtime.tableschema import SAMPLER_NAMES
from .coordination.optuna_adapter import TreeFilteredBruteForceSampler

SAMPLERS = SAMPLER_NAMES   # one list: the table schema and its reports know them too
GP_INSTALL = "pip install 'gemvtune[gp]'"


def gp_missing(load: bool = True) -> str | None:
    """None where Optuna's GP sampler can run (it needs torch and scipy, which gemvtune does not
    require: the ``gp`` extra brings them), else the one-line reason. ``load=False`` only looks for
    the packages (no import: cheap, for a check before work starts)."""
    import importlib
    import importlib.util

    for mod in ("scipy", "torch"):
        try:
            found = importlib.import_module(mod) if load else importlib.util.find_spec(mod)
        except ImportError:
            found = None
        if found is None:
            return f"the gp sampler needs torch and scipy ({mod} is missing: {GP_INSTALL})"
    return None


def _infeasible(t: optuna.trial.FrozenTrial) -> tuple[float]:
    return (float(t.user_attrs.get("infeasible", 0.0)),)


class _BruteForce(TreeFilteredBruteForceSampler):
    """Optuna's BruteForceSampler, skipping finished trials that did not get every parameter (a worker
    killed while a trial was sampling leaves one, failed by its heartbeat): the stock sampler puts such
    a trial at a leaf of its tree and then refuses every later proposal ("param_name mismatch")."""

    @staticmethod
    def tree_trials(trials: list[optuna.trial.FrozenTrial]) -> list[optuna.trial.FrozenTrial]:
        full = max((len(t.params) for t in trials), default=0)   # every gemvtune trial suggests every parameter
        return [t for t in trials if len(t.params) == full or not t.state.is_finished()]


def make_sampler(name: str, seed: int, n_startup: int = 10, constant_liar: bool = False) -> optuna.samplers.BaseSampler:
    if name == "tpe":
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # multivariate TPE is flagged experimental
            # constant_liar (with several trials in flight, compiles overlapping): running trials count
            # as bad so the sampler spreads them.
            return optuna.samplers.TPESampler(seed=seed, n_startup_trials=n_startup, multivariate=True,
                                              constant_liar=constant_liar)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "gp":
        why = gp_missing()   # Optuna's GP sampler runs on torch and scipy
        if why:
            raise UsageError(why)
        # GP ignores pruned trials and would keep proposing invalid configs: they come back as
        # completed-but-infeasible trials instead (see optimize), which its constraint model learns.
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=n_startup, constraints_func=_infeasible)
    if name == "exhaustive":
        return _BruteForce(seed=seed)
    raise UsageError(f"unknown sampler {name!r}; choose one of {', '.join(SAMPLERS)}")
