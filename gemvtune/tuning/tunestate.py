"""The state of a whole-model tune (``<results>/tune-state.json``), so that a killed or interrupted tune resumes
where it stopped: which shapes are done, how much of the budget is spent, and the costs the run measured (seconds
per trial, per shape's fixed work). A state of other settings (another model, budget, batch, dtype or families) is
not resumed: the tune starts afresh and says so. Written atomically after every shape and on the way out."""

from __future__ import annotations

import datetime as _dt
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError

FORMAT, VERSION = "gemvtune-tune-state", 1
NAME = "tune-state.json"


@dataclass
class TuneState:
    key: dict[str, Any]                  # the settings that make a tune the same tune
    budget_s: float
    spent_s: float = 0.0
    done: list[str] = field(default_factory=list)      # shape keys confirmed and written to the table
    trials: int = 0                      # measured trials, for the observed cost of one
    search_s: float = 0.0                # their search seconds
    shapes: int = 0                      # shapes finished, for the observed fixed cost of one
    shape_s: float = 0.0                 # their seconds beyond the search
    predicted_gain: float | None = None  # the first plan's predicted step gain
    started: str = ""
    resumed: int = 0                     # how many times it was resumed

    def trial_cost(self, default: float) -> float:
        """Seconds per trial: measured by this tune once it has measured enough, else ``default``."""
        return self.search_s / self.trials if self.trials >= 20 and self.search_s > 0 else default

    def shape_cost(self, default: float) -> float:
        return self.shape_s / self.shapes if self.shapes >= 1 and self.shape_s > 0 else default

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "key": self.key, "budget_s": self.budget_s,
                "spent_s": round(self.spent_s, 3), "done": self.done, "trials": self.trials,
                "search_s": round(self.search_s, 3), "shapes": self.shapes, "shape_s": round(self.shape_s, 3),
                "predicted_gain": self.predicted_gain, "started": self.started, "resumed": self.resumed}

    def save(self, path: Path) -> None:
        from ..safefile import write_text

        write_text(path, json.dumps(self.to_json(), indent=1, sort_keys=True) + "\n", "tune state")


def _num(data: dict, k: str, where: str, integer: bool = False) -> Any:
    v: Any = data.get(k)
    ok = isinstance(v, int) if integer else isinstance(v, (int, float))
    if isinstance(v, bool) or not ok or not math.isfinite(v) or v < 0:
        raise UsageError(f"{where}: field {k!r} must be a number >= 0, got {str(v)[:40]}")
    return v


def load_state(path: Path, key: dict[str, Any], budget_s: float) -> tuple[TuneState, str]:
    """(the state to run with, what became of the file): a fresh state where there is none or it holds another
    tune's; the file's where it is this tune's. A file that is not a tune state is one UsageError (nothing is
    overwritten: the user moves it)."""
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    fresh = TuneState(key, budget_s, started=now)
    if not path.exists():
        return fresh, "new"
    from ..userfile import JSON_BYTES, read_json

    where = f"tune state {path}"
    data = read_json(path, "tune state", JSON_BYTES)
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("version") != VERSION:
        raise UsageError(f"{where} is not a gemvtune tune state (format {FORMAT} version {VERSION}); move it away")
    if data.get("key") != json.loads(json.dumps(key)):
        return fresh, "another tune's state (other settings) replaced"
    done = data.get("done")
    if not isinstance(done, list) or not all(isinstance(x, str) and len(x) < 64 for x in done):
        raise UsageError(f"{where}: field 'done' must be a list of shape keys")
    gain = data.get("predicted_gain")
    st = TuneState(key, budget_s, spent_s=float(_num(data, "spent_s", where)), done=list(done),
                   trials=int(_num(data, "trials", where, True)), search_s=float(_num(data, "search_s", where)),
                   shapes=int(_num(data, "shapes", where, True)), shape_s=float(_num(data, "shape_s", where)),
                   predicted_gain=float(gain) if isinstance(gain, (int, float)) and not isinstance(gain, bool)
                   and math.isfinite(gain) else None,
                   started=str(data.get("started", now))[:32], resumed=int(_num(data, "resumed", where, True)) + 1)
    return st, "resumed"
