import re

import jinja2
import pytest

from gemvtune import LLAMA_CPP, GemvConfig, Shape, UsageError
from gemvtune.kernels.render import _env, render, source_hash, templates_dir


def test_deterministic():
    c, s = GemvConfig(vec="half8", tpr=16, unroll=4, split_k=2, hint="evict_first", x_load="smem"), Shape(7, 4104)
    a, b = render(c, s), render(c, s)
    assert a == b and source_hash(a) == source_hash(b)


def test_every_parameter_changes_the_source():
    s = Shape(100, 8192)
    base = GemvConfig(block=256, vec="half2", acc="fp32", tpr=32, unroll=2, split_k=2)
    src = render(base, s)
    for k, values in [("block", [512]), ("vec", ["half4"]), ("acc", ["fp16"]), ("tpr", [64]), ("unroll", [4]),
                      ("split_k", [4]), ("hint", ["nc", "evict_first"]), ("x_load", ["smem"])]:
        for v in values:
            other = GemvConfig(**{**base.to_dict(), k: v})
            assert render(other, s) != src, (k, v)
    assert render(base, Shape(100, 8200)) != src  # d is compiled in


def test_llama_render_is_llama_kernel():
    src = render(LLAMA_CPP, Shape(14336, 4096))
    assert "constexpr int BLOCK = 256;" in src and "constexpr int TPR = 256;" in src
    assert "typedef unsigned int wvec_t;" in src        # half2: 4-byte loads
    assert "struct Acc { float a, b; };" in src          # FP32 accumulation
    assert "__shfl_xor_sync" in src and "__shared__ float red" in src  # warp shuffles, then smem
    assert "atomicAdd" not in src and "asm volatile(\"ld." not in src   # no split, plain loads


def test_hints_render_ptx():
    s = Shape(64, 4096)
    assert "ld.global.nc.L1::no_allocate.v4.b32" in render(GemvConfig(vec="half8", hint="nc"), s)
    src = render(GemvConfig(vec="half", hint="evict_first", tpr=32), s)
    assert "createpolicy.fractional.L2::evict_first" in src and "L2::cache_hint.b16" in src


def test_invalid_config_refused():
    with pytest.raises(UsageError, match="not divisible"):
        render(GemvConfig(vec="half8"), Shape(64, 4100))


def test_strict_undefined():
    with pytest.raises(jinja2.UndefinedError):
        _env().get_template("gemv.cu.j2").render(block=256)


def test_templates_found():
    assert (templates_dir() / "gemv.cu.j2").is_file()
    assert not re.search(r"\{\{|\{%", render(LLAMA_CPP, Shape(1, 2)))
