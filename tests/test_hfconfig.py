"""Hugging Face config.json -> linear-layer shapes (gemvtune.kernels.hfconfig): the packaged presets, unfused as
transformers builds them and fused as engines run them; bad files; search --hf-config on the CLI."""

import dataclasses
import importlib.resources
import json
import re
import subprocess
import sys

import pytest
from conftest import ROOT, run_cli

from gemvtune import MODELS, Shape, UsageError, model_shapes
from gemvtune.kernels.hfconfig import PRESET_SOURCES, PRESETS, HFModel, Linear, preset_path, read_hf_config, read_preset

HF = ROOT / "gemvtune" / "kernels" / "hf_configs"


def _layers(model, fused=False):
    return [(x.name, x.M, x.d, x.bias, x.per_layer) for x in model.linear_layers(fused)]


def test_llama_3_8b():
    m = read_hf_config(HF / "llama-3-8b.json")
    assert (m.name, m.model_type, m.head_dim, m.num_hidden_layers, m.tie_word_embeddings) == \
        ("llama-3-8b", "llama", 128, 32, False)
    assert _layers(m) == [
        ("q_proj", 4096, 4096, False, True), ("k_proj", 1024, 4096, False, True), ("v_proj", 1024, 4096, False, True),
        ("o_proj", 4096, 4096, False, True), ("gate_proj", 14336, 4096, False, True),
        ("up_proj", 14336, 4096, False, True), ("down_proj", 4096, 14336, False, True),
        ("lm_head", 128256, 4096, False, False)]
    assert _layers(m, fused=True) == [
        ("qkv_proj", 6144, 4096, False, True), ("o_proj", 4096, 4096, False, True),
        ("gate_up_proj", 28672, 4096, False, True), ("down_proj", 4096, 14336, False, True),
        ("lm_head", 128256, 4096, False, False)]
    assert m.shapes() == [Shape(4096, 4096), Shape(1024, 4096), Shape(14336, 4096), Shape(4096, 14336),
                          Shape(128256, 4096)]
    assert m.shapes(fused=True, n=4) == [Shape(6144, 4096, 4), Shape(4096, 4096, 4), Shape(28672, 4096, 4),
                                         Shape(4096, 14336, 4), Shape(128256, 4096, 4)]


def test_qwen2_5_7b_has_qkv_bias_only():
    m = read_hf_config(HF / "qwen2.5-7b.json")
    assert (m.model_type, m.num_attention_heads, m.num_key_value_heads, m.head_dim, m.num_hidden_layers) == \
        ("qwen2", 28, 4, 128, 28)
    assert not m.attention_bias and m.qkv_bias and not m.o_bias and not m.ffn_bias and not m.tie_word_embeddings
    assert _layers(m) == [
        ("q_proj", 3584, 3584, True, True), ("k_proj", 512, 3584, True, True), ("v_proj", 512, 3584, True, True),
        ("o_proj", 3584, 3584, False, True), ("gate_proj", 18944, 3584, False, True),
        ("up_proj", 18944, 3584, False, True), ("down_proj", 3584, 18944, False, True),
        ("lm_head", 152064, 3584, False, False)]
    assert _layers(m, fused=True) == [
        ("qkv_proj", 4608, 3584, True, True), ("o_proj", 3584, 3584, False, True),
        ("gate_up_proj", 37888, 3584, False, True), ("down_proj", 3584, 18944, False, True),
        ("lm_head", 152064, 3584, False, False)]


def test_mistral_7b():
    m = read_hf_config(HF / "mistral-7b.json")
    assert (m.model_type, m.head_dim, m.vocab_size, m.num_hidden_layers) == ("mistral", 128, 32000, 32)
    assert _layers(m) == [
        ("q_proj", 4096, 4096, False, True), ("k_proj", 1024, 4096, False, True), ("v_proj", 1024, 4096, False, True),
        ("o_proj", 4096, 4096, False, True), ("gate_proj", 14336, 4096, False, True),
        ("up_proj", 14336, 4096, False, True), ("down_proj", 4096, 14336, False, True),
        ("lm_head", 32000, 4096, False, False)]
    assert [(x.name, x.M, x.d) for x in m.linear_layers(fused=True)] == [
        ("qkv_proj", 6144, 4096), ("o_proj", 4096, 4096), ("gate_up_proj", 28672, 4096), ("down_proj", 4096, 14336),
        ("lm_head", 32000, 4096)]


def test_nemo_head_dim_is_not_hidden_over_heads():
    m = read_preset("mistral-nemo-12b")
    assert m.head_dim == 128 and m.hidden_size == 5120            # 32 heads x 128 = 4096 != 5120
    layers = {x.name: (x.M, x.d) for x in m.linear_layers()}
    assert layers["q_proj"] == (4096, 5120) and layers["o_proj"] == (5120, 4096) and layers["k_proj"] == (1024, 5120)
    assert {x.name: (x.M, x.d) for x in m.linear_layers(True)}["qkv_proj"] == (6144, 5120)


def test_llama_3_70b():
    m = read_preset("llama-3-70b")
    assert {x.name: (x.M, x.d) for x in m.linear_layers()} == {
        "q_proj": (8192, 8192), "k_proj": (1024, 8192), "v_proj": (1024, 8192), "o_proj": (8192, 8192),
        "gate_proj": (28672, 8192), "up_proj": (28672, 8192), "down_proj": (8192, 28672), "lm_head": (128256, 8192)}
    assert m.num_hidden_layers == 80


def test_a_folder_and_its_name(tmp_path):
    d = tmp_path / "Meta-Llama-3-8B"
    d.mkdir()
    (d / "config.json").write_text((HF / "llama-3-8b.json").read_text())
    m = read_hf_config(d)
    assert m.name == "Meta-Llama-3-8B" and m.shapes() == read_preset("llama-3-8b").shapes()
    assert read_hf_config(str(d / "config.json")).name == "Meta-Llama-3-8B"
    data = json.loads((HF / "qwen2.5-7b.json").read_text())
    (d / "config.json").write_text(json.dumps({**data, "_name_or_path": "Qwen/Qwen2.5-7B-Instruct"}))
    assert read_hf_config(d).name == "Qwen/Qwen2.5-7B-Instruct"


def test_defaults_and_flags(tmp_path):
    base = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
            "vocab_size": 100, "num_hidden_layers": 2}
    m = HFModel.from_dict(base)
    assert (m.num_key_value_heads, m.head_dim, m.tie_word_embeddings, m.qkv_bias, m.ffn_bias) == (4, 16, False, False, False)
    assert HFModel.from_dict({**base, "head_dim": None, "num_key_value_heads": None}).head_dim == 16
    m = HFModel.from_dict({**base, "attention_bias": True, "mlp_bias": True, "num_key_value_heads": 2})
    assert [x.bias for x in m.linear_layers()] == [True] * 7 + [False]
    assert [x.bias for x in m.linear_layers(fused=True)] == [True] * 4 + [False]
    assert m.shapes(fused=True)[0] == Shape((4 + 2 * 2) * 16, 64)
    odd = HFModel.from_dict({**base, "model_type": "granite"})     # unknown type: llama-like, kept
    assert odd.model_type == "granite" and odd.shapes() == HFModel.from_dict(base).shapes()
    q = HFModel.from_dict({**base, "model_type": "qwen2", "mlp_bias": True, "attention_bias": True})
    assert [x.bias for x in q.linear_layers()] == [True, True, True, False, False, False, False, False]


def test_presets_are_package_data_and_feed_models():
    files = importlib.resources.files("gemvtune.kernels") / "hf_configs"
    assert set(PRESETS) == set(MODELS) == set(PRESET_SOURCES)
    for name in ("llama-3-8b", "qwen2.5-7b", "mistral-7b", "llama-3-70b", "mistral-nemo-12b"):
        res = files / f"{name}.json"
        assert res.is_file(), name
        data = json.loads(res.read_text())
        assert data["architectures"] and data["torch_dtype"] == "bfloat16" and "_name_or_path" not in data
        assert preset_path(name).read_text() == res.read_text()
        m = read_preset(name)
        assert m.name == name and MODELS[name] == [(x.name.removesuffix("_proj"), x.M, x.d)
                                                   for x in m.linear_layers(fused=True)]
        assert model_shapes(name) == m.shapes() and model_shapes(name, 2, fused=True) == m.shapes(True, 2)
    with pytest.raises(UsageError, match="unknown model preset 'gpt-5'"):
        read_preset("gpt-5")


def test_import_reads_no_config():
    code = ("import sys, gemvtune, gemvtune.kernels.shapes, gemvtune.bench.step, gemvtune.cli.main\n"
            "h = sys.modules.get('gemvtune.kernels.hfconfig')\n"
            "print(0 if h is None else h._read_preset.cache_info().currsize)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0 and r.stdout.strip() == "0", r.stdout + r.stderr


def _good():
    return json.loads((HF / "llama-3-8b.json").read_text())


BAD = [  # (what, the file's text, needle naming the field)
    ("missing field", lambda g: json.dumps({k: v for k, v in g.items() if k != "hidden_size"}),
     "'hidden_size' is missing"),
    ("missing model_type", lambda g: json.dumps({k: v for k, v in g.items() if k != "model_type"}), "'model_type'"),
    ("null required size", lambda g: json.dumps({**g, "vocab_size": None}), "'vocab_size' is null"),
    ("string size", lambda g: json.dumps({**g, "intermediate_size": "14336"}), "'intermediate_size' must be a positive"),
    ("float size", lambda g: json.dumps({**g, "hidden_size": 4096.0}), "'hidden_size' must be a positive integer, got 4096.0"),
    ("bool size", lambda g: json.dumps({**g, "num_attention_heads": True}), "'num_attention_heads' must be a positive"),
    ("negative size", lambda g: json.dumps({**g, "num_key_value_heads": -8}), "'num_key_value_heads' must be a positive"),
    ("zero layers", lambda g: json.dumps({**g, "num_hidden_layers": 0}), "'num_hidden_layers' must be a positive"),
    ("float head_dim", lambda g: json.dumps({**g, "head_dim": 128.5}), "'head_dim' must be a positive"),
    ("heads do not divide hidden", lambda g: json.dumps({**g, "num_attention_heads": 30}), "'num_attention_heads' (30)"),
    ("kv heads do not divide heads", lambda g: json.dumps({**g, "num_key_value_heads": 5}), "'num_key_value_heads' (5)"),
    ("bias flag not a bool", lambda g: json.dumps({**g, "attention_bias": "yes"}), "'attention_bias' must be true"),
    ("absurd vocab", lambda g: json.dumps({**g, "vocab_size": 10**10}), "lm_head (vocab_size x hidden_size)"),
    ("no GPU holds it", lambda g: json.dumps({**g, "intermediate_size": 2 * 10**9 - 1}), "more than any GPU holds"),
    ("not JSON", lambda g: "{model_type: llama", "not valid JSON"),
    ("empty", lambda g: "", "is empty"),
    ("not an object", lambda g: json.dumps([g]), "not a JSON object"),
    ("binary", lambda g: "\udcff", "not valid JSON"),
    ("multimodal, its text model short of a field",
     lambda g: json.dumps({"model_type": "llava", "text_config": {k: v for k, v in g.items() if k != "hidden_size"}}),
     "text_config: required field 'hidden_size' is missing"),
    ("multimodal, text_config not an object", lambda g: json.dumps({"model_type": "llava", "text_config": [g]}),
     "text_config must be a JSON object"),
    ("multimodal, text model without a type",
     lambda g: json.dumps({"model_type": "llava", "text_config": {k: v for k, v in g.items() if k != "model_type"}}),
     "text_config: required field 'model_type' is missing"),
    ("mixtral without its experts", lambda g: json.dumps({**g, "model_type": "mixtral", "num_experts_per_tok": 2}),
     "'num_local_experts' is missing"),
    ("qwen2_moe without its shared expert",
     lambda g: json.dumps({**g, "model_type": "qwen2_moe", "num_experts": 60, "num_experts_per_tok": 4,
                           "moe_intermediate_size": 1408}), "'shared_expert_intermediate_size' is missing"),
    ("qwen3_moe, bad mlp_only_layers",
     lambda g: json.dumps({**g, "model_type": "qwen3_moe", "num_experts": 128, "num_experts_per_tok": 8,
                           "moe_intermediate_size": 768, "mlp_only_layers": [0, 32]}), "'mlp_only_layers' must be"),
    ("top-k above the experts", lambda g: json.dumps({**g, "model_type": "mixtral", "num_local_experts": 8,
                                                      "num_experts_per_tok": 9}), "(9) is more than the 8 experts"),
    ("deepseek without v_head_dim",
     lambda g: json.dumps({**g, "model_type": "deepseek_v3", "kv_lora_rank": 512, "qk_nope_head_dim": 128,
                           "qk_rope_head_dim": 64}), "'v_head_dim' is missing"),
    ("deepseek, negative shared experts",
     lambda g: json.dumps({**g, "model_type": "deepseek_v3", "kv_lora_rank": 512, "qk_nope_head_dim": 128,
                           "qk_rope_head_dim": 64, "v_head_dim": 128, "n_routed_experts": 64, "num_experts_per_tok": 6,
                           "moe_intermediate_size": 1408, "n_shared_experts": -1}), "'n_shared_experts' must be"),
    ("an expert model of an unknown kind", lambda g: json.dumps({**g, "model_type": "olmoe", "num_experts": 64}),
     '"olmoe" is a mixture-of-experts model (64 experts) of a kind gemvtune does not read'),
    ("not llama's linears", lambda g: json.dumps({**g, "model_type": "falcon"}), "other linear layers than llama's"),
]


@pytest.mark.parametrize("what,text,needle", BAD, ids=[b[0] for b in BAD])
def test_bad_config_is_one_usage_error(tmp_path, what, text, needle):
    p = tmp_path / "config.json"
    p.write_bytes(text(_good()).encode("utf-8", "surrogateescape"))
    with pytest.raises(UsageError) as e:
        read_hf_config(p)
    msg = str(e.value)
    assert "\n" not in msg and needle in msg and str(p) in msg, msg


def test_missing_file_or_folder(tmp_path):
    with pytest.raises(UsageError, match=re.escape(f"config {tmp_path / 'none.json'} does not exist")):
        read_hf_config(tmp_path / "none.json")
    with pytest.raises(UsageError, match="holds no config.json"):
        read_hf_config(tmp_path)


def test_linear_is_frozen():
    lin = Linear("q_proj", 8, 8)
    assert lin.shape(2) == Shape(8, 8, 2) and lin.bias is False and lin.per_layer is True
    with pytest.raises(dataclasses.FrozenInstanceError):
        lin.M = 9  # type: ignore[misc]


# ------------------------------------------------------------------------------------------------ CLI

def test_search_hf_config_bad_file_is_one_line_exit_2(tmp_path):
    bad = tmp_path / "BAD.json"
    bad.write_text(json.dumps({**_good(), "hidden_size": 4096.0}))
    out = tmp_path / "results"
    r = run_cli("search", "--hf-config", str(bad), "--results", str(out))
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2, r.stderr
    assert len(lines) == 1 and "hidden_size" in lines[0] and str(bad) in lines[0] and "Traceback" not in r.stderr
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["BAD.json"]


def test_search_hf_config_shapes_reach_the_search(tmp_path, monkeypatch):
    """--hf-config and --fused pick the shapes handed to the search (the search itself stubbed)."""
    from click.testing import CliRunner

    import gemvtune.cli.search_cmd as cs
    import gemvtune.tuning.search_run as sc
    from gemvtune.cli.main import cli

    got = []
    monkeypatch.setattr(cs, "_make_runner", lambda shapes, replay, wd: (None, None, str(tmp_path)))
    monkeypatch.setattr(sc, "run_searches", lambda runner, shapes, *a, **k: got.append(shapes))
    d = tmp_path / "qwen"
    d.mkdir()
    (d / "config.json").write_text((HF / "qwen2.5-7b.json").read_text())
    runner = CliRunner()
    r = runner.invoke(cli, ["search", "--hf-config", str(d)])
    assert r.exit_code == 0, r.output
    assert got[-1] == read_preset("qwen2.5-7b").shapes()
    r = runner.invoke(cli, ["search", "--hf-config", str(d), "--fused", "--batch", "1,2"])
    assert r.exit_code == 0, r.output
    assert got[-1] == [Shape(s.M, s.d, n) for s in model_shapes("qwen2.5-7b", fused=True) for n in (1, 2)]
    r = runner.invoke(cli, ["search", "--model", "llama-3-8b", "--hf-config", str(HF / "mistral-7b.json")])
    assert r.exit_code == 0, r.output
    assert got[-1] == model_shapes("llama-3-8b") + [Shape(32000, 4096)]   # distinct, first seen first
    r = runner.invoke(cli, ["search", "--shape", "64x64", "--fused"])
    assert r.exit_code != 0 and "--fused" in str(r.exception)
