"""What the journal tests share: the replayed 4096x4096 search's study and checks of its journal file."""

import json

import optuna
from conftest import ROOT

from gemvtune import Shape
from gemvtune.tuning.coordination.storage import make_storage
from gemvtune.tuning.search import study_name

SWEEPS = str(ROOT / "results" / "nvidia-h200" / "measurements")
SHAPE = "4096x4096"
BASE = study_name(Shape(4096, 4096), "nvidia-h200")


def replay_study(storage):
    """The replay search's study (named BASE, or BASE-replay where replayed studies are kept apart)."""
    names = {s.study_name for s in optuna.get_all_study_summaries(storage, include_best_trial=False)}
    (name,) = names & {BASE, BASE + "-replay"}
    return optuna.load_study(study_name=name, storage=storage)


def journal_study(journal):
    return replay_study(make_storage(f"journal:{journal}"))


def measured(journal):
    """number -> (label, value) of the finished measured trials."""
    return {t.number: (t.user_attrs["label"], t.value) for t in journal_study(journal).get_trials(deepcopy=False)
            if t.user_attrs.get("measured") and t.state.name in ("COMPLETE", "PRUNED")}


def whole(journal):
    """Every line of the journal is one complete JSON record."""
    data = journal.read_bytes()
    assert data.endswith(b"\n")
    for line in data.splitlines():
        assert isinstance(json.loads(line), dict)
