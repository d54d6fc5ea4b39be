"""The route of an FP8-weight call the table has not measured (``route.choose``): (M, d, n) not in the table, or
tuned at other batch sizes only.

What it replaces is dequantize + F.linear (``gemvtune.runtime.fp8linear``), which writes and reads back the whole
weight in 16 bits on every call before cuBLAS reads it again: on the H200 the FP8 kernels ran it 6.3–25× slower
than themselves on every (shape, n) of the committed table (2026-12-05, ``gemvtune bench fp8``). So where the
table's own FP8 entries of the same format and dtype all measured their kernel at least ``EVIDENCE`` times faster
than dequantize + F.linear (and there are at least ``ENTRIES`` of them), an untuned FP8 call runs an FP8 kernel too:
the table's pick for the shape (``Table.lookup``: the winner tuned at the nearest n of the same (M, d) within a
factor of 2, else the nearest tuned shape at this n, else the same (M, d)'s winner at a farther n, else the family's
default), never measured on it, and the route says so. Otherwise
(another GPU's few entries, a table whose FP8 kernels barely won) dequantize + F.linear runs. ``bench guard
--weights`` measures both in a harness of its own."""

from __future__ import annotations

from typing import Any

EVIDENCE = 2.0     # every FP8 entry of the format and dtype: its kernel at least this many times faster than dequant
ENTRIES = 2        # ... over at least this many entries


def untuned(table: Any, shape: Any, out: str, missing: str, ratios: list[float]) -> tuple[Any, str]:
    """(the config to run, or None: dequantize + F.linear; why) for an FP8 call of ``shape`` the table has not
    measured. ``missing``: what the table lacks, in words (the start of why); ``ratios``: dequantize + F.linear µs
    / the route's kernel µs of every FP8 entry of the shape's format and dtype that measured both (``route.choose``;
    an entry routed to dequantize counts with its own ratio, below 1 where it lost)."""
    from ..errors import UsageError
    from ..kernels.epilogue import Epilogue

    fmt = f"{shape.weights} {shape.dtype}"
    if len(ratios) < ENTRIES or min(ratios) < EVIDENCE:
        seen = (f"its {len(ratios)} {fmt} entries measured their kernels x{min(ratios):.2f}..x{max(ratios):.2f} "
                f"dequantize + F.linear" if ratios else f"it measured no {fmt} kernel")
        return None, (f"{missing}, and {seen} (an untuned FP8 call runs a kernel only where every entry measured at "
                      f"least x{EVIDENCE:g} over at least {ENTRIES} entries): dequantize + F.linear runs")
    try:
        cfg, how = table.lookup(shape)
    except UsageError as e:
        return None, f"{missing}: no FP8 kernel can run it ({e}): dequantize + F.linear runs"
    why = cfg.invalid_reasons(shape) or Epilogue(out).invalid_reasons(cfg) or [r for r in [cfg.chain_only()] if r]
    if why:
        return None, f"{missing}: the table's pick {cfg.label} cannot run it here ({why[0]}): dequantize + F.linear runs"
    return cfg, (f"{missing}: the {how} ({cfg.label}) runs, never measured on this shape, because the table's "
                 f"{len(ratios)} {fmt} entries measured their FP8 kernels x{min(ratios):.1f}..x{max(ratios):.1f} "
                 "faster than dequantize + F.linear")


__all__ = ["ENTRIES", "EVIDENCE", "untuned"]
