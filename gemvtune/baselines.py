"""The baselines: every contender timed beside the tuned kernels, by the name a Measurement's ``kind`` and a table
entry's ``baselines`` use. Bench, transition, decode step, check, the table report and the route read names, labels
and the cuBLAS fallback chain from here (one place to add a baseline)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Baseline:
    name: str         # the kind of its Measurement and its key in a table entry's "baselines"
    framework: str    # whose call it is: torch, cupy, or gemvtune's own harness
    label: str        # how reports name it
    how: str          # how it is measured


BASELINES: dict[str, Baseline] = {b.name: b for b in (
    Baseline("cublas-torch", "torch", "cuBLAS (torch F.linear)",
             "F.linear in a torch CUDA graph over the rotating weight copies, as nn.Linear calls it"),
    Baseline("cublas", "cupy", "cuBLAS (cupy.matmul)", "cupy.matmul, timed by the spin method"),
    Baseline("inductor", "torch", "Inductor max-autotune",
             "torch.compile(mode='max-autotune-no-cudagraphs') of F.linear in the same torch harness"),
    Baseline("llama.cpp", "gemvtune", "llama.cpp config (d compiled in)",
             "the GEMV family at llama.cpp's own launch parameters"),
    Baseline("seed", "gemvtune", "seed kernel", "llama.cpp's kernel as written (d at run time), in a graph"),
    # FP8 weights (a shape's ``weights``): no cuBLAS call takes E4M3 codes with FP16/BF16 x, so what a model runs
    # without a kernel is the dequantisation then F.linear (the route's fallback, ``runtime.fp8linear``); cuBLAS
    # on the FP16/BF16 weights of the same (M, d, n) is the speed FP8 must beat (reported, never a route's rival)
    Baseline("dequant-torch", "torch", "dequantize + F.linear",
             "codes x scales to the input dtype, then F.linear, in a torch CUDA graph over the rotating FP8 copies"),
    Baseline("cublas-16bit", "torch", "cuBLAS on 16-bit weights (torch F.linear)",
             "F.linear on FP16/BF16 weights of the same M, d, n, in the same torch harness"),
)}

# the cuBLAS baseline of each kind of caller a table serves (what "never slower" is measured against): torch eager,
# CuPy, and torch under torch.compile (F.linear there is Inductor's to compile; cuBLAS through torch all the same)
CUBLAS_FOR = {"torch": "cublas-torch", "cupy": "cublas", "torch-compile": "cublas-torch"}
# the callers whose own compiler makes a kernel of F.linear, and the baseline that kernel is timed as: the route
# runs the tuned kernel for them only where it beats that one too (``gemvtune.runtime.verdict``)
COMPILER_FOR = {"torch-compile": "inductor"}


# what a call on FP8 weights runs where no kernel does (the last link of the chain: an FP8 entry has no cuBLAS one)
FP8_FALLBACK = "dequant-torch"


def cublas_of(found: Any, framework: str | None = None, ok: Callable[[Any], bool] = bool) -> Any:
    """The baseline a tuned kernel replaces among ``found`` (a table entry's ``baselines`` records, or measurements
    by kind): cuBLAS, ``framework``'s own where present and ``ok``, else torch's, else CuPy's; for FP8 weights (no
    cuBLAS record) dequantize + F.linear (the one fallback chain, written once). None where none is."""
    if not isinstance(found, Mapping):
        return None
    order = ([CUBLAS_FOR[framework]] if framework in CUBLAS_FOR else []) + ["cublas-torch", "cublas", FP8_FALLBACK]
    for name in order:
        v = found.get(name)
        if v is not None and ok(v):
            return v
    return None
