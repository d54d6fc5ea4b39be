"""gemlite's A16W8 FP8 layer as a baseline (``gemvtune.bench.gemlite``). On the CPU: where gemlite is looked for
($GEMVTUNE_GEMLITE, else ./.peers/gemlite) and the one line saying why it does not import, with stand-in gemlite
packages in a tmp dir; the adapter's refusals of inputs gemlite's layer cannot take. On the GPU (marked gpu; skipped
with the reason where gemlite does not import): the layer built from ``kernels.fp8.quantize(w, "row")``'s codes and
scales against the float64 product of the exactly dequantised weight."""

import importlib.util
import sys

import numpy as np
import pytest

from gemvtune.bench.gemlite import ENV, PEER_DIR, gemlite_available, gemlite_fp8_layer
from gemvtune.errors import UsageError


@pytest.fixture
def clean_import(monkeypatch):
    """sys.path and any gemlite module as they were, whatever the test imports."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    saved = {n: m for n, m in sys.modules.items() if n == "gemlite" or n.startswith("gemlite.")}
    for n in saved:
        monkeypatch.delitem(sys.modules, n)
    yield
    for n in [n for n in sys.modules if n == "gemlite" or n.startswith("gemlite.")]:
        del sys.modules[n]
    sys.modules.update(saved)


def fake_gemlite(folder, init="__version__ = '0-test'\n", helper="class A16W8_FP8:\n    pass\n"):
    pkg = folder / "gemlite"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(init)
    (pkg / "helper.py").write_text(helper)
    return folder


def test_the_folder_named_by_the_env_var_is_imported(tmp_path, monkeypatch, clean_import):
    monkeypatch.setenv(ENV, str(fake_gemlite(tmp_path / "carried")))
    assert gemlite_available() == ""
    assert sys.modules["gemlite"].__file__.startswith(str(tmp_path / "carried"))
    assert sys.path[0] == str(tmp_path / "carried")


def test_the_peers_folder_under_the_current_directory_is_found(tmp_path, monkeypatch, clean_import):
    monkeypatch.delenv(ENV, raising=False)
    fake_gemlite(tmp_path / PEER_DIR)
    monkeypatch.chdir(tmp_path)
    assert gemlite_available() == ""
    assert sys.modules["gemlite"].__file__.startswith(str(tmp_path / PEER_DIR))


def test_an_env_var_without_the_package_says_so(tmp_path, monkeypatch, clean_import):
    monkeypatch.setenv(ENV, str(tmp_path))
    why = gemlite_available()
    assert why.startswith(f"{ENV}={tmp_path} holds no gemlite package") and "\n" not in why


def test_nothing_carried_and_none_installed_says_so(tmp_path, monkeypatch, clean_import):
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    if importlib.util.find_spec("gemlite") is not None:
        pytest.skip("a gemlite is installed in this environment")
    why = gemlite_available()
    assert "none carried" in why and "ModuleNotFoundError" in why and "\n" not in why


def test_a_failed_import_is_one_line_and_leaves_nothing_behind(tmp_path, monkeypatch, clean_import):
    init = "from . import helper\nraise RuntimeError('Found no NVIDIA driver on your system.\\nsecond line')\n"
    monkeypatch.setenv(ENV, str(fake_gemlite(tmp_path, init=init)))
    why = gemlite_available()
    assert why == f"gemlite ({tmp_path}) cannot be imported: RuntimeError: Found no NVIDIA driver on your system."
    assert not [n for n in sys.modules if n == "gemlite" or n.startswith("gemlite.")]


def test_a_gemlite_without_the_fp8_helper_is_refused(tmp_path, monkeypatch, clean_import):
    monkeypatch.setenv(ENV, str(fake_gemlite(tmp_path, init="__version__ = '0.4.0'\n", helper="")))
    why = gemlite_available()
    assert why.startswith("gemlite 0.4.0") and "has no helper.A16W8_FP8" in why


def test_tqdm_is_lent_for_the_import_where_it_is_missing(tmp_path, monkeypatch, clean_import):
    monkeypatch.setitem(sys.modules, "tqdm", None)   # an import of tqdm fails, as on the device
    helper = "from tqdm import tqdm\nassert tqdm([1, 2]) == [1, 2]\nclass A16W8_FP8:\n    pass\n"
    monkeypatch.setenv(ENV, str(fake_gemlite(tmp_path, helper=helper)))
    assert gemlite_available() == ""
    assert sys.modules["tqdm"] is None


def test_the_real_carried_copy_answers_in_one_line(monkeypatch):
    """The checkout's .peers/gemlite (when there is one): imports where a CUDA device and Triton answer, else says
    why in one line (on a CPU machine: no triton, or no CUDA device). A real gemlite that imported stays imported
    (not ``clean_import``): importing it twice would register its torch custom op twice."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    if not (root / PEER_DIR / "gemlite" / "__init__.py").is_file():
        pytest.skip(f"no {PEER_DIR} in this checkout")
    monkeypatch.setenv(ENV, str(root / PEER_DIR))
    why = gemlite_available()
    assert "\n" not in why
    assert why == "" or why.startswith(f"gemlite ({root / PEER_DIR}) cannot be imported: ")


# ---- the adapter's refusals (before gemlite is imported) ---------------------------------------------------------

def _inputs(M=64, d=128):
    import torch

    return torch.zeros((M, d), dtype=torch.uint8), torch.ones(M, dtype=torch.float32)


def _refusal(match, codes=None, scales=None, dtype=None, bias=None):
    import torch

    c, s = _inputs()
    with pytest.raises(UsageError, match=match) as e:
        gemlite_fp8_layer(c if codes is None else codes, s if scales is None else scales,
                          torch.float16 if dtype is None else dtype, bias)
    assert "\n" not in str(e.value)


def test_the_adapter_refuses_what_gemlite_cannot_take():
    torch = pytest.importorskip("torch")
    c, s = _inputs()
    _refusal("codes must be a non-empty 2-D uint8 tensor", codes=c.to(torch.float16))
    _refusal("codes must be a non-empty 2-D uint8 tensor", codes=c[0])
    _refusal("codes must be a non-empty 2-D uint8 tensor", codes=c.numpy())
    _refusal("row-major contiguous", codes=torch.zeros((128, 64), dtype=torch.uint8).t())
    _refusal(r"d a multiple of 32 \(GemLiteLinearTriton.s in_features\), got d = 72", codes=torch.zeros((64, 72), dtype=torch.uint8))
    _refusal("float16 or bfloat16 activations, got torch.float32", dtype=torch.float32)
    _refusal(r"scales must be float32 \[M\] = \[64\]", scales=s.to(torch.float16))
    _refusal(r"scales must be float32 \[M\] = \[64\]", scales=s[:, None])
    _refusal(r"bias must be a floating tensor \[M\] = \[64\]", bias=torch.zeros(63))
    _refusal("run on a CUDA device; the codes are on cpu")


# ---- on the GPU ----------------------------------------------------------------------------------------------------

# The bound on ||y - ref|| / ||s|| (s_i^2 = sum_k (W_ik x_k)^2, the measure of gemvtune's verifier; ref the float64
# product of the exactly dequantised W and x), u the unit roundoff of x's dtype (fp16 2^-11, bf16 2^-8). gemlite's
# terms: n <= 2 (GEMV_SPLITK): float32(code) x scale is our float32 dequantisation, FP32 products and sums
# (fp8_error_bound), y rounded once to x's dtype: u ||y||. 3 <= n < 64 (GEMM_SPLITK): each dequantised weight is
# rounded to x's dtype for tl.dot, relative u (~u/sqrt(3) ||s|| summed with random signs; an FP16 subnormal errs by
# at most 2^-25 absolute, negligible here); FP32 tensor-core sums; with SPLIT_K = S > 1 (at most 8 in gemlite's fast
# configs, 16 in max) each slice's sum is rounded to x's dtype and atomic-added in x's dtype: 2S - 1 roundings of sums
# of size up to |y|, ~u/sqrt(3) sqrt(sum_j j/S) ||s||, about 1.2u at S = 8. Altogether ~1.5u (~1.9u at S = 16) in
# the random model: 8u leaves 4x margin and is still ~1/30 (bf16) of what one wrong scale (a factor of 2 at least,
# the rows' magnitudes differ by 2^j) makes. The bias (one more rounding in x's dtype, u |y + b|) fits in the same
# margin. The per-row check allows 5x the bound (gemvtune's ROW_FACTOR).
U = {"fp16": 2.0**-11, "bf16": 2.0**-8}
M = D = 4096


def _bound(dtype):
    from gemvtune.bench.gemlite import gemlite_bound

    assert gemlite_bound(dtype, D) > 8 * U[dtype]
    return gemlite_bound(dtype, D)


def _errors(y, ref, s):
    err = (y.double() - ref).abs()
    return float(err.norm() / s.norm()), float((err / s).max())


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_gemlite_fp8_layer_matches_the_float64_reference(dtype):
    why = gemlite_available()
    if why:
        pytest.skip(why)
    import torch

    from gemvtune.kernels.fp8 import quantize

    tdt = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    rng = np.random.default_rng(37)
    w = rng.standard_normal((M, D), dtype=np.float32) * 0.02
    w *= np.exp2(rng.integers(-2, 3, M)).astype(np.float32)[:, None]   # rows of differing scales
    q = quantize(w, "row")
    codes = torch.from_numpy(np.array(q.codes)).cuda()
    scales = torch.from_numpy(np.array(q.scales)).cuda()
    W64 = codes.view(torch.float8_e4m3fn).to(torch.float32).to(torch.float64) * scales.double()[:, None]
    layer = gemlite_fp8_layer(codes, scales, tdt)
    bound = _bound(dtype)
    g = torch.Generator().manual_seed(1)
    for n in (1, 4, 16):   # GEMV_SPLITK, then GEMM_SPLITK's buckets 4 and 16 (each tuned on its first call)
        x = torch.randn((n, D), generator=g).to("cuda", tdt)
        y = layer(x)
        torch.cuda.synchronize()
        assert y.shape == (n, M) and y.dtype == tdt, (n, y.shape, y.dtype)
        x64 = x.double()
        ref, s = x64 @ W64.T, ((x64 * x64) @ (W64 * W64).T).sqrt()
        rel, row = _errors(y, ref, s)
        assert rel <= bound and row <= 5 * bound, (dtype, n, rel, row, bound)
        if n == 4:   # the bias reaches y
            b = (torch.randn(M, generator=g) * s.mean().cpu()).to("cuda", tdt)
            yb = gemlite_fp8_layer(codes, scales, tdt, bias=b)(x)
            rel, row = _errors(yb, ref + b.double(), (s * s + b.double() ** 2).sqrt())
            assert rel <= bound and row <= 5 * bound, (dtype, "bias", rel, row, bound)
    # a fault the check must catch: every row read with its neighbour's scale
    x = torch.randn((1, D), generator=g).to("cuda", tdt)
    x64 = x.double()
    ref, s = x64 @ W64.T, ((x64 * x64) @ (W64 * W64).T).sqrt()
    rel, _ = _errors(gemlite_fp8_layer(codes, scales.roll(1), tdt)(x), ref, s)
    assert rel > 10 * bound, (dtype, "rolled scales", rel, bound)
