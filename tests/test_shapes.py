import pytest

from gemvtune import Shape, UsageError, model_shapes, parse_batches, parse_shape
from gemvtune.kernels.hfconfig import MODELS
from gemvtune.kernels.shapes import DECODE_SUITE


def test_parse_good():
    assert parse_shape("14336x4096") == Shape(14336, 4096, 1)
    assert parse_shape(" 7X8 ") == Shape(7, 8)
    assert parse_shape("1x1", n=4) == Shape(1, 1, 4)


@pytest.mark.parametrize("text", ["14336", "14336x", "x4096", "0x4096", "-8x4096", "1.5x4096", "abcxdef",
                                  "14336x4096x", "", "14336x0", "4096*4096", "0x0", "1e3x4096"])
def test_parse_bad(text):
    with pytest.raises(UsageError) as e:
        parse_shape(text)
    assert "\n" not in str(e.value)


def test_too_large_for_any_gpu():
    with pytest.raises(UsageError, match="more than any GPU holds"):
        parse_shape("1000000x1000000")
    with pytest.raises(UsageError, match="below 2"):
        parse_shape(f"{2**31}x1")


def test_shape_fields_checked():
    with pytest.raises(UsageError):
        Shape(4096, 4096, 0)
    with pytest.raises(UsageError):
        Shape("4096", 4096)  # type: ignore[arg-type]
    with pytest.raises(UsageError):
        Shape(True, 4096)  # type: ignore[arg-type]


def test_bytes():
    s = Shape(14336, 4096)
    assert s.weight_bytes == 14336 * 4096 * 2
    assert s.bytes_moved == 14336 * 4096 * 2 + 4096 * 2 + 14336 * 4


@pytest.mark.parametrize("text,want", [("1", [1]), ("1,2,4", [1, 2, 4]), ("4, 1,4", [1, 4]), ("16", [16])])
def test_batches(text, want):
    assert parse_batches(text) == want


@pytest.mark.parametrize("text", ["0", "-1", "1,,2", "a", "17", "1.5", ""])
def test_batches_bad(text):
    with pytest.raises(UsageError):
        parse_batches(text)


def test_models():
    for name in MODELS:
        for fused in (False, True):
            shapes = model_shapes(name, fused=fused)
            assert shapes and len(set(shapes)) == len(shapes)
    # the default is transformers' unfused layers: gate/up 14336x4096, k/v 1024x4096
    assert model_shapes("llama-3-8b") == [Shape(4096, 4096), Shape(1024, 4096), Shape(14336, 4096),
                                          Shape(4096, 14336), Shape(128256, 4096)]
    # fused, as engines run them: qkv 6144x4096, gate_up 28672x4096
    assert model_shapes("llama-3-8b", fused=True) == [Shape(6144, 4096), Shape(4096, 4096), Shape(28672, 4096),
                                                      Shape(4096, 14336), Shape(128256, 4096)]
    assert model_shapes("llama-3-8b", n=4, fused=True)[0] == Shape(6144, 4096, 4)
    assert Shape(14336, 4096) not in model_shapes("llama-3-8b", fused=True)
    with pytest.raises(UsageError, match="unknown model"):
        model_shapes("gpt-5")
    with pytest.raises(UsageError, match="unknown model"):
        model_shapes(["llama-3-8b"])  # type: ignore[arg-type]
    assert len(DECODE_SUITE) == 7


def test_models_mapping_is_the_fused_step():
    """MODELS[name] is the engine's decode step (fused), derived from the packaged config.json; these
    are the lists that were hard-coded before the configs."""
    assert list(MODELS) == ["llama-3-8b", "llama-3-70b", "qwen2.5-7b", "mistral-7b", "mistral-nemo-12b"]
    assert len(MODELS) == 5 and "llama-3-8b" in MODELS and "gpt-5" not in MODELS and 3 not in MODELS
    assert MODELS["llama-3-8b"] == [("qkv", 6144, 4096), ("o", 4096, 4096), ("gate_up", 28672, 4096),
                                    ("down", 4096, 14336), ("lm_head", 128256, 4096)]
    assert MODELS["llama-3-70b"] == [("qkv", 10240, 8192), ("o", 8192, 8192), ("gate_up", 57344, 8192),
                                     ("down", 8192, 28672), ("lm_head", 128256, 8192)]
    assert MODELS["qwen2.5-7b"] == [("qkv", 4608, 3584), ("o", 3584, 3584), ("gate_up", 37888, 3584),
                                    ("down", 3584, 18944), ("lm_head", 152064, 3584)]
    assert MODELS["mistral-nemo-12b"] == [("qkv", 6144, 5120), ("o", 5120, 4096), ("gate_up", 28672, 5120),
                                          ("down", 5120, 14336), ("lm_head", 131072, 5120)]
    assert MODELS["mistral-7b"][-1] == ("lm_head", 32000, 4096)
    with pytest.raises(KeyError):
        MODELS["gpt-5"]
    assert MODELS.get("gpt-5") is None
