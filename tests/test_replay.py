"""The replay runner and replayed searches on the committed H200 sweeps (CPU only)."""

import gzip
import json
import math

import pytest
from conftest import ROOT, run_cli

from gemvtune import LLAMA_CPP, GemvConfig, Shape, UsageError
from gemvtune.reports.ktexport import export_kt_cache
from gemvtune.runners.replay import NOT_IN_SWEEP, ReplayRunner, Sweep, sweep_files
from gemvtune.tuning.search import SearchOptions, enqueue_seed, optimize

SWEEPS = ROOT / "results" / "nvidia-h200" / "measurements"
FILES = sweep_files(SWEEPS)


@pytest.fixture(scope="module")
def runner():
    return ReplayRunner(SWEEPS)


def test_serves_what_was_recorded(runner):
    s = Shape(14336, 4096)
    rows = runner.sweep(s).rows
    m = runner.measure(LLAMA_CPP, s)
    assert m.ok and m.us_median == rows[LLAMA_CPP.label]["us_median"] and m.method == "replay"
    assert m.registers == rows[LLAMA_CPP.label]["registers"] and m.gbps > 0
    out = runner.measure(GemvConfig(vec="half", tpr=32), s)        # valid, but outside the sweep grid
    assert out.status == NOT_IN_SWEEP and math.isnan(out.us_median) and "not measured" in out.error
    assert runner.measure(GemvConfig(block=64, tpr=256), s).status == "invalid"
    assert runner.device_info()["name"] == "NVIDIA H200" and runner.ceiling()["read_gbps"] > 1000
    with pytest.raises(UsageError, match="no recorded sweep"):
        runner.measure(LLAMA_CPP, Shape(1000, 1000))


def test_every_sweep_is_whole_and_verified():
    for f in FILES:
        s = Sweep(f)
        assert s.grid and s.meta["valid_in_grid"] == len(s.rows)
        assert all(r["status"] in ("ok", "wrong", "compile_error", "launch_error") for r in s.rows.values())
        assert LLAMA_CPP.label in s.rows
        label, us = s.optimum()
        assert us > 0 and s.rows[label]["status"] == "ok"


def test_bad_sweeps(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        ReplayRunner(tmp_path / "nope")
    with pytest.raises(UsageError, match="no sweep"):
        ReplayRunner(tmp_path)
    bad = tmp_path / "sweep-1x1x1.csv.gz"
    with gzip.open(bad, "wt") as f:
        f.write("a,b\n1,2\n")
    (tmp_path / "sweep-1x1x1.json").write_text("{}")
    with pytest.raises(UsageError, match="not a gemvtune sweep"):
        ReplayRunner(bad)


@pytest.mark.slow  # a CLI replay search
def test_replayed_search_run(tmp_path):
    r = run_cli("search", "--shape", "14336x4096", "--replay", str(SWEEPS), "--results", str(tmp_path),
                "--trials", "60")
    assert r.returncode == 0, r.stderr
    assert "REPLAYED" in r.stdout
    t = json.loads((tmp_path / "table.json").read_text())
    e = t["entries"]["14336x4096x1"]
    assert e["search"]["replayed"] is True and e["search"]["measured_trials"] == 60
    assert e["winner"]["us"] <= e["baselines"]["llama.cpp"]["us"]
    (csv,) = tmp_path.glob("search-14336x4096x1-*.csv")
    assert json.loads(csv.with_suffix(".json").read_text())["replayed"] is True
    r = run_cli("search", "--shape", "1000x1000", "--replay", str(SWEEPS), "--results", str(tmp_path))
    assert r.returncode == 2 and "no recorded sweep" in r.stderr and "Traceback" not in r.stderr


DEFAULT_TRIALS = SearchOptions().trials


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
@pytest.mark.slow  # many seeded replay searches per sweep
def test_default_tpe_budget_reaches_2pct_for_every_seed(path):
    """The default sampler and budget (chosen by the committed study) on every committed sweep."""
    import optuna

    runner = ReplayRunner(path)
    (shape, sweep), = runner.sweeps.items()
    opt = sweep.optimum()[1]
    for seed in range(5):
        study = optuna.create_study(direction="minimize", storage=optuna.storages.InMemoryStorage(),
                                    sampler=optuna.samplers.TPESampler(seed=seed, multivariate=True,
                                                                       n_startup_trials=SearchOptions().n_startup))
        enqueue_seed(study)
        n = optimize(study, runner, shape, SearchOptions(trials=DEFAULT_TRIALS, seed=seed, progress=False,
                                                         domains={"gemv": sweep.grid}))
        assert n == DEFAULT_TRIALS
        assert study.best_value <= opt * 1.02, (shape, seed, study.best_value, opt)


def test_kt_export(tmp_path):
    s = Sweep(FILES[0])
    p = export_kt_cache(s, tmp_path / "kt.json")
    d = json.loads(p.read_text())
    assert d["tune_params_keys"] == list(s.grid) and d["kernel_name"] == "gemv"
    assert len(d["cache"]) == len(s.rows)
    key = ",".join(str(LLAMA_CPP.to_dict()[k]) for k in s.grid)
    assert d["cache"][key]["time"] == pytest.approx(s.rows[LLAMA_CPP.label]["us_median"] / 1000)


def test_a_sweep_holds_one_family(tmp_path, monkeypatch):
    """A sweep records its family (its grid: Family.sweep_grid); replay answers that family only. The
    committed sweeps name none: they hold the default family."""
    from fakes import FakeRunner, fake_us

    import gemvtune.tuning.sweep as sweep_mod
    from gemvtune.kernels.families import DEFAULT_FAMILY, FAMILIES
    from gemvtune.kernels.splitk import SPLITK_SEED

    assert all("family" not in Sweep(f).meta and Sweep(f).family == DEFAULT_FAMILY for f in FILES)
    monkeypatch.setattr(sweep_mod, "compile_variants", lambda items, arch: [])
    fake = FakeRunner()
    fake.arch, fake.replays, fake.warmup, fake.target_us = "sm_90", 3, 1, 100.0
    s = Shape(256, 1024, 2)
    path = sweep_mod.run_sweep(fake, s, tmp_path, echo=lambda _: None, ceiling=fake.ceiling(), family="splitk")
    assert path.name == "sweep-256x1024x2-splitk.csv.gz"
    meta = json.loads(path.with_name("sweep-256x1024x2-splitk.json").read_text())
    assert meta["family"] == "splitk" and meta["grid"] == {k: list(v) for k, v in FAMILIES["splitk"].sweep_grid.items()}
    r = ReplayRunner(tmp_path)
    assert r.sweep(s).family == "splitk" and r.recorded(s, "gemv") == frozenset()
    assert len(r.recorded(s, "splitk")) == meta["valid_in_grid"] == len(fake.calls)
    m = r.measure(SPLITK_SEED, s)
    assert m.ok and m.us_median == fake_us(SPLITK_SEED)
    assert r.measure(LLAMA_CPP, s).status == NOT_IN_SWEEP      # a gemv config: not in a splitk sweep
    # two sweeps of one shape are refused; so are a family that is not registered and another family's grid
    (tmp_path / "sweep-256x1024x2.csv.gz").write_bytes(path.read_bytes())
    (tmp_path / "sweep-256x1024x2.json").write_text(json.dumps(meta))
    with pytest.raises(UsageError, match="both of"):
        ReplayRunner(tmp_path)
    for bad, needle in (({**meta, "family": "tensor"}, "family must be one of"),
                        ({**meta, "family": "gemv"}, "not a gemv parameter")):
        (tmp_path / "sweep-256x1024x2.json").write_text(json.dumps(bad))
        with pytest.raises(UsageError, match=needle):
            Sweep(tmp_path / "sweep-256x1024x2.csv.gz")
