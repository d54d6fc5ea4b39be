"""The Hugging Face end-to-end benchmark (gemvtune bench hf): the report from synthetic rows, the
kernel-name classifier, the ratio/median arithmetic, config handling and CLI errors on the CPU; a CPU
smoke run of the whole pipeline where transformers is installed; the whole bench on a GPU (marked gpu)."""

import csv
import json
import math
import subprocess
import sys

import pytest
from conftest import ROOT, on_committed_gpu, run_cli

from gemvtune.hf.model import file_name, with_layers
from gemvtune.hf.profile import classify_kernel, is_gemvtune_kernel, kernel_totals, per_step, top_kernels
from gemvtune.hf.report import (
    ROW_COLUMNS,
    SUMMARY_COLUMNS,
    explain_summary,
    mode_table,
    round_ratios,
    short_table,
    summary_markdown,
    timing_stats,
    token_agreement,
    write_hf_reports,
)

TABLE = ROOT / "results" / "nvidia-h200" / "table.json"

TINY = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
        "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 4, "vocab_size": 256,
        "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
        "_name_or_path": "test/Tiny-Llama"}

LLAMA_3_8B = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
              "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
              "num_hidden_layers": 32, "vocab_size": 128256, "max_position_embeddings": 8192,
              "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "bos_token_id": 128000, "eos_token_id": 128001,
              "hidden_act": "silu", "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


def _write(tmp_path, data, name="config.json"):
    p = tmp_path / name
    p.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return p


# ---- kernel names ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,kind", [
    ("gemv", "linear"), ("splitk_gemm", "linear"), ("zero_y", "linear"), ("reduce_splits", "linear"),
    ("sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize64x64x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
     "linear"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_f16_s16816gemm_relu_f16_64x64_32x6_tn_align8>(Params)", "linear"),
    ("nvjet_hsh_64x8_64x16_2x1_v_bz_splitK_TNT", "linear"),
    ("void gemv2T_kernel_val<int, int, __half, __half, float, 128, 16, 4, 4, false, false>(...)", "linear"),
    ("void gemvx::kernel<int, int, __half, __half, float, false, true, true, false, 7, false>(...)", "linear"),
    ("void cublasLt::splitKreduce_kernel<32, 16, int, float, __half, float, __half, true, false, false>(...)",
     "linear"),
    ("ampere_fp16_s16816gemm_fp16_64x64_ldg8_f2f_stages_64x5_tn", "linear"),
    ("triton_tem_fused_mm_0", "linear"), ("triton_tem_fused_addmm_3", "linear"),
    ("triton_poi_fused_linear_mul_silu_8", "other"), ("triton_red_fused_addmm_3", "other"),
    ("triton_poi_fused__scaled_dot_product_cudnn_attention__to_copy_3", "attention"),
    ("nvjet_sm90_hsh_128x8_64x12_4x1_v_bz_TNT", "linear"),
    ("fmha_cutlassF_f16_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<...>::Params)", "attention"),
    ("void pytorch_flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4>>(Flash_fwd_params)",
     "attention"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128_4x1x1_kernel0_0", "attention"),
    ("void at::native::elementwise_kernel<128, 2, ...>(int, ...)", "other"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, ...>>(...)", "other"),
    ("triton_poi_fused_add_mul_0", "other"),
    ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_1", "other"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float>(...)", "other"),
])
def test_classify_kernel(name, kind):
    assert classify_kernel(name) == kind


def test_gemvtune_kernel_names_are_exact():
    assert all(is_gemvtune_kernel(n) for n in ("gemv", "splitk_gemm", "zero_y", "reduce_splits", "void gemv(...)"))
    # every template family's kernel: the tensor-core ones and the FP8 ones (the H200's FP8 profile of 2026-12-05
    # counted mma_fp8 as "other" before: 1.6 ms per token of linear work)
    for n in ("mma_gemv", "ring_gemv", "gemv_fp8", "mma_fp8"):
        assert is_gemvtune_kernel(n) and classify_kernel(n) == "linear", n
    assert not any(is_gemvtune_kernel(n) for n in ("gemv2T_kernel_val<int>", "gemvx::kernel", "sm90_xmma_gemm",
                                                   "reduce_kernel", ""))


def _ev(name, dur, cat="kernel", ph="X"):
    return {"ph": ph, "cat": cat, "name": name, "dur": dur, "ts": 0}


def _trace(steps, gemvtune=False):
    """A prefill (one of each, longer) plus `steps` decode steps of a fake 1-layer model."""
    lin = "gemv" if gemvtune else "sm90_xmma_gemm_f16f16"
    ev = [_ev(lin, 100.0), _ev("flash_fwd_kernel", 50.0), _ev("elementwise_kernel", 20.0)]   # prefill
    for _ in range(steps):
        ev += [_ev(lin, 30.0), _ev(lin, 10.0), _ev("fmha_cutlassF_f16", 5.0), _ev("elementwise_kernel", 4.0),
               _ev("triton_poi_fused_add_0", 1.0), _ev("Memcpy DtoD", 2.0, cat="gpu_memcpy"),
               _ev("Memset (Device)", 0.5, cat="gpu_memset")]
    ev += [_ev("ProfilerStep", 1e6, cat="gpu_user_annotation"), _ev("aten::mm", 1e6, cat="cpu_op"),
           _ev("cudaLaunchKernel", 1e6, cat="cuda_runtime"), _ev("gemv", 1e6, ph="i"), {"ph": "X"}, "junk",
           _ev("gemv", "n/a")]
    return ev


def test_kernel_totals_and_per_step():
    full, base = kernel_totals(_trace(7, gemvtune=True)), kernel_totals(_trace(0, gemvtune=True))
    assert full["linear_us"] == pytest.approx(100 + 7 * 40) and full["attention_us"] == pytest.approx(50 + 7 * 5)
    assert full["other_us"] == pytest.approx(20 + 7 * 5) and full["memops_us"] == pytest.approx(7 * 2.5)
    assert full["kernel_us"] == pytest.approx(full["linear_us"] + full["attention_us"] + full["other_us"])
    assert full["gemvtune_n"] == 1 + 14 and full["kernel_n"] == 3 + 7 * 5
    s = per_step(full, base, 7)
    assert s["linear_us"] == pytest.approx(40.0) and s["attention_us"] == pytest.approx(5.0)
    assert s["other_us"] == pytest.approx(5.0) and s["memops_us"] == pytest.approx(2.5)
    assert s["kernel_us"] == pytest.approx(50.0) and s["linear_pct"] == pytest.approx(80.0)
    assert s["gemvtune_n"] == pytest.approx(2.0) and s["kernel_n"] == pytest.approx(5.0) and s["steps"] == 7
    top = top_kernels(full, base, 7, n=2)
    assert [t["name"] for t in top] == ["gemv", "fmha_cutlassF_f16"] and top[0]["us"] == pytest.approx(40.0)
    assert top[0]["kind"] == "linear" and top[1]["kind"] == "attention" and top[0]["n"] == pytest.approx(2.0)
    stock = per_step(kernel_totals(_trace(7)), kernel_totals(_trace(0)), 7)
    assert stock["linear_us"] == pytest.approx(40.0) and stock["gemvtune_n"] == 0
    empty = per_step(kernel_totals([]), kernel_totals([]), 3)
    assert empty["kernel_us"] == 0 and math.isnan(empty["linear_pct"])
    with pytest.raises(ValueError):
        per_step(full, base, 0)


def test_kernel_totals_old_capitalized_category():
    t = kernel_totals([_ev("gemv", 3.0, cat="Kernel"), _ev("Memcpy HtoD", 1.0, cat="Memcpy")])
    assert t["linear_us"] == 3.0 and t["memops_us"] == 0 and t["kernel_n"] == 1


# ---- arithmetic --------------------------------------------------------------------------------------

@pytest.mark.parametrize("a,b,frac,first", [
    ([1, 2, 3, 4], [1, 2, 3, 4], 1.0, None), ([1, 2, 3, 4], [1, 2, 9, 4], 0.75, 2), ([5, 2], [6, 3], 0.0, 0),
    ([1, 2, 3], [1, 2], 2 / 3, 2), ([], [1], 0.0, 0),
])
def test_token_agreement(a, b, frac, first):
    r = token_agreement(a, b)
    assert r["fraction"] == pytest.approx(frac) and r["first_divergence"] == first and r["n"] == max(len(a), len(b))


def test_token_agreement_empty():
    r = token_agreement([], [])
    assert math.isnan(r["fraction"]) and r["first_divergence"] is None and r["n"] == 0


def _rows(T=128):
    """3 rounds; eager: stock 2.0/2.2/2.1 s, gemvtune 1.6/1.5/1.7 s; compiled: stock 0.40 s each, gemvtune
    0.32 then 0.36 then a failure. The timing thread's CPU time is 0.9 of the wall time, for stock 0.1 s more."""
    secs = {("stock", "eager"): [2.0, 2.2, 2.1], ("gemvtune", "eager"): [1.6, 1.5, 1.7],
            ("stock", "compiled"): [0.4, 0.4, 0.4], ("gemvtune", "compiled"): [0.32, 0.36, None]}
    rows = []
    for (impl, mode), ss in secs.items():
        for r, s in enumerate(ss):
            rows.append({"model": "m", "layers": 2, "impl": impl, "mode": mode, "round": r, "position": 0,
                         "tokens": T, "prompt_tokens": 16, "seconds": math.nan if s is None else s,
                         "cpu_ms_per_token": math.nan if s is None else 1e3 * (0.9 * s + 0.1 * (impl == "stock")) / T,
                         "status": "ok" if s is not None else "error",
                         "error": "" if s is not None else "RuntimeError: boom", "scheme": "interleaved"})
    return rows


def test_timing_stats_median_and_reciprocals():
    st = timing_stats(_rows(), "stock", "eager")
    assert st["tokens_per_s"] == pytest.approx(128 / 2.1) and st["ms_per_token"] == pytest.approx(2100 / 128)
    assert st["tokens_per_s_min"] == pytest.approx(128 / 2.2) and st["tokens_per_s_max"] == pytest.approx(128 / 2.0)
    assert st["rounds"] == 3 and st["error"] == ""
    assert st["cpu_ms_per_token"] == pytest.approx(1e3 * (0.9 * 2.1 + 0.1) / 128)
    g = timing_stats(_rows(), "gemvtune", "compiled")          # the failed round is left out, and named
    assert g["rounds"] == 2 and g["tokens_per_s"] == pytest.approx(128 / 0.34) and "boom" in g["error"]
    none = timing_stats(_rows(), "stock", "nope")
    assert none["rounds"] == 0 and math.isnan(none["tokens_per_s"])


def test_mode_table_ratio():
    t = {x["mode"]: x for x in mode_table(_rows())}
    e, c = t["eager"], t["compiled"]
    assert e["ratio"] == pytest.approx((128 / 1.6) / (128 / 2.1)) and e["ratio"] == pytest.approx(2.1 / 1.6)
    assert e["stock_ms_per_token"] == pytest.approx(2100 / 128) and e["gemvtune_ms_per_token"] == pytest.approx(1600 / 128)
    assert sorted(round_ratios(_rows(), "eager")) == pytest.approx(sorted([2.0 / 1.6, 2.2 / 1.5, 2.1 / 1.7]))
    assert e["round_ratio_median"] == pytest.approx(2.0 / 1.6) and e["round_ratio_min"] == pytest.approx(2.1 / 1.7)
    assert e["round_ratio_max"] == pytest.approx(2.2 / 1.5)
    assert e["gemvtune_cpu_ms_per_token"] == pytest.approx(1e3 * 0.9 * 1.6 / 128)
    assert c["gemvtune_cpu_ms_per_token"] == pytest.approx(1e3 * 0.9 * 0.34 / 128)   # the failed round left out
    old = mode_table([{k: v for k, v in r.items() if k != "cpu_ms_per_token"} for r in _rows()])
    assert math.isnan(old[0]["stock_cpu_ms_per_token"]) and old[0]["ratio"] == pytest.approx(e["ratio"])
    assert c["ratio"] == pytest.approx(0.4 / 0.34) and c["gemvtune_rounds"] == 2 and "boom" in c["gemvtune_error"]
    assert round_ratios(_rows(), "compiled") == pytest.approx([0.4 / 0.32, 0.4 / 0.36])
    assert set(SUMMARY_COLUMNS) <= set(e)
    failed = mode_table([r for r in _rows() if r["impl"] == "stock"])
    assert all(math.isnan(x["ratio"]) for x in failed)
    text = short_table(mode_table(_rows()))
    assert "eager" in text and "compiled" in text and f"{2.1 / 1.6:.3f}" in text and f"{2.0 / 1.6:.3f}" in text
    assert "failed" in short_table(failed)


def test_explain_summary_groups():
    rows = [{"name": f"model.layers.{i}.self_attn.q_proj", "M": 4096, "d": 4096, "bias": False, "route": "tuned",
             "why": "tuned for 4096x4096x1", "tuned_us": 11.0, "cublas_us": 13.0} for i in range(2)]
    rows += [{"name": "lm_head", "M": 128256, "d": 4096, "bias": False, "route": "cublas", "why": "cuBLAS faster",
              "tuned_us": 270.0, "cublas_us": 250.0}]
    s = explain_summary(rows)
    assert s["total"] == 3 and s["routes"] == {"tuned": 2, "cublas": 1}
    assert s["groups"][0]["layers"] == 2 and s["groups"][0]["example"] == "model.layers.0.self_attn.q_proj"
    assert explain_summary([]) == {"total": 0, "routes": {}, "groups": []}


# ---- the report files --------------------------------------------------------------------------------

def _result(rows):
    full, base = kernel_totals(_trace(7, True)), kernel_totals(_trace(0, True))
    prof = {"per_step": per_step(full, base, 7), "top": top_kernels(full, base, 7), "tokens": 8}
    ex = [{"name": "lm_head", "M": 128256, "d": 4096, "bias": False, "route": "tuned", "why": "in the table",
           "tuned_us": 270.0, "cublas_us": 250.0}]
    return {"model": "llama-3-8b", "config_path": "c.json", "model_type": "llama", "architecture": "LlamaForCausalLM",
            "layers": 2, "config_layers": 32, "dtype": "float16", "seed": 0, "tokens": 128, "prompt_tokens": 16,
            "rounds": 3, "swapped": 15, "table": "t.json", "scheme": "interleaved", "scheme_note": "why so",
            "compile": {"stock": "1 graph", "gemvtune": "2 graphs"}, "recompiles_during_timing": 0,
            "profile": {"stock": {"eager": prof, "compiled": {"error": "RuntimeError: CUPTI"}}, "gemvtune": {"eager": prof}},
            "agreement": {"eager": {**token_agreement([1, 2, 3], [1, 2, 4]), "stock_repeatable": True},
                          "compiled": {"error": "no successful generate of both implementations"}},
            "logits": {"prefill_rel": 1.5e-3, "decode_rel": 2.5e-3, "decode_argmax_equal": True},
            "explain": {"rows": ex, "summary": explain_summary(ex)}, "notes": ["a note"],
            "env": {"gpu": "NVIDIA H200", "driver": "580.1", "cuda": "13.0", "torch": "2.11.0",
                    "transformers": "5.17.0", "gemvtune": "0.1.0", "python": "3.12.3"},
            "date": "2099-01-01T00:00:00Z", "command": "gemvtune bench --hf-config c.json --layers 2"}


def test_write_hf_reports(tmp_path):
    rows = _rows()
    stem = "hf-llama-3-8b-L2-20990101-000000"
    paths = write_hf_reports(rows, _result(rows), tmp_path, stem)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted([f"{stem}.csv", f"{stem}-summary.csv", f"{stem}-summary.md", f"{stem}-provenance.json",
                            f"{stem}.png"])
    with open(paths["csv"]) as f:
        got = list(csv.DictReader(f))
    assert len(got) == 12 and list(got[0])[:len(ROW_COLUMNS)] == list(ROW_COLUMNS)
    assert {(r["impl"], r["mode"]) for r in got} == {(i, m) for i in ("stock", "gemvtune") for m in ("eager", "compiled")}
    with open(paths["summary_csv"]) as f:
        summ = {r["mode"]: r for r in csv.DictReader(f)}
    assert float(summ["eager"]["ratio"]) == pytest.approx(2.1 / 1.6, rel=1e-5)
    md = paths["summary_md"].read_text()
    assert "| mode | stock tok/s | gemvtune tok/s | ratio | stock ms/token | gemvtune ms/token |" in md
    assert f"| eager | {128 / 2.1:.1f} | {128 / 1.6:.1f} | {2.1 / 1.6:.3f} | {2100 / 128:.2f} | {1600 / 128:.2f} |" in md
    cpu = f"{1e3 * (0.9 * 2.1 + 0.1) / 128:.2f} / {1e3 * 0.9 * 1.6 / 128:.2f}"
    assert f"| {2.0 / 1.6:.3f} ({2.1 / 1.7:.3f}..{2.2 / 1.5:.3f}) | {cpu} |" in md
    assert "| compiled |" in md and "**compiled gemvtune failed** in some rounds: RuntimeError: boom" in md
    assert "| gemvtune | eager | 40.0 | 50.0 | 80.0 |" in md and "failed: RuntimeError: CUPTI" in md
    assert "66.7% of 3 positions equal; first divergence at new token 2." in md
    assert "prefill (all 16 positions) 1.50e-03, first decode step 2.50e-03" in md
    assert "1 swapped layers: 1 tuned." in md and "| 128256×4096 | no | tuned | 1 | 270.00 | 250.00 |" in md
    assert "NVIDIA H200 (driver 580.1" in md and "transformers 5.17.0" in md and "`gemvtune bench --hf-config" in md
    assert "scheme **interleaved**" in md and "a note" in md and "nan" not in md.lower()
    prov = json.loads(paths["provenance"].read_text())
    assert prov["scheme"] == "interleaved" and prov["env"]["gpu"] == "NVIDIA H200" and prov["command"].startswith("gemvtune")
    assert [s["mode"] for s in prov["summary"]] == ["eager", "compiled"] and prov["files"]["png"] == f"{stem}.png"
    png = paths["png"].read_bytes()
    assert png[:4] == b"\x89PNG" and len(png) > 5000


def test_markdown_with_nothing_measured():
    md = summary_markdown({"model": "x"}, mode_table([]))
    assert "| eager | – | – | – |" in md and "(not profiled)" in md


# ---- config handling ---------------------------------------------------------------------------------

@pytest.mark.parametrize("text,name", [("meta-llama/Meta-Llama-3-8B", "meta-llama-3-8b"), ("Qwen/Qwen2.5-7B-Instruct",
                                       "qwen2.5-7b-instruct"), ("my model!", "my-model"), ("", "model"),
                                       ("/abs/path/Llama_3/", "llama-3"), ("...", "model")])
def test_file_name(text, name):
    assert file_name(text) == name


def test_with_layers_cuts_and_repeats_per_layer_lists():
    d = {"num_hidden_layers": 4, "layer_types": ["sliding", "full", "sliding", "full"], "no_rope_layers": [1, 1, 1, 0],
         "eos_token_id": [1, 2, 3, 4], "other": 5}
    cut, adj = with_layers(d, "num_hidden_layers", 4, 2)
    assert cut["num_hidden_layers"] == 2 and cut["layer_types"] == ["sliding", "full"] and cut["no_rope_layers"] == [1, 1]
    assert cut["eos_token_id"] == [1, 2, 3, 4] and sorted(adj) == ["layer_types", "no_rope_layers"]
    grown, _ = with_layers(d, "num_hidden_layers", 4, 6)
    assert grown["layer_types"] == ["sliding", "full"] * 3 and d["num_hidden_layers"] == 4      # the input is untouched
    gpt2, _ = with_layers({"n_layer": 12}, "n_layer", 12, 2)
    assert gpt2 == {"n_layer": 2}


def test_read_config_file_and_folder(tmp_path):
    from gemvtune.hf.model import read_config

    (tmp_path / "Tiny").mkdir()
    _write(tmp_path / "Tiny", TINY)
    for p in (tmp_path / "Tiny", tmp_path / "Tiny" / "config.json"):
        fields, name, f = read_config(p)
        assert fields["hidden_size"] == 64 and name == "tiny-llama" and f.name == "config.json"
    no_name = {k: v for k, v in TINY.items() if k != "_name_or_path"}
    _write(tmp_path / "Tiny", no_name)
    assert read_config(tmp_path / "Tiny")[1] == "tiny"


def test_build_config_overrides_layers():
    pytest.importorskip("transformers")
    from gemvtune.hf.model import build_config

    cfg, info = build_config(dict(LLAMA_3_8B, auto_map={"AutoModel": "x.Y"}), 2)
    assert cfg.num_hidden_layers == 2 and info["config_layers"] == 32 and info["layers"] == 2
    assert cfg.hidden_size == 4096 and cfg.num_key_value_heads == 8 and info["dropped_fields"] == ["auto_map"]
    cfg, info = build_config(LLAMA_3_8B, None)
    assert cfg.num_hidden_layers == 32 and info["adjusted_fields"] == []
    from gemvtune import UsageError

    with pytest.raises(UsageError, match="does not know model_type 'no-such-model'"):
        build_config(dict(LLAMA_3_8B, model_type="no-such-model"), 2)


# ---- the command line --------------------------------------------------------------------------------

def _one_line_exit_2(r, needle):
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in r.stderr, r.stderr


def test_cli_without_transformers_one_line_exit_2(tmp_path):
    cfg = _write(tmp_path, TINY)
    code = ("import sys; sys.modules['transformers'] = None\n"
            "from gemvtune.cli.main import main\n"
            f"main(['bench', 'hf', {str(cfg)!r}, '--layers', '2', '--out', {str(tmp_path / 'out')!r}])\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    _one_line_exit_2(r, "pip install 'gemvtune[hf]'")
    assert "transformers" in r.stderr and not (tmp_path / "out").exists()


CLI_CASES = [
    ("not JSON", "{", ["--layers", "2"], "not valid JSON"),
    ("not an object", "[1, 2]", [], "JSON object"),
    ("no model_type", {k: v for k, v in TINY.items() if k != "model_type"}, [], "model_type"),
    ("layers zero", TINY, ["--layers", "0"], "--layers must be an integer >= 1"),
    ("layers text", TINY, ["--layers", "two"], "--layers must be an integer >= 1"),
    ("tokens zero", TINY, ["--tokens", "0"], "--tokens must be an integer >= 1"),
    ("prompt tokens", TINY, ["--prompt-tokens", "-3"], "--prompt-tokens must be an integer >= 1"),
    ("with --model", TINY, ["--model", "llama-3-8b"], "No such option '--model'"),
    ("with --batch", TINY, ["--batch", "2"], "No such option '--batch'"),
    ("with --configs", TINY, ["--configs", "llama"], "No such option '--configs'"),
]


@pytest.mark.parametrize("what,config,args,needle", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_cli_bad_input_one_line_exit_2(tmp_path, what, config, args, needle):
    cfg = _write(tmp_path, config)
    r = run_cli("bench", "hf", str(cfg), *args, "--out", str(tmp_path / "out"))
    _one_line_exit_2(r, needle)
    assert not (tmp_path / "out").exists()


OLD = "gemvtune: 'bench --hf-config' is deprecated; use 'gemvtune bench hf' (removed in the next release)"
OLD_CASES = [   # the old spelling, bench --hf-config PATH: what it refused, with the same words
    ("with --model", ["--model", "llama-3-8b"], "drop --model"),
    ("with --shape and --batch", ["--shape", "64x64", "--batch", "2"], "drop --shape, --batch"),
    ("with --configs", ["--configs", "llama"], "drop --configs"),
    ("layers zero", ["--layers", "0"], "--layers must be an integer >= 1"),
]


@pytest.mark.parametrize("what,args,needle", OLD_CASES, ids=[c[0] for c in OLD_CASES])
def test_old_spelling_deprecated_refuses_as_before(tmp_path, what, args, needle):
    cfg = _write(tmp_path, TINY)
    r = run_cli("bench", "--hf-config", str(cfg), *args, "--out", str(tmp_path / "out"))
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and lines[0] == OLD and len(lines) == 2 and needle in lines[1], r.stderr
    assert not (tmp_path / "out").exists()


def test_cli_missing_config_and_hf_options_alone(tmp_path):
    _one_line_exit_2(run_cli("bench", "hf", str(tmp_path / "none.json")), "does not exist")
    _one_line_exit_2(run_cli("bench", "hf", str(tmp_path)), "no config.json")
    _one_line_exit_2(run_cli("bench", "hf"), "Missing argument 'CONFIG'")
    _one_line_exit_2(run_cli("bench", "kernels", "--model", "llama-3-8b", "--tokens", "5"), "No such option '--tokens'")
    for args, needle in ((["--model", "llama-3-8b", "--tokens", "5"], "--tokens needs --hf-config"),   # (old spelling)
                         (["--prompt-tokens", "5"], "--prompt-tokens needs --hf-config"),
                         (["--hf-config", str(tmp_path / "none.json")], "does not exist")):
        r = run_cli("bench", *args)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert r.returncode == 2 and len(lines) == 2 and "is deprecated" in lines[0] and needle in lines[1], r.stderr


@pytest.mark.slow  # builds a transformers model in a CLI subprocess
def test_cli_unknown_model_type_and_missing_table(tmp_path):
    pytest.importorskip("transformers")
    cfg = _write(tmp_path, dict(TINY, model_type="no-such-model"))
    _one_line_exit_2(run_cli("bench", "hf", str(cfg)), "does not know model_type 'no-such-model'")
    cfg = _write(tmp_path, TINY)
    _one_line_exit_2(run_cli("bench", "hf", str(cfg), "--table", str(tmp_path / "none.json")), "does not exist")


def test_grouped_variants_keep_their_groups_across_switches():
    """Variants(group=True): restore_linears removes the groups, the swapped variant gets the same LinearGroup
    objects back each time it is put in place (torch.compile's guards see one fixed set); stock has none."""
    pytest.importorskip("transformers")
    import torch

    from gemvtune.hf.check import explain_rows
    from gemvtune.hf.model import Variants, build_config, build_model
    from gemvtune.runtime.table import load_table

    cfg, _ = build_config(dict(TINY), 2)
    model = build_model(cfg, "float16", "cpu")
    keys = {k: v.clone() for k, v in model.state_dict().items()}
    stock_mlp = model.model.layers[0].mlp
    v = Variants(model, load_table(TABLE), group=True)
    assert v.groups == 2 * 2 and len(v.names) == 2 * 7 + 1                # q/k/v and gate/up per layer
    assert v.mlps == 2                                                     # a SwiGLU MLP per layer
    layer = model.model.layers[0]
    attn, mlp = layer.self_attn, layer.mlp
    assert type(attn.q_proj) is torch.nn.Linear and v.current == "stock" and mlp is stock_mlp
    v.use("gemvtune")
    g, fused = attn.q_proj._sibling, layer.mlp
    assert g is not None and g is attn.k_proj._sibling is attn.v_proj._sibling and len(g.members) == 3
    assert type(fused).__name__ == "GemvSwiGLUMLP" and fused.original is stock_mlp
    assert fused.gate_proj._sibling is fused.up_proj._sibling is not None and fused.down_proj._sibling is None
    rows = explain_rows(model)
    assert len(rows["groups"]) == 4 + 2 and sum(rows["summary"]["sibling_routes"].values()) == 4, rows.get("error")
    assert sum(rows["summary"]["swiglu_routes"].values()) == 2 and "residual" in rows["notes"][0]
    v.use("stock")
    assert layer.mlp is stock_mlp and type(stock_mlp.gate_proj) is torch.nn.Linear
    v.use("gemvtune")
    assert attn.q_proj._sibling is g and g.members == (attn.q_proj, attn.k_proj, attn.v_proj)
    assert layer.mlp is fused and fused.gate_proj._sibling.members == (fused.gate_proj, fused.up_proj)
    assert model.state_dict().keys() == keys.keys() and all(torch.equal(model.state_dict()[k], t)
                                                            for k, t in keys.items())
    plain = Variants(build_model(cfg, "float16", "cpu"), load_table(TABLE))
    plain.use("gemvtune")
    assert plain.groups == 0 and plain.model.model.layers[0].self_attn.q_proj._sibling is None


def test_help_lists_hf_options():
    r = run_cli("bench", "hf", "--help")
    assert r.returncode == 0 and "--group" in r.stdout
    assert r.returncode == 0 and "CONFIG" in r.stdout and "--tokens" in r.stdout and "--prompt-tokens" in r.stdout
    assert "--shape" not in r.stdout and "--configs" not in r.stdout     # only its own options


# ---- the whole pipeline ------------------------------------------------------------------------------

@pytest.mark.slow  # builds and runs a transformers model on the CPU
def test_whole_bench_on_cpu(tmp_path):
    """Every step but the profile on a tiny random Llama on the CPU (GemvLinear falls back to F.linear
    there, and generate does not compile off CUDA): the orchestration, not the speed."""
    pytest.importorskip("transformers")
    pytest.importorskip("torch")
    from gemvtune.hf.bench import run_hf_bench

    cfg = _write(tmp_path, TINY)
    lines = []
    paths = run_hf_bench(str(cfg), layers=2, tokens=4, prompt_tokens=3, table_path=str(TABLE),
                         out_dir=str(tmp_path / "out"), rounds=2, echo=lines.append, device="cpu", command="test")
    assert set(paths) == {"csv", "summary_csv", "summary_md", "provenance", "png"}
    assert all(p.exists() and p.stat().st_size > 0 for p in paths.values())
    assert paths["csv"].name.startswith("hf-tiny-llama-L2-") and paths["csv"].parent == tmp_path / "out"
    with open(paths["csv"]) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 2 * 2 * 2 and all(r["status"] == "ok" for r in rows), rows
    prov = json.loads(paths["provenance"].read_text())
    assert prov["swapped"] == 2 * 7 + 1 and prov["layers"] == 2 and prov["config_layers"] == 4
    assert prov["scheme"] == "interleaved" and prov["logits"]["prefill_rel"] == 0.0    # F.linear both ways
    assert prov["agreement"]["eager"]["fraction"] == 1.0
    md = paths["summary_md"].read_text()
    assert "| eager |" in md and "| compiled |" in md and "stock tok/s" in lines[-1]


@pytest.mark.slow   # the GPU suite's second tier: -m "gpu and slow" (docs/testing.md)
@pytest.mark.gpu
def test_whole_bench_on_gpu(tmp_path):
    pytest.importorskip("transformers")
    if not TABLE.exists():
        pytest.skip(f"no table at {TABLE}")
    cfg = _write(tmp_path, LLAMA_3_8B)
    out = tmp_path / "out"
    r = run_cli("bench", "hf", str(cfg), "--layers", "2", "--tokens", "8", "--rounds", "1", "--group",
                "--table", str(TABLE), "--out", str(out), env={"PYTHONUNBUFFERED": "1"})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    md_files = list(out.glob("hf-*-L2-group-*-summary.md"))
    assert len(md_files) == 1, sorted(p.name for p in out.iterdir())
    stem = md_files[0].name[: -len("-summary.md")]
    for suffix in (".csv", "-summary.csv", "-provenance.json", ".png"):
        assert (out / f"{stem}{suffix}").stat().st_size > 0, suffix
    md = md_files[0].read_text()
    for mode in ("eager", "compiled"):
        line = next(ln for ln in md.splitlines() if ln.startswith(f"| {mode} |"))
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert all(c not in ("–", "") for c in cells[1:6]), line          # both implementations measured
    prov = json.loads((out / f"{stem}-provenance.json").read_text())
    assert prov["env"]["gpu"] and prov["swapped"] == 2 * 7 + 1 and prov["group"] and prov["groups"] == 2 * 2
    assert prov["swiglu_mlps"] == 2                                      # each layer's MLP fused (SwiGLU)
    assert len(prov["explain"]["groups"]) == 4 + 2, prov["explain"]      # explain lists each group, MLP and route
    # on the committed table's GPU its kernels run; on another GPU model none does (gemvtune.runtime.tablegpu)
    ran = prov["profile"]["gemvtune"]["eager"].get("per_step", {}).get("gemvtune_n", 0) > 0
    assert ran == on_committed_gpu(), prov["profile"]
    assert prov["profile"]["stock"]["eager"]["per_step"]["gemvtune_n"] == 0
    assert "mode" in r.stdout.splitlines()[-3] and "compiled" in r.stdout.splitlines()[-1]


@pytest.mark.slow  # builds and runs a transformers model on the CPU
def test_whole_fp8_bench_on_cpu(tmp_path):
    """--weights: gemvtune's variant is the model quantised to FP8, stock the 16-bit model; the FP8 model's first
    decode step is checked against a float64 copy of its dequantised weights (on the CPU every FP8 layer runs
    dequantize + F.linear, so the kernels' error is the fallback's: the check holds)."""
    pytest.importorskip("transformers")
    pytest.importorskip("torch")
    from gemvtune.hf.bench import run_hf_bench

    cfg = _write(tmp_path, TINY)
    lines = []
    paths = run_hf_bench(str(cfg), layers=2, tokens=4, prompt_tokens=3, table_path=str(TABLE),
                         out_dir=str(tmp_path / "out"), rounds=1, echo=lines.append, device="cpu", command="test",
                         weights="e4m3-row", profile=False)
    assert paths["csv"].name.startswith("hf-tiny-llama-L2-e4m3-row-")
    prov = json.loads(paths["provenance"].read_text())
    assert prov["weights"] == "e4m3-row" and prov["swapped"] == 2 * 7 + 1
    fp8 = prov["fp8"]
    assert "error" not in fp8, fp8
    assert fp8["held"] and fp8["kernel_rel"] == fp8["fallback_rel"] and 0 < fp8["fallback_rel"] < 1e-2, fp8
    mem = prov["fp8_memory"]
    assert 0 < mem["after"] < 0.6 * mem["before"]     # 1 byte per weight and a float32 scale per row (d = 64)
    assert prov["logits"]["decode_rel"] > 0          # FP8 against the 16-bit model: the quantisation shows
    md = paths["summary_md"].read_text()
    assert "FP8 first-step logits vs float64 of the dequantised model" in md and ": held" in md
    assert any(line.startswith("quantize_fp8: 15 linear layers in FP8") for line in lines), lines


@pytest.mark.slow   # the GPU suite's second tier: -m "gpu and slow" (docs/testing.md)
@pytest.mark.gpu
def test_whole_fp8_bench_on_gpu(tmp_path):
    pytest.importorskip("transformers")
    if not TABLE.exists():
        pytest.skip(f"no table at {TABLE}")
    cfg = _write(tmp_path, LLAMA_3_8B)
    out = tmp_path / "out"
    r = run_cli("bench", "hf", str(cfg), "--layers", "2", "--tokens", "8", "--rounds", "1", "--weights", "e4m3-row",
                "--table", str(TABLE), "--out", str(out), env={"PYTHONUNBUFFERED": "1"})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    prov = json.loads(next(out.glob("hf-*-L2-e4m3-row-*-provenance.json")).read_text())
    assert prov["fp8"].get("held"), prov["fp8"]
    assert prov["agreement"]["eager"]["n"] > 0
