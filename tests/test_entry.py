"""The typed table entry (gemvtune.runtime.entry): the committed table loads into Entry values and gives back the
same JSON, every field of it is one the type reads (a field renamed on either side is caught), and a missing or
mistyped field is one line, whether the table is loaded or built in code."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import pickle

import pytest
from conftest import ROOT

from gemvtune import GemvConfig, Shape, UsageError
from gemvtune.runtime.entry import Entry, Measured, SchemaError, SearchRecord
from gemvtune.runtime.table import Table, load_table, record

TABLE = ROOT / "results" / "nvidia-h200" / "table.json"
CFG = GemvConfig(vec="half8", tpr=64)
DEV = {"name": "NVIDIA H200", "compute_capability": "9.0"}


def _raw():
    return json.loads(TABLE.read_text())


def test_the_committed_table_round_trips():
    raw = _raw()
    t = load_table(TABLE, costmodel=None)
    assert all(isinstance(e, Entry) for e in t.entries.values()) and len(t.entries) == len(raw["entries"])
    assert t.to_json() == raw
    for key, e in raw["entries"].items():
        assert t.entries[key].to_json() == e, key
        assert Entry.from_json(e) == t.entries[key]


def test_written_back_the_committed_entries_are_unchanged(tmp_path):
    """``record`` rewrites every entry through Entry: a new shape merged into the committed table leaves the others'
    JSON as it was."""
    p = tmp_path / "table.json"
    p.write_text(TABLE.read_text())
    raw = _raw()
    e = record(p, Shape(512, 512), {"winner": {"family": "gemv", "config": CFG.to_dict(), "us": 3.0},
                                    "baselines": {"cublas": {"us": 4.0, "status": "ok"}}}, raw["gpu"])
    assert isinstance(e, Entry) and e.shape == Shape(512, 512) and e.winner_config() == CFG
    after = json.loads(p.read_text())
    assert after["entries"].pop("512x512x1") == e.to_json()
    assert after["entries"] == raw["entries"]


def test_every_field_of_the_committed_table_is_read_by_the_type():
    """A field the file holds that the type does not read would land in ``extra`` (kept, but invisible to readers):
    none does. Renaming a field of Entry, Measured or SearchRecord (or of the file) fails here."""
    t = load_table(TABLE, costmodel=None)
    for key, e in t.entries.items():
        recs = [e.winner, *e.best.values(), *e.candidates, *e.baselines.values()]
        assert not e.extra and not e.search.extra and not any(r.extra for r in recs), key
        assert e.search != SearchRecord() and e.winner.us and e.winner.config


def test_null_empty_and_unknown_fields_are_written_back_as_they_were():
    raw = {"M": 64, "d": 64, "winner": {"config": CFG.to_dict(), "us": 2.0, "spread": None, "new_field": [1, {"a": 2}]},
           "candidates": [], "baselines": {}, "search": {"families": [], "family_trials": {}, "seed": None},
           "tie": False, "later": {"x": 1}, "splitk": {"label": "x", "us": 3.0, "status": None}}
    e = Entry.from_json(copy.deepcopy(raw))
    assert e.to_json() == raw
    assert e.winner.spread is None and e.candidates == () and dict(e.baselines) == {} and e.tie is False
    assert e.search.families == () and e.search.family_trials is not None and dict(e.search.family_trials) == {} and e.search.seed is None
    assert e.n is None and e.shape == Shape(64, 64) and dict(e.extra) == {"later": {"x": 1}}
    assert e.winner.ok and not e.best["splitk"].ok and e.best["splitk"].ok_us is None   # a null status is not ok
    raw["later"]["x"] = 2
    assert e.extra["later"] == {"x": 1}    # a copy: the entry does not change with the object it came from


def test_entries_are_frozen_and_have_no_string_keys():
    e = load_table(TABLE, costmodel=None).entries["4096x4096x1"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.tie = False   # type: ignore[misc]
    with pytest.raises(TypeError):
        e["winner"]   # type: ignore[index]
    with pytest.raises(AttributeError):
        e.get("baselines")   # type: ignore[attr-defined]   (a reader left on dict keys fails, it does not read None)
    with pytest.raises(AttributeError):
        _ = e.winner.median_us   # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        e.best["gemv"] = e.winner   # type: ignore[index]


def test_entries_pickle_and_copy():
    """A model holding a table (GemvLinear) can be deep-copied or sent to another process."""
    t = load_table(TABLE, costmodel=None)
    assert pickle.loads(pickle.dumps(t.entries)) == t.entries and copy.deepcopy(t).entries == t.entries


@pytest.mark.parametrize("edit, needle", [
    (lambda e: e.pop("winner"), "winner is missing"),
    (lambda e: e.__setitem__("best_kernel", e.pop("winner")), "winner is missing"),   # renamed in the file
    (lambda e: e.pop("d"), "d is missing"),
    (lambda e: e["winner"].pop("config"), "winner.config is missing"),
    (lambda e: e["search"].__setitem__("seed", "0"), "search.seed must be an integer"),
    (lambda e: e["baselines"]["cublas"].__setitem__("us", "fast"), "baselines.cublas.us must be a number"),
    (lambda e: e["baselines"]["cublas"].__setitem__("config", "x"), "baselines.cublas.config must be a JSON object"),
])
def test_a_missing_or_mistyped_field_is_one_line(tmp_path, edit, needle):
    raw = _raw()
    raw["entries"] = {"4096x4096x1": copy.deepcopy(raw["entries"]["4096x4096x1"])}
    edit(raw["entries"]["4096x4096x1"])
    p = tmp_path / "t.json"
    p.write_text(json.dumps(raw))
    with pytest.raises(UsageError, match="entry 4096x4096x1 is malformed: " + needle) as err:
        load_table(p, costmodel=None)
    assert "\n" not in str(err.value)
    with pytest.raises(UsageError, match=needle) as err:   # a table built in code, unchecked: the same line
        Table(raw)
    assert "\n" not in str(err.value)
    with pytest.raises(SchemaError, match=needle.split(" ", 1)[1]):
        Entry.from_json(raw["entries"]["4096x4096x1"])


def test_record_checks_the_new_entry_before_it_is_merged(tmp_path):
    p = tmp_path / "t.json"
    good = {"winner": {"family": "gemv", "config": CFG.to_dict(), "us": 3.0}}
    record(p, Shape(4096, 4096), good, DEV)
    before = p.read_text()
    for bad in ({"winner": {**good["winner"], "us": math.nan}}, {"winner": {**good["winner"], "us": "3"}},
                {**good, "search": {"replayed": "no"}}):
        with pytest.raises(UsageError, match="entry 4096x4096x1 is malformed"):
            record(p, Shape(4096, 4096), bad, DEV)
        assert p.read_text() == before


def test_measured_records():
    r = Measured.from_json({"us": 2.5, "status": "ok", "family": "gemv", "config": CFG.to_dict()})
    assert r.ok and r.ok_us == 2.5 and r.config_object() == CFG and r
    assert not Measured.from_json({}) and Measured.from_json({}).ok_us is None    # an empty record is none
    assert Measured.from_json({"us": 2.5, "status": "failed"}).ok_us is None
    with pytest.raises(SchemaError, match="config is missing"):
        Measured().config_object()
