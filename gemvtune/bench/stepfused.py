"""The fused implementations of the decode step benchmark (``gemvtune bench step``): ``fused`` (sibling linears in
one launch, the residual and SwiGLU epilogues: ``gemvtune.bench.chain``) and ``fused-pdl`` (the same kernels with
programmatic dependent launch, each at the prefetch depth a chain search picked in this step's own graph).

The chain search is a coordinate descent over the step's five kernels: from every kernel at the deepest depth up
to 2 it can run, each kernel in turn tries its other depths (none included), each candidate step graph timed in
interleaved rounds against the incumbent's, and keeps the fastest by median. The depth is chosen where it acts: in
the chain of launches, with the gaps the step has (``--between``), never on an isolated kernel.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .chain import SLOTS, StepKernel, at_depth, depths_of, step_kernels

FUSED, FUSED_PDL = "fused", "fused-pdl"


@dataclass
class FusedPrep:
    """The fused step's kernels at each depth, their plans and verification."""

    kernels: dict[str, StepKernel]
    variants: dict[str, dict[int, StepKernel]]
    verify: dict[str, dict[str, Any]] = field(default_factory=dict)
    plans: dict[tuple[str, int], Any] = field(default_factory=dict)

    @property
    def verified(self) -> bool:
        return all(v["ok"] for v in self.verify.values())

    def chosen(self, depths: dict[str, int]) -> dict[str, StepKernel]:
        return {s: self.variants[s][depths.get(s, 0)] for s in SLOTS}

    def plans_at(self, depths: dict[str, int]) -> dict[str, Any]:
        return {s: self.plans[(s, depths.get(s, 0))] for s in SLOTS}


def prepare(runner: Any, table: Any, model: Any, pdl: bool, echo: Callable[[str], None]) -> FusedPrep:
    """Choose the fused step's kernels (and with ``pdl`` every chain depth of each), compile them in parallel and
    verify each against float64 on fresh inputs (before the step's weights take the device's memory)."""
    from ..build.compile import compile_variants
    from ..runners.cuda.fusedstep import slot_plan, verify_kernel

    kernels = step_kernels(table, model)
    variants: dict[str, dict[int, StepKernel]] = {}
    for slot, k in kernels.items():
        base = at_depth(k, 0)
        assert base is not None   # (depth 0 is every kernel as it is)
        variants[slot] = {0: base}
        if pdl:
            for d in depths_of(k):
                v = at_depth(k, d)
                if d and v is not None:
                    variants[slot][d] = v
    prep = FusedPrep(kernels, variants)
    items = [(v.config, v.shape, v.epilogue, v.group) for vs in variants.values() for v in vs.values()]
    compile_variants(items, arch=runner.arch)
    for slot, vs in variants.items():
        for d, v in vs.items():
            ok, rel, why = verify_kernel(runner, v)
            prep.verify[f"{slot}@{d}"] = {"label": v.label, "ok": ok, "relerr": rel, "why": why}
            if not ok:
                echo(f"WARNING: the fused step's {slot} kernel {v.label} failed verification: {why}")
            prep.plans[(slot, d)] = slot_plan(runner, v)
    runner.release()
    echo(f"fused step: {', '.join(f'{s} {k.label} ({k.why})' for s, k in kernels.items())}; "
         f"{sum(len(v) for v in variants.values())} variants verified "
         f"{'ok' if prep.verified else 'with FAILURES'} (float64 reference)")
    return prep


def capture(bench: Any, fstep: Any, prep: FusedPrep, depths: dict[str, int], key: str, gaps: Any = None,
            pdl_gaps: bool = False) -> None:
    """The fused step with each slot at its depth in ``depths`` (absent: 0), captured as ``key``."""
    calls = fstep.calls(prep.chosen(depths), prep.plans_at(depths), gaps, pdl_gaps)
    bench.capture_sequence(key, calls, fstep.outputs())


def first_depths(prep: FusedPrep) -> dict[str, int]:
    """Where the search starts: each slot at its deepest depth up to 2."""
    return {s: max(d for d in prep.variants[s] if d <= 2) for s in SLOTS}


def search_depths(bench: Any, fstep: Any, prep: FusedPrep, gaps: Any, pdl_gaps: bool, echo: Callable[[str], None],
                  rounds: int = 3, replays: int = 10) -> tuple[dict[str, int], list[dict[str, Any]]]:
    """The chain search (module docstring): (chosen depth per slot, every comparison made)."""
    best = first_depths(prep)
    capture(bench, fstep, prep, best, "search:incumbent", gaps, pdl_gaps)
    log: list[dict[str, Any]] = []
    for slot in SLOTS:
        for d in sorted(prep.variants[slot]):
            if d == best[slot]:
                continue
            cand = {**best, slot: d}
            capture(bench, fstep, prep, cand, "search:candidate", gaps, pdl_gaps)
            inc, new = [], []
            for _ in range(rounds):
                inc += bench.time("search:incumbent", replays)
                new += bench.time("search:candidate", replays)
            mi, mn = statistics.median(inc), statistics.median(new)
            log.append({"slot": slot, "depth": d, "incumbent": dict(best), "incumbent_us": mi, "candidate_us": mn})
            if mn < mi:
                best = cand
                capture(bench, fstep, prep, best, "search:incumbent", gaps, pdl_gaps)
        tried = ", ".join(f"depth {r['depth']} {r['candidate_us']:.1f} against {r['incumbent_us']:.1f}"
                          for r in log if r["slot"] == slot)
        echo(f"  chain search: {slot} at depth {best[slot]} (µs per step: {tried})")
    bench.drop("search:incumbent")
    bench.drop("search:candidate")
    return best, log
