"""The measured gain a whole-model tune ends with (``gemvtune tune``): the step's shapes in ``bench guard``'s
independent harness, stock ``nn.Linear`` against the swapped layers, weighted by each shape's launches per step."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..tuning.tunerun import Step


def guard_gain(table: Path, steps: Sequence[Step], echo: Callable[[str], None], rounds: int = 3,
               replays: int = 5) -> float | None:
    """The step's gain over stock ``nn.Linear`` in ``bench guard``'s harness (torch CUDA graphs over weight copies,
    no gemvtune runner): Σ calls × stock / Σ calls × swapped, over the step's shapes. None without torch."""
    try:
        import torch  # noqa: F401
    except ImportError:
        echo("the measured gain needs torch (bench guard's harness): not measured")
        return None
    from ..bench.guard import run_guard
    from ..runtime.table import load_table

    t = load_table(table)
    by_dtype: dict[str, list[tuple[int, int]]] = {}
    for s in steps:
        by_dtype.setdefault(s.shape.dtype, [])
        if (s.shape.M, s.shape.d) not in by_dtype[s.shape.dtype]:
            by_dtype[s.shape.dtype].append((s.shape.M, s.shape.d))
    batches = sorted({s.shape.n for s in steps})
    rows: dict[tuple[int, int, int, str], dict[str, Any]] = {}
    for dt, shapes in by_dtype.items():
        r = run_guard(shapes, batches, [dt], t, table.parent / "benchmarks", rounds=rounds, replays=replays,
                      echo=echo, command="gemvtune tune (measured gain)")
        for row in r.rows:
            rows[(int(row["M"]), int(row["d"]), int(row["n"]), str(row["dtype"]))] = row
    stock = mine = 0.0
    for s in steps:
        got = rows.get((s.shape.M, s.shape.d, s.shape.n, s.shape.dtype))
        if got is None or not got.get("stock_us") or not got.get("gemvtune_us"):
            continue
        stock += s.calls * float(got["stock_us"])
        mine += s.calls * float(got["gemvtune_us"])
    return stock / mine if mine else None
