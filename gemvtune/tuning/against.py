"""Two tables side by side on this GPU, in one process (``gemvtune check --table A --against B``, ``gemvtune tune
--against B``): per shape both hold, what each table's route runs for a torch caller (its tuned kernel, or cuBLAS)
re-measured in interleaved rounds, the first table's time over the second's, and the weighted total (a decode
step's, where each shape's launches per step are given). A shape where the first is more than ``WITHIN`` slower is
flagged: a re-tune (a budgeted one, say) that did not reach what the other table holds."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

from ..baselines import cublas_of
from ..kernels.shapes import Shape

WITHIN = 0.02


def _contender(table: Any, shape: Shape) -> Any:
    """The config a table's route runs for ``shape`` (a torch caller), or None for cuBLAS."""
    from ..runtime.route import choose

    r = choose(table, shape.M, shape.d, shape.n, dtype=shape.dtype)
    return r.config if r.tuned else None


def side_by_side(runner: Any, table: Any, other: Any, shapes: Sequence[Shape], rounds: int = 3,
                 weights: dict[Shape, float] | None = None, echo: Callable[[str], None] = print
                 ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(one row per shape, the weighted total): each table's route measured ``rounds`` times, interleaved with the
    other's and with cuBLAS (verified in the first round); each side's spread over its rounds ((max - min) / median)
    is reported beside the ratio, which is flagged beyond ``WITHIN`` whatever the spreads."""
    rows = []
    for shape in shapes:
        picks = {"table": _contender(table, shape), "against": _contender(other, shape)}
        times: dict[str, list[float]] = {"table": [], "against": [], "cublas": []}
        status = "ok"
        for r in range(rounds):
            got: dict[Any, float] = {}
            for cfg in dict.fromkeys(c for c in picks.values() if c is not None):
                m = runner.measure(cfg, shape, kind="tuned", verify=r == 0)
                if not m.ok:
                    status = f"{cfg.label}: {m.status}: {m.error}"[:300]
                    break
                got[cfg] = m.us_median
            b = cublas_of({x.kind: x for x in runner.baselines(shape)}, "torch", ok=lambda x: x.ok)
            if status != "ok" or b is None:
                status = status if status != "ok" else "cuBLAS did not measure"
                break
            times["cublas"].append(b.us_median)
            for k, cfg in picks.items():
                times[k].append(got[cfg] if cfg is not None else b.us_median)
        med = {k: statistics.median(v) if v else float("nan") for k, v in times.items()}
        spr = {k: (max(v) - min(v)) / med[k] if v and med[k] > 0 else float("nan") for k, v in times.items()}
        ratio = med["table"] / med["against"] if med["against"] == med["against"] and med["against"] else float("nan")
        flag = status if status != "ok" else (f"{100 * (ratio - 1):+.1f}% against the other table"
                                              if ratio > 1 + WITHIN else "")
        row: dict[str, Any] = {"shape": str(shape), "M": shape.M, "d": shape.d, "n": shape.n, "dtype": shape.dtype,
               "weight": (weights or {}).get(shape, 1.0),
               "table_route": picks["table"].label if picks["table"] is not None else "cublas",
               "against_route": picks["against"].label if picks["against"] is not None else "cublas",
               "table_us": med["table"], "against_us": med["against"], "cublas_us": med["cublas"],
               "table_spread": spr["table"], "against_spread": spr["against"], "ratio": ratio, "flags": flag}
        rows.append(row)
        echo(f"{shape!s:>16s} {row['table_route']:<40s} {med['table']:8.2f}  {row['against_route']:<40s} "
             f"{med['against']:8.2f} µs  x{ratio:.3f} (rounds' spreads {100 * spr['table']:.1f}% + "
             f"{100 * spr['against']:.1f}%)  {'FLAG: ' + flag if flag else 'ok'}")
        runner.release()
    ok = [r for r in rows if r["ratio"] == r["ratio"]]
    a = sum(float(r["weight"]) * float(r["table_us"]) for r in ok)
    b = sum(float(r["weight"]) * float(r["against_us"]) for r in ok)
    c = sum(float(r["weight"]) * float(r["cublas_us"]) for r in ok)
    total = {"shapes": len(ok), "table_us": a, "against_us": b, "cublas_us": c,
             "ratio": a / b if b else float("nan"), "within": bool(b) and a <= b * (1 + WITHIN)}
    return rows, total
