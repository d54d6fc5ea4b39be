"""Decode-step benchmark (``gemvtune bench step --model NAME --layers N``): the linear layers of one decode step of a
model preset (per layer in order qkv, o, gate_up, down; then the LM head) with every weight resident, captured in one
CUDA graph per implementation, replays timed with CUDA events, rounds interleaved:

- ``tuned``: the table's kernel of each fused shape (qkv and gate_up as one weight each, as engines keep them);
- ``fused``: what a model with its own q/k/v and gate/up weights can run (``gemvtune.bench.chain``): one grouped launch
  for q, k, v, o adding the residual, one grouped launch for gate and up writing ``silu(g)·u``, down adding the
  residual (``gemvtune.bench.stepfused``);
- ``fused-pdl`` (``--pdl``): the same with programmatic dependent launch, each kernel at the prefetch depth a chain
  search picked in this graph;
- the baselines: the llama.cpp config and cuBLAS (torch ``F.linear``), on the fused shapes.

``--between plain,pdl`` adds each implementation again with stand-ins of the kernels a model runs between its
linears (``gemvtune.bench.gaps``): ``plain`` ones end a PDL chain (as cuBLAS or Inductor kernels do), ``pdl`` ones
release the next kernel at once (as PDL-aware engine kernels do). The unfused implementations have the elementwise
gaps the fused one does without (SwiGLU's product, the residual adds). This module is the orchestration; the report is
gemvtune.bench.stepreport's, the GPU half gemvtune.runners.cuda.decode's and .fusedstep's."""

from __future__ import annotations

import datetime as _dt
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..kernels.hfconfig import MODELS, model_shapes
from ..kernels.shapes import Shape
from ..workspace import Workspace, replace_previous
from .gaps import BETWEEN, DEFAULT_CONTEXT
from .stepfused import FUSED, FUSED_PDL
from .stepreport import BASELINE_IMPLS, key_of, split_key, write_reports

MAX_STEP_LAYERS = 1024   # one CUDA graph per implementation holds 7 launches a layer


def check_decode_args(model: str | None, layers: Any, shape_texts: tuple = (), suite: str | None = None,
                      spec: str = "tuned", batch_text: str = "1") -> int:
    """Bad combinations of ``bench step`` (and of the old ``bench --layers``) are one UsageError, before any GPU
    work; returns N."""
    if not model:
        raise UsageError("--layers needs --model (the decode step of a model preset)")
    from ..intparse import positive_int

    n_layers = positive_int(layers, "--layers", MAX_STEP_LAYERS)
    model_shapes(model)  # unknown preset: one line naming the known ones
    if shape_texts or suite:
        raise UsageError("--layers times one model's decode step: drop --shape/--suite")
    if spec != "tuned":
        raise UsageError("--layers times the table's tuned kernels: drop --configs")
    if str(batch_text).strip() != "1":
        raise UsageError("--layers times a batch-1 decode step: drop --batch")
    return n_layers


def step_ops(model: str, layers: int) -> list[tuple[str, Shape]]:
    """(name, shape) of every linear of one decode step, in launch order: per layer the preset's
    per-layer linears in their listed order, then the LM head once."""
    model_shapes(model)
    if isinstance(layers, bool) or not isinstance(layers, int) or not 1 <= layers <= MAX_STEP_LAYERS:
        raise UsageError(f"--layers must be an integer >= 1 and <= {MAX_STEP_LAYERS}, got {layers!r}")
    per = [(n, M, d) for n, M, d in MODELS[model] if n != "lm_head"]
    head = [(n, M, d) for n, M, d in MODELS[model] if n == "lm_head"]
    return ([(f"layers.{i}.{n}", Shape(M, d)) for i in range(layers) for n, M, d in per]
            + [(n, Shape(M, d)) for n, M, d in head])


def step_bytes(ops: list[tuple[str, Shape]]) -> int:
    """The fewest bytes one step must move: every W once, every x and y once."""
    return sum(s.bytes_moved for _, s in ops)


def measure_decode_step(runner: Any, ops: list[tuple[str, Shape]], table: Any, rounds: int = 3, replays: int = 20,
                        echo: Callable[[str], None] = print, pdl: bool = False, model: str | None = None,
                        between: tuple[str, ...] = ("none",), context: int = DEFAULT_CONTEXT,
                        ) -> tuple[Any, Any, dict[str, Any]]:
    """(samples frame, the DecodeStepBench, info): compile and verify each distinct shape's tuned and llama.cpp
    kernels (with ``model``, the fused step's kernels too, and with ``pdl`` each at every chain depth), allocate the
    step, capture one graph per implementation and stand-in mode (``between``; the fused-pdl depths searched in each),
    time them interleaved."""
    import pandas as pd

    from ..build.compile import compile_variants
    from ..kernels.gemv import LLAMA_CPP
    from ..runners.cuda.decode import DecodeStepBench, free_bytes, launchers, verify

    shapes = list(dict.fromkeys(s for _, s in ops))
    looked = {s: table.lookup(s) for s in shapes}
    configs = {"tuned": {s: c for s, (c, _) in looked.items()}, "llama.cpp": {s: LLAMA_CPP for s in shapes}}
    compile_variants([(c, s) for cs in configs.values() for s, c in cs.items()], arch=runner.arch)
    info: dict[str, Any] = {"configs": {str(s): {"tuned": c.label, "how": how} for s, (c, how) in looked.items()},
                            "llama_cpp": LLAMA_CPP.label, "verified": {}, "verify": {},
                            "not_tuned": [str(s) for s, (_, how) in looked.items() if how != "tuned"]}
    prep = hf = None
    if model is not None:
        from ..kernels.hfconfig import read_preset
        from . import stepfused

        hf = read_preset(model)
        prep = stepfused.prepare(runner, table, hf, pdl, echo)
        info["fused_kernels"] = {s: k.label for s, k in prep.kernels.items()}
        info["verify"]["fused"] = prep.verify
        info["verified"][FUSED] = prep.verified
    launch = {impl: launchers(runner, cs) for impl, cs in configs.items()}
    for impl, res in verify(runner, configs, launch).items():
        info["verify"][impl] = {str(s): {"ok": ok, "relerr": rel, "why": why} for s, ok, rel, why in res}
        info["verified"][impl] = all(ok for _, ok, _, _ in res)
        for s, ok, _rel, why in res:
            if not ok:
                echo(f"WARNING: the {impl} kernel for {s} failed verification: {why}")
    echo("verified: " + ", ".join(f"{impl} {'ok' if v else 'FAILED'}" for impl, v in info["verified"].items())
         + f" ({len(shapes)} shapes, float64 reference)")
    need = sum(s.weight_bytes for _, s in ops) + 4 * max(s.M * s.d for s in shapes) + 2**30
    free = free_bytes()
    if need > free:
        raise UsageError(f"{len(ops)} linears need {need / 1e9:.1f} GB of device memory, {free / 1e9:.1f} GB is "
                         f"free: use fewer --layers")
    bench = DecodeStepBench(runner, ops)
    echo(f"allocated {bench.weight_bytes / 1e9:.2f} GB of FP16 weights for {len(ops)} linears")
    layers = (len(ops) - 1) // 4
    keys: list[str] = []
    info["methods"], info["depths"], info["chain_search"], info["gap_bytes"] = {}, {}, {}, {}
    fstep = None
    if prep is not None:
        from ..runners.cuda.fusedstep import FusedStep

        fstep = FusedStep(bench, hf, layers)
        bench.keep(fstep)
    gap_sets: dict[bool, Any] = {}
    if any(b != "none" for b in between):
        if model is None:
            raise UsageError("stand-ins between the linears (--between) need the model preset")
        from ..kernels.hfconfig import read_preset
        from ..runners.cuda.fusedstep import GapBuffers
        from ..runners.cuda.standins import StandIns
        from .gaps import layer_gaps

        standins = StandIns(runner)
        # the same buffers for both stand-in modes (a mode changes how they launch, not what they read and write);
        # kept as long as the graphs that captured their pointers (the H200, 2026-12-04: buffers of one mode freed
        # when the next mode's were made, then reused by its outputs, which the first mode's stand-ins overwrote)
        gap_sets = {fused: GapBuffers(runner, standins, layer_gaps(read_preset(model), 1, fused, context), layers)
                    for fused in (False, True)}
        bench.keep(standins, *gap_sets.values())
    from . import stepfused

    for b in between:
        gaps_u, gaps_f = (gap_sets[False], gap_sets[True]) if b != "none" else (None, None)
        if gaps_u is not None and gaps_f is not None:
            info["gap_bytes"][b] = {"unfused": gaps_u.bytes_per_layer * layers, "fused": gaps_f.bytes_per_layer * layers}
        for impl in configs:
            k = key_of(impl, b)
            bench.capture_kernels(impl, configs[impl], launch[impl], gaps_u, b == "pdl", key=k)
            keys.append(k)
        if prep is not None:
            stepfused.capture(bench, fstep, prep, {}, key_of(FUSED, b), gaps_f, b == "pdl")
            keys.append(key_of(FUSED, b))
            if pdl:
                echo(f"chain search ({b} between the linears):")
                depths, log = stepfused.search_depths(bench, fstep, prep, gaps_f, b == "pdl", echo)
                info["depths"][b], info["chain_search"][b] = depths, log
                stepfused.capture(bench, fstep, prep, depths, key_of(FUSED_PDL, b), gaps_f, b == "pdl")
                keys.append(key_of(FUSED_PDL, b))
        cublas, method = bench.capture_cublas(gaps_u, b == "pdl", "" if b == "none" else f"@{b}")
        keys.append(cublas)
    info["methods"] = {k: bench.methods.get(k, "graph") for k in keys}
    rows = []
    for r in range(rounds):
        line = []
        for k in keys:
            t = bench.time(k, replays)
            rows += [{"impl": k, "method": info["methods"][k], "round": r, "replay": j, "us": v} for j, v in enumerate(t)]
            line.append(f"{k} {statistics.median(t):.1f} µs")
        echo(f"round {r + 1}/{rounds}: " + ", ".join(line))
    info["written"] = {k: bench.written(k) for k in keys}
    if fstep is not None and prep is not None:
        info["fused_checked"] = {}
        for k in keys:
            if split_key(k)[0] in (FUSED, FUSED_PDL):
                bench.time(k, 1)   # one more replay, then its last layer against float64
                depths = info["depths"].get(split_key(k)[1], {}) if split_key(k)[0] == FUSED_PDL else {}
                info["fused_checked"][k] = fstep.check_last_layer(runner, prep.chosen(depths))
    # every unfused step's first layer, after the replays, against float64 of its W and x (a baseline too)
    info["checked"] = {k: [list(bench.check_op(k, i)) for i in range(min(4, len(ops)))] for k in keys
                       if split_key(k)[0] not in (FUSED, FUSED_PDL) and bench.y.get(k) and bench.y[k][0] is not None}
    cub = {split_key(k)[1]: k for k in keys if split_key(k)[0] in BASELINE_IMPLS[1:]}
    info["max_rel_diff_vs_cublas"] = {k: bench.max_rel_diff(k, cub[split_key(k)[1]]) for k in keys
                                      if split_key(k)[0] in configs}
    return pd.DataFrame(rows), bench, info


def parse_between(text: str | None) -> tuple[str, ...]:
    """``--between``: a comma list of none, plain, pdl (each once; ``none`` first when given)."""
    if text is None or not str(text).strip():
        return ("none",)
    vals = [v.strip() for v in str(text).split(",") if v.strip()]
    bad = [v for v in vals if v not in BETWEEN]
    if bad or not vals or len(set(vals)) != len(vals):
        raise UsageError(f"--between takes a comma list of {', '.join(BETWEEN)}, each once; got {text!r:.60}")
    return tuple(sorted(vals, key=BETWEEN.index))


def run_decode_step(model: str, layers: int, table_path: str, out_dir: str | None,
                    echo: Callable[[str], None] = print, rounds: int = 3, replays: int = 20, pdl: bool = False,
                    between: tuple[str, ...] = ("none",), context: int = DEFAULT_CONTEXT) -> Path:
    from ..runtime.table import load_table
    from .kernels import _start

    ops = step_ops(model, layers)
    table = load_table(table_path)
    runner, dev, ceil = _start(echo)
    table._check_gpu(dev["name"])
    echo(f"table {table_path}; {model}: {layers} layers x {len(ops) // max(layers, 1)} linears + LM head = "
         f"{len(ops)} launches, {step_bytes(ops) / 1e9:.2f} GB per step")
    out = Path(out_dir) if out_dir else Workspace.for_gpu(dev["name"]).benchmarks
    try:
        out.mkdir(parents=True, exist_ok=True)  # an unwritable --out fails before the GPU work
    except OSError as e:
        raise UsageError(f"output folder {out} cannot be created: {e.strerror or e}") from None
    samples, bench, info = measure_decode_step(runner, ops, table, rounds, replays, echo, pdl=pdl, model=model,
                                               between=between, context=context)
    meta = {"model": model, "layers": layers, "ops": len(ops), "step_bytes": step_bytes(ops),
            "weight_bytes": bench.weight_bytes, "rounds": rounds, "replays": replays, "table": str(table_path),
            "pdl": pdl, "between": list(between), "context": context}
    bench.close()
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    path, md = write_reports(samples, info, meta, out, f"decode-{model}-L{layers}-{stamp}", dev, ceil)
    echo(md)
    echo(f"wrote {path}, {path.with_suffix('.json').name}, its -summary.csv/-summary.md and {path.stem}.png")
    if not out_dir:   # the workspace's benchmarks: the latest run of each benchmark is kept
        replace_previous(out, f"decode-{model}-L{layers}", stamp)
    return path
