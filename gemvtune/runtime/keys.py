"""How a table names its entries: the key of a shape, and the shape of an entry (pure; imported by the table,
its schema and the router alike)."""

from __future__ import annotations

from typing import Any

from ..kernels.shapes import Shape


def entry_key(shape: Shape) -> str:
    """``MxDxn`` for FP16 (every table before BF16), ``MxDxn.bf16`` for another dtype, then ``.e4m3-row`` (or
    ``.e4m3-b128``) for FP8 weights."""
    return f"{shape.M}x{shape.d}x{shape.n}" + shape.dtype_suffix(".") + shape.weights_suffix(".")


def entry_shape(e: dict[str, Any]) -> Shape:
    """The shape of a table entry's JSON object (a table built in code; a loaded one's ``Entry.shape``); an entry
    without ``dtype`` is FP16, one without ``weights`` has W in its dtype."""
    return Shape(int(e["M"]), int(e["d"]), int(e.get("n") or 1), str(e.get("dtype") or "fp16"), str(e.get("weights") or ""))
