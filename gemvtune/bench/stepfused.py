"""The fused implementations of the decode step benchmark (``gemvtune bench step``): ``fused`` (sibling linears in
one launch, the residual and SwiGLU epilogues: ``gemvtune.bench.chain``) and ``fused-pdl`` (the same kernels with
programmatic dependent launch, each as the chain variant — trigger and prefetch depth — a chain search picked in this
step's own graph).

The chain search is a coordinate descent over the step's five kernels: from every kernel without PDL, each kernel in
turn tries its chain variants (``pdl`` = chainK, earlyK), each candidate step graph timed in interleaved rounds
against the incumbent's, and keeps the fastest by median. A variant is chosen where it acts: in the chain of
launches, with the gaps the step has (``--between``), never on an isolated kernel.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .chain import SLOTS, StepKernel, at_depth, depths_of, pdl_value, step_kernels

FUSED, FUSED_PDL = "fused", "fused-pdl"


@dataclass
class FusedPrep:
    """The fused step's kernels as every chain variant (by their ``pdl`` value), their plans and verification."""

    kernels: dict[str, StepKernel]
    variants: dict[str, dict[str, StepKernel]]
    verify: dict[str, dict[str, Any]] = field(default_factory=dict)
    plans: dict[tuple[str, str], Any] = field(default_factory=dict)

    @property
    def verified(self) -> bool:
        return all(v["ok"] for v in self.verify.values())

    def chosen(self, pdl: dict[str, str]) -> dict[str, StepKernel]:
        """Each slot's kernel as the variant ``pdl`` names (absent: ``off``)."""
        return {s: self.variants[s][pdl.get(s, "off")] for s in SLOTS}

    def plans_at(self, pdl: dict[str, str]) -> dict[str, Any]:
        return {s: self.plans[(s, pdl.get(s, "off"))] for s in SLOTS}


def prepare(runner: Any, table: Any, model: Any, pdl: bool, echo: Callable[[str], None]) -> FusedPrep:
    """Choose the fused step's kernels (and with ``pdl`` every chain variant of each), compile them in parallel and
    verify each against float64 on fresh inputs (before the step's weights take the device's memory)."""
    from ..build.compile import compile_variants
    from ..runners.cuda.fusedstep import slot_plan, verify_kernel

    kernels = step_kernels(table, model)
    variants: dict[str, dict[str, StepKernel]] = {}
    for slot, k in kernels.items():
        for variant in (depths_of(k) if pdl else [("", 0)]):
            kv = at_depth(k, variant)
            if kv is not None:
                variants.setdefault(slot, {})[pdl_value(variant)] = kv
    prep = FusedPrep(kernels, variants)
    items = [(v.config, v.shape, v.epilogue, v.group) for vs in variants.values() for v in vs.values()]
    compile_variants(items, arch=runner.arch)
    for slot, vs in variants.items():
        for name, sk in vs.items():
            ok, rel, why = verify_kernel(runner, sk)
            prep.verify[f"{slot}@{name}"] = {"label": sk.label, "ok": ok, "relerr": rel, "why": why}
            if not ok:
                echo(f"WARNING: the fused step's {slot} kernel {sk.label} failed verification: {why}")
            prep.plans[(slot, name)] = slot_plan(runner, sk)
    runner.release()
    echo(f"fused step: {', '.join(f'{s} {k.label} ({k.why})' for s, k in kernels.items())}; "
         f"{sum(len(v) for v in variants.values())} variants verified "
         f"{'ok' if prep.verified else 'with FAILURES'} (float64 reference)")
    return prep


def capture(bench: Any, fstep: Any, prep: FusedPrep, pdl: dict[str, str], key: str, gaps: Any = None,
            pdl_gaps: bool = False) -> None:
    """The fused step with each slot as its variant in ``pdl`` (absent: off), captured as ``key``."""
    calls = fstep.calls(prep.chosen(pdl), prep.plans_at(pdl), gaps, pdl_gaps)
    bench.capture_sequence(key, calls, fstep.outputs())


def search_depths(bench: Any, fstep: Any, prep: FusedPrep, gaps: Any, pdl_gaps: bool, echo: Callable[[str], None],
                  rounds: int = 3, replays: int = 10) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """The chain search (module docstring): (chosen ``pdl`` value per slot, every comparison made)."""
    best = {s: "off" for s in SLOTS}
    capture(bench, fstep, prep, best, "search:incumbent", gaps, pdl_gaps)
    log: list[dict[str, Any]] = []
    for slot in SLOTS:
        for name in prep.variants[slot]:
            if name == best[slot]:
                continue
            cand = {**best, slot: name}
            capture(bench, fstep, prep, cand, "search:candidate", gaps, pdl_gaps)
            inc, new = [], []
            for _ in range(rounds):
                inc += bench.time("search:incumbent", replays)
                new += bench.time("search:candidate", replays)
            mi, mn = statistics.median(inc), statistics.median(new)
            log.append({"slot": slot, "pdl": name, "incumbent": dict(best), "incumbent_us": mi, "candidate_us": mn})
            if mn < mi:
                best = cand
                capture(bench, fstep, prep, best, "search:incumbent", gaps, pdl_gaps)
        tried = ", ".join(f"{r['pdl']} {r['candidate_us']:.1f}/{r['incumbent_us']:.1f}" for r in log if r["slot"] == slot)
        echo(f"  chain search: {slot} runs {best[slot]} (µs per step, candidate/incumbent: {tried})")
    bench.drop("search:incumbent")
    bench.drop("search:candidate")
    return best, log
