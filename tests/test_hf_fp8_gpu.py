"""A transformers model whose config carries an FP8 quantisation runs through gemvtune's FP8 route (marked gpu;
skipped with the reason where no CUDA device answers): a tiny Llama saved in FP16, loaded with
``FineGrainedFP8Config`` (transformers quantises it on load: E4M3 codes with 128x128 ``weight_scale_inv``), saved
again as an FP8 checkpoint and loaded from it (what a user downloads); ``swap_linears`` wraps each of its 14
``FP8Linear`` layers holding the same tensors (``state_dict`` unchanged), every one runs the FP8 kernels (an empty
table of this GPU under the policy ``tuned``), the first decode step agrees with a float64 copy of the dequantised
model as closely as dequantize + F.linear in 16 bits does (``gemvtune.hf.fp8check``), and ``restore_linears`` gives
the FP8Linear modules back."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed")
tf = pytest.importorskip("transformers")

from gemvtune.runtime.table import Table  # noqa: E402
from gemvtune.runtime.torch_fp8 import GemvFp8Linear  # noqa: E402
from gemvtune.runtime.torch_linear import explain, restore_linears, swap_linears  # noqa: E402

pytestmark = pytest.mark.gpu


def test_a_transformers_fp8_checkpoint_runs_through_the_fp8_route(tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    pytest.importorskip("accelerate", reason="transformers' FP8 quantiser needs accelerate")
    fg = pytest.importorskip("transformers.integrations.finegrained_fp8")
    torch.manual_seed(0)
    cfg = tf.LlamaConfig(hidden_size=512, intermediate_size=1024, num_hidden_layers=2, num_attention_heads=8,
                         num_key_value_heads=2, vocab_size=1024)
    tf.LlamaForCausalLM(cfg).to(torch.float16).save_pretrained(tmp_path / "fp16")
    quantised = tf.AutoModelForCausalLM.from_pretrained(tmp_path / "fp16", dtype=torch.float16, device_map="cuda",
                                                        quantization_config=tf.FineGrainedFP8Config())
    quantised.save_pretrained(tmp_path / "fp8")
    del quantised
    model = tf.AutoModelForCausalLM.from_pretrained(tmp_path / "fp8", dtype=torch.float16, device_map="cuda").eval()
    assert getattr(model.config, "quantization_config", None) is not None
    fp8 = {n: m for n, m in model.named_modules() if isinstance(m, fg.FP8Linear)}
    assert len(fp8) == 14, sorted(fp8)
    sd = {k: v.data_ptr() for k, v in model.state_dict().items()}

    table = Table({"schema": 1, "gpu": {"name": torch.cuda.get_device_name()}, "entries": {}}, policy="tuned")
    names = swap_linears(model, table)
    assert set(fp8) <= set(names)
    assert all(isinstance(dict(model.named_modules())[n], GemvFp8Linear) for n in fp8)
    assert {k: v.data_ptr() for k, v in model.state_dict().items()} == sd      # the same tensors, the same names
    rows = {r["name"]: r for r in explain(model)}
    assert all(rows[n]["weights"] == "e4m3-b128" and rows[n]["route"] == "tuned" for n in fp8), \
        [(n, rows[n]["route"], rows[n]["why"]) for n in fp8 if rows[n]["route"] != "tuned"]

    from gemvtune.hf.fp8check import FACTOR, FLOOR, _first_step, fallback_only, float64_reference

    ids = torch.randint(0, 1024, (1, 7), device="cuda")
    nxt, kern = _first_step(model, ids, None, torch)
    with fallback_only(model):
        _, fall = _first_step(model, ids, nxt, torch)
    _, ref = _first_step(float64_reference(model), ids, nxt, torch)
    den = float(ref.abs().max())
    e_k, e_f = float((kern - ref).abs().max()) / den, float((fall - ref).abs().max()) / den
    assert e_k <= max(FACTOR * e_f, FLOOR), (e_k, e_f)
    assert torch.equal(kern.argmax(-1), ref.argmax(-1))

    restore_linears(model)
    assert all(isinstance(dict(model.named_modules())[n], fg.FP8Linear) for n in fp8)
    assert {k: v.data_ptr() for k, v in model.state_dict().items()} == sd
