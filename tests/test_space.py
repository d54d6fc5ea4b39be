import json

import pytest

from gemvtune import LLAMA_CPP, GemvConfig, Shape, UsageError, parse_config, sample_configs
from gemvtune.kernels.families import load_configs
from gemvtune.kernels.gemv import DOMAINS, all_configs
from gemvtune.kernels.shapes import DECODE_SUITE


def test_llama_point():
    assert LLAMA_CPP == GemvConfig(block=256, vec="half2", acc="fp32", tpr=256, unroll=1, split_k=1,
                                   hint="default", x_load="ldg")
    assert LLAMA_CPP.rows_per_block == 1
    for M, d in DECODE_SUITE:
        assert LLAMA_CPP.is_valid(Shape(M, d))
    assert LLAMA_CPP.grid(Shape(14336, 4096)) == (14336, 1, 1)


def test_domains_cover_issue():
    assert DOMAINS["block"] == (32, 64, 128, 256, 512, 1024)
    assert set(DOMAINS["vec"]) == {"half", "half2", "half4", "half8"}
    assert set(DOMAINS["acc"]) == {"fp32", "fp16"}
    assert sum(1 for _ in all_configs()) == 345600


@pytest.mark.parametrize("cfg,shape,needle", [
    (GemvConfig(vec="half8"), Shape(64, 4100), "not divisible by the half8 width"),
    (GemvConfig(block=64, tpr=128), Shape(64, 4096), "exceed the block"),
    (GemvConfig(split_k=16, tpr=256), Shape(64, 4096), "vectors per split"),
    (GemvConfig(unroll=8, tpr=256), Shape(64, 2048), "unrolled loop would never run"),
    (GemvConfig(x_load="smem", vec="half8", tpr=32), Shape(64, 32768), "shared memory"),
    (GemvConfig(x_load="smem", vec="half8", tpr=32), Shape(64, 4096, 16), "16 column(s)"),
    (GemvConfig(acc="fp16", tpr=32, block=32, vec="half2", unroll=4), Shape(64, 4096, 2), "fp16 accumulation chains"),
    (GemvConfig(split_k=4, vec="half8", tpr=2), Shape(8, 16), "split_k=4 exceeds"),
    (GemvConfig(acc="fp16", tpr=4, block=32, vec="half8"), Shape(64, 4096), "fp16 accumulation chains"),
    (GemvConfig(acc="fp16", tpr=32, block=256, vec="half2", unroll=4), Shape(64, 4096, 1, "bf16"),
     "a BF16 accumulator is invalid: 8 significant bits lose the sum (acc=fp16 is for FP16 inputs only)"),
])
def test_invalid_reasons(cfg, shape, needle):
    r = cfg.invalid_reasons(shape)
    assert r and any(needle in x for x in r), r
    assert not cfg.is_valid(shape)


def test_valid_examples():
    assert GemvConfig(vec="half8", tpr=8, unroll=4, split_k=2, x_load="smem").is_valid(Shape(7, 4104))
    assert GemvConfig(vec="half", tpr=2, block=32).is_valid(Shape(1, 1))
    assert GemvConfig(x_load="smem", vec="half8", tpr=32).is_valid(Shape(64, 16384))
    assert GemvConfig(acc="fp16", tpr=32, block=256, vec="half2", unroll=4).is_valid(Shape(64, 4096))   # FP16 inputs
    assert GemvConfig(vec="half8", tpr=8, unroll=4, split_k=2, x_load="smem").is_valid(Shape(7, 4104, 1, "bf16"))


def test_domain_errors_and_from_dict():
    with pytest.raises(UsageError, match="unknown gemv parameter"):
        GemvConfig.from_dict({"blocks": 256})
    with pytest.raises(UsageError, match="block=100"):
        GemvConfig.from_dict({"block": 100})
    with pytest.raises(UsageError, match="vec='half16'"):
        GemvConfig.from_dict({"vec": "half16"})
    with pytest.raises(UsageError):
        GemvConfig.from_dict({"unroll": True})
    with pytest.raises(UsageError, match="JSON object"):
        GemvConfig.from_dict([1, 2])
    c = GemvConfig(vec="half8", tpr=16)
    assert GemvConfig.from_dict(json.loads(json.dumps(c.to_dict()))) == c


@pytest.mark.parametrize("evil", [
    {"hint": 'default"); asm("trap;'},
    {"vec": "half2 {{ 7*7 }}"},
    {"x_load": "{% include '/etc/passwd' %}"},
    {"block": "256; __trap();"},
])
def test_no_user_text_reaches_source(evil):
    with pytest.raises(UsageError):
        GemvConfig.from_dict(evil)


def test_parse_config_forms():
    assert parse_config("llama") == LLAMA_CPP
    assert parse_config("vec=half8,tpr=32") == GemvConfig(vec="half8", tpr=32)
    assert parse_config('{"vec": "half4", "unroll": 2}') == GemvConfig(vec="half4", unroll=2)
    for bad in ["vec", "{not json", "tpr=3", "color=red"]:
        with pytest.raises(UsageError):
            parse_config(bad)


def test_load_configs(tmp_path):
    p = tmp_path / "c.json"
    p.write_text(json.dumps([LLAMA_CPP.to_dict(), {"vec": "half8", "tpr": 8}]))
    assert load_configs(str(p)) == [LLAMA_CPP, GemvConfig(vec="half8", tpr=8)]
    p.write_text("[{\"vec\": \"half9\"}]")
    with pytest.raises(UsageError):
        load_configs(str(p))
    p.write_text("[")
    with pytest.raises(UsageError, match="not valid JSON"):
        load_configs(str(p))
    with pytest.raises(UsageError, match="does not exist"):
        load_configs(str(tmp_path / "missing.json"))


@pytest.mark.slow  # samples and checks thousands of configs
def test_sample_is_seeded_and_valid():
    s = Shape(14336, 4096)
    a, b = sample_configs(s, 50, seed=3), sample_configs(s, 50, seed=3)
    assert a == b and a[0] == LLAMA_CPP and len(set(a)) == 50
    assert all(c.is_valid(s) for c in a)
    assert sample_configs(s, 50, seed=4) != a


def test_fp16_chain():
    # llama.cpp point at d=4096: 2048 half2 vectors over 256 threads -> 8 per thread, 8 FMAs per lane.
    assert LLAMA_CPP.fp16_chain(4096) == 8
    assert GemvConfig(vec="half", tpr=4, block=32).fp16_chain(4096) == 1024
    # unroll spreads the loads over independent accumulators: 32 vectors per thread / 4 slots
    assert GemvConfig(unroll=4, tpr=64).fp16_chain(4096) == 8
    assert GemvConfig(acc="fp16", unroll=4, tpr=64).is_valid(Shape(64, 4096))
