"""The linear layers' share of a decode step in ``gemvtune bench hf``: GPU kernels by category
from torch.profiler's Chrome trace (the classifier and the arithmetic are pure: no torch), per decode step
as a generate of k tokens minus one of 1 token over k - 1. torch is imported inside functions only."""

from __future__ import annotations

import functools
import json
import math
import os
import re
import tempfile
from collections.abc import Callable, Iterable
from typing import Any

from ..kernels.families import FAMILIES
from .report import IMPLS, MODES
from .rounds import Bench, first_line, sync

PROFILE_TOKENS = 8              # eager profile: a generate of this many tokens minus one of 1 token

# Kernel names gemvtune's templates launch (extern "C", so CUPTI reports them exactly so): every template family's
# main kernel (gemv, splitk_gemm, mma_gemv, ring_gemv, gemv_fp8, mma_fp8) and the split-K family's helpers.
GEMVTUNE_KERNELS = frozenset({f.main_kernel for f in FAMILIES.values() if not f.library} | {"zero_y", "reduce_splits"})
_ATTENTION = re.compile(r"flash|fmha|attention|attn|sdpa", re.IGNORECASE)
_LINEAR = re.compile(r"gemm|gemv|xmma|cutlass|nvjet|splitkreduce|cublas", re.IGNORECASE)
_TRITON_LINEAR_TOKENS = frozenset({"mm", "addmm", "bmm", "linear"})
_MEMOPS = frozenset({"gpu_memcpy", "gpu_memset"})


def is_gemvtune_kernel(name: str) -> bool:
    """True for the kernels gemvtune launches (every template family's, and the split-K family's helpers)."""
    return _base_name(name) in GEMVTUNE_KERNELS


def _base_name(name: str) -> str:
    """``void gemv(...)``-style or plain names to the bare function name."""
    s = str(name).strip()
    if s.startswith("void "):
        s = s[5:]
    return s.split("(", 1)[0].split("<", 1)[0].strip()


def classify_kernel(name: str) -> str:
    """``linear`` | ``attention`` | ``other`` for a GPU kernel name as the profiler reports it.

    linear: gemvtune's kernels (exact names), cuBLAS/cuBLASLt/CUTLASS GEMM and GEMV kernels (names
    holding gemm, gemv, xmma, cutlass, nvjet, splitKreduce or cublas) and Inductor GEMM templates
    (``triton_tem_fused_mm…``). Inductor's pointwise and reduction kernels are other even when named
    after a linear they fuse with (``triton_poi_fused_linear_mul_silu``: the activation). attention (names
    holding flash, fmha, attention, attn or sdpa) is tested first, since CUTLASS-based attention kernels
    (``fmha_cutlass…``) would otherwise count as linear. Batched GEMMs of a math-path attention cannot be
    told apart by name and count as linear."""
    s = str(name)
    if is_gemvtune_kernel(s):
        return "linear"
    if _ATTENTION.search(s):
        return "attention"
    if _LINEAR.search(s):
        return "linear"
    if s.startswith("triton_tem_") and set(s.split("_")) & _TRITON_LINEAR_TOKENS:
        return "linear"  # an Inductor GEMM template (max-autotune); its pointwise kernels are not GEMMs
    return "other"


def kernel_totals(trace_events: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """GPU time by category from a Chrome trace's ``traceEvents`` (torch.profiler's export): complete
    events (ph ``X``) of category kernel, gpu_memcpy or gpu_memset; durations in µs. GPU-side user
    annotations and CPU events are left out (they would count the same time twice)."""
    tot: dict[str, Any] = {"linear_us": 0.0, "attention_us": 0.0, "other_us": 0.0, "memops_us": 0.0,
           "linear_n": 0, "attention_n": 0, "other_n": 0, "memops_n": 0, "gemvtune_n": 0, "gemvtune_us": 0.0}
    by_name: dict[str, list[float]] = {}
    for e in trace_events:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        cat = str(e.get("cat", "")).lower()
        if cat != "kernel" and cat not in _MEMOPS:
            continue
        try:
            dur = float(e.get("dur", 0.0))
        except (TypeError, ValueError):
            continue
        name = str(e.get("name", ""))
        kind = "memops" if cat in _MEMOPS else classify_kernel(name)
        tot[f"{kind}_us"] += dur
        tot[f"{kind}_n"] += 1
        if kind != "memops" and is_gemvtune_kernel(name):
            tot["gemvtune_n"] += 1
            tot["gemvtune_us"] += dur
        agg = by_name.setdefault(name, [0.0, 0])
        agg[0] += dur
        agg[1] += 1
    tot["kernel_us"] = tot["linear_us"] + tot["attention_us"] + tot["other_us"]
    tot["kernel_n"] = tot["linear_n"] + tot["attention_n"] + tot["other_n"]
    tot["by_name"] = {k: {"us": v[0], "n": int(v[1]), "kind": "memops" if k.lower().startswith(("memcpy", "memset"))
                          else classify_kernel(k)} for k, v in by_name.items()}
    return tot


_NUMERIC = ("linear_us", "attention_us", "other_us", "memops_us", "kernel_us", "gemvtune_us",
            "linear_n", "attention_n", "other_n", "memops_n", "kernel_n", "gemvtune_n")


def per_step(full: dict[str, Any], base: dict[str, Any], steps: int) -> dict[str, float]:
    """Per decode step: (totals of a generate of k tokens - totals of a generate of 1 token) / (k - 1),
    so the prefill and the first token cancel; plus the linear share of kernel time in %."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    out = {k: (float(full.get(k, 0.0)) - float(base.get(k, 0.0))) / steps for k in _NUMERIC}
    out["linear_pct"] = 100.0 * out["linear_us"] / out["kernel_us"] if out["kernel_us"] > 0 else math.nan
    out["steps"] = steps
    return out


def top_kernels(full: dict[str, Any], base: dict[str, Any], steps: int, n: int = 8) -> list[dict[str, Any]]:
    """The n kernels taking the most time per decode step (same subtraction as per_step)."""
    fb, bb = full.get("by_name", {}), base.get("by_name", {})
    rows = []
    for name, v in fb.items():
        b = bb.get(name, {"us": 0.0, "n": 0})
        rows.append({"name": name, "kind": v.get("kind", classify_kernel(name)),
                     "us": (v["us"] - b["us"]) / steps, "n": (v["n"] - b["n"]) / steps})
    rows.sort(key=lambda r: -r["us"])
    return rows[:n]


def _profile_totals(b: Bench, fn: Callable[[], Any]) -> dict[str, Any]:
    """GPU time by category of whatever ``fn`` launches (torch.profiler, CUDA activity; Chrome trace)."""
    torch = b.torch
    from torch.profiler import ProfilerActivity, profile

    def once(acts: list) -> dict[str, Any]:
        with tempfile.TemporaryDirectory() as d:
            with profile(activities=acts) as prof:
                fn()
                sync(torch, b.device)
            path = os.path.join(d, "trace.json")
            prof.export_chrome_trace(path)
            with open(path) as f:
                events = json.load(f).get("traceEvents", [])
        return kernel_totals(events)

    tot = once([ProfilerActivity.CUDA])
    if tot["kernel_n"] == 0:  # some builds record GPU activity only alongside CPU activity
        tot = once([ProfilerActivity.CPU, ProfilerActivity.CUDA])
    return tot


def profile_linear_share(b: Bench, compiled: bool = True) -> dict[str, Any]:
    """Per impl and mode: GPU kernel time per decode step by category (gemvtune.hf.report), from a
    profiled generate of k tokens minus one of 1 token over k - 1 (eager: k = PROFILE_TOKENS; compiled:
    k = the timed token count, so the static cache and compiled graphs are the timed ones)."""
    out: dict[str, Any] = {impl: {} for impl in IMPLS}
    if not str(b.device).startswith("cuda"):
        return {impl: {m: {"error": "no CUDA device: not profiled"} for m in MODES} for impl in IMPLS}
    plan = [("eager", max(2, min(PROFILE_TOKENS, b.tokens)))]
    if compiled and b.tokens >= 2:
        plan.append(("compiled", b.tokens))
    for impl in IMPLS:
        for mode, k in plan:
            b.v.use(impl)
            try:
                if mode == "compiled":  # this variant's graphs in place (blocked scheme: the other's were last)
                    b.generate(mode, k)
                    sync(b.torch, b.device)
                full = _profile_totals(b, functools.partial(b.generate, mode, k))
                base = _profile_totals(b, functools.partial(b.generate, mode, 1))
                out[impl][mode] = {"tokens": k, "per_step": per_step(full, base, k - 1),
                                   "top": top_kernels(full, base, k - 1)}
            except Exception as e:
                out[impl][mode] = {"error": first_line(e)}
    return out
