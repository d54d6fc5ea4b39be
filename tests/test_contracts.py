"""Contracts of the Python API and of a few commands (docs/troubleshooting.md, "Hostile files"): arguments of the
wrong type are TypeErrors that say what was expected, a zero-sized Linear takes the F.linear fallback, a CPU tensor
is refused before any GPU warning, a mixture-of-experts config is read with its experts or refused, never read as a
dense model, and usage errors exit 2 in one line."""

import json
import os
import re
import warnings

import pytest
from conftest import ROOT, run_cli

from gemvtune import UsageError
from gemvtune.kernels.hfconfig import HFModel, read_hf_config
from gemvtune.runtime.table import load_table

TABLE = ROOT / "results" / "nvidia-h200" / "table.json"
LLAMA = json.loads((ROOT / "gemvtune" / "kernels" / "hf_configs" / "llama-3-8b.json").read_text())


def _one_line(r, needle, code=2):
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == code, (r.returncode, r.stderr)
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in r.stderr, r.stderr


@pytest.fixture(scope="module")
def torch_and_table():
    torch = pytest.importorskip("torch")
    return torch, load_table(TABLE)


@pytest.mark.parametrize("bad", [str(TABLE), {}, None, 3])
def test_a_wrong_table_argument_is_a_type_error_saying_what_was_expected(torch_and_table, bad):
    torch, _ = torch_and_table
    import gemvtune

    with pytest.raises(TypeError, match="table must be a gemvtune Table from load_table"):
        gemvtune.GemvLinear(torch.nn.Linear(8, 8), bad)
    with pytest.raises(TypeError, match="table must be a gemvtune Table from load_table"):
        gemvtune.swap_linears(torch.nn.Sequential(torch.nn.Linear(8, 8)), bad)


def test_a_wrong_model_or_filter_argument_is_a_type_error(torch_and_table):
    torch, table = torch_and_table
    import gemvtune

    with pytest.raises(TypeError, match="model must be a torch.nn.Module, got str"):
        gemvtune.swap_linears("model", table)
    with pytest.raises(TypeError, match="filter must be a callable"):
        gemvtune.swap_linears(torch.nn.Sequential(torch.nn.Linear(8, 8)), table, filter=3)
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        gemvtune.explain([1, 2])
    with pytest.raises(TypeError, match="GemvLinear wraps an nn.Linear"):
        gemvtune.GemvLinear("linear", table)


@pytest.mark.parametrize("d_in,d_out", [(0, 8), (8, 0), (0, 0)])
def test_a_zero_sized_linear_takes_the_f_linear_fallback(torch_and_table, d_in, d_out):
    torch, table = torch_and_table
    import gemvtune

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # torch: "Initializing zero-element tensors is a no-op"
        lin = torch.nn.Linear(d_in, d_out).half()
    model = torch.nn.Sequential(lin)
    assert gemvtune.swap_linears(model, table) == ["0"]
    x = torch.randn(3, d_in).half()
    y = model(x)
    assert y.shape == (3, d_out) and torch.equal(y, torch.nn.functional.linear(x, lin.weight, lin.bias))
    row = gemvtune.explain(model)[0]
    assert row["route"] == "F.linear" and "zero-sized" in row["why"]
    compiled = torch.compile(model, backend="eager")
    assert compiled(x).shape == (3, d_out)


def test_table_gemv_on_cpu_tensors_refuses_without_a_gpu_warning(torch_and_table):
    torch, _ = torch_and_table
    table = load_table(TABLE)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with pytest.raises(UsageError, match="CUDA"):
            table.gemv(torch.zeros(64, 64, dtype=torch.float16), torch.zeros(64, dtype=torch.float16))
    assert not [m for m in w if "tuned on" in str(m.message)], [str(m.message) for m in w]

    with pytest.raises(UsageError, match=r"W must be a CUDA tensor, got one on cpu .*\.cuda\(\)"):
        table.gemv(torch.zeros(64, 64, dtype=torch.float16), [0.0] * 64)


def test_table_gemv_on_numpy_arrays_is_one_error_and_no_gpu_warning(torch_and_table):
    """With no device, that is said (exit 3 on the command line; tests/test_bad_input.py); with one, the arrays in
    host memory are one UsageError. Either way before the check of the table's GPU could warn."""
    np = pytest.importorskip("numpy")
    from gemvtune.device._cupy import cuda_available
    from gemvtune.errors import NoDeviceError

    table = load_table(TABLE)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        if cuda_available():   # (a reason: no device answers)
            with pytest.raises(NoDeviceError):
                table.gemv(np.zeros((64, 64), np.float16), np.zeros(64, np.float16))
        else:
            with pytest.raises(UsageError, match=r"W must be a CUDA array .*numpy.ndarray \(host memory\)"):
                table.gemv(np.zeros((64, 64), np.float16), np.zeros(64, np.float16))
    assert not w, [str(m.message) for m in w]


def test_the_table_class_itself_is_a_type_error(torch_and_table):
    torch, _ = torch_and_table
    import gemvtune

    with pytest.raises(TypeError, match="got the class Table itself"):
        gemvtune.GemvLinear(torch.nn.Linear(8, 8), gemvtune.Table)
    with pytest.raises(TypeError, match="restore_linears: model must be a torch.nn.Module"):
        gemvtune.restore_linears("model")


MOE = [   # (what, fields over Llama-3-8B's, what reading it gives: experts read, or the one line of the refusal)
    ("qwen2_moe", {"model_type": "qwen2_moe", "num_experts": 60, "moe_intermediate_size": 1408,
                   "shared_expert_intermediate_size": 5632, "num_experts_per_tok": 4}, 60),
    ("mixtral", {"model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2}, 8),
    ("deepseek_v3 without its latent attention", {"model_type": "deepseek_v3", "n_routed_experts": 256,
                                                  "moe_intermediate_size": 2048}, "'kv_lora_rank' is missing"),
    ("mixtral without top-k", {"model_type": "mixtral", "num_local_experts": 8}, "'num_experts_per_tok' is missing"),
    ("llama-typed with experts", {"model_type": "llama", "num_experts": 16}, "mixture-of-experts model (16 experts)"),
]


@pytest.mark.parametrize("what,extra,expect", MOE, ids=[m[0] for m in MOE])
def test_a_mixture_of_experts_is_read_with_its_experts_or_refused_in_one_line(tmp_path, what, extra, expect):
    """Never read as a dense model: its experts are read (mixtral, qwen2_moe, qwen3_moe, deepseek), or the file is
    refused in one line; the Hugging Face benchmarks, which build dense decoders, refuse it either way."""
    from gemvtune.hf.model import read_config

    data = {**LLAMA, **extra}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(data))
    if isinstance(expect, int):
        assert HFModel.from_dict(data, where="config x").moe.experts == expect
        with pytest.raises(UsageError, match="mixture-of-experts model; the Hugging Face benchmarks"):
            read_config(p)
        return
    with pytest.raises(UsageError, match=re.escape(expect)):
        HFModel.from_dict(data, where="config x")
    _one_line(run_cli("search", "--hf-config", str(p), "--results", str(tmp_path / "r")), expect)
    assert not (tmp_path / "r").exists() or not list((tmp_path / "r").iterdir())


def test_other_architectures_are_refused_and_llama_like_ones_still_read():
    with pytest.raises(UsageError, match="other linear layers than llama's"):
        HFModel.from_dict({**LLAMA, "model_type": "gpt2"})
    assert HFModel.from_dict({**LLAMA, "model_type": "granite"}).shapes() == HFModel.from_dict(LLAMA).shapes()


def test_an_hf_config_that_is_a_fifo_or_dev_zero_is_one_line(tmp_path):
    os.mkfifo(tmp_path / "fifo.json")
    (tmp_path / "zero.json").symlink_to("/dev/zero")
    with pytest.raises(UsageError, match="FIFO"):
        read_hf_config(tmp_path / "fifo.json")
    with pytest.raises(UsageError, match="character device"):
        read_hf_config(tmp_path / "zero.json")


@pytest.mark.parametrize("arch", ["sm_99x", "12", "sm_٩٠", "sm_90; rm -rf /"])
def test_compile_check_with_a_bad_arch_is_a_usage_error(arch):
    _one_line(run_cli("compile-check", "--shape", "64x64", "--arch", arch), "bad architecture")


def test_export_out_empty_or_special_is_one_line_and_a_link_is_followed(tmp_path):
    _one_line(run_cli("export", "--table", str(TABLE), "--out", ""), "the path is empty")
    os.mkfifo(tmp_path / "f.cuh")
    _one_line(run_cli("export", "--table", str(TABLE), "--out", str(tmp_path / "f.cuh")), "regular file")
    real = tmp_path / "real.cuh"
    real.write_text("old\n")
    (tmp_path / "link.cuh").symlink_to(real)
    r = run_cli("export", "--table", str(TABLE), "--out", str(tmp_path / "link.cuh"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "link.cuh").is_symlink() and "#pragma once" in real.read_text()
