"""Transfer across batch sizes (gemvtune.tuning.neighbours): a search of a weight at one n is warm-started with what the
table measured fastest for the same weight at the other n, nearest first, valid for this shape, FP8 and 16-bit kept
apart; a tune does it for each shape it searches after a sibling (the H200's 8B tune of 2026-12-05 searched 4096x4096
at n = 8 before n = 16 and never measured, at n = 16, the shape of its n = 8 winner)."""

from __future__ import annotations

import optuna
import pytest
from conftest import ROOT

from gemvtune import Shape
from gemvtune.kernels.families import FAMILIES
from gemvtune.runtime.table import load_table
from gemvtune.tuning.neighbours import merged, other_n_warm, other_shape_warm

TABLE = ROOT / "results" / "nvidia-h200" / "table.json"


@pytest.fixture(scope="module")
def table():
    return load_table(TABLE, costmodel=None)


def test_the_nearest_batch_sizes_winners_come_first(table):
    got = other_n_warm(table, Shape(4096, 4096, 12), ["ring", "gemv"])
    assert set(got) == {"ring", "gemv"}                                    # only the families searched
    e16 = table.entry(Shape(4096, 4096, 16))
    first = got["ring"][0]
    assert first["_from"] == f"n = 16: {e16.winner_config().label}"        # n = 16 is nearer 12 than n = 8 is
    assert {k: v for k, v in first.items() if k != "_from"} == e16.winner_config().to_dict()
    assert all(len(v) <= 3 for v in got.values())
    for fam, params in got.items():
        for p in params:
            c = FAMILIES[fam].config_cls(**{k: v for k, v in p.items() if k not in ("_from", "family")})
            assert c.is_valid(Shape(4096, 4096, 12)) and c != FAMILIES[fam].seed


def test_fp8_and_16_bit_weights_never_lend_each_other_kernels(table):
    fp8 = other_n_warm(table, Shape(4096, 4096, 4, "fp16", "e4m3-row"), ["fp8gemv", "fp8mma", "gemv", "ring"])
    assert fp8 and set(fp8) <= {"fp8gemv", "fp8mma"} and all(p["_from"].startswith("n = 8:") for p in fp8["fp8gemv"])
    assert not other_n_warm(table, Shape(4096, 4096, 4, "fp16", "e4m3-b128"), ["fp8gemv", "fp8mma"])   # none tuned
    assert not other_n_warm(table, Shape(4096, 4096, 1), ["gemv"], k=0) and not other_n_warm(None, Shape(1, 8), ["gemv"])
    assert not other_n_warm(table, Shape(4104, 4104, 3), ["gemv", "ring"])   # no entry of that weight


def test_other_weights_at_the_same_n_lend_their_winners_same_d_first(table):
    got = other_shape_warm(table, Shape(1024, 4096, 16), ["ring", "gemv"])
    assert set(got) == {"ring", "gemv"} and all(len(v) <= 2 for v in got.values())
    first = got["ring"][0]
    e = table.entry(Shape(4096, 4096, 16))   # the same d, the nearest size: 4x the bytes (6144x4096 is 6x)
    assert first["_from"] == f"4096x4096: {e.winner_config().label}"
    assert {k: v for k, v in first.items() if k != "_from"} == e.winner_config().to_dict()
    for fam, params in got.items():
        for p in params:
            assert p["_from"].split(":")[0] in {"4096x4096", "6144x4096", "14336x4096", "4096x14336"}
            c = FAMILIES[fam].config_cls(**{k: v for k, v in p.items() if k not in ("_from", "family")})
            assert c.is_valid(Shape(1024, 4096, 16)) and c != FAMILIES[fam].seed
    assert not other_shape_warm(table, Shape(4096, 4096, 16, "bf16"), ["ring"])           # no other bf16 weight at 16
    assert not other_shape_warm(table, Shape(1024, 4096, 16, "fp16", "e4m3-row"), ["fp8gemv", "ring"])
    assert not other_shape_warm(table, Shape(1024, 4096, 16), ["ring"], k=0)
    assert not other_shape_warm(table, Shape(4096, 4096, 3), ["ring", "gemv"])             # no entry at n = 3


def test_merged_keeps_the_siblings_first_and_each_config_once():
    a = {"k": 1, "_from": "n = 8: x"}
    got = merged({"ring": [a]}, {"ring": ({"k": 1}, {"k": 2}), "gemv": ({"k": 3},)})
    assert got == {"ring": (a, {"k": 2}), "gemv": ({"k": 3},)}


def test_enqueued_siblings_say_where_they_came_from_and_values_outside_the_space_are_not_enqueued():
    from gemvtune.tuning.search import enqueue_warm, fixed_params

    study = optuna.create_study()
    domains = {"a": [1, 2], "b": ["x", "y"]}
    n = enqueue_warm(study, ({"a": 1, "b": "x", "_from": "n = 8: cfg"}, {"a": 3, "b": "x"}, {"a": 2, "b": "y"}),
                     domains)
    tags = [t.user_attrs["enqueued"] for t in study.get_trials(deepcopy=False)]
    assert n == 2 and tags == ["n = 8: cfg", "cost model #2"]   # (its rank among the model's)
    assert [fixed_params(t) for t in study.get_trials(deepcopy=False)] == [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}]


def _tune(tmp_path, shapes, families=("gemv",), calls=None):
    """A FakeRunner tune of ``shapes`` (60 s): (result, echoed lines, the second search's enqueued tags, its frame)."""
    import pandas as pd
    from fakes import FakeRunner

    from gemvtune.runtime.keys import entry_key
    from gemvtune.tuning.search_options import SearchOptions
    from gemvtune.tuning.tunerun import Step, run_tune

    lines: list[str] = []
    steps = [Step(s, c) for s, c in zip(shapes, calls or [32.0] * len(shapes))]
    res = run_tune(FakeRunner(), steps, 60.0, SearchOptions(families=families, progress=False, rounds=2), tmp_path,
                   tmp_path / "table.json", echo=lines.append, reconfirm=False)
    assert len(res.searched) == len(shapes), lines
    (csv,) = tmp_path.glob(f"search-{entry_key(res.searched[1])}-*.csv")
    df = pd.read_csv(csv).sort_values("trial")
    return res, lines, df.enqueued.fillna("").tolist(), df


def test_a_tune_warm_starts_each_n_from_the_n_searched_before_it(tmp_path):
    res, lines, tags, df = _tune(tmp_path, [Shape(4096, 4096, 1), Shape(4096, 4096, 2)])
    first, second = res.searched
    won = load_table(tmp_path / "table.json", costmodel=None).entry(first).winner_config().label
    assert tags[0] == "llama.cpp" and tags[1] == f"n = {first.n}: {won}", tags[:6]   # right after the seed
    assert bool(df.measured.iloc[1]) and df.label.iloc[1] == won
    assert sum(t.startswith(f"n = {first.n}: ") for t in tags) == 3 and "cost model #1" in tags   # then the model's
    assert any(ln.startswith(f"{second}: warm start from the table's other batch sizes: gemv 3") for ln in lines), lines
    assert not any(ln.startswith(f"{first}: warm start from the table's other") for ln in lines)


def test_a_tune_warm_starts_a_weight_from_the_other_weights_searched_before_it_at_the_same_n(tmp_path):
    res, lines, tags, _ = _tune(tmp_path, [Shape(4096, 4096, 2), Shape(2048, 4096, 2)])
    first, second = res.searched
    won = load_table(tmp_path / "table.json", costmodel=None).entry(first).winner_config()
    assert won != FAMILIES["gemv"].seed
    assert tags[0] == "llama.cpp" and tags[1] == f"{first.M}x{first.d}: {won.label}", tags[:6]   # after the seed
    assert any(ln.startswith(f"{second}: warm start from other weights at n = 2: gemv ") for ln in lines), lines
    assert not any(ln.startswith(f"{first}: warm start from") for ln in lines)


def test_a_tune_runs_a_weights_batch_sizes_upwards_whatever_their_value(tmp_path):
    """The n = 16 step runs 100x as often (the plan's most valuable shape), yet n = 1 is searched first (so that n = 16
    can be warm-started from it where they search one family)."""
    res, lines, _, _ = _tune(tmp_path, [Shape(4096, 4096, 16), Shape(4096, 4096, 1)], ("gemv", "ring"),
                             calls=[3200.0, 32.0])
    assert [s.n for s in res.searched] == [1, 16], lines
