import re

import jinja2
import pytest

from gemvtune import LLAMA_CPP, GemvConfig, Shape, UsageError
from gemvtune.build.render import _env, render, source_hash, templates_dir


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


def test_fp16_sources_are_byte_identical_to_before_bf16():
    """FP16 rendering did not change when BF16 kernels were added (issue 21): committed measurements, the export
    goldens and compile caches key on these bytes. tests/data/fp16_render_hashes.json holds the sha256 of a fixed
    sample (every family, one config for every value of every parameter, on edge shapes at n = 1, 3, 8, 16, with
    the FP16 epilogues; and the seed kernel) rendered by the templates before BF16 was added."""
    import hashlib
    import json
    from pathlib import Path

    from gemvtune.kernels.epilogue import Epilogue
    from gemvtune.kernels.families import config_from_dict
    from gemvtune.runners.cuda.seed import seed_source

    data = json.loads((Path(__file__).parent / "data" / "fp16_render_hashes.json").read_text())
    assert len(data["entries"]) > 400 and {e["config"]["family"] for e in data["entries"]} == {"gemv", "splitk", "mma", "ring"}
    changed, checked = [], 0
    for entry in data["entries"]:
        cfg, s = config_from_dict(entry["config"]), Shape(*entry["shape"])
        for key, want in entry["sha256"].items():
            out, _, bias = key.partition(".")
            e = Epilogue(out, bias == "bias")
            checked += 1
            if hashlib.sha256(render(cfg, s, e).encode()).hexdigest() != want:
                changed.append(f"{cfg.label}{e.label} {s}")
    for n, want in data["seed_llamacpp"].items():
        checked += 1
        if hashlib.sha256(seed_source(int(n)).encode()).hexdigest() != want:
            changed.append(f"seed n={n}")
    assert checked > 700 and not changed, changed[:5]


# Every template family's seed, fallbacks and 8 seeded valid configs on 3 shapes, with every epilogue each can fuse:
# the digest of their sources as rendered before the family modules declared their own registry entries (render
# values and complexity moved onto the config classes). A change here changes the compile cache, the committed
# measurements' sources and exported headers.
SAMPLE_SOURCES, SAMPLE_DIGEST = 424, "e6c14706c7592e3930740342fd6cd79aa2878aed7a589be4a21dd217a3e07686"


def test_a_sample_of_every_family_renders_the_same_bytes():
    import hashlib
    import random

    from gemvtune.kernels.epilogue import ALL_EPILOGUES
    from gemvtune.kernels.families import FAMILIES

    h, count = hashlib.sha256(), 0
    for name, fam in FAMILIES.items():
        if fam.library:
            continue
        rng = random.Random(name)
        for s in (Shape(4096, 4096, 1), Shape(100, 4104, 5, "bf16"), Shape(14336, 4096, 16)):
            pool = list(fam.all_configs())
            valid = [c for c in rng.sample(pool, min(len(pool), 600)) if c.is_valid(s)][:8]
            for c in [fam.seed, *(c for c, _ in fam.fallbacks), *valid]:
                for e in ALL_EPILOGUES:
                    if c.is_valid(s) and not e.shape_reasons(s) and not e.invalid_reasons(c):
                        h.update(hashlib.sha256(render(c, s, e).encode()).digest())
                        count += 1
    assert (count, h.hexdigest()) == (SAMPLE_SOURCES, SAMPLE_DIGEST)
