"""The checks of one field of a Hugging Face ``config.json``: a positive integer, a flag, a list of layer indices. Each
bad value is one UsageError naming the file (``where``) and the field; shared by the dense reader
(``gemvtune.kernels.hfconfig``) and the expert and latent-attention reader (``gemvtune.kernels.hfmoe``)."""

from __future__ import annotations

import json
from typing import Any

from ..errors import UsageError


def show(v: Any) -> str:
    """A value for an error line: short, one line."""
    text = json.dumps(v) if not isinstance(v, (dict, list)) else type(v).__name__
    return text if len(text) <= 40 else text[:37] + "..."


def size(data: dict, field: str, where: str, default: int | None = None) -> int:
    """A positive integer field; a bool, a float (even 4096.0) or a string is refused. null or absent
    takes ``default``; absent without one is a missing required field."""
    v = data.get(field)
    if v is None:
        if default is None:
            raise UsageError(f"{where}: required field {field!r} is {'missing' if field not in data else 'null'}")
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise UsageError(f"{where}: field {field!r} must be a positive integer, got {show(v)}")
    if v < 1:
        raise UsageError(f"{where}: field {field!r} must be a positive integer, got {v}")
    return v


def count(data: dict, field: str, where: str, default: int = 0) -> int:
    """A non-negative integer field (``n_shared_experts``, ``first_k_dense_replace``): 0 allowed, null or absent
    is ``default``."""
    v = data.get(field)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise UsageError(f"{where}: field {field!r} must be a non-negative integer, got {show(v)}")
    return v


def flag(data: dict, field: str, where: str, default: bool = False) -> bool:
    v = data.get(field)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise UsageError(f"{where}: field {field!r} must be true or false, got {show(v)}")
    return v


def layer_list(data: dict, field: str, where: str, layers: int) -> frozenset[int]:
    """A list of layer indices (``mlp_only_layers``), each in 0..layers-1; null or absent is none."""
    v = data.get(field)
    if v is None:
        return frozenset()
    if not isinstance(v, list) or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < layers
                                      for i in v):
        raise UsageError(f"{where}: field {field!r} must be a list of layer indices 0..{layers - 1}, got {show(v)}")
    return frozenset(v)
