import collections

import optuna
import pytest
from fakes import FakeRunner, fake_us

from gemvtune import LLAMA_CPP, Shape, UsageError
from gemvtune.kernels.gemv import DOMAINS, GemvConfig
from gemvtune.tuning.confirm import complexity
from gemvtune.tuning.coordination.storage import make_storage
from gemvtune.tuning.search import SearchOptions, run_search

SHAPE = Shape(4096, 4096)
FLAT = {k: v for k, v in DOMAINS.items() if k != "occ"}   # the fake runner ignores occ: leave it out


def _search(tmp_path, trials=60, sampler="tpe", runner=None, seed=0, families=("gemv",)):
    runner = runner or FakeRunner()
    storage = make_storage(f"journal:{tmp_path / 'journal.log'}")
    opts = SearchOptions(sampler=sampler, trials=trials, seed=seed, progress=False, families=families,
                         domains={"gemv": FLAT})
    return runner, run_search(runner, SHAPE, opts, storage, "s", echo=lambda s: None)


@pytest.mark.slow  # a whole search with NVRTC compiles
def test_search_finds_known_optimum_and_never_measures_invalid(tmp_path):
    runner, res = _search(tmp_path, trials=150)
    assert runner.calls[0] == LLAMA_CPP                       # the llama.cpp config is tried first
    tuned = [c for c in runner.calls[:150]]
    assert len(set(tuned)) == len(tuned)                      # nothing measured twice
    assert res.measured == 150 and res.new_measured == 150
    w = res.entry["winner"]
    assert w["us"] == min(t["value"] for t in res.trials if t["state"] == "COMPLETE")
    assert w["config"]["vec"] == "half8" and w["config"]["tpr"] == 64
    assert w["us"] == pytest.approx(10.0)
    # many configs tie at the optimum: the simplest of those re-measured is chosen
    tied = [c for c in res.candidates if c["us"] == pytest.approx(10.0)]
    if len(tied) > 1:
        assert res.tie
        from gemvtune.kernels.gemv import GemvConfig
        assert complexity(GemvConfig(**w["config"])) == min(complexity(GemvConfig(**c["config"])) for c in tied)
    assert res.entry["baselines"]["llama.cpp"]["us"] == pytest.approx(fake_us(LLAMA_CPP))
    assert res.entry["baselines"]["cublas"]["us"] == 15.0
    assert res.entry["search"]["sampler"] == "tpe" and res.entry["search"]["seed"] == 0
    assert res.entry["search"]["family_trials"] == {"gemv": 150} and res.entry["search"]["space_measured"] == []


@pytest.mark.slow  # a whole search with NVRTC compiles
def test_failures_recorded_and_invalid_pruned(tmp_path):
    _, res = _search(tmp_path, trials=60, sampler="random")
    by = collections.Counter(r.get("status") for r in res.trials)
    assert by["invalid"] > 0 and by["ok"] > 0
    for r in res.trials:
        if r.get("status") == "invalid":
            assert r["state"] == "PRUNED" and r["error"] and not r.get("measured")
        if r.get("status") == "wrong":
            assert r["state"] == "PRUNED" and "planted" in r["error"]
    assert not (res.entry["winner"]["config"]["x_load"] == "smem" and res.entry["winner"]["config"]["acc"] == "fp16")


@pytest.mark.slow  # two searches with NVRTC compiles
def test_resume_repeats_nothing(tmp_path):
    r1, a = _search(tmp_path, trials=30)
    r2, b = _search(tmp_path, trials=30)
    calls_search = [c for c in r2.calls]  # only confirmation measurements: no new trial
    assert b.new_measured == 0 and b.measured == 30
    assert len(b.trials) == len(a.trials)
    r3, c = _search(tmp_path, trials=45)
    assert c.new_measured == 15 and c.measured == 45
    measured_labels = [t["label"] for t in c.trials if t.get("measured")]
    assert len(measured_labels) == len(set(measured_labels)) == 45
    assert calls_search  # confirmation re-measured candidates


@pytest.mark.parametrize("sampler", ["random", "exhaustive"])
def test_other_samplers_run(tmp_path, sampler):
    _, res = _search(tmp_path, trials=20, sampler=sampler)
    assert res.measured == 20


def test_bad_options():
    with pytest.raises(UsageError, match="unknown sampler"):
        SearchOptions(sampler="annealing")
    for bad in (0, -3, True):
        with pytest.raises(UsageError, match="trials"):
            SearchOptions(trials=bad)
    with pytest.raises(UsageError, match="timeout"):
        SearchOptions(timeout=0)


@pytest.mark.parametrize("url", ["", "journal:", "nonsense", "postgresql://nobody@127.0.0.1:1/none"])
def test_bad_storage(url):
    with pytest.raises(UsageError):
        make_storage(url)


def test_sqlite_storage(tmp_path):
    s = make_storage(f"sqlite:///{tmp_path / 'o.db'}")
    st = optuna.create_study(storage=s, study_name="x")
    assert st.study_name == "x"


def test_timeout_stops_early(tmp_path):
    import time

    class Slow(FakeRunner):
        def measure(self, config, shape, **kw):
            time.sleep(0.05)
            return super().measure(config, shape, **kw)

    runner = Slow()
    storage = make_storage(f"journal:{tmp_path / 'j.log'}")
    opts = SearchOptions(trials=1000, timeout=1.0, progress=False, rounds=1, top_k=1)
    res = run_search(runner, SHAPE, opts, storage, "t", echo=lambda s: None)
    assert 1 <= res.measured < 100


def test_gp_sampler(tmp_path):
    pytest.importorskip("torch", reason="Optuna's GP sampler needs torch (not in the CI install)")
    pytest.importorskip("scipy", reason="Optuna's GP sampler needs scipy (not in the CI install)")
    # GP ignores pruned trials: invalid configs come back to it as completed-but-infeasible trials.
    _, res = _search(tmp_path, trials=8, sampler="gp")
    assert res.measured == 8
    infeasible = [t for t in res.trials if t.get("infeasible")]
    assert all(t["status"] == "invalid" and t["state"] == "COMPLETE" for t in infeasible)
    assert res.entry["winner"]["us"] == min(t["value"] for t in res.trials if t["state"] == "COMPLETE")


@pytest.mark.slow  # searches of both families with NVRTC compiles
def test_both_families_searched_and_kept(tmp_path):
    from gemvtune.kernels.splitk import SPLITK_SEED

    runner, res = _search(tmp_path, trials=40, families=("gemv", "splitk"))
    fams = [c.family for c in runner.calls]
    assert fams[0] == "gemv" and runner.calls[0] == LLAMA_CPP           # each study starts at its seed
    assert runner.calls[fams.index("splitk")] == SPLITK_SEED
    assert res.measured == 80                                          # the budget is per family
    e = res.entry
    assert e["splitk"]["us"] == pytest.approx(11.0) and e["splitk"]["config"]["split"] == 4
    assert e["gemv"]["us"] <= 11.0
    assert e["winner"]["us"] == min(e["gemv"]["us"], e["splitk"]["us"])
    assert e["winner"]["family"] == "gemv"     # faster, or tied with the splitk best (simpler family wins)
    assert {t["family"] for t in res.trials} == {"gemv", "splitk"}
    # a splitk-only search names the splitk winner, and a table records it and loads it back
    (tmp_path / "b").mkdir()
    runner2, res2 = _search(tmp_path / "b", trials=20, families=("splitk",))
    assert res2.entry["winner"]["family"] == "splitk" and "gemv" not in res2.entry
    from gemvtune.runtime.table import load_table, record

    record(tmp_path / "t.json", SHAPE, res2.entry, runner2.device_info())
    cfg, how = load_table(tmp_path / "t.json").lookup(SHAPE)
    assert how == "tuned" and cfg.family == "splitk" and cfg.label == res2.entry["winner"]["label"]


def test_parallel_trials_keep_the_budget_and_measure_nothing_twice(tmp_path):
    import threading
    import time

    class Compiling(FakeRunner):
        compile_jobs = 4

        def __init__(self):
            super().__init__()
            self.compiled, self.busy, self.overlap = [], 0, False
            self._l = threading.Lock()

        def precompile(self, config, shape):
            time.sleep(0.002)
            self.compiled.append(config)

        def measure(self, config, shape, **kw):
            with self._l:
                self.busy += 1
                self.overlap |= self.busy > 1
            try:
                return super().measure(config, shape, **kw)
            finally:
                with self._l:
                    self.busy -= 1

    runner, res = _search(tmp_path, trials=40, runner=Compiling())
    assert res.measured == 40
    measured = [t["label"] for t in res.trials if t.get("measured")]
    assert len(measured) == len(set(measured)) == 40
    assert runner.compiled and not runner.overlap          # compiles ran; GPU measurements never overlapped
    assert res.entry["search"]["measured_trials"] == 40


def test_a_search_of_some_families_confirms_against_the_tables_best_of_the_others(tmp_path):
    """A splitk-only search on a shape whose table entry holds a faster gemv best: the gemv config is
    re-measured in the confirmation (the same process) and stays the winner; an entry the reader cannot
    use (missing table, unknown family record, a config invalid for the shape) gives no incumbent."""
    import json

    from fakes import TPR_BEST, VEC_BEST

    from gemvtune.kernels.families import config_to_dict
    from gemvtune.kernels.gemv import GemvConfig
    from gemvtune.runtime.table import entry_key
    from gemvtune.tuning.search_run import incumbents

    best = GemvConfig(vec=VEC_BEST, tpr=TPR_BEST, block=256)
    table = tmp_path / "table.json"
    assert incumbents(table, SHAPE) == ()
    rec = {"family": "gemv", "config": config_to_dict(best), "us": 10.0, "status": "ok"}
    bad = {"family": "gemv", "config": {**config_to_dict(best), "vec": "half16"}, "us": 1.0}
    table.write_text(json.dumps({"entries": {entry_key(SHAPE): {"gemv": rec, "splitk": bad}}}))
    inc = incumbents(table, SHAPE)
    assert inc == (best,)
    runner = FakeRunner()
    opts = SearchOptions(trials=6, seed=0, progress=False, families=("splitk",), domains={"gemv": FLAT})
    res = run_search(runner, SHAPE, opts, make_storage(f"journal:{tmp_path / 'j.log'}"), "s", echo=lambda s: None,
                     incumbents=inc)
    assert best in runner.calls and res.entry["winner"]["family"] == "gemv"
    assert res.entry["gemv"]["us"] == pytest.approx(10.0) and res.entry["splitk"]["us"] >= 11.0


def test_a_re_tune_never_replaces_an_entry_by_a_slower_config(tmp_path):
    """A search again of the family that holds the entry (a re-tune), over a space that cannot reach the
    held winner: the winner is re-measured beside the new top configs and stays; the entry's winner record
    (here of no family record) counts as well."""
    import json

    from fakes import TPR_BEST, VEC_BEST

    from gemvtune.kernels.families import config_to_dict
    from gemvtune.kernels.gemv import GemvConfig
    from gemvtune.runtime.table import entry_key
    from gemvtune.tuning.search_run import incumbents

    best = GemvConfig(vec=VEC_BEST, tpr=TPR_BEST, block=256)
    table = tmp_path / "table.json"
    table.write_text(json.dumps({"entries": {entry_key(SHAPE): {
        "winner": {"family": "gemv", "config": config_to_dict(best), "us": 10.0}}}}))
    inc = incumbents(table, SHAPE)
    assert inc == (best,)
    narrow = {**FLAT, "tpr": [8, 16], "vec": ["half2"]}      # the held winner is outside this space
    runner = FakeRunner()
    opts = SearchOptions(trials=6, seed=0, progress=False, families=("gemv",), domains={"gemv": narrow})
    res = run_search(runner, SHAPE, opts, make_storage(f"journal:{tmp_path / 'j.log'}"), "s", echo=lambda s: None,
                     incumbents=inc)
    assert res.entry["winner"]["label"] == best.label and res.entry["gemv"]["label"] == best.label
    without = run_search(FakeRunner(), SHAPE, opts, make_storage(f"journal:{tmp_path / 'k.log'}"), "s",
                         echo=lambda s: None)
    assert without.entry["winner"]["us"] > res.entry["winner"]["us"]   # what the re-tune alone would have written


def test_a_search_in_one_dtype_weighs_what_the_other_dtype_found(tmp_path):
    """The H200 probe of 2026-12-02 (runs/issue21d/probe): the same config runs at the same speed in FP16 and BF16,
    yet the BF16 search of 4096x4096 n = 8 missed the FP16 winner's ring config (2.5% faster in BF16 too). The
    other dtype's entry joins the incumbents: its configs as this dtype runs them (an FP16 accumulator becomes
    FP32 in BF16; BF16 configs run in FP16 as they are), this dtype's own first; a search in BF16 whose space
    cannot reach the FP16 winner still re-measures its twin, and it wins."""
    import json

    from fakes import TPR_BEST, VEC_BEST

    from gemvtune.kernels.families import config_to_dict
    from gemvtune.kernels.ring import RingConfig
    from gemvtune.runtime.table import entry_key
    from gemvtune.tuning.search_run import incumbents

    bf = Shape(SHAPE.M, SHAPE.d, SHAPE.n, "bf16")
    fp_win = GemvConfig(vec=VEC_BEST, tpr=TPR_BEST, block=256, acc="fp16")
    twin = GemvConfig(vec=VEC_BEST, tpr=TPR_BEST, block=256, acc="fp32")
    ring, own = RingConfig(), GemvConfig(vec="half4", tpr=32, block=128)
    table = tmp_path / "table.json"
    entries = {entry_key(SHAPE): {"winner": {"family": "gemv", "config": config_to_dict(fp_win), "us": 10.0},
                                  "ring": {"config": config_to_dict(ring), "us": 11.0, "status": "ok"}}}
    table.write_text(json.dumps({"entries": entries}))
    assert incumbents(table, bf) == (twin, ring)
    assert incumbents(table, SHAPE) == (fp_win, ring)
    entries[entry_key(bf)] = {"winner": {"family": "gemv", "config": config_to_dict(own), "us": 12.0}}
    table.write_text(json.dumps({"entries": entries}))
    assert incumbents(table, bf) == (own, twin, ring)                 # BF16's own entry first
    assert incumbents(table, SHAPE) == (fp_win, ring, own)            # BF16 configs run in FP16 as they are
    narrow = {**FLAT, "tpr": [8, 16], "vec": ["half2"]}              # the twin is outside this space
    opts = SearchOptions(trials=6, seed=0, progress=False, families=("gemv",), domains={"gemv": narrow})
    runner = FakeRunner()
    res = run_search(runner, bf, opts, make_storage(f"journal:{tmp_path / 'j.log'}"), "s", echo=lambda s: None,
                     incumbents=incumbents(table, bf))
    assert twin in runner.calls and fp_win not in runner.calls        # never an FP16 accumulator in BF16
    assert res.entry["winner"]["label"] == twin.label


def test_an_fp8_re_tune_weighs_the_fp8_entry_it_would_replace(tmp_path):
    """The H100 re-tune of 4096x4096 n = 16 e4m3-row (2026-12-06) wrote fp8mma d2 at 11.31 µs over the entry's d4 at
    10.32: the incumbents were read from the 16-bit key, so the FP8 winner was never re-measured. An FP8 shape's
    incumbents are its own weights' entries (each dtype of x), never the 16-bit entry's, and the 16-bit shape's
    never the FP8 entry's."""
    import json

    from gemvtune.kernels.families import config_to_dict
    from gemvtune.kernels.fp8mma import Fp8MmaConfig
    from gemvtune.kernels.mma import MmaConfig
    from gemvtune.runtime.table import entry_key
    from gemvtune.tuning.search_run import incumbents

    row = Shape(4096, 4096, 16, "fp16", "e4m3-row")
    plain = Shape(4096, 4096, 16, "fp16")
    held, other = Fp8MmaConfig(rw=1, kw=8, depth=4), Fp8MmaConfig(rw=1, kw=8, depth=2)
    sixteen = MmaConfig(rw=1, kw=8, depth=4)
    table = tmp_path / "table.json"
    entries = {entry_key(row): {"winner": {"family": "fp8mma", "config": config_to_dict(held), "us": 10.32}},
               entry_key(Shape(4096, 4096, 16, "bf16", "e4m3-row")): {
                   "winner": {"family": "fp8mma", "config": config_to_dict(other), "us": 10.5}},
               entry_key(plain): {"winner": {"family": "mma", "config": config_to_dict(sixteen), "us": 13.0}}}
    table.write_text(json.dumps({"entries": entries}))
    assert incumbents(table, row) == (held, other)
    assert incumbents(table, plain) == (sixteen,)
    assert incumbents(table, Shape(4096, 4096, 16, "fp16", "e4m3-b128")) == ()


def _study_of(config, us: float) -> optuna.Study:
    """A study holding one measured trial of ``config`` at ``us`` (what confirm reads its top-k from)."""
    study = optuna.create_study()
    study.add_trial(optuna.trial.create_trial(
        params=config.to_dict(), value=us, user_attrs={"measured": True},
        distributions={k: optuna.distributions.CategoricalDistribution([v]) for k, v in config.to_dict().items()}))
    return study


def test_one_noisy_round_does_not_make_a_slower_config_a_tie():
    """The 2026-12-02 re-tune of 28672x4096 n = 2: the fastest config had one noisy round (a 9% range over 5
    rounds), so every config within 9% tied and the simplest, 5% slower by median, won. Ties are capped at 1%."""
    from gemvtune.kernels.ring import RingConfig
    from gemvtune.tuning.confirm import confirm

    fast, simple = RingConfig(), GemvConfig(vec="half2", tpr=256, block=256)
    assert complexity(simple) < complexity(fast)
    rounds = collections.Counter()

    class Noisy(FakeRunner):
        def measure(self, config, shape, kind="variant", verify=True, timed=True, **kw):
            m = super().measure(config, shape, kind, verify, timed, **kw)
            if config == fast:
                rounds[fast] += 1
                m.us_median = 11.0 if rounds[fast] == 2 else 10.0      # one noisy round of five
            elif config == simple:
                m.us_median = 10.5                                      # 5% slower, steady
            return m

    study = _study_of(fast, 10.0)
    opts = SearchOptions(progress=False, families=("ring",), top_k=1, rounds=5)
    res = confirm(Noisy(), SHAPE, {"ring": study}, opts, echo=lambda s: None, incumbents=(simple,))
    assert res.entry["winner"]["label"] == fast.label and not res.tie
    rounds.clear()                                                      # within 1%: still a tie, the simplest wins

    class Close(Noisy):
        def measure(self, config, shape, kind="variant", verify=True, timed=True, **kw):
            m = super().measure(config, shape, kind, verify, timed, **kw)
            if config == simple:
                m.us_median = 10.05
            return m

    res = confirm(Close(), SHAPE, {"ring": study}, opts, echo=lambda s: None, incumbents=(simple,))
    assert res.tie and res.entry["winner"]["label"] == simple.label


def test_a_scattered_runner_up_does_not_widen_the_tie():
    """The 2026-12-02 BF16 search of 4096x4096 n = 1: b128 (round range 0.2%) was fastest, b1024 0.7% slower with
    a 1.2% range; the tie band took the larger range, b1024 tied as the simpler config and won, then ran 7% over
    its search time in the bench. The band is the fastest config's own range."""
    from gemvtune.tuning.confirm import confirm

    fast = GemvConfig(vec="half8", acc="fp32", tpr=16, block=128, unroll=8, hint="nc")
    simple = GemvConfig(vec="half8", acc="fp32", tpr=32, block=1024, unroll=4, hint="nc")
    assert complexity(simple) < complexity(fast)
    times = {fast: iter([9.59, 9.60, 9.58, 9.59, 9.60]), simple: iter([9.60, 9.66, 9.72, 9.65, 9.66])}

    class Scatter(FakeRunner):
        def measure(self, config, shape, kind="variant", verify=True, timed=True, **kw):
            m = super().measure(config, shape, kind, verify, timed, **kw)
            if config in times:
                m.us_median = next(times[config])
            return m

    study = _study_of(fast, 9.59)
    opts = SearchOptions(progress=False, families=("gemv",), top_k=1, rounds=5)
    res = confirm(Scatter(), SHAPE, {"gemv": study}, opts, echo=lambda s: None, incumbents=(simple,))
    assert res.entry["winner"]["label"] == fast.label and not res.tie
