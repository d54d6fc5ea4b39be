"""The never-slower check in a harness of its own (``gemvtune bench guard``): per shape, n and dtype, stock
``nn.Linear`` against the same modules after ``swap_linears`` with the table (FP8 weights, ``--weights``:
dequantize + F.linear against the FP8 layers with the table; ``guardlayers``), each captured in one torch CUDA graph
that calls K weight copies in turn (their bytes at least 3x the L2, so every call reads its weight from memory),
replays timed with ``torch.cuda.Event`` in interleaved rounds. torch builds the layers and times them: no gemvtune
runner, no CuPy and none of the search's timing code, so the search's own harness is not what judges it (the kernels
are compiled ahead by ``build.compile``, as the swapped layers would compile them on their first call). Each contender's output is checked
against a float64 reference before timing (eager) and after it (the graph's own output). The rule, the summary and
everything else pure are in ``gemvtune.bench.guardverdict``; this module is the GPU half and the files.

The device is behind a small backend (``CudaBackend``: capture, time, free memory, what the device is) so that the
whole loop runs on the CPU in the tests with a fake one. torch is imported inside functions only.
"""

from __future__ import annotations

import datetime as _dt
import json
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..kernels.shapes import Shape
from .guardlayers import TORCH_DTYPE, Layers, bound_extra, build_layers, launches, reference, relerr
from .guardverdict import (
    COLUMNS,
    calls_per_graph,
    copies_for,
    csv_row,
    error_bound,
    failure_line,
    row_stats,
    summary_markdown,
    verdict,
)

STEM = "guard"
CONTENDERS = ("stock", "gemvtune")


class CudaBackend:
    """The GPU through torch: what the device is, its free memory, a CUDA graph captured after a warm-up on a
    side stream (docs/pytorch.md: a swapped layer builds its kernel plan on its first call of an n, which must not
    happen during capture), and the replays of a graph timed between CUDA events."""

    device = "cuda"

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.props = torch.cuda.get_device_properties(torch.cuda.current_device())
        self._info: dict[str, Any] | None = None

    def info(self) -> dict[str, Any]:
        """What the device is (asked once): name, compute capability, SMs, L2, memory, driver, torch and CUDA."""
        if self._info is None:
            self._info = self._ask()
        return dict(self._info)

    def _ask(self) -> dict[str, Any]:
        import subprocess

        p, torch = self.props, self.torch
        try:   # (one driver per host: the first GPU's line)
            out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20).stdout.strip()
            driver = (out.splitlines() or [""])[0].strip()
        except Exception:
            driver = ""
        return {"name": p.name, "compute_capability": f"{p.major}.{p.minor}", "sm_count": p.multi_processor_count,
                "l2_bytes": int(p.L2_cache_size), "memory_bytes": int(p.total_memory), "driver": driver,
                "torch": torch.__version__, "cuda": torch.version.cuda or ""}

    @property
    def arch(self) -> str:
        return f"sm_{self.props.major}{self.props.minor}"

    def free_bytes(self) -> int:
        return int(self.torch.cuda.mem_get_info()[0])

    def capture(self, fn: Callable[[], Any], warmups: int = 2) -> tuple[Any, Any]:
        """(graph, what ``fn`` returned during capture): ``fn`` run ``warmups`` times on a side stream first."""
        torch = self.torch
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(warmups):
                fn()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = fn()
        torch.cuda.synchronize()
        return g, out

    def time(self, graph: Any, calls: int, replays: int) -> list[float]:
        """µs per call of each of ``replays`` replays, back to back between events (one untimed replay first, so
        the timed ones queue behind it and the GPU never waits for the CPU)."""
        torch = self.torch
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(replays + 1)]
        graph.replay()
        ev[0].record()
        for i in range(replays):
            graph.replay()
            ev[i + 1].record()
        ev[-1].synchronize()
        return [ev[i].elapsed_time(ev[i + 1]) * 1e3 / calls for i in range(replays)]

    def release(self) -> None:
        self.torch.cuda.synchronize()
        self.torch.cuda.empty_cache()


def measure_row(backend: Any, layers: Layers, table: Any, n: int, rounds: int, replays: int, calls: int,
                seed: int = 0) -> dict[str, Any]:
    """One row: the route, both contenders checked eagerly against float64, then (when both are right) captured
    and timed in ``rounds`` interleaved rounds of ``replays`` replays, the graphs' outputs checked after; the
    statistics and the verdict (``guardverdict``)."""
    import torch

    from ..runtime.torch_linear import explain

    s = layers.shape
    K = len(layers.stock)
    row: dict[str, Any] = {"shape": f"{s.M}x{s.d}", "M": s.M, "d": s.d, "n": n, "dtype": s.dtype,
                           "weights": s.weights, "copies": K, "copies_capped": layers.capped, "calls_per_graph": calls,
                           "bound": error_bound(s.dtype, s.d) + bound_extra(s), "config": "", "error": ""}
    ex = explain(layers.container, n)[0]
    row["route"], row["route_why"] = ex["route"], ex["why"]
    if row["route"] == "tuned":
        r = table.route(s.M, s.d, n, "torch", s.dtype, s.dtype, s.weights)
        row["config"] = r.config.label if r.config is not None else ""
    dt = getattr(torch, TORCH_DTYPE[s.dtype])
    gen = torch.Generator(device=backend.device).manual_seed(seed)
    graphs: dict[str, Any] = {}
    outs: dict[str, Any] = {}
    samples: dict[str, list[list[float]]] = {c: [] for c in CONTENDERS}
    with torch.no_grad():
        x = torch.randn(n, s.d, device=backend.device, dtype=dt, generator=gen)
        ref = reference(x, layers.ref_weight)
        try:
            row["stock_relerr"] = relerr(layers.stock[0](x), ref)
            row["gemvtune_relerr"] = relerr(layers.swapped[0](x), ref)   # (its first call of n: builds its plan)
            row["launches"] = launches(layers.swapped[0], s, n, row["route"])
            if not all(row[f"{c}_relerr"] <= row["bound"] for c in CONTENDERS):
                row["error"] = (f"outside the bound {row['bound']:.1e} before timing: stock {row['stock_relerr']:.2e}, "
                                f"gemvtune {row['gemvtune_relerr']:.2e}")
            else:
                for c, mods in (("stock", layers.stock), ("gemvtune", layers.swapped)):
                    seq = [mods[i % K] for i in range(calls)]
                    graphs[c], outs[c] = backend.capture(lambda seq=seq: [m(x) for m in seq])
                for r in range(rounds):
                    for c in (CONTENDERS if r % 2 == 0 else CONTENDERS[::-1]):
                        samples[c].append(backend.time(graphs[c], calls, replays))
                for c in CONTENDERS:
                    row[f"{c}_graph_relerr"] = relerr(outs[c][0], ref)   # call 0 is copy 0's
        except Exception as e:   # a row that cannot be measured is an ERROR row, not the end of the run
            row["error"] = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}"
            samples = {c: [] for c in CONTENDERS}
    del graphs, outs
    for c in CONTENDERS:
        for k in ("_relerr", "_graph_relerr"):
            row.setdefault(c + k, float("nan"))
    row.setdefault("launches", "")
    row["verified"] = not row["error"] and all(row[f"{c}{k}"] <= row["bound"] for c in CONTENDERS
                                               for k in ("_relerr", "_graph_relerr"))
    if samples["stock"] and len(samples["stock"]) == len(samples["gemvtune"]) == rounds:
        row.update(row_stats(samples["stock"], samples["gemvtune"]))
        row["round_medians"] = {c: [statistics.median(v) for v in samples[c]] for c in CONTENDERS}
    else:
        row.update({k: float("nan") for k in ("stock_us", "gemvtune_us", "ratio", "ratio_q25", "stock_spread",
                                             "gemvtune_spread")}, round_ratios=[])
    if row["verified"] is False and not row["error"]:
        row["error"] = "a graph's output is outside the bound"
    row["verdict"] = verdict(row["ratio"], row["round_ratios"], row["verified"])
    return row


def precompile(table: Any, shapes: Sequence[Shape], batches: Sequence[int], arch: str) -> int:
    """Compile, in parallel into the disk cache, every kernel the routes of these rows run (each swapped layer
    would otherwise compile its own on its first call, one after another); returns how many were asked for."""
    from ..build.compile import compile_variants
    from ..kernels.epilogue import Epilogue
    from ..kernels.families import is_library

    items = []
    for s in shapes:
        for n in batches:
            r = table.route(s.M, s.d, n, "torch", s.dtype, s.dtype, s.weights)
            if r.tuned and r.config is not None and not is_library(r.config):
                items.append((r.config, Shape(s.M, s.d, n, s.dtype, s.weights), Epilogue(s.dtype, False)))
    items = list(dict.fromkeys(items))
    if items:
        try:
            compile_variants(items, arch=arch)   # a compile failure is returned, left to the layer's own call
        except Exception:   # (a config its template refuses): that row's layer says so when it is called
            pass
    return len(items)


@dataclass
class GuardResult:
    rows: list[dict[str, Any]]
    csv: Path
    markdown: str
    failure: str            # failure_line: "" when every row passed


def run_guard(shapes: Sequence[tuple[int, int]], batches: Sequence[int], dtypes: Sequence[str], table: Any,
              out: Path, rounds: int = 7, replays: int = 10, echo: Callable[[str], None] = print,
              backend: Any = None, keep_latest: bool = False, command: str | None = None,
              weights: str = "") -> GuardResult:
    """Every (shape, dtype) in turn, its copies allocated once and reused for every n; one row per n; then the
    CSV, the JSON provenance and the markdown summary under ``out`` (``keep_latest``: the previous run there
    goes). ``weights``: an FP8 format ("e4m3-row", "e4m3-b128"): FP8 layers through the table's FP8 routes against
    dequantize + F.linear of the same weights (``guardlayers``); the files' stem names it. Returns the rows, the CSV's
    path, the summary and the failure line."""
    from ..provenance import VERSION, provenance, source_commit

    backend = backend or CudaBackend()
    dev = backend.info()
    t0 = time.perf_counter()
    todo = [Shape(M, d, 1, dt, weights) for dt in dtypes for M, d in shapes]
    if hasattr(backend, "arch"):
        k = precompile(table, todo, batches, backend.arch)
        echo(f"compiled {k} tuned kernels for the routed rows ({time.perf_counter() - t0:.1f} s)")
    rows: list[dict[str, Any]] = []
    capped: list[str] = []
    for i, s in enumerate(todo):
        t1 = time.perf_counter()
        K, cap = copies_for(s.weight_bytes, dev["l2_bytes"], backend.free_bytes())
        calls = calls_per_graph(s.weight_bytes, K)
        layers = build_layers(backend, table, s, K, seed=i)
        layers.capped = cap
        if cap:
            capped.append(f"{s.M}x{s.d} {s.dtype}: {K} copies, {K * s.weight_bytes / 2**20:.0f} MiB")
        echo(f"[{i + 1}/{len(todo)}] {s.M}x{s.d} {s.dtype}{s.weights_suffix(' ')}: {K} copies ({K * s.weight_bytes / 2**20:.0f} MiB"
             f"{', capped by memory' if cap else ''}), {calls} calls per graph")
        for n in batches:
            r = measure_row(backend, layers, table, n, rounds, replays, calls, seed=1000 * i + n)
            rows.append(r)
            echo(f"  n={n:<2d} {r['route']:7s} stock {r['stock_us']:8.2f} µs  gemvtune {r['gemvtune_us']:8.2f} µs  "
                 f"×{r['ratio']:.3f}  {r['verdict']}" + (f"  ({r['error']})" if r["error"] else ""))
        del layers
        backend.release()
        echo(f"  {time.perf_counter() - t1:.1f} s (total {time.perf_counter() - t0:.1f} s)")
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    meta = {"table": str(getattr(table, "path", "")), "table_origin": getattr(table, "origin", ""),
            "rounds": rounds, "replays": replays, "batches": list(batches), "dtypes": list(dtypes),
            "shapes": [f"{M}x{d}" for M, d in shapes], "weights": weights, "capped": capped, "gemvtune": VERSION,
            "commit": source_commit(), "seconds": round(time.perf_counter() - t0, 1)}
    prov = provenance(dev, **meta)
    if command:
        prov["command"] = command
    return _write(rows, prov, out, stamp, keep_latest, stem_of(weights))


def stem_of(weights: str = "") -> str:
    """The files' stem of a run: ``guard``, or ``guard-<format>`` for FP8 weights (each keeps its own latest run)."""
    return f"{STEM}-{weights}" if weights else STEM


def _write(rows: list[dict[str, Any]], prov: dict[str, Any], out: Path, stamp: str, keep_latest: bool,
           stem: str = STEM) -> GuardResult:
    import pandas as pd

    from ..cells import write_csv
    from ..safefile import write_text
    from ..workspace import replace_previous

    out.mkdir(parents=True, exist_ok=True)
    base = out / f"{stem}-{stamp}"
    csv = Path(f"{base}.csv")
    write_csv(pd.DataFrame([csv_row(r) for r in rows], columns=COLUMNS), csv, float_format="%.6g")
    detail = [{k: r.get(k) for k in ("shape", "n", "dtype", "route", "verdict", "round_medians")} for r in rows]
    write_text(Path(f"{base}.json"), json.dumps({**prov, "rows": detail}, indent=1, default=str) + "\n")
    md = summary_markdown(rows, prov)
    md_path = Path(f"{base}-summary.md")
    write_text(md_path, md)
    if keep_latest:   # the workspace's benchmarks: the latest run of each benchmark is kept
        replace_previous(out, stem, stamp)
    return GuardResult(rows, csv, md, failure_line(rows, str(md_path)))
