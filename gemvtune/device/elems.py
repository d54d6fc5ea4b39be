"""The element types of W, x, bias and y on the device, as NumPy/CuPy arrays. FP16 and FP32 are native dtypes;
BF16 is not (CuPy has no bfloat16), so a BF16 array is uint16 holding the bits. Every function works on NumPy
and CuPy arrays alike (only array methods), so the conversions are tested on the CPU."""

from __future__ import annotations

from typing import Any

BF16_NAN = 0x7FC0   # a quiet NaN's bits: the poison a BF16 output is filled with before a launch


def bf16_bits(f32: Any) -> Any:
    """FP32 values to BF16 bits (uint16), rounded to nearest even (NaN stays NaN)."""
    u = f32.astype("float32").view("uint32")
    r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    nan = f32 != f32
    return r.astype("uint16") * ~nan + nan.astype("uint16") * BF16_NAN


def bf16_values(bits: Any) -> Any:
    """BF16 bits (uint16) to their FP32 values (exact)."""
    return (bits.astype("uint32") << 16).view("float32")


def storage_dtype(dtype: str) -> str:
    """The array dtype an element type is stored as: float16, uint16 (BF16 bits) or float32."""
    return {"fp16": "float16", "bf16": "uint16", "fp32": "float32"}[dtype]


def from_float32(f32: Any, dtype: str) -> Any:
    """FP32 values to an array of element type ``dtype`` (rounded to nearest)."""
    return bf16_bits(f32) if dtype == "bf16" else f32.astype(storage_dtype(dtype))


def to_float64(a: Any, dtype: str) -> Any:
    """An array of element type ``dtype`` to float64 values (exact)."""
    return (bf16_values(a) if dtype == "bf16" else a).astype("float64")


def nan_fill(xp: Any, shape: Any, dtype: str) -> Any:
    """A new ``xp`` (numpy or cupy) array of element type ``dtype``, every element NaN (the unwritten poison)."""
    if dtype == "bf16":
        return xp.full(shape, BF16_NAN, dtype=xp.uint16)
    return xp.full(shape, xp.nan, dtype=storage_dtype(dtype))
