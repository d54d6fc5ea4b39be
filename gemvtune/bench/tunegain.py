"""The measured gain a whole-model tune ends with (``gemvtune tune``): the step's shapes in ``bench guard``'s
independent harness, stock ``nn.Linear`` against the swapped layers (FP8 weights: dequantize + F.linear against the
FP8 layers), weighted by each shape's launches per step."""

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
    by_kind: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for s in steps:
        pairs = by_kind.setdefault((s.shape.dtype, s.shape.weights), [])
        if (s.shape.M, s.shape.d) not in pairs:
            pairs.append((s.shape.M, s.shape.d))
    batches = sorted({s.shape.n for s in steps})
    rows: list[dict[str, Any]] = []
    for (dt, weights), shapes in by_kind.items():
        rows += run_guard(shapes, batches, [dt], t, table.parent / "benchmarks", rounds=rounds, replays=replays,
                          echo=echo, command="gemvtune tune (measured gain)", weights=weights).rows
    return step_gain(rows, steps)


def step_gain(rows: Sequence[dict[str, Any]], steps: Sequence[Step]) -> float | None:
    """Σ calls × stock µs / Σ calls × gemvtune µs over the steps with a measured row of their (M, d, n, dtype,
    weights) (an ERROR row has no times: its step is left out); None where no step has one."""
    import math

    by = {(int(r["M"]), int(r["d"]), int(r["n"]), str(r["dtype"]), str(r.get("weights") or "")): r for r in rows}
    stock = mine = 0.0
    for s in steps:
        got = by.get((s.shape.M, s.shape.d, s.shape.n, s.shape.dtype, s.shape.weights))
        if got is None:
            continue
        a, b = float(got.get("stock_us") or math.nan), float(got.get("gemvtune_us") or math.nan)
        if not (math.isfinite(a) and math.isfinite(b) and a > 0 and b > 0):
            continue
        stock += s.calls * a
        mine += s.calls * b
    return stock / mine if mine else None
