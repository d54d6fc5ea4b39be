"""Timed rounds of ``gemvtune bench hf``: greedy ``generate`` of stock and swapped on one model,
eager and compiled, warmed up, then interleaved over rounds (or, where switching variants under one
compiled model fails, compiled mode blocked per variant); one row per timed call, a failure a row and
not a crash. torch is imported inside functions only."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable
from typing import Any

from .model import Variants
from .report import IMPLS, MODES
from .torchcompile import dynamo_counts, dynamo_delta, reset_compile


def sync(torch: Any, device: str) -> None:
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def first_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}"


class Bench:
    """One model, one prompt, stock and swapped; every generate wrapped so a failure is a row, not a crash."""

    def __init__(self, model: Any, variants: Variants, ids: Any, tokens: int, device: str, pad_id: int,
                 echo: Callable[[str], None], lock: Any = None):
        import torch

        self.torch, self.model, self.v, self.ids, self.tokens = torch, model, variants, ids, tokens
        self.device, self.pad_id, self.echo = device, pad_id, echo
        self.mask = torch.ones_like(ids)
        self.lock = lock or contextlib.nullcontext
        self.outputs: dict[tuple[str, str], list[list[int]]] = {}

    def generate(self, mode: str, tokens: int | None = None) -> Any:
        kw: dict[str, Any] = {"max_new_tokens": tokens or self.tokens, "min_new_tokens": tokens or self.tokens,
                              "do_sample": False, "attention_mask": self.mask, "pad_token_id": self.pad_id}
        if mode == "compiled":
            kw["cache_implementation"] = "static"
        return self.model.generate(self.ids, **kw)

    def timed(self, impl: str, mode: str) -> dict[str, Any]:
        """One timed generate: seconds (wall), cpu_seconds (this thread's CPU time, ``time.thread_time``: a
        descheduled thread does not accrue it, so a busy host moves it less than the wall time), the new
        tokens, status and error."""
        torch = self.torch
        self.v.use(impl)
        try:
            with self.lock():
                sync(torch, self.device)
                t0, c0 = time.perf_counter(), time.thread_time()
                out = self.generate(mode)
                sync(torch, self.device)
                dt, cpu = time.perf_counter() - t0, time.thread_time() - c0
            new = out[0, self.ids.shape[1]:].tolist()
        except Exception as e:
            with contextlib.suppress(Exception):
                sync(torch, self.device)
            return {"seconds": math.nan, "cpu_seconds": math.nan, "status": "error", "error": first_line(e), "new": []}
        status = "ok" if len(new) == self.tokens else "short"
        return {"seconds": dt, "cpu_seconds": cpu, "status": status, "new": new,
                "error": "" if status == "ok" else f"generated {len(new)} of {self.tokens} tokens"}


def _row(meta: dict[str, Any], impl: str, mode: str, rnd: Any, pos: int, res: dict[str, Any], scheme: str,
         tokens: int) -> dict[str, Any]:
    s, cpu = res["seconds"], res.get("cpu_seconds", math.nan)
    good = res["status"] == "ok" and s == s and s > 0
    return {"model": meta["model"], "layers": meta["layers"], "impl": impl, "mode": mode, "round": rnd,
            "position": pos, "tokens": tokens, "prompt_tokens": meta["prompt_tokens"], "seconds": s,
            "tokens_per_s": tokens / s if good else math.nan, "ms_per_token": 1e3 * s / tokens if good else math.nan,
            "cpu_seconds": cpu, "cpu_ms_per_token": 1e3 * cpu / tokens if good and cpu == cpu else math.nan,
            "status": res["status"], "error": res.get("error", ""), "scheme": scheme}


def run_rounds(b: Bench, rounds: int, meta: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Warm-up, then ``rounds`` timed rounds. Scheme ``interleaved``: per round, per mode, stock and
    gemvtune back to back (the order alternating between rounds), the compiled graphs of both variants
    kept side by side. If compiled stock fails once the swapped variant has compiled too (switching broke),
    or a compiled call fails during the interleaved rounds, compiled mode is (re-)timed ``blocked``: per
    implementation ``reset_compile``, one warm-up, then all its rounds in a row; eager stays interleaved.
    An (impl, mode) whose warm-up failed is not timed (its rows say why). Returns (rows, info)."""
    echo, T = b.echo, b.tokens
    info: dict[str, Any] = {"warmup": {}, "scheme": "interleaved", "notes": []}

    def warm(impl: str, mode: str, tag: str = "") -> dict[str, Any]:
        before = dynamo_counts()
        t0 = time.perf_counter()
        res = b.timed(impl, mode)
        w = {"seconds": time.perf_counter() - t0, "status": res["status"], "error": res["error"],
             "dynamo": dynamo_delta(before, dynamo_counts())}
        info["warmup"][f"{impl}/{mode}{tag}"] = w
        dyn = w["dynamo"]
        echo(f"warm-up {impl:8s} {mode:8s}{tag}: {w['seconds']:7.1f} s, {res['status']}"
             + (f" ({res['error']})" if res["error"] else "")
             + (f"; dynamo: {dyn.get('unique_graphs', 0)} graphs, {dyn.get('graph_breaks', 0)} graph breaks"
                if dyn and mode == "compiled" else ""))
        return res

    def skipped(impl: str, mode: str, r: int, pos: int, why: str, scheme: str) -> dict[str, Any]:
        return _row(meta, impl, mode, r, pos, {"seconds": math.nan, "status": "skipped",
                                                "error": f"warm-up failed: {why}"}, scheme, T)

    # Warm-up: each (impl, mode) once, in round 0's order; then compiled stock once more, after the swapped
    # variant compiled, to see that switching back finds its graph.
    for mode in MODES:
        for impl in IMPLS:
            warm(impl, mode)
    switch = warm("stock", "compiled", " (switch back)")
    bad = {(i, m): info["warmup"][f"{i}/{m}"]["error"] or info["warmup"][f"{i}/{m}"]["status"]
           for i in IMPLS for m in MODES if info["warmup"][f"{i}/{m}"]["status"] != "ok"}
    blocked = ("stock", "compiled") not in bad and switch["status"] != "ok"
    if blocked:
        info["notes"].append(f"compiled stock failed after the swapped model compiled ({switch['error']}): "
                             "compiled mode timed blocked")
    if (info["warmup"]["stock/compiled (switch back)"].get("dynamo") or {}).get("unique_graphs"):
        info["notes"].append("switching back to stock compiled new graphs during the warm-up (torch.compile's "
                             "guards did not keep both variants)")

    rows: list[dict[str, Any]] = []
    before = dynamo_counts()
    modes_now = [m for m in MODES if not (blocked and m == "compiled")]
    for r in range(rounds):
        order = IMPLS if r % 2 == 0 else IMPLS[::-1]
        line = []
        for mode in modes_now:
            for pos, impl in enumerate(order):
                if (impl, mode) in bad:
                    rows.append(skipped(impl, mode, r, pos, bad[impl, mode], "interleaved"))
                    continue
                res = b.timed(impl, mode)
                b.outputs.setdefault((impl, mode), []).append(res["new"])
                rows.append(_row(meta, impl, mode, r, pos, res, "interleaved", T))
                line.append(f"{mode} {impl} " + (f"{T / res['seconds']:.1f} tok/s" if res["status"] == "ok"
                                                  else res["status"]))
        echo(f"round {r + 1}/{rounds}: " + ", ".join(line))
    delta = dynamo_delta(before, dynamo_counts())
    info["recompiles_during_timing"] = delta.get("unique_graphs", 0) if delta else None

    failed = [x for x in rows if x["mode"] == "compiled" and x["status"] not in ("ok", "skipped")]
    if not blocked and failed:
        blocked = True
        info["notes"].append(f"{len(failed)} interleaved compiled runs failed ({failed[0]['error']}): compiled "
                             "mode re-timed blocked; the interleaved compiled rows are in the provenance JSON "
                             "under abandoned_rows")
        info["abandoned_rows"] = [x for x in rows if x["mode"] == "compiled"]
        rows = [x for x in rows if x["mode"] != "compiled"]
        for k in [k for k in b.outputs if k[1] == "compiled"]:
            del b.outputs[k]
    if blocked:
        info["scheme"] = "eager interleaved, compiled blocked"
        for impl in IMPLS:
            echo(f"compiled {impl}: reset torch.compile, warm up, then {rounds} rounds in a row")
            reset_compile(b.model)
            w = warm(impl, "compiled", " (blocked)")
            for r in range(rounds):
                if w["status"] != "ok":
                    rows.append(skipped(impl, "compiled", r, 0, w["error"] or w["status"], "blocked"))
                    continue
                res = b.timed(impl, "compiled")
                b.outputs.setdefault((impl, "compiled"), []).append(res["new"])
                rows.append(_row(meta, impl, "compiled", r, 0, res, "blocked", T))
                echo(f"  compiled {impl} round {r + 1}/{rounds}: "
                     + (f"{T / res['seconds']:.1f} tok/s" if res["status"] == "ok"
                        else f"{res['status']} {res['error']}"))
    info["scheme_note"] = SCHEME_NOTES[info["scheme"]]
    return rows, info


SCHEME_NOTES = {
    "interleaved": "per round, per mode (eager, then compiled), stock and gemvtune back to back, the order alternating "
                   "between rounds; both variants' compiled graphs kept side by side (swap_linears once, then the same "
                   "module objects switched by setattr, so torch.compile's guards see two fixed module sets).",
    "eager interleaved, compiled blocked": "eager as interleaved; compiled: per implementation torch._dynamo.reset(), "
                                           "CUDA-graph trees reset and transformers' cached compiled call dropped, one "
                                           "warm-up, then all its rounds in a row (switching variants under one "
                                           "compiled model failed).",
}
