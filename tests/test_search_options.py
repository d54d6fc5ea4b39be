"""Issue 18: the search options are declared once (gemvtune.tuning.search_options.OPTIONS); the click options,
the worker processes' command line, the study's ``search_options`` attribute and SearchOptions'
bounds are derived from it, and stay equal to it (CPU only)."""

import dataclasses
import json

import click
import optuna
import pytest
from fakes import FakeRunner

from gemvtune import Shape, UsageError
from gemvtune.cli.search_cmd import search, worker
from gemvtune.kernels.gemv import DOMAINS
from gemvtune.tuning.search import run_search
from gemvtune.tuning.search_options import (
    BY_FLAG,
    JOIN_OPTIONS,
    OPTIONS,
    SearchOptions,
    from_cli,
    from_study,
    study_record,
    worker_argv,
)

# every option of the search command given a value other than its default
FULL = ["--shape", "64x64", "--shape", "128x256", "--model", "llama-3-8b", "--hf-config", "/abs/a.json",
        "--hf-config", "/abs/b", "--fused", "--tp", "2", "--sampler", "random", "--trials", "37", "--timeout", "2.5",
        "--seed", "7", "--storage", "sqlite:///x.db", "--results", "res", "--table", "t.json", "--top-k", "4",
        "--rounds", "2", "--warm-start", "3", "--batch", "1,2", "--dtype", "bf16", "--weights", "e4m3-row", "--family", "gemv", "--replay", "sweeps", "--allow-replay-into-measured",
        "--watchdog", "30", "--devices", "0,1", "--workers", "2", "--no-reconfirm", "--inductor", "--heartbeat", "0.5",
        "--worker-index", "1"]


def _params(command, argv):
    return command.make_context(command.name, list(argv)).params


def test_the_declaration_covers_the_commands():
    search_opts = [o for o in OPTIONS if o.flag and o.search]
    assert [p.name for p in search.params] == [o.dest for o in search_opts]
    assert [p.opts[0] for p in worker.params] == [flag for flag, _ in JOIN_OPTIONS]
    assert {f for f in FULL if f.startswith("--")} == {o.flag for o in search_opts}   # FULL gives every one


@pytest.mark.parametrize("argv", [FULL, ["--shape", "64x64"]], ids=["every option", "defaults"])
def test_worker_argv_round_trips(argv):
    """Each worker of --workers/--devices parses back every option the declaration passes on to
    workers, with the same value, and so builds the same SearchOptions."""
    given = _params(search, argv)
    back = _params(search, worker_argv(given))
    for o in OPTIONS:
        if o.flag and o.search:
            assert back[o.dest] == (given[o.dest] if o.workers else _params(search, [])[o.dest]), o.flag
    assert from_cli(back) == from_cli(given)
    assert "--worker-index" not in worker_argv(given)   # (run_workers gives each worker its own)


def test_hf_config_paths_reach_workers_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = worker_argv(_params(search, ["--hf-config", "model/config.json"]))
    assert argv[argv.index("--hf-config") + 1] == str(tmp_path / "model" / "config.json")


def test_cli_options_make_the_same_search_options():
    opts = from_cli(_params(search, FULL))
    assert (opts.sampler, opts.trials, opts.timeout, opts.seed, opts.storage, opts.top_k, opts.rounds,
            opts.families) == ("random", 37, 2.5, 7, "sqlite:///x.db", 4, 2, ("gemv",))
    assert from_cli(_params(search, [])) == SearchOptions()   # the click defaults are SearchOptions'


def test_study_record_round_trips():
    opts = SearchOptions(sampler="random", trials=37, seed=7, top_k=4, rounds=2, n_startup=3, families=("splitk",),
                         timeout=9.0, storage="memory:", jobs=2)
    record = study_record(opts)
    # the attribute's keys: studies in existing storages hold these, and workers joining them read them
    assert set(record) == {"trials", "sampler", "seed", "families", "top_k", "rounds", "n_startup"}
    assert set(record) == {o.field for o in OPTIONS if o.study}
    back = from_study(json.loads(json.dumps(record)), timeout=9.0, storage="memory:", jobs=2)
    assert back == opts


def test_run_search_records_the_declared_attribute(tmp_path):
    opts = SearchOptions(trials=3, sampler="random", seed=5, top_k=1, rounds=1, progress=False, families=("gemv",),
                         domains={"gemv": {k: v for k, v in DOMAINS.items() if k != "occ"}})
    storage = optuna.storages.InMemoryStorage()
    run_search(FakeRunner(), Shape(4096, 4096), opts, storage, "s", echo=lambda s: None)
    attrs = optuna.load_study(study_name="s", storage=storage).user_attrs
    assert attrs["search_options"] == study_record(opts)
    assert from_study(attrs["search_options"], progress=False, domains=opts.domains) == opts


def test_search_options_fields_are_declared():
    fields = {f.name: f for f in dataclasses.fields(SearchOptions)}
    declared = {o.field: o for o in OPTIONS if o.field}
    assert set(declared) <= set(fields)
    assert set(fields) - set(declared) == {"progress", "domains", "warm_start", "family_trials"}   # run-time plumbing, not options
    for name, o in declared.items():
        if o.parse is None:
            assert fields[name].default == o.default, name


def _edges(t):
    """(valid, invalid) values at the edges of a click range."""
    step = 1 if isinstance(t, click.IntRange) else 0.5
    ok, bad = [], [None, True, "3"]
    for edge, sign, is_open in ((t.min, -1, t.min_open), (t.max, 1, t.max_open)):
        if edge is not None:
            (bad if is_open else ok).append(edge)
            bad.append(edge + sign * step)
    return ok, bad


@pytest.mark.parametrize("o", [o for o in OPTIONS if o.field and isinstance(o.type, (click.IntRange, click.FloatRange))],
                         ids=lambda o: o.field)
def test_search_options_bounds_are_the_declared_ones(o):
    ok, bad = _edges(o.type)
    for v in ok:
        SearchOptions(**{o.field: v})
        if o.flag:
            assert _params(search, [o.flag, str(v)])[o.dest] == v   # the command line takes it too
    for v in bad:
        if v is None and o.default is None:
            continue   # (an option that may be left unset)
        with pytest.raises(UsageError, match=o.flag or o.field.replace("_", "-")):
            SearchOptions(**{o.field: v})
        if o.flag and isinstance(v, (int, float)) and not isinstance(v, bool):   # (click parses "3")
            with pytest.raises(click.BadParameter):
                _params(search, [o.flag, str(v)])


def test_search_options_refuse_an_unknown_choice():
    with pytest.raises(UsageError, match="unknown sampler 'annealing'; choose one of tpe, random, gp, exhaustive"):
        SearchOptions(sampler="annealing")
    with pytest.raises(click.BadParameter):
        _params(search, ["--sampler", "annealing"])
    assert tuple(BY_FLAG["--sampler"].type.choices) == ("tpe", "random", "gp", "exhaustive")


def test_family_trials_give_each_family_its_own_budget():
    opts = SearchOptions(trials=100, family_trials={"gemv": 35, "ring": 5})
    assert opts.for_family("gemv").trials == 35 and opts.for_family("ring").trials == 5
    assert opts.for_family("splitk") is opts
    with pytest.raises(UsageError, match="trials"):
        SearchOptions(family_trials={"gemv": 0})
    with pytest.raises(UsageError, match="unknown family"):
        SearchOptions(family_trials={"nope": 5})
