"""The Hugging Face end-to-end benchmark's report (``gemvtune bench hf``): pure functions from
plain rows and dicts to numbers, CSV, markdown and a bar chart. No torch, no transformers: the GPU half
is gemvtune.hf.bench (and the modules it runs), which hands this module only JSON-able data.

Vocabulary: impl is ``stock`` (the model as transformers builds it) or ``gemvtune`` (the same model
object after ``swap_linears``); mode is ``eager`` (plain ``generate``) or ``compiled`` (``generate`` with
``cache_implementation="static"``, which transformers compiles itself). Ratios are gemvtune / stock in
tokens/s: above 1 means gemvtune decodes faster."""

from __future__ import annotations

import csv
import json
import math
import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..cells import csv_cell
from ..safefile import savefig, write_text, write_with

IMPLS = ("stock", "gemvtune")
MODES = ("eager", "compiled")
LABELS = {"stock": "stock", "gemvtune": "gemvtune"}
ROW_COLUMNS = ("model", "layers", "impl", "mode", "round", "position", "tokens", "prompt_tokens", "seconds",
               "tokens_per_s", "ms_per_token", "cpu_seconds", "cpu_ms_per_token", "status", "error", "scheme")
SUMMARY_COLUMNS = ("mode", "stock_tokens_per_s", "gemvtune_tokens_per_s", "ratio", "stock_ms_per_token",
                   "gemvtune_ms_per_token", "stock_tokens_per_s_min", "stock_tokens_per_s_max",
                   "gemvtune_tokens_per_s_min", "gemvtune_tokens_per_s_max", "round_ratio_median",
                   "round_ratio_min", "round_ratio_max", "stock_cpu_ms_per_token", "gemvtune_cpu_ms_per_token",
                   "stock_rounds", "gemvtune_rounds", "stock_error", "gemvtune_error")


def token_agreement(a: list[int], b: list[int]) -> dict[str, Any]:
    """Greedy tokens of stock (a) against gemvtune (b): the fraction of equal positions (over the
    longer length; missing positions count as different) and the first position that differs (None
    when all agree)."""
    a, b = [int(t) for t in a], [int(t) for t in b]
    n = max(len(a), len(b))
    if n == 0:
        return {"fraction": math.nan, "first_divergence": None, "n": 0}
    same = sum(1 for x, y in zip(a, b) if x == y)
    first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if first is None and len(a) != len(b):
        first = min(len(a), len(b))
    return {"fraction": same / n, "first_divergence": first, "n": n}


def _ok(r: dict[str, Any]) -> bool:
    s = r.get("seconds")
    return r.get("status", "ok") == "ok" and isinstance(s, (int, float)) and s == s and s > 0


def timing_stats(rows: list[dict[str, Any]], impl: str, mode: str) -> dict[str, Any]:
    """Median over rounds of one (impl, mode): tokens/s and ms/token both from the median seconds (so
    they are exact reciprocals), min/max tokens/s, the median CPU ms/token of the timing thread (NaN where
    the rows have none), the number of good rounds and the first error."""
    mine = [r for r in rows if r.get("impl") == impl and r.get("mode") == mode]
    ok = [r for r in mine if _ok(r)]
    err = next((str(r.get("error") or r.get("status")) for r in mine if not _ok(r)), "")
    if not ok:
        return {"tokens_per_s": math.nan, "ms_per_token": math.nan, "tokens_per_s_min": math.nan,
                "tokens_per_s_max": math.nan, "cpu_ms_per_token": math.nan, "rounds": 0, "error": err}
    tokens = int(ok[0].get("tokens", 0))
    secs = [float(r["seconds"]) for r in ok]
    med = statistics.median(secs)
    cpu = [float(c) for r in ok for c in [r.get("cpu_ms_per_token")] if isinstance(c, (int, float)) and c == c]
    return {"tokens_per_s": tokens / med, "ms_per_token": 1e3 * med / tokens if tokens else math.nan,
            "tokens_per_s_min": tokens / max(secs), "tokens_per_s_max": tokens / min(secs),
            "cpu_ms_per_token": statistics.median(cpu) if cpu else math.nan, "rounds": len(ok), "error": err}


def round_ratios(rows: list[dict[str, Any]], mode: str) -> list[float]:
    """gemvtune / stock tokens/s within each round (the two ran back to back: a paired ratio)."""
    by_round: dict[Any, dict[str, float]] = {}
    for r in rows:
        if r.get("mode") == mode and _ok(r):
            by_round.setdefault(r.get("round"), {})[r["impl"]] = float(r["seconds"])
    return [v["stock"] / v["gemvtune"] for _, v in sorted(by_round.items(), key=lambda kv: str(kv[0]))
            if "stock" in v and "gemvtune" in v]


def mode_table(rows: list[dict[str, Any]], modes: Iterable[str] = MODES) -> list[dict[str, Any]]:
    """One row per mode: stock and gemvtune median tokens/s and ms/token, ratio = gemvtune tokens/s /
    stock tokens/s (the medians'), and the spread of the per-round paired ratios."""
    out = []
    for mode in modes:
        s, g = timing_stats(rows, "stock", mode), timing_stats(rows, "gemvtune", mode)
        rr = round_ratios(rows, mode)
        ratio = g["tokens_per_s"] / s["tokens_per_s"] if s["rounds"] and g["rounds"] else math.nan
        out.append({"mode": mode, "stock_tokens_per_s": s["tokens_per_s"], "gemvtune_tokens_per_s": g["tokens_per_s"],
                    "ratio": ratio, "stock_ms_per_token": s["ms_per_token"], "gemvtune_ms_per_token": g["ms_per_token"],
                    "stock_tokens_per_s_min": s["tokens_per_s_min"], "stock_tokens_per_s_max": s["tokens_per_s_max"],
                    "gemvtune_tokens_per_s_min": g["tokens_per_s_min"],
                    "gemvtune_tokens_per_s_max": g["tokens_per_s_max"],
                    "round_ratio_median": statistics.median(rr) if rr else math.nan,
                    "round_ratio_min": min(rr) if rr else math.nan, "round_ratio_max": max(rr) if rr else math.nan,
                    "stock_cpu_ms_per_token": s["cpu_ms_per_token"], "gemvtune_cpu_ms_per_token": g["cpu_ms_per_token"],
                    "stock_rounds": s["rounds"], "gemvtune_rounds": g["rounds"],
                    "stock_error": s["error"], "gemvtune_error": g["error"]})
    return out


def explain_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``gemvtune.explain`` rows to: layers per route, and groups of identical (M, d, bias, route, why)
    with their layer count and times (the first row's)."""
    routes: dict[str, int] = {}
    groups: dict[tuple, dict[str, Any]] = {}
    for r in rows:
        route = str(r.get("route", "?"))
        routes[route] = routes.get(route, 0) + 1
        key = (r.get("M"), r.get("d"), bool(r.get("bias")), route, str(r.get("why", "")))
        g = groups.setdefault(key, {"M": r.get("M"), "d": r.get("d"), "bias": bool(r.get("bias")), "route": route,
                                    "why": str(r.get("why", "")), "layers": 0, "example": r.get("name", ""),
                                    "tuned_us": r.get("tuned_us"), "cublas_us": r.get("cublas_us")})
        g["layers"] += 1
    return {"total": len(rows), "routes": routes, "groups": sorted(groups.values(), key=lambda g: -g["layers"])}


# ---- formatting -----------------------------------------------------------------------------------------

def _f(v: Any, spec: str, missing: str = "–") -> str:
    if v is None or (isinstance(v, float) and (math.isnan(v) or math.isinf(v))):
        return missing
    try:
        return format(v, spec)
    except (TypeError, ValueError):
        return str(v)


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def summary_markdown(result: dict[str, Any], table: list[dict[str, Any]]) -> str:
    """The summary: the speed table per mode, the linear share, correctness, explain, environment."""
    r = result
    env = r.get("env", {})
    lines = [f"# {r.get('model', '?')}: end-to-end greedy decode, stock transformers vs gemvtune", "",
             f"{r.get('architecture', '?')} (model_type {r.get('model_type', '?')}) built from `{r.get('config_path', '?')}` "
             f"with random {r.get('dtype', '?')} weights (seed {r.get('seed', '?')}), {r.get('layers', '?')} layers "
             f"(config: {r.get('config_layers', '?')}); batch 1, {r.get('prompt_tokens', '?')} prompt tokens, "
             f"{r.get('tokens', '?')} new tokens per generate; {r.get('swapped', '?')} linear layers swapped for "
             f"GemvLinear" + (f", {r['groups']} sibling groups and {r.get('swiglu_mlps', 0)} SwiGLU MLPs "
                              f"(`swap_linears(..., group=True)`: one grouped launch, for an MLP one that writes "
                              f"silu(gate)·up, where the table measured it faster)" if r.get("group") else "")
             + f"; table `{r.get('table', '?')}`.",
             f"{r.get('rounds', '?')} timed rounds, scheme **{r.get('scheme', '?')}**: {r.get('scheme_note', '')}", "",
             "| mode | stock tok/s | gemvtune tok/s | ratio | stock ms/token | gemvtune ms/token "
             "| stock tok/s min..max | gemvtune tok/s min..max | per-round ratio median (min..max) "
             "| CPU ms/token stock / gemvtune |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for t in table:
        lines.append(f"| {t['mode']} | {_f(t['stock_tokens_per_s'], '.1f')} | {_f(t['gemvtune_tokens_per_s'], '.1f')} | "
                     f"{_f(t['ratio'], '.3f')} | {_f(t['stock_ms_per_token'], '.2f')} | "
                     f"{_f(t['gemvtune_ms_per_token'], '.2f')} | {_f(t['stock_tokens_per_s_min'], '.1f')}.."
                     f"{_f(t['stock_tokens_per_s_max'], '.1f')} | {_f(t['gemvtune_tokens_per_s_min'], '.1f')}.."
                     f"{_f(t['gemvtune_tokens_per_s_max'], '.1f')} | {_f(t['round_ratio_median'], '.3f')} "
                     f"({_f(t['round_ratio_min'], '.3f')}..{_f(t['round_ratio_max'], '.3f')}) | "
                     f"{_f(t.get('stock_cpu_ms_per_token'), '.2f')} / {_f(t.get('gemvtune_cpu_ms_per_token'), '.2f')} |")
    lines += ["", "ratio = gemvtune tok/s / stock tok/s (medians; above 1: gemvtune is faster). tok/s = new tokens / "
                  "wall time of one `generate` call (torch.cuda.synchronize before and after), which includes the "
                  "prefill of the prompt and generate's own per-token work; ms/token is its inverse. Per-round ratio: "
                  "stock / gemvtune time within each round (the two ran back to back). CPU ms/token: the timing "
                  "thread's CPU time (`time.thread_time`) per new token, median over rounds: time the thread spent "
                  "descheduled on a busy host is not in it, spinning in a synchronization is; in eager mode, where "
                  "the host's Python work paces the decode, it is the cost each implementation puts on the host."]
    for t in table:
        for impl in IMPLS:
            if t.get(f"{impl}_error"):
                lines.append(f"- **{t['mode']} {impl} failed** in some rounds: {_cell(t[f'{impl}_error'])[:300]}")
    comp = r.get("compile", {})
    if comp:
        lines.append("")
        lines.append("Compiled mode: " + "; ".join(f"{impl}: {_cell(v)}" for impl, v in comp.items()) + ".")
    if r.get("recompiles_during_timing"):
        lines.append(f"**torch.compile compiled {r['recompiles_during_timing']} new graph(s) during the timed rounds**: "
                     "the compiled times include compilation.")

    prof = r.get("profile", {})
    lines += ["", "## Share of a decode step in linear layers", "",
              "GPU kernel time per decode step from torch.profiler (CUDA activity): a profiled generate of k tokens "
              "minus one of 1 token, divided by k - 1 (prefill and first token cancel). linear = gemvtune's kernels "
              "and cuBLAS/CUTLASS GEMM/GEMV kernels, by name (gemvtune.hf.profile.classify_kernel).", "",
              "| impl | mode | linear µs/token | all kernels µs/token | linear % | attention µs/token | other µs/token "
              "| memcpy/memset µs/token | gemvtune kernels/token | kernels/token |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    any_prof = False
    for impl in IMPLS:
        for mode in MODES:
            p = prof.get(impl, {}).get(mode)
            if not p:
                continue
            any_prof = True
            if p.get("error"):
                lines.append(f"| {impl} | {mode} | failed: {_cell(p['error'])[:200]} | | | | | | | |")
                continue
            s = p.get("per_step", {})
            lines.append(f"| {impl} | {mode} | {_f(s.get('linear_us'), '.1f')} | {_f(s.get('kernel_us'), '.1f')} | "
                         f"{_f(s.get('linear_pct'), '.1f')} | {_f(s.get('attention_us'), '.1f')} | "
                         f"{_f(s.get('other_us'), '.1f')} | {_f(s.get('memops_us'), '.1f')} | "
                         f"{_f(s.get('gemvtune_n'), '.1f')} | {_f(s.get('kernel_n'), '.1f')} |")
    if not any_prof:
        lines.append("| (not profiled) | | | | | | | | | |")
    for impl in IMPLS:
        for mode in MODES:
            p = prof.get(impl, {}).get(mode) or {}
            if p.get("top"):
                lines.append("")
                lines.append(f"Top kernels, {impl} {mode} (µs per step, launches per step): " + "; ".join(
                    f"`{_cell(k['name'])[:60]}` ({k['kind']}) {_f(k['us'], '.1f')} µs ×{_f(k['n'], '.1f')}"
                    for k in p["top"]))

    lines += ["", "## Correctness (report, never required: random weights make greedy tokens diverge on tiny "
                  "differences)", ""]
    for mode, a in (r.get("agreement") or {}).items():
        if a.get("error"):
            lines.append(f"- {mode}: no comparison ({_cell(a['error'])[:200]})")
            continue
        fd = a.get("first_divergence")
        lines.append(f"- {mode} greedy tokens, stock vs gemvtune: {_f(100 * a['fraction'] if a.get('n') else math.nan, '.1f')}% "
                     f"of {a.get('n', 0)} positions equal; "
                     + ("all equal." if fd is None else f"first divergence at new token {fd}."))
    lg = r.get("logits") or {}
    if lg.get("error"):
        lines.append(f"- logits: not compared ({_cell(lg['error'])[:300]})")
    elif lg:
        lines.append(f"- logits, max|gemvtune - stock| / max|stock|: prefill (all {r.get('prompt_tokens', '?')} positions) "
                     f"{_f(lg.get('prefill_rel'), '.2e')}, first decode step {_f(lg.get('decode_rel'), '.2e')} (eager, "
                     f"both fed stock's greedy next token); argmax of the first decode step "
                     f"{'equal' if lg.get('decode_argmax_equal') else 'differs'}.")
    if r.get("fp8"):   # (gemvtune bench hf --weights: the FP8 model's accuracy, gemvtune.hf.fp8check)
        mem = r.get("fp8_memory") or {}
        lines.append(f"- {fp8_line(r['fp8'])}; the stock comparison above is the FP8 model against the 16-bit one"
                     + (f"; linears' weights {mem['before'] / 1e9:.2f} GB -> {mem['after'] / 1e9:.2f} GB in FP8 "
                        "(the 16-bit ones kept for the stock rounds)." if mem else "."))

    ex = r.get("explain") or {}
    lines += ["", "## Which layers run tuned kernels (gemvtune.explain, n=1)", ""]
    if ex.get("error"):
        lines.append(f"explain not available: {_cell(ex['error'])[:300]}")
    elif ex.get("summary"):
        sm = ex["summary"]
        lines.append(f"{sm['total']} swapped layers: " + ", ".join(f"{v} {k}" for k, v in sorted(sm["routes"].items()))
                     + ".")
        lines += ["", "| M × d | bias | route | layers | tuned µs | cuBLAS µs | why | e.g. |", "|---|---|---|---|---|---|---|---|"]
        for g in sm["groups"]:
            lines.append(f"| {g['M']}×{g['d']} | {'yes' if g['bias'] else 'no'} | {g['route']} | {g['layers']} | "
                         f"{_f(g['tuned_us'], '.2f')} | {_f(g['cublas_us'], '.2f')} | {_cell(g['why'])} | "
                         f"`{_cell(g['example'])}` |")
        for key, what in (("sibling_routes", "sibling groups"), ("swiglu_routes", "SwiGLU MLPs")):
            if sm.get(key):
                lines.append(f"\n{sum(sm[key].values())} {what}: "
                             + ", ".join(f"{v} {k}" for k, v in sm[key].items()) + ".")
        lines += [f"\n{_cell(n)}" for n in ex.get("notes") or []]

    notes = r.get("notes") or []
    if notes:
        lines += ["", "## Notes", ""] + [f"- {_cell(n)}" for n in notes]
    lines += ["", "## Environment", "",
              f"- GPU: {env.get('gpu', '?')} (driver {env.get('driver', '?')}, CUDA {env.get('cuda', '?')})",
              f"- torch {env.get('torch', '?')}, transformers {env.get('transformers', '?')}, gemvtune "
              f"{env.get('gemvtune', '?')}, Python {env.get('python', '?')}",
              f"- date (UTC): {r.get('date', '?')}",
              f"- command: `{r.get('command', '?')}`"]
    return "\n".join(lines) + "\n"


def short_table(table: list[dict[str, Any]]) -> str:
    """A few lines for the terminal."""
    lines = [f"{'mode':9s} {'stock tok/s':>12s} {'gemvtune tok/s':>15s} {'ratio':>7s} {'stock ms/tok':>13s} "
             f"{'gemvtune ms/tok':>16s} {'round ratio':>11s} {'CPU ms/tok s/g':>15s}"]
    for t in table:
        lines.append(f"{t['mode']:9s} {_f(t['stock_tokens_per_s'], '12.1f', 'failed'):>12s} "
                     f"{_f(t['gemvtune_tokens_per_s'], '15.1f', 'failed'):>15s} {_f(t['ratio'], '7.3f'):>7s} "
                     f"{_f(t['stock_ms_per_token'], '13.2f'):>13s} {_f(t['gemvtune_ms_per_token'], '16.2f'):>16s} "
                     f"{_f(t['round_ratio_median'], '11.3f'):>11s} "
                     f"{_f(t.get('stock_cpu_ms_per_token'), '.2f') + ' / ' + _f(t.get('gemvtune_cpu_ms_per_token'), '.2f'):>15s}")
    return "\n".join(lines)


def write_rows_csv(rows: list[dict[str, Any]], path: str | Path, columns: Iterable[str]) -> Path:
    """Rows to CSV with fixed columns first (then any extra keys, sorted); floats at 6 significant digits."""
    path = Path(path)
    cols = list(columns)
    extra = sorted({k for r in rows for k in r} - set(cols))
    def write(f: Any) -> None:
        w = csv.DictWriter(f, fieldnames=[csv_cell(c) for c in cols + extra], extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({csv_cell(k): (format(v, ".6g") if isinstance(v, float) else ("" if v is None else csv_cell(v)))
                        for k, v in r.items()})

    write_with(path, write, "HF bench CSV")
    return path


def plot_hf(table: list[dict[str, Any]], path: str | Path, title: str) -> Path:
    """Bars of median tokens/s per mode, stock vs gemvtune, min..max as error bars, ratio above."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    w = 0.38
    xs = list(range(len(table)))
    top = 0.0
    for i, impl in enumerate(IMPLS):
        vals = [t[f"{impl}_tokens_per_s"] for t in table]
        lo = [t[f"{impl}_tokens_per_s_min"] for t in table]
        hi = [t[f"{impl}_tokens_per_s_max"] for t in table]
        v0 = [0.0 if v != v else v for v in vals]
        err = [[0.0 if (v != v or a != a) else max(v - a, 0.0) for v, a in zip(vals, lo)],
               [0.0 if (v != v or b != b) else max(b - v, 0.0) for v, b in zip(vals, hi)]]
        bars = ax.bar([x + (i - 0.5) * w for x in xs], v0, w, yerr=err, capsize=4, label=LABELS[impl],
                      color=("C7", "C0")[i])
        for b, v, h in zip(bars, vals, hi):
            y = max(0.0 if v != v else v, 0.0 if h != h else h)
            ax.text(b.get_x() + b.get_width() / 2, y * 1.01, "failed" if v != v else f"{v:.0f}",
                    ha="center", va="bottom", fontsize=8)
        top = max([top] + [h for h in hi if h == h] + [v for v in vals if v == v])
    for x, t in zip(xs, table):
        if t["ratio"] == t["ratio"]:
            ax.text(x, top * 1.12, f"×{t['ratio']:.3f}", ha="center", va="bottom", fontsize=9, weight="bold")
    ax.set_xticks(xs, [t["mode"] for t in table])
    ax.set_ylabel("decode tokens/s (batch 1, median over rounds)")
    ax.set_ylim(0, (top or 1.0) * 1.3)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2, frameon=False)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    savefig(fig, path, dpi=110)
    plt.close(fig)
    return Path(path)


def write_hf_reports(rows: list[dict[str, Any]], result: dict[str, Any], out: str | Path, stem: str) -> dict[str, Path]:
    """``<stem>.csv`` (one row per impl, mode, round), ``<stem>-summary.csv`` (one row per mode),
    ``<stem>-summary.md``, ``<stem>-provenance.json`` and ``<stem>.png``; returns their paths by kind."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    table = mode_table(rows)
    paths = {"csv": write_rows_csv(rows, out / f"{stem}.csv", ROW_COLUMNS),
             "summary_csv": write_rows_csv(table, out / f"{stem}-summary.csv", SUMMARY_COLUMNS)}
    try:
        paths["png"] = plot_hf(table, out / f"{stem}.png",
                               f"{result.get('env', {}).get('gpu', '')}: {result.get('model', '')}, "
                               f"{result.get('layers', '?')} layers, {result.get('tokens', '?')} tokens")
    except Exception as e:  # a chart must never cost the numbers
        result.setdefault("notes", []).append(f"bar chart not written: {type(e).__name__}: {e}")
    md = summary_markdown(result, table)
    paths["summary_md"] = out / f"{stem}-summary.md"
    write_text(paths["summary_md"], md)
    paths["provenance"] = out / f"{stem}-provenance.json"
    prov = {**result, "summary": table, "files": {k: p.name for k, p in paths.items()}}
    write_text(paths["provenance"], json.dumps(_json_safe(prov), indent=2, sort_keys=True, default=str) + "\n")
    return paths


def _json_safe(v: Any) -> Any:
    """NaN and infinities to null (strict JSON), recursively."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {str(k): _json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    return v


def fp8_line(r: dict[str, Any]) -> str:
    """One line of ``fp8_accuracy``'s result."""
    if "error" in r:
        return f"FP8 first-step logits vs float64 of the dequantised model: not checked ({r['error']})"
    return (f"FP8 first-step logits vs float64 of the dequantised model: kernels {r['kernel_rel']:.2e}, dequantize + "
            f"F.linear {r['fallback_rel']:.2e} (max|diff| / max|ref|); tolerance {r['tolerance']:.2e} "
            f"(max({r['factor']:g} x the fallback's, {r['floor']:g})): {'held' if r['held'] else 'NOT held'}; "
            f"argmax {'equal' if r['argmax_equal'] else 'differs'}"
            + (f"; the float64 copy ran on {r['reference_device']}" if r.get("reference_device") else ""))
