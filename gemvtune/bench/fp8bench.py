"""The FP8 benchmark (``gemvtune bench fp8``): per shape and batch, in one process and interleaved over rounds, the
table's FP8 kernel (E4M3 weights with FP32 scales) beside what it is for and against:

- ``fp8``: the table's FP8 route config for the shape (its tuned winner, else the lookup's fallback, named);
- ``tuned-16bit``: the table's kernel for the same (M, d, n) with 16-bit weights (what FP8 must halve);
- ``cublas-16bit``: cuBLAS (``F.linear``) on 16-bit weights;
- ``dequant-torch``: dequantize + ``F.linear`` (what a model of FP8 weights runs without a kernel: the route's
  fallback);
- ``gemlite-fp8``: gemlite's A16W8_FP8 with its own autotune, built from the same codes and scales (row scales
  only; ``gemvtune.bench.gemlite``).

Each is verified against float64 in its first round (and again after a failure) and timed in a CUDA graph over
rotating weight copies (>= 3x L2, or an L2 flush per sample). The summary gives, per shape: medians, the FP8 kernel's
% of the read ceiling on its own bytes (codes + scales), ``fp8_over_16bit`` (FP8 time / the 16-bit tuned time: issue
37's target is <= 0.55 at n = 1 on shapes of >= 100 MB in FP16), ``x_gemlite`` and ``x_dequant`` (their time / FP8's:
>= 1.2 and > 1), ``x_gemlite_cap`` (gemlite's time / the read floor of the FP8 bytes: the most × gemlite any kernel
reaches, at 100% of the read ceiling; where gemlite runs within 1.2x of the floor, >= 1.2 is out of reach), and per n
the geometric means."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import math
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..build.compile import compile_variants
from ..cells import write_csv as write_frame
from ..kernels.shapes import Shape
from ..reports.runcsv import provenance, write_csv
from ..runners.base import Measurement
from ..safefile import write_text
from ..workspace import Workspace, replace_previous
from .kernels import _check, _start
from .report import geomean

KINDS = ("fp8", "tuned-16bit", "cublas-16bit", "dequant-torch", "gemlite-fp8")
BIG_MB = 100.0   # "large" shapes: the FP16 weight at least this many MB (the target's set)


def _median(ms: list[Measurement], kind: str) -> float:
    t = [m.us_median for m in ms if m.kind == kind and m.ok]
    return statistics.median(t) if t else math.nan


def summary_row(shape8: Shape, ms: list[Measurement], ceiling_gbps: float, how8: str, how16: str) -> dict[str, Any]:
    """One (M, d, n): each contender's median over rounds, the FP8 kernel's GB/s and % of the read ceiling on its
    bytes, and the ratios (module docstring); the first failure of each contender, with its reason."""
    t = {k: _median(ms, k) for k in KINDS}
    fp8 = t["fp8"]
    floor = shape8.bytes_moved / (ceiling_gbps * 1e3)
    row: dict[str, Any] = {"M": shape8.M, "d": shape8.d, "n": shape8.n, "dtype": shape8.dtype,
                           "weights": shape8.weights, "weight_mb_16bit": shape8.M * shape8.d * 2 / 1e6,
                           "weight_mb": shape8.weight_bytes / 1e6, "fp8_config": how8, "tuned_16bit": how16}
    row.update({f"{k.replace('-', '_')}_us": v for k, v in t.items()})
    row.update({"floor_us": floor, "pct_ceiling": 100 * floor / fp8 if fp8 == fp8 else math.nan,
                "fp8_over_16bit": fp8 / t["tuned-16bit"], "fp8_over_cublas16": fp8 / t["cublas-16bit"],
                "x_gemlite": t["gemlite-fp8"] / fp8, "x_gemlite_cap": t["gemlite-fp8"] / floor,
                "x_dequant": t["dequant-torch"] / fp8,
                "fp8_spread": _spread(ms, "fp8"),
                "errors": "; ".join(f"{m.kind}: {m.error}" for m in
                                    {m.kind: m for m in reversed(ms) if not m.ok}.values())})
    return row


def _spread(ms: list[Measurement], kind: str) -> float:
    t = [m.us_median for m in ms if m.kind == kind and m.ok]
    return (max(t) - min(t)) / statistics.median(t) if len(t) > 1 else math.nan


def fp8_markdown(df: Any) -> str:
    """The summary: one line per shape, then per n the geometric means and the worst ratio, then the targets."""
    lines = ["| shape | n | dtype | FP8 µs | % ceiling | 16-bit tuned µs | FP8/16-bit | cuBLAS 16-bit µs | "
             "dequant+F.linear µs | × dequant | gemlite µs | × gemlite |", "|" + "---|" * 12]
    for r in df.itertuples():
        lines.append(f"| {r.M}x{r.d} | {r.n} | {r.dtype} | {_f(r.fp8_us)} | {_f(r.pct_ceiling, '.1f')} | "
                     f"{_f(r.tuned_16bit_us)} | {_f(r.fp8_over_16bit, '.3f')} | {_f(r.cublas_16bit_us)} | "
                     f"{_f(r.dequant_torch_us)} | {_f(r.x_dequant, '.3f')} | {_f(r.gemlite_fp8_us)} | "
                     f"{_f(r.x_gemlite, '.3f')} |")
    lines += ["", "| n | shapes | geomean FP8/16-bit | geomean × gemlite | min × gemlite | min × dequant |",
              "|---|---|---|---|---|---|"]
    for n, g in df.groupby("n"):
        lines.append(f"| {n} | {len(g)} | {_f(geomean(g.fp8_over_16bit), '.3f')} | {_f(geomean(g.x_gemlite), '.3f')} "
                     f"| {_f(g.x_gemlite.min(), '.3f')} | {_f(g.x_dequant.min(), '.3f')} |")
    big = df[(df.n == 1) & (df.weight_mb_16bit >= BIG_MB)]
    lines += ["", f"n = 1, shapes of >= {BIG_MB:.0f} MB in FP16 ({len(big)}): FP8/16-bit tuned "
              + (f"{big.fp8_over_16bit.max():.3f} at worst, {geomean(big.fp8_over_16bit):.3f} geomean (target <= 0.55)"
                 if len(big) else "not measured"),
              f"x gemlite: {df.x_gemlite.min():.3f} at worst, {geomean(df.x_gemlite):.3f} geomean (targets >= 1.2 "
              "each, >= 1.3 geomean)" if df.x_gemlite.notna().any() else "x gemlite: not measured",
              *([f"x gemlite at the read ceiling (gemlite µs / the FP8 bytes' floor µs: the most any kernel reaches): "
                 f"{int((df.x_gemlite_cap < 1.2).sum())} of {int(df.x_gemlite_cap.notna().sum())} rows below 1.2, "
                 f"{geomean(df.x_gemlite_cap):.3f} geomean"] if df.x_gemlite.notna().any() else []),
              f"x dequantize + F.linear: {df.x_dequant.min():.3f} at worst (target > 1: never slower)"
              if df.x_dequant.notna().any() else "x dequantize + F.linear: not measured"]
    return "\n".join(lines) + "\n"


def _f(v: Any, spec: str = ".2f") -> str:
    return format(float(v), spec) if isinstance(v, (int, float)) and v == v else "-"


def run_fp8_bench(shapes: list[Shape], table_path: str, out_dir: str | None, echo: Callable[[str], None] = print,
                  rounds: int = 3, gemlite: bool = True, tag: str = "bench-fp8") -> Path:
    """``shapes``: FP8 shapes (``Shape.weights`` set); each measured as the module docstring says; CSV of every
    measurement, summary CSV and markdown under the workspace's benchmarks (the previous run's replaced)."""
    import pandas as pd

    from ..runtime.table import load_table

    if any(not s.weights for s in shapes):
        raise ValueError("bench fp8 measures shapes of FP8 weights (Shape.weights)")
    table = load_table(table_path, policy="tuned")   # (the kernel to measure: the table's, or its lookup's fallback)
    runner, dev, ceil = _start(echo)
    table._check_gpu(dev["name"])
    echo(f"table {table_path}")
    warmed: set[tuple[int, int, str]] = set()
    rows: list[Measurement] = []
    summary: list[dict[str, Any]] = []
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    out = Path(out_dir) if out_dir else Workspace.for_gpu(dev["name"]).benchmarks

    def write() -> tuple[Path, str]:   # after every shape: a run cut short keeps the rows it measured
        path = write_csv(rows, out / f"{tag}-{stamp}.csv", provenance(dev, ceiling=ceil, table=str(table_path),
                                                                   shapes=[str(s) for s in shapes], rounds=rounds))
        df = pd.DataFrame(summary)
        write_frame(df, out / f"{tag}-{stamp}-summary.csv", float_format="%.6g")
        md = fp8_markdown(df)
        write_text(out / f"{tag}-{stamp}-summary.md", md)
        return path, md

    for s8 in shapes:
        s16 = dataclasses.replace(s8, weights="")
        cfg8, how8 = table.lookup(s8)
        cfg16, how16 = table.lookup(s16)
        compile_variants([(cfg8, s8), (cfg16, s16)], arch=runner.arch)
        ms: list[Measurement] = []
        first: dict[str, Measurement] = {}
        for _ in range(rounds):
            got = [runner.measure(cfg8, s8, kind="fp8", verify=_check(first, "fp8")),
                   runner.measure(cfg16, s16, kind="tuned-16bit", verify=_check(first, "tuned-16bit"))]
            got += runner.baselines(s8)
            if gemlite:
                got.append(measure_gemlite(runner, s8, runner.baseline.time_torch, warmed))
            for m in got:
                first.setdefault(m.kind, m)
            ms += got
        row = summary_row(s8, ms, ceil["read_gbps"], f"{cfg8.label} ({how8})", f"{cfg16.label} ({how16})")
        summary.append(row)
        rows += ms
        echo(f"{s8!s:>24s} FP8 {row['fp8_us']:8.2f} µs {row['pct_ceiling']:5.1f}%  FP8/16-bit "
             f"{row['fp8_over_16bit']:.3f}  x{row['x_dequant']:.3f} dequant  x{row['x_gemlite']:.3f} gemlite"
             + (f"  [{row['errors'][:160]}]" if row["errors"] else ""))
        runner.release()
        path, md = write()
    if not summary:   # (no shape: the empty files, as a run with shapes writes them)
        path, md = write()
    echo(md)
    echo(f"wrote {path} and its -summary.csv/-summary.md")
    if not out_dir:
        replace_previous(out, tag, stamp)
    return path


WARM_N = (1, 2, 4, 8, 16)   # gemlite's own warm-up batches: its GEMM_SPLITK tunes per bucket of n (bench.gemlite)


def measure_gemlite(h: Any, shape: Shape, time_torch: Callable[..., tuple[list[float], int]],
                    warmed: set[tuple[int, int, str]]) -> Measurement:
    """gemlite's A16W8_FP8 (``gemvtune.bench.gemlite``) on an FP8 ``shape`` of row scales, built from the very codes
    and scales the runner's buffers hold (one layer per rotating copy) and the verifier's, verified against the same
    float64 reference and timed with ``time_torch`` in a CUDA graph. gemlite's autotune runs at its warm-up batches
    (``WARM_N``) once per (M, d, dtype) of this process (``warmed``) before anything is timed or captured. What
    cannot run (gemlite missing, block scales, d not a multiple of 32) is an INVALID measurement with its reason."""
    from ..device._cupy import as_torch, from_torch
    from ..runners.base import Status
    from .gemlite import GEMLITE_KIND, GEMLITE_LABEL, MIN_D, gemlite_available, gemlite_bound, gemlite_fp8_layer

    m = Measurement.of(GEMLITE_LABEL, GEMLITE_KIND, shape, Status.OK)
    why = ("gemlite's A16W8_FP8 takes one scale per output row, not 128x128 blocks" if shape.fp8_layout != "row"
           else f"gemlite needs d to be a multiple of {MIN_D}" if shape.d % MIN_D else gemlite_available())
    if why:
        m.status, m.error = Status.INVALID, why
        return m
    m.bound = gemlite_bound(shape.dtype, shape.d)
    import torch

    tdt = torch.bfloat16 if shape.dtype == "bf16" else torch.float16
    layers: dict[int, Any] = {}

    def layer(W: Any) -> Any:   # (W: DeviceFp8) one gemlite layer per weight, its codes read in place
        got = layers.get(id(W))
        if got is None:
            got = layers[id(W)] = (gemlite_fp8_layer(as_torch(torch, W.codes, "u8"), as_torch(torch, W.scales, "fp32"),
                                                     tdt), W)
        return got[0]

    with h.on_stream():
        try:
            b = h.buffers(shape)
            key = (shape.M, shape.d, shape.dtype)
            if key not in warmed:   # gemlite's autotune: synchronising benchmarks, never inside a capture
                lay = layer(b.W[0])
                dev = as_torch(torch, b.W[0].codes, "u8").device
                for n in WARM_N:
                    lay(torch.zeros(n, shape.d, dtype=tdt, device=dev))
                torch.cuda.synchronize()
                warmed.add(key)

            def run(W: Any, x: Any, y: Any) -> Any:
                return from_torch(torch, layer(W)(as_torch(torch, x, shape.dtype).view(shape.n, shape.d)))

            ok, m.relerr, m.rowerr, reason = h.verify(run, shape, m.bound)
            if not ok:
                m.status, m.error = Status.WRONG, reason
                return m
            calls = [layer(w) for w in b.W]
            xt = [as_torch(torch, x, shape.dtype).view(shape.n, shape.d) for x in b.x]
            t, k = time_torch(torch, shape, b, lambda i: calls[i % b.copies](xt[i % b.copies]))
        except Exception as e:
            m.status, m.error = Status.LAUNCH_ERROR, (str(e).splitlines() or [type(e).__name__])[0][:300]
            return m
        h.fill_times(m, t, shape, "graph", k, b)
    return m
