"""Decode-step benchmark (``gemvtune bench step --model NAME --layers N``): the linear layers of one decode
step of a model preset (per layer in order qkv, o, gate_up, down; then the LM head) with every weight
resident, captured in one CUDA graph per implementation (the table's tuned kernels, the llama.cpp
config, cuBLAS), replays timed with CUDA events. Linear layers only: no attention, norms or sampling,
and each linear reads a fixed random x (the chain is not numerically connected). This module is the
orchestration and the report; the GPU half is gemvtune.runners.cuda.decode."""

from __future__ import annotations

import datetime as _dt
import json
import math
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..baselines import BASELINES, CUBLAS_FOR, cublas_of
from ..cells import write_csv
from ..errors import UsageError
from ..kernels.hfconfig import MODELS, model_shapes
from ..kernels.shapes import Shape
from ..safefile import savefig, write_text
from ..workspace import Workspace, replace_previous

# the step's implementations: the table's kernels, then the baselines by their names in gemvtune.baselines (cuBLAS
# is torch's F.linear where torch is installed, else cupy.matmul: the registry's fallback chain)
BASELINE_IMPLS = ("llama.cpp", CUBLAS_FOR["torch"], CUBLAS_FOR["cupy"])
PDL_IMPL = "tuned-pdl"   # --pdl: the tuned kernels' pdl=on variants, launched with programmatic stream serialization
IMPLS = ("tuned", PDL_IMPL, *BASELINE_IMPLS)
LABELS = {"tuned": "gemvtune tuned", PDL_IMPL: "gemvtune tuned, PDL",
          **{b: BASELINES[b].label for b in BASELINE_IMPLS}}
NOTE = ("Linear layers only (no attention, norms, rotary, sampling); every linear reads its own fixed "
        "random x, so the chain is not numerically connected: the memory traffic and launch sequence of "
        "a real batch-1 step are what is reproduced.")


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


def with_pdl(config: Any, shape: Shape) -> tuple[Any, str]:
    """``config`` with programmatic dependent launch on (its family's ``pdl`` field set to "on": the kernel prefetches
    its W into L2, then waits for the previous kernel before it reads x), and "" ; or ``config`` itself and why
    it has no such variant (a family without the field, or a variant that is not valid on ``shape``)."""
    import dataclasses

    names = {f.name for f in dataclasses.fields(config)} if dataclasses.is_dataclass(config) else set()
    if "pdl" not in names:
        return config, f"{config.label}: its family has no programmatic-dependent-launch variant"
    if config.pdl == "on":
        return config, ""
    on = dataclasses.replace(config, pdl="on")
    why = "; ".join(on.invalid_reasons(shape))
    return (config, f"{on.label}: {why}") if why else (on, "")


def step_bytes(ops: list[tuple[str, Shape]]) -> int:
    """The fewest bytes one step must move: every W once, every x and y once."""
    return sum(s.bytes_moved for _, s in ops)


def summary_frame(samples: Any, nbytes: int, ceiling_gbps: float, methods: dict[str, str] | None = None) -> Any:
    """Per implementation (from a frame of impl, round, us samples): median, min, max, spread of all
    replays and of the round medians, tokens/s, GB/s, % of the read ceiling, and time / tuned time."""
    import pandas as pd

    rows = []
    for impl in [i for i in IMPLS if i in set(samples.impl)] + sorted(set(samples.impl) - set(IMPLS)):
        s = samples[samples.impl == impl]
        us = [float(v) for v in s.us]
        med = statistics.median(us)
        rmeds = [statistics.median(g.us) for _, g in s.groupby("round")]
        rows.append({"impl": impl, "method": (methods or {}).get(impl, ""), "us_median": med, "us_min": min(us),
                     "us_max": max(us), "spread": (max(us) - min(us)) / med, "round_spread":
                     (max(rmeds) - min(rmeds)) / med, "samples": len(us), "rounds": len(rmeds),
                     "tokens_per_s": 1e6 / med, "gbps": nbytes / (med * 1e-6) / 1e9,
                     "pct_ceiling": 100 * nbytes / (med * 1e-6) / 1e9 / ceiling_gbps if ceiling_gbps else math.nan})
    df = pd.DataFrame(rows)
    tuned = df.loc[df.impl == "tuned", "us_median"]
    df["x_tuned"] = df.us_median / float(tuned.iloc[0]) if len(tuned) else math.nan
    return df


def ratios(df: Any) -> dict[str, float]:
    """Speed-ups of the tuned step: cuBLAS time / tuned time and llama.cpp-config time / tuned time."""
    t = dict(zip(df.impl, df.us_median))
    tu = t.get("tuned", math.nan)
    cublas = cublas_of(t, ok=math.isfinite)   # the registry's chain: torch's F.linear, else cupy.matmul
    out = {"tuned_vs_cublas": (cublas if cublas is not None else math.nan) / tu,
           "tuned_vs_llama": t.get("llama.cpp", math.nan) / tu}
    if PDL_IMPL in t:
        out["pdl_vs_cublas"] = (cublas if cublas is not None else math.nan) / t[PDL_IMPL]
        out["pdl_vs_tuned"] = tu / t[PDL_IMPL]
    return out


def decode_markdown(df: Any, meta: dict[str, Any]) -> str:
    ceil = meta.get("ceiling", {})
    floor_us = meta["step_bytes"] / (ceil["read_gbps"] * 1e3) if ceil.get("read_gbps") else math.nan
    r = ratios(df)
    lines: list[str] = [f"Decode step of {meta['model']}, {meta['layers']} layers + LM head: {meta['ops']} linear layers, "
             f"{meta['step_bytes'] / 1e9:.2f} GB moved per step (weights {meta['weight_bytes'] / 1e9:.2f} GB, all "
             f"resident); one CUDA graph per implementation, {meta.get('rounds')} interleaved rounds of "
             f"{meta.get('replays')} replays.",
             f"Read ceiling {ceil.get('read_gbps', math.nan):.0f} GB/s (same run): the step cannot take less than "
             f"{floor_us:.1f} µs.", "",
             "| implementation | µs per token | min..max | spread | rounds spread | tokens/s (linears only) | GB/s "
             "| % ceiling | × tuned time | method |", "|---|---|---|---|---|---|---|---|---|---|"]
    for _, x in df.iterrows():
        lines.append(f"| {LABELS.get(x.impl, x.impl)} | {x.us_median:.1f} | {x.us_min:.1f}..{x.us_max:.1f} | "
                     f"{100 * x.spread:.1f}% | {100 * x.round_spread:.1f}% | {x.tokens_per_s:.1f} | {x.gbps:.0f} | "
                     f"{x.pct_ceiling:.1f} | {x.x_tuned:.3f} | {x.method} |")
    lines += ["", f"Tuned step vs cuBLAS: ×{r['tuned_vs_cublas']:.3f}; vs the llama.cpp config: "
                  f"×{r['tuned_vs_llama']:.3f} (time of the other / time of the tuned step)."]
    if "pdl_vs_tuned" in r:
        lines.append(f"Tuned step with programmatic dependent launch: ×{r['pdl_vs_tuned']:.3f} the tuned step, "
                     f"×{r['pdl_vs_cublas']:.3f} cuBLAS's.")
    bad = [k for k, v in meta.get("verified", {}).items() if not v]
    lines.append("Every kernel timed was verified against a float64 reference first." if not bad else
                 f"**Verification failed** for: {', '.join(bad)} (their times are not comparable).")
    unwritten = [k for k, v in meta.get("written", {}).items() if not v]
    if unwritten:
        lines.append(f"**Outputs left unwritten** (NaN poison) by: {', '.join(unwritten)}.")
    diff = meta.get("max_rel_diff_vs_cublas") or {}
    if diff:
        lines.append("Outputs of the step against cuBLAS's, worst op (relative L2): "
                     + ", ".join(f"{LABELS.get(k, k)} {v:.1e}" for k, v in diff.items()) + ".")
    if meta.get("no_pdl"):
        lines.append("Without a PDL variant (the tuned kernel as it is, launched without the attribute): "
                     + "; ".join(meta["no_pdl"]) + ".")
    if meta.get("not_tuned"):
        lines.append(f"Not in the table (fallback config used): {', '.join(meta['not_tuned'])}.")
    lines += ["", NOTE]
    return "\n".join(lines) + "\n"


def plot_decode(df: Any, path: str | Path, title: str, floor_us: float = math.nan) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    xs = list(range(len(df)))
    err = [df.us_median - df.us_min, df.us_max - df.us_median]
    bars = ax.bar(xs, df.us_median, yerr=err, capsize=4, color=[f"C{i}" for i in range(len(df))])
    for b, (_, x) in zip(bars, df.iterrows()):
        ax.text(b.get_x() + b.get_width() / 2, x.us_max * 1.02, f"{x.tokens_per_s:.0f} tok/s\n{x.pct_ceiling:.0f}% of ceiling",
                ha="center", va="bottom", fontsize=8)
    if floor_us == floor_us:
        ax.axhline(floor_us, color="k", lw=1, ls="--", label=f"read-ceiling floor {floor_us:.0f} µs")
        ax.legend(fontsize=8, loc="lower right")
    ax.set_xticks(xs, [LABELS.get(i, i) for i in df.impl])
    ax.set_ylabel("µs per decode step (linear layers)")
    ax.set_ylim(0, float(df.us_max.max()) * 1.25)
    ax.set_title(title, fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    savefig(fig, path, dpi=110)
    plt.close(fig)
    return Path(path)


def measure_decode_step(runner: Any, ops: list[tuple[str, Shape]], table: Any, rounds: int = 3, replays: int = 20,
                        echo: Callable[[str], None] = print, pdl: bool = False) -> tuple[Any, Any, dict[str, Any]]:
    """(samples frame, the DecodeStepBench, info): compile and verify each distinct shape's tuned and
    llama.cpp kernels (and with ``pdl`` the tuned kernels' PDL variants), allocate the step, capture one graph per
    implementation, time them interleaved."""
    import pandas as pd

    from ..build.compile import compile_variants
    from ..kernels.gemv import LLAMA_CPP
    from ..runners.cuda.decode import DecodeStepBench, free_bytes, launchers, verify

    shapes = list(dict.fromkeys(s for _, s in ops))
    looked = {s: table.lookup(s) for s in shapes}
    configs = {"tuned": {s: c for s, (c, _) in looked.items()}, "llama.cpp": {s: LLAMA_CPP for s in shapes}}
    no_pdl: list[str] = []
    if pdl:
        pdls = {s: with_pdl(c, s) for s, c in configs["tuned"].items()}
        configs[PDL_IMPL] = {s: c for s, (c, _) in pdls.items()}
        no_pdl = [f"{s} ({why})" for s, (_, why) in pdls.items() if why]
    compile_variants([(c, s) for cs in configs.values() for s, c in cs.items()], arch=runner.arch)
    info: dict[str, Any] = {"configs": {str(s): {"tuned": c.label, "how": how} for s, (c, how) in looked.items()},
                            "llama_cpp": LLAMA_CPP.label, "verified": {}, "verify": {},
                            "not_tuned": [str(s) for s, (_, how) in looked.items() if how != "tuned"],
                            **({"no_pdl": no_pdl, "pdl_configs": {str(s): c.label for s, c in configs[PDL_IMPL].items()}}
                               if pdl else {})}
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
    ours = tuple(configs)
    for impl in ours:
        bench.capture_kernels(impl, configs[impl], launch[impl])
    cublas, method = bench.capture_cublas()
    info["methods"] = {**{i: bench.methods[i] for i in ours}, cublas: method}
    impls = (*ours, cublas)
    rows = []
    for r in range(rounds):
        line = []
        for impl in impls:
            t = bench.time(impl, replays)
            rows += [{"impl": impl, "method": info["methods"][impl], "round": r, "replay": k, "us": v}
                     for k, v in enumerate(t)]
            line.append(f"{impl} {statistics.median(t):.1f} µs")
        echo(f"round {r + 1}/{rounds}: " + ", ".join(line))
    info["written"] = {impl: bench.written(impl) for impl in impls}
    info["max_rel_diff_vs_cublas"] = {i: bench.max_rel_diff(i, cublas) for i in ours}
    return pd.DataFrame(rows), bench, info


def write_reports(samples: Any, info: dict[str, Any], meta: dict[str, Any], out: Path, stem: str,
                  device: dict[str, Any], ceiling: dict[str, Any]) -> tuple[Path, str]:
    """CSV of every replay + JSON provenance, summary CSV/markdown, bar chart; returns (csv, markdown)."""
    from ..reports.runcsv import provenance

    out.mkdir(parents=True, exist_ok=True)
    df = summary_frame(samples, meta["step_bytes"], ceiling.get("read_gbps", math.nan), info.get("methods"))
    meta = {**meta, "ceiling": ceiling, **{k: info[k] for k in ("verified", "not_tuned", "written", "no_pdl",
                                                                 "max_rel_diff_vs_cublas") if k in info}}
    path = out / f"{stem}.csv"
    write_csv(samples, path, float_format="%.6g")
    prov = provenance(device, **meta, **{k: v for k, v in info.items() if k not in meta}, ratios=ratios(df), note=NOTE)
    write_text(path.with_suffix(".json"), json.dumps(prov, indent=2, sort_keys=True, default=str) + "\n")
    write_csv(df, out / f"{stem}-summary.csv", float_format="%.6g")
    md = decode_markdown(df, meta)
    write_text(out / f"{stem}-summary.md", md)
    floor = meta["step_bytes"] / (ceiling["read_gbps"] * 1e3) if ceiling.get("read_gbps") else math.nan
    plot_decode(df, out / f"{stem}.png", f"{device.get('name', '')}: {meta['model']} decode step, "
                f"{meta['layers']} layers + LM head", floor)
    return path, md


def run_decode_step(model: str, layers: int, table_path: str, out_dir: str | None,
                    echo: Callable[[str], None] = print, rounds: int = 3, replays: int = 20, pdl: bool = False) -> Path:
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
    samples, bench, info = measure_decode_step(runner, ops, table, rounds, replays, echo, pdl=pdl)
    meta = {"model": model, "layers": layers, "ops": len(ops), "step_bytes": step_bytes(ops),
            "weight_bytes": bench.weight_bytes, "rounds": rounds, "replays": replays, "table": str(table_path),
            "pdl": pdl}
    bench.close()
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    path, md = write_reports(samples, info, meta, out, f"decode-{model}-L{layers}-{stamp}", dev, ceil)
    echo(md)
    echo(f"wrote {path}, {path.with_suffix('.json').name}, its -summary.csv/-summary.md and {path.stem}.png")
    if not out_dir:   # the workspace's benchmarks: the latest run of each benchmark is kept
        replace_previous(out, f"decode-{model}-L{layers}", stamp)
    return path
