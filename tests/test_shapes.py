import pytest

from gemvtune import Shape, UsageError, model_shapes, parse_batches, parse_shape
from gemvtune.shapes import DECODE_SUITE, MODELS


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
        shapes = model_shapes(name)
        assert shapes and len(set(shapes)) == len(shapes)
    assert Shape(14336, 4096) not in model_shapes("llama-3-8b")  # fused gate_up is 28672
    assert Shape(4096, 14336) in model_shapes("llama-3-8b")
    with pytest.raises(UsageError, match="unknown model"):
        model_shapes("gpt-5")
    assert len(DECODE_SUITE) == 7
