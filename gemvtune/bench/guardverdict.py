"""The pure half of ``gemvtune bench guard``: how many weight copies and calls a graph holds, the correctness
bound, the statistics of one row, the never-slower rule, and the markdown summary (frame in, text and verdict
out). No torch, no GPU: every function here is tested on the CPU.

The rule (``verdict``). Per row (shape, n, dtype) both contenders, stock ``nn.Linear`` and the same modules after
``swap_linears``, are timed in the same rounds, back to back (the order swapped every round). ``ratio`` is the
swapped layer's median µs per call over every replay divided by stock's; each round also gives a paired ratio
(the two round medians of that round). A row is

- ``FAIL``: ``ratio > 1 + MARGIN`` (slower than stock by more than 1%) **and** the lower quartile of its paired
  round ratios is above ``1 + MARGIN`` too: at least three rounds in four (linear interpolation between rounds)
  saw the swapped layer more than 1% slower, so the loss is beyond the paired noise;
- ``SLOW``: ``ratio > 1 + MARGIN`` but the lower quartile is not: slower by the medians, inside the paired noise.
  Listed in the summary, does not fail the run;
- ``ERROR``: a contender's output was not finite or not within ``error_bound`` of the float64 reference (eager or
  in its graph), or the row could not be measured: its times mean nothing;
- ``PASS`` otherwise.

The run fails (exit 1, ``gemvtune check``'s convention for a failed check) when any row is ``FAIL`` or ``ERROR``,
whichever way the row was routed: a row routed to cuBLAS runs ``F.linear`` inside the wrapper, the same kernel as
stock, so it must come out at 1.00, and a loss there is either the wrapper's cost or a bias of the harness, each of
which the promise (never slower than what the table replaces) rules out too.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

MARGIN = 0.01          # slower than stock by more than 1% ...
QUANTILE = 0.25        # ... in the lower quartile of the paired round ratios too: beyond the paired noise
VERDICTS = ("PASS", "SLOW", "FAIL", "ERROR")
FAILING = ("FAIL", "ERROR")

COPIES_FACTOR = 3      # the copies of one weight hold at least 3x the L2 (MEASURING.md): every call reads HBM
MIN_COPIES = 2
MAX_COPY_BYTES = 8 * 2**30   # the copies of one (shape, dtype) at most (and at most a quarter of free memory)
GRAPH_US = 1000.0      # each graph replay runs about this long (the replay's own gap stays far below 1% of it)
MAX_CALLS = 512
MAX_COPIES = MAX_CALLS // 2   # a graph passes over its copies at least twice
EST_GBPS = 4000.0      # a call's time estimated from its weight bytes at this rate (H200: ~4,476 GB/s ceiling)
MIN_CALL_US = 4.0

COLUMNS = ["shape", "M", "d", "n", "dtype", "weights", "route", "config", "launches", "route_why", "copies", "copies_capped",
           "calls_per_graph", "stock_us", "gemvtune_us", "ratio", "ratio_q25", "stock_spread", "gemvtune_spread",
           "round_ratios", "stock_relerr", "gemvtune_relerr", "stock_graph_relerr", "gemvtune_graph_relerr", "bound",
           "verified", "verdict", "error"]


def copies_for(weight_bytes: int, l2_bytes: int, free_bytes: int | None = None,
               cap_bytes: int = MAX_COPY_BYTES) -> tuple[int, bool]:
    """(K, capped): K weight copies whose bytes are at least ``COPIES_FACTOR`` x the L2 (at least ``MIN_COPIES``),
    unless that is more than ``MAX_COPIES`` copies (a tiny weight), ``cap_bytes`` or a quarter of ``free_bytes``:
    then as many as those allow (at least 1), and capped is True."""
    if weight_bytes <= 0:
        raise ValueError(f"weight_bytes must be positive, got {weight_bytes}")
    want = max(MIN_COPIES, math.ceil(COPIES_FACTOR * max(l2_bytes, 0) / weight_bytes))
    cap = cap_bytes if free_bytes is None else min(cap_bytes, free_bytes // 4)
    if want <= MAX_COPIES and want * weight_bytes <= cap:
        return want, False
    return max(1, min(MAX_COPIES, want, cap // weight_bytes)), True


def calls_per_graph(weight_bytes: int, copies: int, graph_us: float = GRAPH_US) -> int:
    """Calls captured in one graph: whole passes over the ``copies`` (at least two), enough that a replay runs
    about ``graph_us`` (a call estimated at its weight bytes over ``EST_GBPS``), at most ``MAX_CALLS``."""
    est = max(MIN_CALL_US, weight_bytes / (EST_GBPS * 1e3))
    passes = max(2, math.ceil(graph_us / (copies * est)))
    return max(copies, min(passes * copies, MAX_CALLS // copies * copies))


def estimate_seconds(shapes: Sequence[tuple[int, int]], batches: int, dtypes: int, rounds: int, replays: int,
                     l2_bytes: int = 60 * 2**20, per_row_s: float = 0.25, start_s: float = 20.0) -> float:
    """A rough run time: per (shape, n, dtype) both graphs' replays (each round one lead-in replay more) plus a
    fixed cost per row (warm-up, capture, the checks), plus the start (CUDA, the table, the compiles)."""
    total = start_s
    for M, d in shapes:
        wb = M * d * 2
        k = copies_for(wb, l2_bytes)[0]
        calls = calls_per_graph(wb, k)
        graph_s = calls * max(MIN_CALL_US, wb / (EST_GBPS * 1e3)) * 1e-6
        total += batches * dtypes * (2 * rounds * (replays + 1) * graph_s + per_row_s)
    return total


def error_bound(dtype: str, d: int) -> float:
    """The relative L2 error ‖y − ref‖ / ‖ref‖ (ref in float64) either contender may have: the loosest a correct
    kernel can be, FP16 accumulation (each __hfma2 rounds to FP16, u = 2^-11; chains of random terms add ~u·√(L/6);
    allowed 4·u·√(1 + d/3072)), plus twice the output's own rounding (y is stored in the weights' dtype: u_out =
    2^-11 for FP16, 2^-8 for BF16). cuBLAS may reduce in reduced precision too (torch's default for FP16). A wrong
    kernel is off by orders of magnitude more (one wrong element of y alone ~ 1/√M of the norm)."""
    from ..kernels.shapes import UNIT_ROUNDOFF

    return 4 * UNIT_ROUNDOFF["fp16"] * math.sqrt(1 + d / 3072) + 2 * UNIT_ROUNDOFF[dtype]


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile of ``values`` by linear interpolation between order statistics (numpy's default)."""
    xs = sorted(float(v) for v in values)
    if not xs:
        return math.nan
    pos = (len(xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def row_stats(stock_rounds: Sequence[Sequence[float]], gemvtune_rounds: Sequence[Sequence[float]]) -> dict[str, Any]:
    """From each contender's per-call µs of every replay, grouped by round (the same rounds, paired): the medians
    over every replay, the ratio gemvtune / stock, the paired per-round ratios and their lower quartile, and each
    contender's spread (max / min of its round medians)."""
    if len(stock_rounds) != len(gemvtune_rounds) or not stock_rounds or not all(stock_rounds) \
            or not all(gemvtune_rounds):
        raise ValueError("row_stats needs the same rounds of both contenders, each with at least one replay")
    s_all = [v for r in stock_rounds for v in r]
    g_all = [v for r in gemvtune_rounds for v in r]
    s_med = [statistics.median(r) for r in stock_rounds]
    g_med = [statistics.median(r) for r in gemvtune_rounds]
    stock_us, gem_us = statistics.median(s_all), statistics.median(g_all)
    ratios = [g / s for g, s in zip(g_med, s_med)]
    return {"stock_us": stock_us, "gemvtune_us": gem_us, "ratio": gem_us / stock_us,
            "round_ratios": ratios, "ratio_q25": quantile(ratios, QUANTILE),
            "stock_spread": max(s_med) / min(s_med), "gemvtune_spread": max(g_med) / min(g_med)}


def verdict(ratio: float, round_ratios: Sequence[float], verified: bool = True, margin: float = MARGIN) -> str:
    """The never-slower rule of one row (the module docstring): ERROR, FAIL, SLOW or PASS."""
    if not verified or not (ratio == ratio) or not round_ratios or any(r != r for r in round_ratios):
        return "ERROR"
    if ratio <= 1 + margin:
        return "PASS"
    return "FAIL" if quantile(round_ratios, QUANTILE) > 1 + margin else "SLOW"


def failing(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows that fail the run: FAIL or ERROR."""
    return [r for r in rows if r["verdict"] in FAILING]


def _label(r: dict[str, Any]) -> str:
    return f"{r['shape']} n={r['n']} {r['dtype']}" + (f" {r['weights']}" if r.get("weights") else "")


def failure_line(rows: Sequence[dict[str, Any]], where: str = "") -> str:
    """The one line the command ends with when the check failed ("" when it passed)."""
    bad = failing(rows)
    if not bad:
        return ""
    parts = [f"{_label(r)} {r['verdict']}" + (f" ×{r['ratio']:.3f}" if r["verdict"] == "FAIL" else "")
             for r in bad[:6]]
    more = f" and {len(bad) - 6} more" if len(bad) > 6 else ""
    return (f"bench guard: {len(bad)} of {len(rows)} rows failed the never-slower check (slower than stock by more "
            f"than {MARGIN:.0%} beyond the paired noise, or a wrong output): {', '.join(parts)}{more}"
            + (f"; see {where}" if where else ""))


def _geomean(xs: Sequence[float]) -> float:
    xs = [x for x in xs if x == x and x > 0]
    return statistics.geometric_mean(xs) if xs else math.nan


def _f(v: Any, spec: str = ".3f") -> str:
    return "-" if v is None or (isinstance(v, float) and v != v) else format(v, spec)


def _cell(r: dict[str, Any]) -> str:
    if r["verdict"] == "ERROR":
        return "ERR"
    text = _f(r["ratio"])
    text = f"**{text}**" if r["route"] == "tuned" else text
    return text + {"FAIL": " FAIL", "SLOW": " slow"}.get(r["verdict"], "")


def dtype_lines(rows: Sequence[dict[str, Any]], dtype: str) -> list[str]:
    """The summary's section of one dtype: routed counts, the worst and the geomean of the tuned rows, the cuBLAS
    rows' range, the rows slower by more than 1%, and a grid of ratios (shape against n)."""
    from ..cells import md_cell

    rs = [r for r in rows if r["dtype"] == dtype]
    tuned = [r for r in rs if r["route"] == "tuned" and r["verdict"] != "ERROR"]
    cublas = [r for r in rs if r["route"] != "tuned" and r["verdict"] != "ERROR"]
    weights = next((r["weights"] for r in rs if r.get("weights")), "")
    base = "dequantize + F.linear" if weights else "cuBLAS"
    lines = [f"## {dtype}" + (f", {weights} weights" if weights else ""), ""]
    if tuned:
        worst = max(tuned, key=lambda r: r["ratio"])
        lines.append(f"- {len(tuned)} of {len(rs)} rows routed to a tuned kernel: geomean speed-up "
                     f"×{_geomean([1 / r['ratio'] for r in tuned]):.3f} (stock µs / gemvtune µs), worst ratio "
                     f"{worst['ratio']:.3f} ({md_cell(_label(worst))}, paired rounds "
                     f"{_f(min(worst['round_ratios']))}..{_f(max(worst['round_ratios']))}).")
    else:
        lines.append(f"- none of {len(rs)} rows routed to a tuned kernel.")
    if cublas:
        lo, hi = min(r["ratio"] for r in cublas), max(r["ratio"] for r in cublas)
        lines.append(f"- {len(cublas)} rows routed to {base} (" + ("the same function as stock inside the FP8 layer"
                     if weights else "F.linear inside the wrapper") + f", the wrapper's own cost in a graph): ratio "
                     f"{lo:.3f}..{hi:.3f}, geomean {_geomean([r['ratio'] for r in cublas]):.3f}.")
    fell = [r for r in tuned if r.get("launches") == "F.linear"]
    if fell:
        lines.append("- routed to a tuned kernel but launched F.linear (the library refused the table's algorithm): "
                     + ", ".join(md_cell(_label(r)) for r in fell) + ".")
    errors = [r for r in rs if r["verdict"] == "ERROR"]
    if errors:
        lines.append("- **ERROR** (wrong output or not measured): "
                     + "; ".join(f"{md_cell(_label(r))}: {md_cell(r.get('error') or 'outside the bound')}"
                                 for r in errors) + ".")
    slow = [r for r in rs if r["verdict"] in ("FAIL", "SLOW")]
    if slow:
        lines += ["", f"Slower than stock by more than {MARGIN:.0%}:", "",
                  "| M×d | n | route | config | stock µs | gemvtune µs | ratio | paired round ratios | verdict |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for r in slow:
            rr = " ".join(f"{x:.3f}" for x in r["round_ratios"])
            lines.append(f"| {md_cell(r['shape'])} | {r['n']} | {md_cell(r['route'])} | {md_cell(r['config'])} | "
                         f"{r['stock_us']:.2f} | {r['gemvtune_us']:.2f} | {r['ratio']:.3f} | {rr} | "
                         f"**{r['verdict']}** |")
    else:
        lines.append(f"- no row slower than stock by more than {MARGIN:.0%}.")
    ns = sorted({r["n"] for r in rs})
    shapes = list(dict.fromkeys(r["shape"] for r in rs))
    by = {(r["shape"], r["n"]): r for r in rs}
    lines += ["", "Ratio gemvtune / stock per shape and n (**bold**: routed to a tuned kernel; plain: routed to "
                  f"{base}):", "", "| M×d | " + " | ".join(f"n={n}" for n in ns) + " |", "|---" * (len(ns) + 1) + "|"]
    for s in shapes:
        lines.append(f"| {md_cell(s)} | " + " | ".join(_cell(by[s, n]) if (s, n) in by else "" for n in ns) + " |")
    return lines + [""]


def summary_markdown(rows: Sequence[dict[str, Any]], meta: dict[str, Any]) -> str:
    """The run's markdown summary: where and how it was measured, the verdict, then one section per dtype."""
    from ..cells import md_cell

    dev = meta.get("device") or {}
    counts = {v: sum(r["verdict"] == v for r in rows) for v in VERDICTS}
    bad = counts["FAIL"] + counts["ERROR"]
    fp8 = meta.get("weights") or ""
    stock = "dequantize + F.linear" if fp8 else "stock nn.Linear"
    head = [f"# Never slower: swapped layers against {stock}, {md_cell(dev.get('name', '?'))}", "",
            f"{md_cell(meta.get('date', ''))}; driver {md_cell(dev.get('driver') or '?')}, torch "
            f"{md_cell(dev.get('torch', '?'))}, gemvtune {md_cell(meta.get('gemvtune', '?'))} (commit "
            f"{md_cell(meta.get('commit') or '?')}); table `{md_cell(meta.get('table', '?'))}`; command: "
            f"`{md_cell(meta.get('command', ''))}`", "",
            "Per shape and dtype, K copies of the weight as "
            + (f"{md_cell(fp8)} FP8 layers (`GemvFp8Linear`, quantised from random `nn.Linear` weights)" if fp8 else
               "`nn.Linear` modules")
            + f" (their bytes at least {COPIES_FACTOR}× the {dev.get('l2_bytes', 0) / 2**20:.4g} MiB L2: every call "
            f"reads its weight from memory); per n one CUDA graph per contender cycling through the copies: stock"
            + (" (the same codes and scales, dequantised to x's dtype then `F.linear` on every call: what an FP8 model "
               "runs without a kernel), and the layers with the table (each call routed by its FP8 entries)" if fp8
               else ", and the same modules after `swap_linears` (each call routed by the table)")
            + f". {meta.get('rounds')} rounds of "
            f"{meta.get('replays')} replays, the contenders back to back, the order swapped every round; µs per "
            f"call are medians. Outputs checked against float64 before timing and in the graphs after"
            + (f"; the run took {meta['seconds']:.0f} s." if meta.get("seconds") is not None else "."), "",
            f"Rule: a row FAILs when gemvtune / stock > {1 + MARGIN:.2f} and the lower quartile of its paired round "
            f"ratios > {1 + MARGIN:.2f} too (beyond the paired noise); SLOW: above {1 + MARGIN:.2f} by the medians "
            f"only; ERROR: a wrong output.", ""]
    if meta.get("capped"):
        head += [f"Copies capped by memory (fewer than {COPIES_FACTOR}× the L2: the L2 may serve part of the "
                 f"weight): {md_cell(', '.join(meta['capped']))}.", ""]
    head += [f"**Verdict: {'FAIL' if bad else 'PASS'}** ({len(rows)} rows: {counts['PASS']} pass, {counts['SLOW']} "
             f"slow inside the noise, {counts['FAIL']} fail, {counts['ERROR']} error)", ""]
    body: list[str] = []
    for dt in dict.fromkeys(r["dtype"] for r in rows):
        body += dtype_lines(rows, dt)
    return "\n".join(head + body).rstrip("\n") + "\n"


def csv_row(r: dict[str, Any]) -> dict[str, Any]:
    """A row as the CSV holds it: the columns in order, the round ratios as one text cell."""
    out = {k: r.get(k) for k in COLUMNS}
    out["round_ratios"] = " ".join(f"{x:.4f}" for x in r.get("round_ratios") or [])
    return out
