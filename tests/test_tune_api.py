"""gemvtune.tune: the search from Python, returning the loaded table (here on the committed H200 sweeps through the
replay runner: no GPU), with search's own option checks, and one clear error for what it cannot do."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT

import gemvtune
from gemvtune import NoDeviceError, Shape, UsageError

SWEEPS = ROOT / "results" / "nvidia-h200" / "measurements"


def test_tune_searches_and_returns_the_table(tmp_path):
    table = gemvtune.tune(["4096x4096", Shape(14336, 4096)], replay=SWEEPS, trials=12, seed=3, results=tmp_path)
    assert table.path == str(tmp_path / "table.json") and {(s.M, s.d, s.n) for s in table.shapes} == {
        (4096, 4096, 1), (14336, 4096, 1)}
    cfg, how = table.lookup(Shape(4096, 4096))
    assert how == "tuned" and cfg.is_valid(Shape(4096, 4096))
    entry = table.entry(Shape(4096, 4096))
    assert entry.search.measured_trials <= 12 and json.loads((tmp_path / "table.json").read_text())["entries"]
    assert sorted(p.name for p in tmp_path.glob("search-4096x4096x1-*.csv"))   # the trials, as search writes them


def test_the_same_seed_gives_the_same_winner(tmp_path):
    a = gemvtune.tune("4096x4096", replay=SWEEPS, trials=10, seed=5, results=tmp_path / "a")
    b = gemvtune.tune("4096x4096", replay=SWEEPS, trials=10, seed=5, results=tmp_path / "b")
    assert a.lookup(Shape(4096, 4096)) == b.lookup(Shape(4096, 4096))


@pytest.mark.parametrize("kw,needle", [
    ({}, "tune needs shapes"),
    ({"shapes": "4096x4096", "batch": 17}, "17"),
    ({"shapes": "4096x4096", "batch": [1, True]}, "batch must be"),
    ({"shapes": "4096x4096", "trials": 0}, "trials"),
    ({"shapes": "4096x4096", "families": ["nope"]}, "nope"),
    ({"shapes": "4096x0"}, "d must be >= 1"),
    ({"shapes": "4096x4096", "fused": True}, "fused"),
])
def test_bad_arguments_are_one_usage_error_before_any_work(kw, needle, tmp_path):
    with pytest.raises(UsageError, match=needle):
        gemvtune.tune(replay=SWEEPS, results=tmp_path, **kw)
    assert not list(tmp_path.iterdir())


def test_a_shape_with_no_recorded_sweep_fails_before_anything_is_written(tmp_path):
    with pytest.raises(UsageError):
        gemvtune.tune("4104x4104", replay=SWEEPS, results=tmp_path)
    assert not list(tmp_path.iterdir())


def test_without_replay_it_needs_a_gpu(tmp_path):
    from gemvtune.runners.cuda import cuda_available

    if not cuda_available():
        pytest.skip("a CUDA device answers here")
    with pytest.raises(NoDeviceError):
        gemvtune.tune("4096x4096", results=tmp_path)
