"""Keeping a table fresh: ``stale`` lists the entries worth re-tuning without a GPU (a family searched with less
than the default budget that did not measure its whole space, a config the cost model predicts 3% faster than
both the winner's predicted time and its recorded one, or the other dtype's winner, the same kernel in this dtype,
recorded 2% faster and never measured for this entry), and ``recheck`` re-measures every entry's winner and its
cuBLAS baselines on this GPU in one process, interleaved, flagging a winner whose time drifted by more than 3% from
the table's record or that lost to cuBLAS."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from ..baselines import cublas_of
from ..kernels.families import FAMILIES
from ..kernels.shapes import Shape
from ..runtime.entry import Entry, SearchRecord
from ..runtime.route import measured
from ..runtime.table import Table

DRIFT = 0.03        # a re-measured winner this far from its record is flagged
PREDICTED = 0.03    # a predicted best this much faster than the winner (predicted and recorded) marks the entry stale
DTYPE_GAP = 0.02    # the other dtype's winner, the same kernel here, recorded this much faster marks the entry stale


def _measured(entry: Entry) -> list[Any]:
    """The configs an entry's confirmation measured (its winner and candidates; unreadable records skipped)."""
    out = []
    for c in [entry.winner, *entry.candidates]:
        try:
            out.append(c.config_object())
        except Exception:   # (not a dict, no config, a family or value this version cannot read)
            continue
    return out


def _dtype_gap(table: Table, shape: Shape, entry: Entry) -> str:
    """Why the other dtype's entry of (M, d, n) suggests a re-tune ("" when it does not): its winner is the same
    kernel in this dtype (``for_dtype`` leaves it as it is: no FP16 accumulator turned FP32), this entry never
    measured it, and its recorded time is ``DTYPE_GAP`` under this winner's. The same config runs at the same
    speed in FP16 and BF16 (H200, 2026-12-02, runs/issue21d/probe); a re-search takes it as an incumbent."""
    from ..kernels.families import for_dtype
    from ..kernels.shapes import DTYPES

    rec = entry.winner.us
    for dt in DTYPES:
        if dt == shape.dtype:
            continue
        other = table.entry(Shape(shape.M, shape.d, shape.n, dt))
        if not other:
            continue
        try:
            cfg = other.winner_config()
        except Exception:   # (an entry this version cannot read gives no hint)
            continue
        us = other.winner.us
        if (for_dtype(cfg, shape.dtype) != cfg or not cfg.is_valid(shape) or cfg in _measured(entry)
                or not isinstance(us, (int, float)) or not isinstance(rec, (int, float)) or rec <= us * (1 + DTYPE_GAP)):
            continue
        return (f"the {dt.upper()} entry's winner {cfg.label} (the same kernel in {shape.dtype.upper()}, never measured "
                f"for this entry) recorded {us:.2f} µs, {100 * (rec / us - 1):.1f}% under this winner's {rec:.2f} µs")
    return ""


def _short_families(search: SearchRecord, budget: int) -> str:
    """Which of a search's families measured fewer trials than ``budget`` without measuring their whole space
    ("" when none). A record without per-family counts (older searches) is judged by its total."""
    per = search.family_trials
    whole = search.space_measured   # families; one bool for all in the searches of 2026-12-02 morning
    if per is not None:
        done = set(whole) if isinstance(whole, tuple) else set(per) if whole is True else set()
        short = {f: n for f, n in per.items() if isinstance(n, int) and n < budget and f not in done}
        return ", ".join(f"{f} {n} measured trials" for f, n in short.items())
    trials = search.measured_trials   # the studies' measured trials (resumed studies count whole)
    if isinstance(trials, int) and trials < budget and whole is not True:
        return f"{trials} measured trials in its studies"
    return ""


def stale(table: Table, model: Any = None, default_trials: int | None = None) -> list[dict[str, Any]]:
    """One row per entry that should be searched again, with why."""
    from .search_options import DEFAULT_TRIALS

    budget = DEFAULT_TRIALS if default_trials is None else default_trials
    rows = []
    for key in table.keys():
        shape = Shape(*key)
        e = table.entry(shape)
        if e is None:
            continue
        why = []
        short = _short_families(e.search, budget)
        if short:
            why.append(f"{short} (< the default budget {budget})")
        gap = _dtype_gap(table, shape, e)
        if gap:
            why.append(gap)
        cfg = e.winner_config()
        if model is not None and not FAMILIES[cfg.family].library and not shape.weights:
            from ..model.zerotrial import candidates

            cands = candidates(table, shape)
            (best, best_us), = model.rank(cands + [cfg], shape, 1)
            (won_us,) = model.predict_us([(cfg, shape)])
            rec = e.winner.us
            # Both: the prediction against the winner's prediction cancels the model's error on the shape, and
            # against the recorded time it guards against the model's error on the winner's config (a record is
            # the best of its measurements; the model predicts a config's typical time, so it over-predicts
            # winners, most on configs it has few measurements of).
            beats_rec = not isinstance(rec, (int, float)) or rec > best_us * (1 + PREDICTED)
            if won_us > best_us * (1 + PREDICTED) and beats_rec:
                why.append(f"the cost model predicts {best.label} at {best_us:.2f} µs, {100 * (won_us / best_us - 1):.1f}% "
                           f"faster than the winner's predicted {won_us:.2f} µs"
                           + (f" and {100 * (rec / best_us - 1):.1f}% faster than its recorded {rec:.2f} µs"
                              if isinstance(rec, (int, float)) else ""))
        if why:
            rows.append({"shape": str(shape), "M": shape.M, "d": shape.d, "n": shape.n, "winner": cfg.label,
                         "why": "; ".join(why)})
    return rows


def recheck(runner: Any, table: Table, shapes: list[Shape], rounds: int = 2, framework: str = "torch",
            echo: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Per entry, in one process: the table's winner and the cuBLAS baselines re-measured ``rounds`` times,
    interleaved (the winner verified in the first round); one row with the table's and today's medians."""
    rows = []
    for shape in shapes:
        e = table.entry(shape)
        if e is None:
            continue
        cfg = e.winner_config()
        rec_tuned = e.winner.us
        _, rec_cublas, _ = measured(e, framework, shape)
        tuned, cublas, status = [], [], "ok"
        for r in range(rounds):
            m = runner.measure(cfg, shape, kind="tuned", verify=r == 0)
            if not m.ok:
                status = f"{m.status}: {m.error}"[:300]
                break
            tuned.append(m.us_median)
            got = {b.kind: b for b in runner.baselines(shape)}
            base = cublas_of(got, framework)
            if base is not None and base.ok:
                cublas.append(base.us_median)
        now_t = statistics.median(tuned) if tuned else float("nan")
        now_c = statistics.median(cublas) if cublas else float("nan")
        flags = []
        if status != "ok":
            flags.append(f"winner failed: {status}")
        if isinstance(rec_tuned, (int, float)) and rec_tuned > 0 and now_t == now_t:
            drift = now_t / rec_tuned - 1
            if abs(drift) > DRIFT:
                flags.append(f"winner drifted {100 * drift:+.1f}% from the table's {rec_tuned:.2f} µs")
        else:
            drift = float("nan")
        if now_t == now_t and now_c == now_c and now_t >= now_c:
            flags.append(f"lost to cuBLAS ({now_t:.2f} against {now_c:.2f} µs)")
        row = {"shape": str(shape), "M": shape.M, "d": shape.d, "n": shape.n, "winner": cfg.label,
               "family": cfg.family, "table_us": rec_tuned, "now_us": now_t, "drift_pct": 100 * drift,
               "table_cublas_us": rec_cublas, "now_cublas_us": now_c, "x_cublas_now": now_c / now_t if now_t else float("nan"),
               "flags": "; ".join(flags)}
        rows.append(row)
        echo(f"{shape!s:>16s} {cfg.label:<44s} table {rec_tuned or float('nan'):8.2f} now {now_t:8.2f} µs "
             f"({row['drift_pct']:+.1f}%)  cuBLAS now {now_c:8.2f}  {'FLAG: ' + row['flags'] if flags else 'ok'}")
        runner.release()
    return rows
