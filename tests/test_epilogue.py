"""The epilogue (output dtype, bias) fused into every kernel of both families: renders, NVRTC compiles
for sm_90 without spills on edge shapes, refusals, the error bound for an FP16 output, and the
verification's reference (run on the CPU with NumPy standing in for CuPy)."""

import random
import re

import numpy as np
import pytest

from gemvtune import GemvConfig, Shape, UsageError
from gemvtune.build.compile import CompileError, Resources, compile_variants
from gemvtune.build.render import render
from gemvtune.kernels import splitk as sk
from gemvtune.kernels.epilogue import DEFAULT, EPILOGUES, Epilogue
from gemvtune.kernels.gemv import valid_configs
from gemvtune.kernels.launchspec import launch_spec
from gemvtune.runners.timing import error_bound

SHAPES = [Shape(7, 72, 3), Shape(7, 4104, 1)]
# The kernel ABI (y is out_t*: float or half, as the source's typedef says), on whitespace-normalized source.
ABI = re.compile(r"__global__ void (?:__launch_bounds__\([^)]*\) )?(\w+) ?\(const half\* __restrict__ W, "
                 r"const half\* __restrict__ x, out_t\* __restrict__ y, const half\* __restrict__ bias, "
                 r"float\* __restrict__ ws, unsigned int\* __restrict__ counters, int M\)")


def _kernels_with_abi(src: str) -> list[str]:
    return ABI.findall(" ".join(src.split()))


def _configs(s: Shape) -> list:
    """Per shape: a GEMV with split_k 1 and one with split_k > 1; a split-K GEMM with split 1, one
    combining with pass2 and one with atomics (seeded choices among the valid configs)."""
    rng = random.Random(16)
    g = valid_configs(s)
    k = sk.valid_configs(s)
    picks = [[c for c in g if c.split_k == 1], [c for c in g if c.split_k > 1],
             [c for c in k if c.split == 1], [c for c in k if c.split > 1 and c.combine == "pass2"],
             [c for c in k if c.split > 1 and c.combine == "atomic"]]
    assert all(picks), s
    return [rng.choice(p) for p in picks]


def _items() -> list[tuple]:
    return [(c, s, e) for s in SHAPES for c in _configs(s) for e in EPILOGUES if not e.invalid_reasons(c)]


@pytest.mark.slow  # NVRTC compiles every epilogue of both families
def test_every_epilogue_compiles_for_both_families_without_spills():
    items = _items()
    assert {(c.family, e) for c, _, e in items} == {(f, e) for f in ("gemv", "splitk") for e in EPILOGUES}
    results = compile_variants(items, arch="sm_90")
    failures = [(c.label + e.label, str(s), str(r)) for (c, s, e), r in zip(items, results)
                if isinstance(r, CompileError)]
    assert not failures, failures[:3]
    for (c, s, e), r in zip(items, results):
        for name, _, _ in launch_spec(c, s, e).kernels:   # every kernel of the call, helpers included
            res = Resources.parse(r.log, name)
            assert f"'{name}'" in r.log and res.registers > 0, (c.label + e.label, name)
            assert res.spill_stores == 0 and res.stack_bytes == 0, (c.label + e.label, str(s), name, res)


@pytest.mark.parametrize("s", SHAPES, ids=str)
def test_renders_differ_and_state_the_epilogue(s):
    for c in _configs(s):
        srcs = {e: render(c, s, e) for e in EPILOGUES if not e.invalid_reasons(c)}
        assert len(set(srcs.values())) == len(srcs), c.label
        assert srcs[DEFAULT] == render(c, s)
        for e, src in srcs.items():
            assert src.splitlines()[0].endswith(" " + c.label + e.label)
            assert f"typedef {e.out_ctype} out_t;" in src
            assert ("__ldg(bias + row)" in src) == e.bias
            assert ("__float2half_rn" in src) == (e.out == "fp16")
            names = _kernels_with_abi(src)
            assert len(names) == src.count("__global__"), c.label
            assert {k for k, _, _ in launch_spec(c, s, e).kernels} <= set(names), c.label


def test_default_source_has_the_seven_argument_abi():
    s = Shape(7, 4104, 1)
    for c in _configs(s):
        src = render(c, s)
        assert "typedef float out_t;" in src and "bias + row" not in src and "__float2half_rn" not in src
        names = _kernels_with_abi(src)
        assert {k for k, _, _ in launch_spec(c, s).kernels} <= set(names), c.label
        for name in names:
            m = re.search(rf"\b{name}\s*\((.*?)\)\s*\{{", src, flags=re.S)
            assert m and len(m.group(1).split(",")) == 7, (c.label, name)


def test_atomic_combine_with_fp16_out_is_refused():
    s = Shape(7, 4104, 1)
    c = next(c for c in sk.valid_configs(s) if c.split > 1 and c.combine == "atomic")
    for bias in (False, True):
        e = Epilogue("fp16", bias)
        with pytest.raises(UsageError, match="an FP16 output needs combine=pass2"):
            render(c, s, e)
        with pytest.raises(UsageError, match="combine=pass2"):
            compile_variants([(c, s, e)])
    assert render(c, s, Epilogue("fp32", True))       # FP32 out: the atomics work, zero_y writes the bias
    pass2 = sk.SplitKConfig(**{**c.to_dict(), "combine": "pass2"})
    assert render(pass2, s, Epilogue("fp16", True))


def test_bad_epilogue_refused():
    with pytest.raises(UsageError, match="Epilogue"):
        render(GemvConfig(), Shape(8, 64), "fp16")


def test_error_bound_fp16_output():
    for acc in ("fp32", "fp16"):
        assert error_bound(acc, 4096) == error_bound(acc, 4096, "fp32")
        assert error_bound(acc, 4096, "fp16") == pytest.approx(error_bound(acc, 4096) + 2.0**-10)
    with pytest.raises(ValueError):
        error_bound("fp32", 64, "fp8")   # (bf16 is an output dtype since issue 21)


# ---- the verification's reference, with NumPy standing in for CuPy ----------------------------
class _Stream:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False

    def synchronize(self):
        pass


@pytest.fixture
def numpy_verifier(monkeypatch):
    from gemvtune.device import _cupy
    from gemvtune.runners.cuda import verify

    monkeypatch.setattr(_cupy, "cp", np)
    monkeypatch.setattr(verify, "cp", np)

    return verify.Verifier(_Stream(), np.random.default_rng(3))   # the runner's part, given its stream and generator


def _kernel(e: Epilogue, drop_bias: bool = False):
    """A correct kernel in NumPy (FP32 sums, the epilogue in the store), or one that forgets the bias."""
    def run(W, x, y, bias=None):
        t = (x.astype(np.float32).reshape(-1, W.shape[1]) @ W.astype(np.float32).T).reshape(y.shape)
        if bias is not None and not drop_bias:
            t = t + bias.astype(np.float32)
        y[...] = t.astype(y.dtype)
    return run


@pytest.mark.parametrize("s", [Shape(129, 72, 3), Shape(64, 4096, 1)], ids=str)
def test_verify_reference_with_each_epilogue(numpy_verifier, s):
    calls = []
    for e in EPILOGUES:
        def run(*args, e=e):
            calls.append((e, len(args), args[2].dtype, args[3] is not None if len(args) > 3 else None))
            return _kernel(e)(*args)
        ok, rel, row, why = numpy_verifier.verify(run, s, error_bound("fp32", s.d, e.out), e)
        assert ok, (e, rel, row, why)
        if e.out == "fp16":   # the FP16 store's error, not the FP32 bound's
            assert error_bound("fp32", s.d) < rel < error_bound("fp32", s.d, "fp16")
        if e.bias:            # forgetting the bias fails
            assert not numpy_verifier.verify(_kernel(e, drop_bias=True), s, error_bound("fp32", s.d, e.out), e)[0]
    assert calls == [(DEFAULT, 3, np.float32, None), (Epilogue("fp32", True), 4, np.float32, True),
                     (Epilogue("fp16", False), 4, np.float16, False), (Epilogue("fp16", True), 4, np.float16, True)]


def test_verify_fails_an_unwritten_fp16_output(numpy_verifier):
    s = Shape(16, 64, 1)
    ok, _, _, why = numpy_verifier.verify(lambda W, x, y, bias: None, s, 1.0, Epilogue("fp16", True))
    assert not ok and "NaN" in why
