"""Issue 21: the dtype of W and x (fp16, bf16) through the system on the CPU: shapes and their keys, BF16
element conversions, verification bounds, table entries and routes kept apart by dtype (a BF16 call never runs
an entry tuned for FP16, and the reverse), the search's study and CSV names, the cost model's data, and the
commands' --dtype."""

import json

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import ROOT

from gemvtune import Shape, UsageError
from gemvtune.device.elems import BF16_NAN, bf16_bits, bf16_values, from_float32, nan_fill, to_float64
from gemvtune.kernels.shapes import parse_shape
from gemvtune.runners.timing import error_bound, library_bound
from gemvtune.runtime.keys import entry_key, entry_shape
from gemvtune.runtime.table import Table, load_table, record
from gemvtune.runtime.tableschema import validate_table

GEMV = {"block": 256, "vec": "half8", "acc": "fp32", "tpr": 128, "unroll": 1, "split_k": 1, "hint": "nc",
        "x_load": "ldg", "pdl": "off", "occ": "auto"}
DEVICE = {"name": "NVIDIA H200", "sm_count": 132}


def _entry(M, d, n, tuned_us, cublas_us, dtype=None):
    e = {"M": M, "d": d, "n": n, "winner": {"family": "gemv", "config": GEMV, "us": tuned_us},
         "baselines": {"cublas-torch": {"us": cublas_us, "status": "ok"}}}
    if dtype is not None:
        e["dtype"] = dtype
    return e


def _table(*entries):
    data = {"schema": 1, "gpu": {"name": "X"}, "entries": {entry_key(entry_shape(e)): e for e in entries}}
    validate_table(data, "t.json")
    return Table(data)


def test_shape_dtype_key_and_parse():
    assert Shape(4096, 4096).dtype == "fp16" and Shape(4096, 4096).key == "4096x4096"
    b = Shape(4096, 4096, 2, "bf16")
    assert b.key == "4096x4096@n2.bf16" and b != Shape(4096, 4096, 2) and b.weight_bytes == 4096 * 4096 * 2
    assert parse_shape("7x72", 3, "bf16") == Shape(7, 72, 3, "bf16")
    with pytest.raises(UsageError, match="dtype must be one of fp16, bf16"):
        Shape(8, 8, 1, "fp32")


def test_bf16_bits_round_to_nearest_even_like_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    f = np.concatenate([rng.standard_normal(4096).astype(np.float32) * 10.0 ** rng.integers(-30, 30, 4096),
                        np.float32([0.0, -0.0, 1.0, 65504.0, 3.0e38, 1e-40, 1.00390625, 1.01171875])])
    want = torch.from_numpy(f).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    assert np.array_equal(bf16_bits(f), want)
    assert np.array_equal(bf16_values(want), torch.from_numpy(want.view(np.int16)).view(torch.bfloat16).float().numpy())
    assert np.isnan(bf16_values(bf16_bits(np.float32([np.nan])))).all()


def test_element_arrays_of_each_dtype():
    f = np.float32([0.5, -1.0, 0.1])
    assert from_float32(f, "fp16").dtype == np.float16 and from_float32(f, "bf16").dtype == np.uint16
    assert to_float64(from_float32(f, "bf16"), "bf16").tolist() == [0.5, -1.0, float(bf16_values(bf16_bits(f))[2])]
    assert to_float64(from_float32(f, "fp16"), "fp16").dtype == np.float64
    assert (nan_fill(np, (2, 3), "bf16") == BF16_NAN).all() and np.isnan(nan_fill(np, 4, "fp16")).all()
    assert np.isnan(to_float64(nan_fill(np, 4, "bf16"), "bf16")).all()


def test_bf16_bounds():
    d = 4096
    assert error_bound("fp32", d, "bf16") == pytest.approx(error_bound("fp32", d) + 2.0 ** -7)
    assert error_bound("fp32", d, "bf16") > error_bound("fp32", d, "fp16") > error_bound("fp32", d)
    assert library_bound(Shape(8, d)) == error_bound("fp16", d)
    assert library_bound(Shape(8, d, 1, "bf16")) == error_bound("fp32", d, "bf16")
    with pytest.raises(ValueError):
        error_bound("fp32", d, "fp8")


def test_table_keys_and_routes_keep_dtypes_apart():
    t = _table(_entry(4096, 4096, 1, 9.5, 13.8), _entry(1024, 4096, 1, 3.0, 7.0, "bf16"))
    assert sorted(t.keys()) == [(1024, 4096, 1, "bf16"), (4096, 4096, 1, "fp16")]
    assert t.shapes == [Shape(1024, 4096, 1, "bf16"), Shape(4096, 4096)]
    assert t.route(4096, 4096, 1, "torch").tuned
    r = t.route(4096, 4096, 1, "torch", "bf16", "bf16")            # a BF16 call, an FP16 entry: cuBLAS, said
    assert r.kind == "cublas" and "not in the table for bf16 (its entries are of another dtype)" in r.why
    assert t.route(1024, 4096, 1, "torch", "bf16", "bf16").tuned
    assert t.route(1024, 4096, 1, "torch", "fp32", "bf16").tuned
    assert not t.route(1024, 4096, 1, "torch", "fp16").tuned       # an FP16 call, a BF16 entry: cuBLAS
    with pytest.raises(ValueError, match="output is fp32 or bf16"):
        t.route(1024, 4096, 1, "torch", "fp16", "bf16")
    cfg, how = t.lookup(Shape(4096, 4096, 1, "bf16"))              # no transfer of another dtype's winner
    assert how != "tuned" and "4096x4096" not in how


def test_a_bf16_entry_never_routes_to_a_16_bit_accumulator():
    """A BF16 entry with an FP16-accumulator winner (as an FP16 entry copied over would have) is refused by the
    table's schema with one line; a Table built without validation, or one whose candidates hold such a config,
    still never routes to it: the family's best that is valid, or cuBLAS."""
    e = _entry(4096, 4096, 1, 9.5, 13.8, "bf16")
    e["winner"]["config"] = dict(GEMV, acc="fp16")
    with pytest.raises(UsageError, match="a BF16 accumulator is invalid"):
        _table(e)
    unchecked = Table({"schema": 1, "gpu": {"name": "X"}, "entries": {"4096x4096x1.bf16": e}})
    assert not unchecked.route(4096, 4096, 1, "torch", "bf16", "bf16").tuned
    e["gemv"] = {"family": "gemv", "config": GEMV, "us": 10.0}
    r = Table({"schema": 1, "gpu": {"name": "X"}, "entries": {"4096x4096x1.bf16": e}}).route(
        4096, 4096, 1, "torch", "bf16", "bf16")
    assert r.tuned and r.config.acc == "fp32" and r.tuned_us == 10.0


def test_record_writes_dtype_and_keeps_both(tmp_path):
    path = tmp_path / "table.json"
    e = {"winner": {"family": "gemv", "config": GEMV, "us": 9.5}, "baselines": {}}
    record(path, Shape(4096, 4096), dict(e), DEVICE)
    record(path, Shape(4096, 4096, 1, "bf16"), {**e, "winner": {**e["winner"], "us": 9.7}}, DEVICE)
    data = json.loads(path.read_text())
    assert sorted(data["entries"]) == ["4096x4096x1", "4096x4096x1.bf16"]
    assert data["entries"]["4096x4096x1.bf16"]["dtype"] == "bf16" and data["entries"]["4096x4096x1"]["dtype"] == "fp16"
    t = load_table(path, costmodel=None)
    assert t.entry(Shape(4096, 4096, 1, "bf16")).winner.us == 9.7 and t.entry(Shape(4096, 4096)).winner.us == 9.5


@pytest.mark.parametrize("key, dtype, why", [("4096x4096x1", "bf16", "does not match its M, d, n, dtype"),
                                              ("4096x4096x1.bf16", None, "does not match"),
                                              ("4096x4096x1.fp8", "fp8", "dtype must be one of fp16, bf16")])
def test_schema_refuses_a_dtype_that_does_not_fit(tmp_path, key, dtype, why):
    e = _entry(4096, 4096, 1, 9.5, 13.8, dtype)
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"schema": 1, "gpu": {"name": "X"}, "entries": {key: e}}))
    with pytest.raises(UsageError, match=why):
        load_table(path)


def test_committed_table_keeps_its_dtypes_apart():
    t = load_table(ROOT / "results" / "nvidia-h200" / "table.json")
    assert {k[3] for k in t.keys()} == {"fp16", "bf16"}
    assert (1024, 4096, 1, "fp16") in t.keys() and (1024, 4096, 1, "bf16") in t.keys()
    assert t.route(1024, 4096, 1, "torch", "bf16", "bf16").config.acc == "fp32"
    data = json.loads(json.dumps(t.data))     # every tabled M x d has BF16 entries since 2026-12-02: drop some
    data["entries"] = {k: e for k, e in data["entries"].items() if not k.startswith("1024x4096x") or e.get("dtype") != "bf16"}
    fp_only = Table(data, t.path)
    assert (1024, 4096, 1, "fp16") in fp_only.keys() and (1024, 4096, 1, "bf16") not in fp_only.keys()
    r = fp_only.route(1024, 4096, 1, "torch", "bf16", "bf16")           # FP16 entry only: a BF16 call runs cuBLAS
    assert r.kind == "cublas" and "another dtype" in r.why
    r = t.route(4096, 4096, 1, "torch", "bf16", "bf16")                # its own BF16 entry: FP32 accumulation
    assert r.tuned and r.config.acc == "fp32"
    assert r.tuned_us == t.entry(Shape(4096, 4096, 1, "bf16")).winner.us
    assert t.predicted(Shape(11008, 4096, 1, "bf16")) is None      # the FP16 cost model says nothing for BF16


def test_study_and_file_names_carry_a_non_default_dtype():
    from gemvtune.tuning.search import study_name
    from gemvtune.tuning.sweep import sweep_path

    assert study_name(Shape(4096, 4096), "nvidia-h200") == "gemvtune-nvidia-h200-4096x4096x1"
    assert study_name(Shape(4096, 4096, 1, "bf16"), "nvidia-h200") == "gemvtune-nvidia-h200-4096x4096x1-bf16"
    assert sweep_path("o", Shape(4096, 4096, 1, "bf16")).name == "sweep-4096x4096x1-bf16.csv.gz"


def test_cost_model_data_is_one_dtype(tmp_path):
    from gemvtune.model.dataset import _NAME, load

    assert _NAME.match("search-4096x4096x1-bf16-20261202-033123.csv").group(4) == "bf16"
    assert _NAME.match("search-4096x4096x1-20261202-033123.csv").group(4) is None
    fp16 = load(ROOT / "results" / "nvidia-h200", sweeps=False)
    assert len(fp16.frame) and {s.dtype for s in fp16.shapes} == {"fp16"}
    bf16 = load(ROOT / "results" / "nvidia-h200", sweeps=False, dtype="bf16")     # the BF16 searches, apart
    assert len(bf16.frame) and {s.dtype for s in bf16.shapes} == {"bf16"}


def test_torch_gemvlinear_bf16_on_the_cpu_is_f_linear():
    torch = pytest.importorskip("torch")
    from gemvtune.runtime.torch_linear import GemvLinear, explain

    t = _table(_entry(64, 64, 1, 1.0, 5.0, "bf16"))
    lin = torch.nn.Linear(64, 64, bias=False).to(torch.bfloat16)
    g = GemvLinear(lin, t)
    assert g._tuned[torch.bfloat16][1] and not g._tuned[torch.float16][1]
    x = torch.randn(1, 64, dtype=torch.bfloat16)
    assert torch.equal(g(x), torch.nn.functional.linear(x, lin.weight))
    assert explain(torch.nn.Sequential(g))[0]["why"] == "weight on cpu, not a CUDA device"


def test_dtype_option_of_the_commands(tmp_path):
    from gemvtune.cli.main import cli

    r = CliRunner().invoke(cli, ["predict", "--shape", "4096x4096", "--dtype", "bf16"])
    assert isinstance(r.exception, UsageError) and "FP16 measurements only" in str(r.exception)
    r = CliRunner().invoke(cli, ["verify", "--shape", "4096x4096", "--dtype", "fp8"])
    assert r.exit_code == 2 and "fp16" in r.output and "bf16" in r.output
    r = CliRunner().invoke(cli, ["check", "--table", str(ROOT / "results" / "nvidia-h200" / "table.json"),
                                 "--stale-only", "--dtype", "bf16", "--shape", "4096x4096@n2", "--out", str(tmp_path)])
    assert isinstance(r.exception, UsageError) and "not in the table" in str(r.exception)   # (an FP16 entry only)
    assert "4096x4096@n2.bf16" in str(r.exception)


def _mixed_table():
    """FP16 and BF16 entries of every template family's seed (and a split-K with a workspace)."""
    from gemvtune.kernels.families import FAMILIES, config_to_dict

    entries = []
    for dt in ("fp16", "bf16"):
        for i, fam in enumerate(f for f in FAMILIES.values() if not f.library):
            shape = Shape(1024 + 64 * i, 4096, 1 if fam.name == "gemv" else 4, dt)
            if not fam.seed.is_valid(shape):
                continue
            e = _entry(shape.M, shape.d, shape.n, 9.0, 13.0, dt)
            e["winner"] = {"family": fam.name, "config": config_to_dict(fam.seed), "us": 9.0}
            entries.append(e)
    return _table(*entries)


def test_export_writes_both_dtypes():
    from gemvtune.runtime.export import build_header, namespace_of

    t = _mixed_table()
    text = build_header(t)
    assert {s.dtype for s in t.shapes} == {"fp16", "bf16"}
    for s in t.shapes:
        assert f"namespace {namespace_of(s)} {{" in text
        assert namespace_of(s).endswith("_bf16") == (s.dtype == "bf16")
    for api in ("gemvtune_gemv_bf16(int M, int d, int n, const __nv_bfloat16* W", "gemvtune_is_tuned_bf16",
                "gemvtune_kernel_label_bf16", "gemvtune_workspace_bytes_bf16", "namespace gemvtune_fallback_bf16",
                "#include <cuda_bf16.h>", "gemvtune_gemv(int M, int d, int n, const __half* W"):
        assert api in text, api
    fp16_only = build_header(_table(_entry(4096, 4096, 1, 9.5, 13.8)))
    assert "bf16" not in fp16_only and "bfloat16" not in fp16_only


@pytest.mark.slow   # nvcc builds the header
def test_export_with_bf16_entries_compiles_with_nvcc(tmp_path):
    from test_export import _compile, _nvcc

    from gemvtune.runtime.export import build_header

    nvcc = _nvcc()
    if not nvcc:
        pytest.skip("nvcc is not on PATH")
    t = _mixed_table()
    only = Shape(2048, 4096, 1, "bf16")                 # a BF16 entry with no FP16 twin, of a config of its own
    e = _entry(only.M, only.d, only.n, 9.0, 13.0, "bf16")
    e["winner"]["config"] = dict(GEMV, block=128, tpr=64)
    t = _table(e, *t.data["entries"].values())
    (tmp_path / "g.cuh").write_text(build_header(t))
    calls = "\n".join(f"    e |= gemvtune_gemv{'_bf16' if s.dtype == 'bf16' else ''}({s.M}, {s.d}, {s.n}, "
                      f"({'const __nv_bfloat16' if s.dtype == 'bf16' else 'const __half'}*)p, "
                      f"({'const __nv_bfloat16' if s.dtype == 'bf16' else 'const __half'}*)p, (float*)p, p, 0);"
                      for s in t.shapes)
    labels = ('extern "C" const char* lab16(int M, int d, int n) { return gemvtune_kernel_label(M, d, n); }\n'
              'extern "C" const char* lab_bf16(int M, int d, int n) { return gemvtune_kernel_label_bf16(M, d, n); }\n')
    (tmp_path / "a.cu").write_text('#include "g.cuh"\n' + labels + 'extern "C" int run_all(void* p) {\n    int e = 0;\n'
                                   + calls + "\n    return e + gemvtune_is_tuned_bf16(1, 1, 1);\n}\n")
    _compile(nvcc, "sm_90", tmp_path, [tmp_path / "a.cu"], tmp_path / "liba.so")
    import ctypes

    so = ctypes.CDLL(str(tmp_path / "liba.so"))      # each dtype's queries answer for its own entries only
    so.lab16.restype = so.lab_bf16.restype = ctypes.c_char_p
    for s in t.shapes:
        cfg, _ = t.lookup(s)
        own = so.lab_bf16 if s.dtype == "bf16" else so.lab16
        assert own(s.M, s.d, s.n).decode() == f"{cfg.family}:{cfg.label}"
    assert so.lab_bf16(2048, 4096, 1).decode() == "gemv:" + t.lookup(only)[0].label and so.lab16(2048, 4096, 1) == b"fallback"
