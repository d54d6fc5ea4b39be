"""The whole-model tune on the GPU (marked gpu; skipped with the reason where no CUDA device answers): a budgeted tune
of two small shapes at two batch sizes spends no more than its budget (by its own clock, kept in its state), writes a
valid table whose entries were searched at the plan's split and re-confirmed in a fresh process (or says that the
budget ran out first: the suite shares the GPU between its shards), and ends with the step's predicted and measured
gains. Marked slow: it runs in the second GPU tier (``gpu-check.sh slow-tests``),
which has the room for its budget."""

import json

import pytest
from conftest import run_cli

from gemvtune.runtime.table import load_table
from gemvtune.runtime.tableschema import validate_table
from gemvtune.tuning.tunestate import NAME

pytestmark = [pytest.mark.gpu, pytest.mark.slow]   # a minute of tuning: the second GPU tier (docs/testing.md)

BUDGET_S = 60


def test_a_budgeted_tune_of_two_small_shapes_ends_inside_its_budget(tmp_path):
    r = run_cli("tune", "--shape", "1024x4096", "--shape", "512x3584", "--batch", "1,4", "--budget", f"{BUDGET_S}s",
                "--results", str(tmp_path), "--no-measure")
    assert r.returncode == 0, r.stderr[-2000:]
    state = json.loads((tmp_path / NAME).read_text())
    assert 0 < state["spent_s"] <= BUDGET_S, (state, r.stdout[-3000:])
    data = json.loads((tmp_path / "table.json").read_text())
    entries = validate_table(data, tmp_path / "table.json")
    assert entries and set(state["done"]) == set(data["entries"])
    table = load_table(tmp_path / "table.json", costmodel=None)
    # every entry confirmed again in a fresh process, unless the budget ran out first, which the tune says
    cut = "stopped at the budget's end" in r.stdout or "no time left in the budget to re-confirm" in r.stdout
    for s in table.shapes:
        e = table.entry(s)
        assert e.search.family_budgets and (e.reconfirmed is not None or cut), r.stdout[-2000:]   # the plan's split
    assert "predicted x" in r.stdout and "in the search" in r.stdout
