import json
import multiprocessing as mp
import warnings

import pytest

from gemvtune import LLAMA_CPP, GemvConfig, Shape, UsageError
from gemvtune.runtime.table import SCHEMA_VERSION, load_table, record

DEV = {"name": "NVIDIA H200", "compute_capability": "9.0", "sm_count": 132, "l2_bytes": 62914560,
       "driver": "580", "cuda_runtime": 13020}


def _entry(cfg: GemvConfig, us: float = 10.0):
    return {"winner": {"family": "gemv", "config": cfg.to_dict(), "label": cfg.label, "us": us, "us_min": us,
                       "us_max": us, "gbps": 1.0, "pct_ceiling": 90.0, "spread": 0.01},
            "baselines": {"llama.cpp": {"us": 12.0}, "cublas-torch": {"us": 13.0}},
            "search": {"sampler": "tpe", "seed": 0}}


def test_round_trip_and_merge(tmp_path):
    p = tmp_path / "t.json"
    a, b = GemvConfig(vec="half8", tpr=64), GemvConfig(vec="half4", tpr=32)
    record(p, Shape(4096, 4096), _entry(a), DEV, {"read_gbps": 4600})
    record(p, Shape(14336, 4096), _entry(b), DEV)
    t = load_table(p)
    assert t.data["schema"] == SCHEMA_VERSION and t.gpu["name"] == "NVIDIA H200"
    assert t.lookup(Shape(4096, 4096)) == (a, "tuned") and t.lookup(Shape(14336, 4096)) == (b, "tuned")
    assert t.data["ceiling"]["read_gbps"] == 4600
    record(p, Shape(4096, 4096), _entry(b, 9.0), DEV)   # replacing one keeps the other
    t = load_table(p)
    assert t.lookup(Shape(4096, 4096))[0] == b and len(t.shapes) == 2
    assert not list(tmp_path.glob("*.tmp"))


def test_failed_write_keeps_old_table(tmp_path, monkeypatch):
    p = tmp_path / "t.json"
    record(p, Shape(4096, 4096), _entry(LLAMA_CPP), DEV)
    before = p.read_text()
    import gemvtune.runtime.table as tm

    def boom(*a, **k):
        raise OSError("disk full")
    monkeypatch.setattr(tm.json, "dump", boom)
    with pytest.raises(OSError):
        record(p, Shape(1024, 16384), _entry(LLAMA_CPP), DEV)
    assert p.read_text() == before and not list(tmp_path.glob("*.tmp"))


def test_record_refuses_bad_config_and_other_gpu(tmp_path):
    p = tmp_path / "t.json"
    bad = _entry(LLAMA_CPP)
    bad["winner"]["config"]["vec"] = "half16"
    with pytest.raises(UsageError):
        record(p, Shape(64, 64), bad, DEV)
    assert not p.exists()
    record(p, Shape(64, 64), _entry(LLAMA_CPP), DEV)
    with pytest.raises(UsageError, match="made on NVIDIA H200"):
        record(p, Shape(64, 128), _entry(LLAMA_CPP), {**DEV, "name": "NVIDIA H100"})


@pytest.mark.parametrize("content,needle", [
    (None, "does not exist"), ("", "is empty"), ('{"schema": 1, "entr', "not valid JSON"), ("[1, 2]", "not a gemvtune table"),
    (json.dumps({"schema": 99, "gpu": {}, "entries": {}}), "newer gemvtune"),
    (json.dumps({"schema": 1, "gpu": {}, "entries": {"1x1x1": {"M": 1}}}), "malformed"),
])
def test_bad_tables(tmp_path, content, needle):
    p = tmp_path / "t.json"
    if content is not None:
        p.write_text(content)
    with pytest.raises(UsageError, match=needle):
        load_table(p)


def test_fallbacks(tmp_path):
    p = tmp_path / "t.json"
    half8 = GemvConfig(vec="half8", tpr=64)
    record(p, Shape(4096, 4096), _entry(half8), DEV)
    record(p, Shape(128256, 4096), _entry(GemvConfig(vec="half8", tpr=32)), DEV)
    t = load_table(p)
    cfg, how = t.lookup(Shape(5000, 4096))
    assert cfg == half8 and how == "nearest tuned shape 4096x4096"
    assert t.lookup(Shape(100000, 4096))[1] == "nearest tuned shape 128256x4096"
    cfg, how = t.lookup(Shape(4096, 4100))   # half8 cannot do d % 8 != 0
    assert (cfg, how) == (LLAMA_CPP, "llama.cpp fallback")
    cfg, how = t.lookup(Shape(7, 3))         # odd d: only scalar-half configs
    assert how == "generic fallback" and cfg.vec == "half" and cfg.is_valid(Shape(7, 3))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        t.config_for(Shape(5000, 4096))
        t.config_for(Shape(5000, 4096))
        t.config_for(Shape(4096, 4096))
    assert len(w) == 1 and "not in the table" in str(w[0].message)


def _writer(path, i):
    for j in range(10):
        record(path, Shape(64 * (i + 1), 8 * (j + 1)), _entry(GemvConfig(vec="half", tpr=2, block=32)), DEV)


def test_concurrent_writers_lose_nothing(tmp_path):
    p = str(tmp_path / "t.json")
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(p, i)) for i in range(4)]
    for q in procs:
        q.start()
    for q in procs:
        q.join(60)
    assert all(q.exitcode == 0 for q in procs)
    assert len(load_table(p).shapes) == 40


def test_another_gpu_never_runs_the_tables_kernels(tmp_path):
    """A table used on another GPU model is read as before (lookups, reports), but every call takes its fallback,
    cuBLAS, with one warning saying so (strict_gpu: a UsageError); on its own model its kernels run."""
    from gemvtune.kernels.group import GroupShape
    from gemvtune.runtime.grouproute import choose_group

    p = tmp_path / "t.json"
    record(p, Shape(64, 64), _entry(LLAMA_CPP, 5.0), DEV)   # 5 µs against cuBLAS's 13: the kernel wins
    t = load_table(p)
    assert t.route(64, 64, 1).tuned and not t.foreign
    with pytest.warns(UserWarning, match="tuned on NVIDIA H200, this is NVIDIA H100: its kernels never run on another "
                                         r"GPU; every call runs cuBLAS \(F.linear, cupy.matmul\)"):
        assert t.check_device("NVIDIA H100", (9, 0)) is False
    for framework in ("torch", "cupy", "torch-compile"):
        r = t.route(64, 64, 1, framework)
        assert r.kind == "cublas" and r.config is None and "tuned on NVIDIA H200, this is NVIDIA H100" in r.why
    g = choose_group(t, GroupShape((32, 32), 64))
    assert not g.grouped and "tuned on NVIDIA H200" in g.why
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # said once
        assert t.check_device("NVIDIA H100") is False
    assert t.lookup(Shape(64, 64)) == (LLAMA_CPP, "tuned") and t.shapes == [Shape(64, 64)]   # still read whole
    tuned = load_table(p, policy="tuned")   # even the policy that always runs a gemvtune kernel
    with pytest.warns(UserWarning, match="its kernels never run on another GPU"):
        tuned._check_gpu("NVIDIA H100")   # (the benchmarks' check, by name)
    assert tuned.route(64, 64, 1).kind == "cublas" and tuned.route(5000, 64, 1).kind == "cublas"
    with pytest.raises(UsageError, match="tuned on NVIDIA H200, this is NVIDIA H100"):
        load_table(p, strict_gpu=True).check_device("NVIDIA H100")
    same = load_table(p, strict_gpu=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # same model: silent, and its kernels run
        assert same.check_device("NVIDIA H200", (9, 0)) and same.route(64, 64, 1).tuned and same.arch.name == "sm_90"


def test_a_tuned_config_the_devices_arch_cannot_run_falls_back(tmp_path):
    """A route never runs a config the architecture lacks a feature for: an FP8 kernel (cvt e4m3x2: sm_89) on an
    A100 runs the fallback, dequantize + F.linear, and with the policy ``tuned`` a PDL config (sm_90) the llama.cpp
    config."""
    from gemvtune.kernels.fp8gemv import Fp8GemvConfig

    a100 = {**DEV, "name": "NVIDIA A100", "compute_capability": "8.0"}
    p = tmp_path / "t.json"
    f8 = Fp8GemvConfig()
    ent = {**_entry(f8, 5.0), "baselines": {"dequant-torch": {"us": 13.0}}}
    ent["winner"]["family"] = "fp8gemv"
    record(p, Shape(64, 4096, 1, "fp16", "e4m3-row"), ent, a100)
    t = load_table(p)
    assert t.arch.name == "sm_80" and t.lookup(Shape(64, 4096, 1, "fp16", "e4m3-row")) == (f8, "tuned")
    r = t.route(64, 4096, 1, weights="e4m3-row")
    assert r.kind == "cublas" and r.why.startswith(f"{f8.label} cannot run on sm_80 (the fp8gemv family needs cvt.rn.f16x2.e4m3x2")
    pdl = GemvConfig(pdl="on")
    p80 = tmp_path / "t80.json"
    record(p80, Shape(64, 4096), _entry(pdl, 5.0), a100)
    r = load_table(p80, policy="tuned").route(64, 4096, 1)
    assert r.tuned and r.config == LLAMA_CPP and r.why.endswith(f"the llama.cpp fallback {LLAMA_CPP.label}")
    p90 = tmp_path / "t90.json"
    record(p90, Shape(64, 4096, 1, "fp16", "e4m3-row"), ent, DEV)
    t90 = load_table(p90)
    assert t90.route(64, 4096, 1, weights="e4m3-row").config == f8   # on its H200 it runs
    assert t90.check_device("NVIDIA H200", (8, 0)) and not t90.route(64, 4096, 1, weights="e4m3-row").tuned


def test_a_pdl_winner_of_an_isolated_search_is_not_run(tmp_path):
    """A programmatic-dependent-launch config won its isolated search by overlapping each launch with the one before
    it, a neighbour no model has: the route runs the entry's fastest other measured kernel (the confirmation's
    candidates count), says which winner it passed over and why, and the policy ``tuned`` runs the same; an entry
    with no other kernel runs cuBLAS."""
    pdl, plain = GemvConfig(pdl="on"), GemvConfig(unroll=4)
    ent = _entry(pdl, 5.0)
    ent["candidates"] = [{**ent["winner"]}, {**_entry(plain, 8.0)["winner"]}]
    p = tmp_path / "t.json"
    record(p, Shape(64, 4096), ent, DEV)
    t = load_table(p)
    r = t.route(64, 4096, 1)
    assert r.tuned and r.config == plain and r.tuned_us == 8.0
    assert r.why.endswith(f"the search's winner {pdl.label} is not run: pdl=on is chosen in a model's chain of "
                          "launches only (an isolated timing overlaps each launch with the one before it)")
    assert t.lookup(Shape(64, 4096)) == (plain, "tuned")
    from gemvtune.reports.tablereport import table_frame, table_summary

    assert f"runs {plain.label}: the winner's PDL is a model chain's choice" in table_summary(t)
    assert list(table_frame(t)["runs"]) == [plain.label]
    q = tmp_path / "q.json"
    record(q, Shape(64, 4096), _entry(pdl, 5.0), DEV)
    r = load_table(q).route(64, 4096, 1)
    assert r.kind == "cublas" and "is not run: pdl=on" in r.why


def test_a_swapped_layer_on_another_gpu_runs_f_linear_and_says_why(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    import gemvtune

    p = tmp_path / "t.json"
    record(p, Shape(64, 64), _entry(LLAMA_CPP, 5.0), DEV)
    t = load_table(p)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)   # an H100 answers (no GPU needed for the routes)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda dev=None: "NVIDIA H100")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda dev=None: (9, 0))
    model = torch.nn.Sequential(torch.nn.Linear(64, 64).half())
    with pytest.warns(UserWarning, match="tuned on NVIDIA H200, this is NVIDIA H100"):
        gemvtune.swap_linears(model, t)
    layer = model[0]
    assert not any(any(v) for v in layer._tuned.values()) and not any(any(v) for v in layer._compiled.values())
    assert "its kernels never run here" in t.route(64, 64, 1, "torch", "fp16", "fp16").why


def _sk_entry(cfg, us, gemv_us):
    e = _entry(LLAMA_CPP, us)
    e["winner"] = {**e["winner"], "family": cfg.family, "config": cfg.to_dict(), "label": cfg.label}
    e["gemv"] = {"family": "gemv", "config": LLAMA_CPP.to_dict(), "label": LLAMA_CPP.label, "us": gemv_us}
    e["splitk"] = {"family": "splitk", "config": {}, "label": "x", "us": us if cfg.family == "splitk" else gemv_us + 1}
    return e


def test_batch_entries_dispatch_by_n_and_crossover(tmp_path):
    from gemvtune.kernels.splitk import SplitKConfig
    from gemvtune.transition.crossover import crossover_frame, crossovers, plot_crossover

    p = tmp_path / "t.json"
    sk = SplitKConfig(mt=1, warps=2, split=8)
    for n, fam_cfg, us, gus in ((1, LLAMA_CPP, 10.0, 10.0), (2, LLAMA_CPP, 11.0, 11.0), (4, sk, 11.5, 12.0),
                                (8, sk, 12.0, 14.0)):
        record(p, Shape(4096, 4096, n), _sk_entry(fam_cfg, us, gus), DEV, {"read_gbps": 4600})
    t = load_table(p)
    assert t.lookup(Shape(4096, 4096, 8)) == (sk, "tuned")
    assert t.lookup(Shape(4096, 4096, 2)) == (LLAMA_CPP, "tuned")
    cfg, how = t.lookup(Shape(4096, 4096, 6))            # untuned n: the winner of the nearest tuned n
    assert cfg == sk and how == "winner tuned at n=8"     # 4 and 8 are both 2 away: ties go to the larger n
    df = crossover_frame(t)
    assert list(df.n) == [1, 2, 4, 8] and list(df.winner_family) == ["gemv", "gemv", "splitk", "splitk"]
    assert crossovers(df) == {(4096, 4096): 4}
    assert df.floor_us.iloc[0] == pytest.approx(Shape(4096, 4096).bytes_moved / 4600e3)
    paths = plot_crossover(df, tmp_path, "NVIDIA H200")
    assert [x.name for x in paths] == ["crossover-4096x4096.png"] and paths[0].stat().st_size > 10000


def test_a_search_of_one_family_keeps_the_other_familys_best(tmp_path):
    """Re-searching only the GEMV family replaces the winner and the gemv best, and keeps the split-K
    best of the earlier search, marked with when it was found."""
    from gemvtune.kernels.splitk import SPLITK_SEED

    p = tmp_path / "t.json"
    first = {**_entry(LLAMA_CPP), "gemv": {"label": LLAMA_CPP.label, "us": 10.0},
             "splitk": {"label": SPLITK_SEED.label, "us": 12.0}}
    record(p, Shape(4096, 4096), first, DEV)
    was = json.loads(p.read_text())["entries"]["4096x4096x1"]["updated"]
    better = GemvConfig(vec="half8", tpr=64, block=128)
    record(p, Shape(4096, 4096), {**_entry(better, 9.0), "gemv": {"label": better.label, "us": 9.0}}, DEV)
    e = json.loads(p.read_text())["entries"]["4096x4096x1"]
    assert e["gemv"]["label"] == better.label and "kept_from" not in e["gemv"]
    assert e["splitk"]["label"] == SPLITK_SEED.label and e["splitk"]["kept_from"] == was
