"""Every private Optuna name gemvtune relies on, each behind one small named function or class: nothing else in
the package touches a name Optuna does not publish (tests/test_optuna_private.py greps for it).

Supported: the Optuna range of ``SUPPORTED_OPTUNA``, which is pyproject's pin. tests/test_optuna_adapter.py checks
that each hook below exists and behaves on the installed Optuna, and (slow) on the lowest pinned version, installed
apart. What each hook is, and where Optuna keeps it:

- ``study_storage``: a study's storage (``Study._storage``; Optuna publishes no accessor);
- ``trial_id``: a trial's id in its storage (``Trial._trial_id``, ``FrozenTrial._trial_id``), what the storage's
  own (public) methods take;
- ``fixed_params``: the parameters ``Study.enqueue_trial`` fixed for a queued trial (its system attribute
  ``fixed_params``);
- ``journal_op_codes``: the op codes of Optuna's journal (``JournalOperation``, in a private module that moved);
- ``RecordHookJournalStorage``: a ``JournalStorage`` whose every appended record passes through
  ``write_record`` (Optuna's ``JournalStorage._write_log``, the one place a record is appended);
- ``TreeFilteredBruteForceSampler``: a ``BruteForceSampler`` whose tree is built from the trials ``tree_trials``
  keeps (Optuna's ``BruteForceSampler._populate_tree``, called on the sampler);
- ``OPTIMIZE_LOGGER``: the logger of Optuna's trial loop (``optuna.study._optimize``), which reports a failed
  trial.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import Any

import optuna

SUPPORTED_OPTUNA = ">=4.2,<6"   # pyproject's pin (a test keeps the two equal)

OPTIMIZE_LOGGER = "optuna.study._optimize"

# Where Optuna keeps its journal's op codes (``JournalOperation``): the module moved across versions; the module of
# ``JournalStorage`` itself (which replays them) is the last resort.
_ENUM_HOMES = ("optuna.storages.journal._storage", "optuna.storages.journal._base", "optuna.storages._journal.storage")


def optimize_logger() -> logging.Logger:
    """The logger Optuna's trial loop reports a failed trial on (a traceback, then a line)."""
    return logging.getLogger(OPTIMIZE_LOGGER)


def study_storage(study: optuna.Study) -> optuna.storages.BaseStorage:
    """The storage ``study`` reads and writes (for a storage given by URL, Optuna's cached wrapper of it)."""
    return study._storage


def trial_id(trial: optuna.Trial | optuna.trial.FrozenTrial) -> int:
    """The storage's id of ``trial`` (unique across the storage's studies; ``number`` is per study)."""
    return trial._trial_id


def fixed_params(trial: optuna.trial.FrozenTrial) -> dict[str, Any]:
    """The parameters ``enqueue_trial`` fixed for ``trial`` ({} for one the sampler proposes)."""
    return trial.system_attrs.get("fixed_params", {})


def journal_op_codes() -> frozenset[int] | None:
    """The op codes of the installed Optuna's journal, or None if its ``JournalOperation`` cannot be found."""
    for home in (*_ENUM_HOMES, optuna.storages.JournalStorage.__module__):
        try:
            ops = getattr(importlib.import_module(home), "JournalOperation", None)
        except ImportError:
            continue
        if ops is not None:
            return frozenset(int(op) for op in ops)
    return None


class RecordHookJournalStorage(optuna.storages.JournalStorage):
    """Optuna's journal storage whose every record is appended through ``write_record(write)``: a subclass
    overrides it to guard the append (``write()`` appends the record; by default it is just called)."""

    def write_record(self, write: Callable[[], None]) -> None:
        write()

    def _write_log(self, op_code: int, extra_fields: dict[str, Any]) -> None:
        append = super()._write_log
        self.write_record(lambda: append(op_code, extra_fields))


class TreeFilteredBruteForceSampler(optuna.samplers.BruteForceSampler):
    """Optuna's BruteForceSampler whose tree of the study's trials is built only from the trials that
    ``tree_trials`` keeps (a static method a subclass overrides; by default every trial)."""

    @staticmethod
    def tree_trials(trials: list[optuna.trial.FrozenTrial]) -> list[optuna.trial.FrozenTrial]:
        return trials

    @classmethod
    def _populate_tree(cls, tree: Any, trials: Any, params: dict[str, Any]) -> None:
        # (a list in Optuna 5, a generator in 4.2: listed once, then filtered)
        optuna.samplers.BruteForceSampler._populate_tree(tree, cls.tree_trials(list(trials)), params)
