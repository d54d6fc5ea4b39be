"""What the PyTorch drop-ins share: the check of a table argument, and the walk over a model's direct children
(``swap_linears``, ``quantize_fp8``, ``restore_linears``)."""

from __future__ import annotations

import os
from typing import Any

import torch


def check_table(table: Any, who: str) -> None:
    """A TypeError saying what was expected, for a table argument that is not a loaded gemvtune Table (or an
    object with its ``route``, as tests pass)."""
    if isinstance(table, type) or not callable(getattr(table, "route", None)):
        if isinstance(table, type):   # the class itself (gemvtune.Table), not a loaded table
            raise TypeError(f"{who}: table must be a gemvtune Table from load_table(path), got the class "
                            f"{table.__name__} itself")
        hint = " (load it first: gemvtune.load_table(path))" if isinstance(table, (str, os.PathLike)) else ""
        raise TypeError(f"{who}: table must be a gemvtune Table from load_table(path), got "
                        f"{type(table).__name__}{hint}")


def linear_children(model: torch.nn.Module):
    """(qualified name, parent, attribute name, child) for every direct child of every module."""
    for pname, parent in model.named_modules(remove_duplicate=False):
        for cname, child in list(parent.named_children()):
            yield (f"{pname}.{cname}" if pname else cname), parent, cname, child
