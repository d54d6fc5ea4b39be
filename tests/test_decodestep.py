"""The decode-step benchmark (gemvtune bench step --model NAME --layers N): the layer list, the report from a
synthetic frame and bad input on the CPU; a 2-layer step on a GPU (marked gpu)."""

import json
import math

import pytest
from conftest import ROOT, run_cli

from gemvtune import MODELS, Shape, UsageError
from gemvtune.baselines import BASELINES
from gemvtune.bench.step import check_decode_args, parse_between, step_bytes, step_ops
from gemvtune.bench.stepfused import FUSED, FUSED_PDL
from gemvtune.bench.stepreport import (
    IMPLS,
    NOTE,
    OURS,
    decode_markdown,
    key_bytes,
    key_of,
    ratios,
    split_key,
    summary_frame,
    write_reports,
)

TABLE = ROOT / "results" / "nvidia-h200" / "table.json"


def test_llama_3_8b_step_layers():
    ops = step_ops("llama-3-8b", 32)
    assert len(ops) == 32 * 4 + 1
    assert ops[:5] == [("layers.0.qkv", Shape(6144, 4096)), ("layers.0.o", Shape(4096, 4096)),
                       ("layers.0.gate_up", Shape(28672, 4096)), ("layers.0.down", Shape(4096, 14336)),
                       ("layers.1.qkv", Shape(6144, 4096))]
    assert ops[-2] == ("layers.31.down", Shape(4096, 14336)) and ops[-1] == ("lm_head", Shape(128256, 4096))
    per_layer = (6144 + 4096 + 28672) * 4096 + 4096 * 14336
    weights = 2 * (32 * per_layer + 128256 * 4096)
    assert sum(s.weight_bytes for _, s in ops) == weights            # ~15 GB: fits an H200 with room
    assert 13e9 < weights < 16e9
    assert step_bytes(ops) == weights + sum(2 * s.d + 4 * s.M for _, s in ops)
    assert len({s for _, s in ops}) == 5
    for model in MODELS:                                               # every preset builds
        one = step_ops(model, 1)
        assert one[-1][0] == "lm_head" and len(one) == len(MODELS[model])


@pytest.mark.parametrize("args,needle", [
    ((None, "2"), "needs --model"), (("llama-3-8b", "0"), ">= 1"), (("llama-3-8b", "-3"), ">= 1"),
    (("llama-3-8b", "x"), ">= 1"), (("gpt-9", "2"), "unknown model preset"),
    (("llama-3-8b", "2", ("64x64",)), "drop --shape"), (("llama-3-8b", "2", (), "decode"), "drop --shape"),
    (("llama-3-8b", "2", (), None, "llama"), "drop --configs"), (("llama-3-8b", "2", (), None, "tuned", "1,2"), "drop --batch"),
])
def test_check_decode_args(args, needle):
    with pytest.raises(UsageError, match=needle):
        check_decode_args(*args)


def test_step_is_the_fused_set_from_the_configs():
    """The step replays the fused linears engines run (qkv, gate_up), derived from the packaged configs."""
    from gemvtune.kernels.hfconfig import read_preset

    ops = step_ops("qwen2.5-7b", 2)
    assert ops == [("layers.0.qkv", Shape(4608, 3584)), ("layers.0.o", Shape(3584, 3584)),
                   ("layers.0.gate_up", Shape(37888, 3584)), ("layers.0.down", Shape(3584, 18944)),
                   ("layers.1.qkv", Shape(4608, 3584)), ("layers.1.o", Shape(3584, 3584)),
                   ("layers.1.gate_up", Shape(37888, 3584)), ("layers.1.down", Shape(3584, 18944)),
                   ("lm_head", Shape(152064, 3584))]
    for model in MODELS:
        fused = read_preset(model).linear_layers(fused=True)
        assert [s for _, s in step_ops(model, 1)] == [x.shape() for x in fused]
    assert step_ops("mistral-7b", 1)[-1] == ("lm_head", Shape(32000, 4096))


def test_check_decode_args_accepts_and_step_ops_refuses():
    assert check_decode_args("llama-3-8b", "32") == 32 and check_decode_args("qwen2.5-7b", 1) == 1
    for bad in (0, -1, True, 2.0):
        with pytest.raises(UsageError, match=">= 1"):
            step_ops("llama-3-8b", bad)


CLI_CASES = [
    ("--layers without --model", ["bench", "step", "--layers", "2"], "Missing option '--model'"),
    ("--model without --layers", ["bench", "step", "--model", "llama-3-8b"], "Missing option '--layers'"),
    ("--layers zero", ["bench", "step", "--model", "llama-3-8b", "--layers", "0"], ">= 1"),
    ("--layers negative", ["bench", "step", "--model", "llama-3-8b", "--layers", "-1"], ">= 1"),
    ("--layers not a number", ["bench", "step", "--model", "llama-3-8b", "--layers", "two"], ">= 1"),
    ("--layers, unknown model", ["bench", "step", "--model", "gpt-9", "--layers", "2"], "unknown model preset"),
    ("with --shape", ["bench", "step", "--model", "llama-3-8b", "--layers", "2", "--shape", "64x64"],
     "No such option '--shape'"),
    ("with --batch", ["bench", "step", "--model", "llama-3-8b", "--layers", "2", "--batch", "2"],
     "No such option '--batch'"),
    ("table missing", ["bench", "step", "--model", "llama-3-8b", "--layers", "2", "--table", "{tmp}/none.json"],
     "does not exist"),
    # the old spelling (bench --model NAME --layers N): its refusals as before, after the deprecation line
    ("old: --layers without --model", ["bench", "--layers", "2"], "needs --model"),
    ("old: --layers with --shape", ["bench", "--model", "llama-3-8b", "--layers", "2", "--shape", "64x64"],
     "drop --shape"),
    ("old: --layers with --batch", ["bench", "--model", "llama-3-8b", "--layers", "2", "--batch", "2"], "drop --batch"),
    ("old: table missing", ["bench", "--model", "llama-3-8b", "--layers", "2", "--table", "{tmp}/none.json"],
     "does not exist"),
]
DEPRECATED = "gemvtune: 'bench --layers' is deprecated; use 'gemvtune bench step' (removed in the next release)"


@pytest.mark.parametrize("what,args,needle", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_bad_input_is_one_line_exit_2(tmp_path, what, args, needle):
    r = run_cli(*[a.replace("{tmp}", str(tmp_path)) for a in args], "--out", str(tmp_path / "out"))
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2, (r.returncode, r.stderr)
    if args[1] != "step":
        assert lines[:1] == [DEPRECATED], r.stderr
        lines = lines[1:]
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "out").exists()


def _synthetic():
    import pandas as pd

    base = {"tuned": 3000.0, "llama.cpp": 3300.0, "cublas": 3450.0}
    rows = [{"impl": impl, "method": "graph", "round": r, "replay": k, "us": us * (1 + 0.001 * (k - 2) + 0.002 * r)}
            for r in range(3) for impl, us in base.items() for k in range(5)]
    return pd.DataFrame(rows)


META = {"model": "llama-3-8b", "layers": 32, "ops": 129, "step_bytes": 15_000_000_000, "weight_bytes": 14_990_000_000,
        "rounds": 3, "replays": 5, "table": "results/nvidia-h200/table.json"}
CEIL = {"read_gbps": 4500.0, "launch_floor_us": 0.5}


def test_summary_frame_and_ratios():
    df = summary_frame(_synthetic(), META["step_bytes"], CEIL["read_gbps"], {"cublas": "graph (torch F.linear)"})
    assert list(df.impl) == ["tuned", "llama.cpp", "cublas"]   # the step's order; every name the registry's
    assert all(i in BASELINES for i in IMPLS if i not in OURS)
    t = df.set_index("impl")
    assert t.loc["tuned", "us_median"] == pytest.approx(3000 * 1.002)
    assert t.loc["tuned", "us_min"] == pytest.approx(3000 * 0.998) and t.loc["tuned", "samples"] == 15
    assert t.loc["tuned", "rounds"] == 3 and t.loc["tuned", "round_spread"] == pytest.approx(0.004 / 1.002)
    assert t.loc["tuned", "tokens_per_s"] == pytest.approx(1e6 / (3000 * 1.002))
    assert t.loc["tuned", "gbps"] == pytest.approx(15e9 / (3000 * 1.002e-6) / 1e9)
    assert t.loc["tuned", "pct_ceiling"] == pytest.approx(100 * t.loc["tuned", "gbps"] / 4500)
    assert t.loc["tuned", "x_tuned"] == 1 and t.loc["cublas", "x_tuned"] == pytest.approx(1.15)
    assert t.loc["cublas", "method"] == "graph (torch F.linear)"
    r = ratios(df)
    assert r["tuned_vs_cublas"] == pytest.approx(1.15) and r["tuned_vs_llama"] == pytest.approx(1.1)


def test_keys_between_modes_and_bytes():
    assert key_of("tuned", "none") == "tuned" and key_of(FUSED_PDL, "pdl") == "fused-pdl@pdl"
    assert split_key("fused-pdl@pdl") == (FUSED_PDL, "pdl") and split_key("cublas-torch") == ("cublas-torch", "none")
    assert parse_between(None) == ("none",) and parse_between("pdl, none,plain") == ("none", "plain", "pdl")
    for bad in ("sometimes", "none,none", ",", "pdl;plain"):
        with pytest.raises(UsageError, match="--between"):
            parse_between(bad)
    gb = {"plain": {"unfused": 400, "fused": 300}}
    assert key_bytes(["tuned", "fused@plain", "tuned@plain", "cublas-torch@plain"], 10_000, gb) == {
        "tuned": 10_000, "fused@plain": 10_300, "tuned@plain": 10_400, "cublas-torch@plain": 10_400}


def test_ratios_and_markdown_with_the_fused_steps():
    import pandas as pd

    extra = pd.DataFrame([{"impl": impl, "method": "graph", "round": r, "replay": k, "us": us}
                          for impl, us in ((FUSED, 2950.0), (FUSED_PDL, 2900.0), ("tuned@pdl", 3200.0),
                                           ("fused-pdl@pdl", 3000.0), ("cublas@pdl", 3600.0))
                          for r in range(3) for k in range(5)])
    df = summary_frame(pd.concat([_synthetic(), extra]), META["step_bytes"], CEIL["read_gbps"])
    assert list(df.impl) == ["tuned", FUSED, FUSED_PDL, "llama.cpp", "cublas", "tuned@pdl", "fused-pdl@pdl",
                             "cublas@pdl"]
    t = df.set_index("impl")
    assert t.loc["fused-pdl@pdl", "x_tuned"] == pytest.approx(3000 / 3200)   # against the tuned step with the same gaps
    r = ratios(df)
    assert r["fused-pdl_vs_tuned"] == pytest.approx(3000 * 1.002 / 2900)
    assert r["fused-pdl_vs_cublas"] == pytest.approx(3450 * 1.002 / 2900)
    assert r["fused-pdl_vs_cublas@pdl"] == pytest.approx(3600 / 3000) and r["tuned_vs_cublas@pdl"] == pytest.approx(1.125)
    assert "tuned_vs_llama@pdl" in r and math.isnan(r["tuned_vs_llama@pdl"])
    md = decode_markdown(df, {**META, "ceiling": CEIL, "depths": {"none": {"qkv": "chain2", "o": "early4"}},
                              "fused_checked": {FUSED: [("down+r", True, 1e-6, "")]}})
    assert "gemvtune fused, chain PDL, PDL stand-ins between" in md and "×1.200 cuBLAS's step" in md
    assert "none: qkv chain2, o early4" in md and "matched float64 of their inputs" in md
    bad = decode_markdown(df, {**META, "fused_checked": {FUSED_PDL: [("down+r", False, 0.3, "x")]}})
    assert "**Wrong after the replays**: fused-pdl down+r" in bad


def test_markdown_and_files(tmp_path):
    info = {"methods": {"tuned": "graph", "llama.cpp": "graph", "cublas": "graph (torch F.linear)"},
            "verified": {"tuned": True, "llama.cpp": True}, "not_tuned": [], "configs": {"6144x4096": {"tuned": "x"}},
            "written": {"tuned": True, "llama.cpp": True, "cublas": True},
            "max_rel_diff_vs_cublas": {"tuned": 1.23e-3, "llama.cpp": 2e-3}}
    dev = {"name": "NVIDIA H200"}
    path, md = write_reports(_synthetic(), info, META, tmp_path, "decode-llama-3-8b-L32-20990101-000000", dev, CEIL)
    assert "µs per token" in md and "×1.150" in md and "×1.100" in md and NOTE in md
    assert "nan" not in md.lower() and "verified against a float64 reference" in md
    assert "gemvtune tuned 1.2e-03" in md and "unwritten" not in md
    assert "3333.3 µs" in md                                                # the floor: 15 GB at 4500 GB/s
    names = sorted(p.name for p in tmp_path.iterdir())
    stem = "decode-llama-3-8b-L32-20990101-000000"
    assert names == sorted([f"{stem}.csv", f"{stem}.json", f"{stem}-summary.csv", f"{stem}-summary.md", f"{stem}.png"])
    prov = json.loads(path.with_suffix(".json").read_text())
    assert prov["device"] == dev and prov["layers"] == 32 and prov["ratios"]["tuned_vs_cublas"] == pytest.approx(1.15)
    assert "command" in prov and "date" in prov and prov["note"] == NOTE
    assert (tmp_path / f"{stem}.png").read_bytes()[:4] == b"\x89PNG"
    bad = decode_markdown(summary_frame(_synthetic(), META["step_bytes"], math.nan),
                          {**META, "verified": {"tuned": False}, "not_tuned": ["1x8"], "written": {"cublas": False}})
    assert "Verification failed" in bad and "1x8" in bad and "unwritten** (NaN poison) by: cublas" in bad


# ---------------------------------------------------------------------------------------------- GPU

@pytest.mark.gpu
def test_two_layer_step_on_the_gpu(tmp_path):
    from gemvtune.bench.step import measure_decode_step
    from gemvtune.runners.cuda import CudaRunner
    from gemvtune.runtime.table import load_table

    runner = CudaRunner(replays=3)
    ops = step_ops("llama-3-8b", 2)
    samples, bench, info = measure_decode_step(runner, ops, load_table(TABLE), rounds=2, replays=4, echo=print,
                                               pdl=True, model="llama-3-8b", between=("none", "plain", "pdl"))
    try:
        assert info["verified"] == {FUSED: True, "tuned": True, "llama.cpp": True}, info["verify"]
        assert not info["not_tuned"] and len(info["verify"]["fused"]) > 5     # every chain depth of every slot
        cublas = next(i for i in info["methods"] if i.startswith("cublas"))
        impls = {"tuned", FUSED, FUSED_PDL, "llama.cpp", cublas}
        assert set(info["methods"]) == {key_of(i, b) for i in impls for b in ("none", "plain", "pdl")}
        for impl in info["methods"]:
            t = samples[samples.impl == impl].us
            assert len(t) == 8 and (t > 0).all() and t.notna().all(), impl
            assert info["written"][impl], impl                       # every op of the step wrote its output
        # the fused steps (PDL chains in the graph, down reading the h its gate/up group wrote): right after replays
        assert len(info["fused_checked"]) == 6
        for key, rows in info["fused_checked"].items():
            assert [r[0] for r in rows] == ["qkv.q", "qkv.k", "qkv.v", "o+r", "silu(g)*u", "down+r", "lm_head"]
            assert all(ok for _, ok, _, _ in rows), (key, rows)
        assert set(info["depths"]) == {"none", "plain", "pdl"} and all(info["chain_search"].values())
        bad = {k: rows for k, rows in info["checked"].items() if not all(r[0] for r in rows)}
        assert set(info["checked"]) == {key_of(i, b) for i in ("tuned", "llama.cpp", cublas)
                                        for b in ("none", "plain", "pdl")} and not bad, bad
        ok, _, why = bench.check_op(cublas, 0)
        assert ok, why
        assert info["max_rel_diff_vs_cublas"]["tuned"] < 1e-2
        assert info["methods"]["tuned"] == "graph"
        meta = {"model": "llama-3-8b", "layers": 2, "ops": len(ops), "step_bytes": step_bytes(ops),
                "weight_bytes": bench.weight_bytes, "rounds": 2, "replays": 4, "depths": info["depths"]}
        ceil = {"read_gbps": 4500.0}
        path, md = write_reports(samples, info, meta, tmp_path, "decode-test", {"name": "gpu"}, ceil)
        assert path.exists() and "µs per token" in md
        # the step is bound by HBM: 2 layers + head move ~1.9 GB; at most ~5 TB/s
        med = samples[samples.impl == "tuned"].us.median()
        assert step_bytes(ops) / (med * 1e-6) / 1e9 < 6000
    finally:
        bench.close()
        runner.release()


class _FakeStep:
    """Stands in for runners.cuda.decode.DecodeStepBench: what the orchestration calls, no GPU."""

    TIMES = {"tuned": 100.0, FUSED: 97.0, FUSED_PDL: 95.0, "llama.cpp": 110.0, "cublas-torch": 120.0,
             "search:incumbent": 96.0, "search:candidate": 95.5}

    def __init__(self, runner, ops):
        self.ops, self.methods, self.captured, self.y = ops, {}, [], {}

    @property
    def weight_bytes(self):
        return sum(s.weight_bytes for _, s in self.ops)

    def capture_kernels(self, impl, configs, launch, gaps=None, pdl_gaps=False, key=None):
        assert set(configs) == set(launch) == {s for _, s in self.ops}
        assert (gaps is None) == ((key or impl) == impl) and pdl_gaps == (key or "").endswith("@pdl")
        self.captured.append(key or impl)
        self.methods[key or impl] = "graph"
        self.y[key or impl] = [object()] * len(self.ops)

    def capture_sequence(self, key, calls, outputs, configs=None):
        self.captured.append(key)
        self.methods[key] = "graph"

    def capture_cublas(self, gaps=None, pdl_gaps=False, suffix=""):
        self.captured.append("cublas-torch" + suffix)
        self.y["cublas-torch" + suffix] = [object()] * len(self.ops)
        return "cublas-torch" + suffix, "graph (torch F.linear)"

    def check_op(self, key, i):
        return (True, 1e-6, "") if key != "llama.cpp@pdl" or i != 2 else (False, 0.5, "relative error 0.5")

    def time(self, key, replays):
        return [self.TIMES[split_key(key)[0]] + (5 if "@" in key else 0) + k for k in range(replays)]

    def written(self, impl):
        return True

    def max_rel_diff(self, a, b):
        return 1e-3

    def drop(self, key):
        self.methods.pop(key, None)

    def keep(self, *objs):
        self.kept = getattr(self, "kept", []) + list(objs)

    def close(self):
        pass


class _FakeFused:
    def __init__(self, bench, model, layers):
        self.layers = layers

    def calls(self, kernels, plans, gaps=None, pdl_gaps=False):
        assert set(kernels) == set(plans) == {"qkv", "o", "gate_up", "down", "lm_head"}
        return []

    def outputs(self):
        return []

    def check_last_layer(self, runner, kernels):
        return [("down+r", True, 1e-6, "")]


class _FakeGaps:
    def __init__(self, runner, standins, gaps, layers):
        self.bytes_per_layer = sum(g.bytes_moved for g in gaps.values())


def test_orchestration_with_a_fake_gpu(tmp_path, monkeypatch):
    """run_decode_step end to end (lookup, compile list, verification bookkeeping, the fused step and its chain
    search, stand-in modes, memory check, interleaved rounds, files) with the GPU half replaced by fakes."""
    import gemvtune.bench.kernels
    import gemvtune.build.compile
    import gemvtune.runners.cuda.decode as dec
    import gemvtune.runners.cuda.fusedstep as fs
    import gemvtune.runners.cuda.standins as si
    from gemvtune.bench.step import run_decode_step

    class Runner:
        arch = "sm_90"

        def release(self):
            pass

    compiled = []
    monkeypatch.setattr(gemvtune.build.compile, "compile_variants", lambda items, arch: compiled.extend(items))
    monkeypatch.setattr(gemvtune.bench.kernels, "_start", lambda echo: (Runner(), {"name": "NVIDIA H200"}, CEIL))
    monkeypatch.setattr(dec, "launchers", lambda runner, cs: {s: object() for s in cs})
    monkeypatch.setattr(dec, "verify", lambda runner, cs, launch: {i: [(s, True, 1e-4, "") for s in c] for i, c in cs.items()})
    monkeypatch.setattr(dec, "free_bytes", lambda: 10**12)
    monkeypatch.setattr(dec, "DecodeStepBench", _FakeStep)
    monkeypatch.setattr(fs, "verify_kernel", lambda runner, k: (True, 1e-6, ""))
    monkeypatch.setattr(fs, "slot_plan", lambda runner, k: object())
    monkeypatch.setattr(fs, "FusedStep", _FakeFused)
    monkeypatch.setattr(fs, "GapBuffers", _FakeGaps)
    monkeypatch.setattr(si, "StandIns", lambda runner: object())
    said = []
    path = run_decode_step("llama-3-8b", 2, str(TABLE), str(tmp_path), echo=said.append, rounds=2, replays=3)
    assert len(compiled) == 15 and path.exists()                      # 5 shapes x (tuned, llama.cpp), 5 fused kernels
    assert [len(c) for c in compiled[10:]] == [4] * 5 and compiled[10][3] is not None   # (config, shape, epilogue, group)
    prov = json.loads(path.with_suffix(".json").read_text())
    assert prov["verified"] == {FUSED: True, "tuned": True, "llama.cpp": True} and prov["not_tuned"] == []
    assert prov["configs"]["128256x4096"]["how"] == "tuned" and prov["ops"] == 9
    assert prov["ratios"]["tuned_vs_cublas"] == pytest.approx(121 / 101)
    assert prov["ratios"]["fused_vs_cublas"] == pytest.approx(121 / 98)
    assert set(prov["fused_kernels"]) == {"qkv", "o", "gate_up", "down", "lm_head"}
    assert prov["fused_kernels"]["gate_up"].endswith(".o16.swiglu.g2") and prov["fused_kernels"]["o"].endswith(".o16.res")
    md = (tmp_path / f"{path.stem}-summary.md").read_text()
    assert "×1.198" in md and "round 2/2" in "\n".join(said)
    import pandas as pd

    s = pd.read_csv(path)
    assert len(s) == 3 * 2 * 4 and list(s.impl[:3]) == ["tuned"] * 3
    compiled.clear()
    path = run_decode_step("llama-3-8b", 2, str(TABLE), str(tmp_path / "pdl"), echo=said.append, rounds=2, replays=3,
                           pdl=True, between=("none", "pdl"))
    prov = json.loads(path.with_suffix(".json").read_text())
    assert len(compiled) > 15 and {"chain", "early"} <= {c[0].pdl[:5] for c in compiled}   # + the chain variants
    assert prov["pdl"] is True and prov["ratios"]["fused-pdl_vs_tuned"] == pytest.approx(101 / 96)
    assert set(prov["depths"]) == {"none", "pdl"} and set(prov["depths"]["pdl"]) == {"qkv", "o", "gate_up", "down",
                                                                                      "lm_head"}
    assert prov["gap_bytes"]["pdl"]["unfused"] > prov["gap_bytes"]["pdl"]["fused"] > 0
    assert set(pd.read_csv(path).impl) == {key_of(i, b) for i in ("tuned", FUSED, FUSED_PDL, "llama.cpp", "cublas-torch")
                                           for b in ("none", "pdl")}
    assert "chain search (pdl between the linears):" in said
    assert prov["checked"]["tuned@pdl"][3] == [True, 1e-6, ""] and "fused@pdl" not in prov["checked"]
    md = (tmp_path / "pdl" / f"{path.stem}-summary.md").read_text()
    assert "**Wrong after the replays** (first layer): llama.cpp@pdl op 2." in md
    monkeypatch.setattr(dec, "free_bytes", lambda: 10**9)
    with pytest.raises(UsageError, match="use fewer --layers"):
        run_decode_step("llama-3-8b", 2, str(TABLE), str(tmp_path / "x"), echo=said.append)
