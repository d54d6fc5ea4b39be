"""The GEMV -> GEMM transition measured (``gemvtune transition``): per shape (M, d), in one process, the
read ceiling and the FP16 tensor-core ceiling (a large square GEMM), then for each batch n every series
timed in turn (interleaved per n): the table's tuned kernel (n <= 16), cuBLAS through F.linear, cuBLASLt's
best algorithm (``transition_lt``), and whatever else ``SERIES`` lists.

A series is a name, ``reason(n)`` (why it cannot run n, or None) and ``time(n)`` (a ``Timing``: the
median and spread of its samples and whether its answer was verified). ``measure_series`` turns them
into rows: a refusal is a "skipped" row with its reason, an exception a "failed" row with its first
line, a wrong answer a "wrong" row; it never raises for a series. To add one (cuBLASLt's best
algorithm, say), write a maker ``f(ctx: SeriesContext) -> Series`` (``FnSeries`` takes two functions)
and append it to ``SERIES``."""

from __future__ import annotations

import datetime as _dt
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any, Protocol

from ..baselines import CUBLAS_FOR
from ..errors import UsageError
from ..intparse import is_int_text
from ..kernels.shapes import MAX_BATCH, Shape
from ..runners.timing import launches_for
from ..safefile import write_text
from ..workspace import Workspace, replace_previous
from .report import bytes_moved, flops, ridge_n

MAX_N = 4096                 # the largest batch the command measures
TUNED_REASON = f"n outside 1..{MAX_BATCH} for a tuned kernel"
VERIFIED, UNCHECKED, WRONG = "verified", "unchecked", "wrong"
_RANGE = re.compile(r"^([0-9]{1,12})[ \t]*\.\.[ \t]*([0-9]{1,12})$", re.ASCII)


def _pow2(v: int) -> bool:
    return v >= 1 and v & (v - 1) == 0


def parse_batch_list(text: str) -> list[int]:
    """``1..256`` (the powers of two from 1 to 256: both ends powers of two), ``1,2,3,8,64``, or a mix
    (``1..16,24,48``) into the sorted distinct batches, each in 1..MAX_N; anything else is one UsageError."""
    out: set[int] = set()
    parts = [p.strip() for p in str(text).split(",")]
    for p in parts:
        m = _RANGE.match(p)
        if m:
            a, b = int(m.group(1)), int(m.group(2))
            if not (_pow2(a) and _pow2(b)):
                raise UsageError(f"batch range {p!r}: a..b steps through powers of two, so a and b must be "
                                 "powers of two (e.g. 1..256)")
            if a > b:
                raise UsageError(f"batch range {p!r} is empty: its start is above its end")
            vals = [1 << k for k in range(a.bit_length() - 1, b.bit_length())]
        elif is_int_text(p) and not p.startswith(("+", "-")):
            vals = [int(p)]
        else:
            raise UsageError(f"malformed batch list {text!r}: expected n values like 1,2,8 or a power-of-two "
                             "range like 1..256")
        for v in vals:
            if not 1 <= v <= MAX_N:
                raise UsageError(f"batch n={v} is outside 1..{MAX_N}")
            out.add(v)
    return sorted(out)


@dataclass(frozen=True)
class Timing:
    """What one series' ``time(n)`` gives: µs per call (median, fastest and slowest sample, sample count),
    whether its answer was checked (``verified``: VERIFIED, UNCHECKED or WRONG, with ``error`` saying why)
    and what ran (``detail``: a config label, an algorithm, a graph length)."""

    us_median: float
    us_min: float
    us_max: float
    samples: int
    verified: str = VERIFIED
    detail: str = ""
    error: str = ""

    @classmethod
    def from_samples(cls, us: Sequence[float], verified: str = VERIFIED, detail: str = "") -> Timing:
        """From the per-sample µs (each a whole timed replay divided by its calls)."""
        if not us:
            raise ValueError("no timed samples")
        return cls(float(median(us)), float(min(us)), float(max(us)), len(us), verified, detail)

    @classmethod
    def wrong(cls, error: str, detail: str = "") -> Timing:
        """A series whose answer failed its check: no time is kept."""
        return cls(math.nan, math.nan, math.nan, 0, WRONG, detail, error)


class Series(Protocol):
    """One line of the transition plot."""

    name: str

    def reason(self, n: int) -> str | None:
        """Why this series cannot run batch n (a "skipped" row), or None."""
        ...

    def time(self, n: int) -> Timing:
        """Verify and time batch n; may raise (a "failed" row with the first line)."""
        ...


@dataclass
class FnSeries:
    """A series from two functions: ``reason_of(n)`` and ``time_of(n)``."""

    name: str
    reason_of: Callable[[int], str | None]
    time_of: Callable[[int], Timing]

    def reason(self, n: int) -> str | None:
        return self.reason_of(n)

    def time(self, n: int) -> Timing:
        return self.time_of(n)


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def measure_series(series: Sequence[Series], ns: Sequence[int], M: int, d: int,
                   echo: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """For each n, each series in turn (interleaved): one row (``reports.transition.RAW_COLUMNS``) per
    (series, n). Never raises for a series (KeyboardInterrupt still stops it)."""
    rows = []
    for n in ns:
        for s in series:
            row: dict[str, Any] = {"M": M, "d": d, "n": n, "series": s.name, "status": "ok", "reason": "",
                                   "us_median": math.nan, "us_min": math.nan, "us_max": math.nan, "samples": 0,
                                   "verified": "", "detail": ""}
            try:
                why = s.reason(n)
                if why:
                    row.update(status="skipped", reason=str(why))
                else:
                    t = s.time(n)
                    row.update(us_median=t.us_median, us_min=t.us_min, us_max=t.us_max, samples=t.samples,
                               verified=t.verified, detail=t.detail)
                    if t.verified == WRONG:
                        row.update(status="wrong", reason=t.error or "answer failed verification")
                    elif not t.us_median > 0:
                        row.update(status="failed", reason=f"no time measured ({t.us_median})")
            except Exception as e:
                row.update(status="failed", reason=f"{type(e).__name__}: {_first_line(e)}")
            rows.append(row)
            if echo is not None:
                what = f"{row['us_median']:9.2f} µs  {row['detail']}" if row["status"] == "ok" else \
                    f"{row['status']}: {row['reason']}"
                echo(f"  {M}x{d} n={n:<5d} {s.name:14s} {what}")
    return rows


# ---- the GPU series ------------------------------------------------------------------------------
@dataclass
class SeriesContext:
    """What a series maker gets: the CUDA runner, the loaded table (None where no n <= 16 was asked),
    the shape and the two ceilings measured in this run."""

    runner: Any
    table: Any
    M: int
    d: int
    read_gbps: float
    peak_tflops: float

    def est_us(self, n: int) -> float:
        """A call's expected time: the larger of the read floor and the compute floor, + 1 µs."""
        return max(bytes_moved(self.M, self.d, n) / (self.read_gbps * 1e3),
                   flops(self.M, self.d, n) / (self.peak_tflops * 1e6) if self.peak_tflops > 0 else 0.0) + 1.0


def tuned_series(ctx: SeriesContext) -> Series:
    """The table's kernel for (M, d, n) (``Table.lookup``: tuned, or how it fell back), measured by the
    runner (verified, CUDA graph over cold weight copies). Refuses n > MAX_BATCH: no Shape holds it."""
    def reason(n: int) -> str | None:
        if n > MAX_BATCH:
            return TUNED_REASON
        return "no table loaded" if ctx.table is None else None

    def time(n: int) -> Timing:
        shape = Shape(ctx.M, ctx.d, n)
        cfg, how = ctx.table.lookup(shape)
        m = ctx.runner.measure(cfg, shape, kind="tuned")
        detail = f"{m.name} ({how})"
        if m.status == WRONG:
            return Timing.wrong(m.error, detail)
        if not m.ok:
            raise RuntimeError(f"{m.status}: {m.error}")
        return Timing(m.us_median, m.us_min, m.us_max, m.samples, VERIFIED, detail + f", {m.method}")

    return FnSeries("tuned", reason, time)


def cublas_series(ctx: SeriesContext) -> Series:
    """cuBLAS through torch.nn.functional.linear(x[n, d], W[M, d]) in a torch CUDA graph over the
    runner's rotating weight copies (``time_torch_linear``): the registry's ``cublas-torch`` baseline."""
    return FnSeries(CUBLAS_FOR["torch"], lambda n: None, lambda n: time_torch_linear(ctx.runner, ctx.M, ctx.d, n, ctx.est_us(n)))


def cublaslt_series(ctx: SeriesContext) -> Series:
    """cuBLASLt's best algorithm per n (``transition_lt.best_cublaslt``: the heuristic's top, each verified,
    timed like the cuBLAS series); skipped with the reason where nvmath-python's bindings are missing."""
    from . import lt as transition_lt

    def reason(n: int) -> str | None:
        try:
            from ..device.ltplan import bindings

            bindings()
        except Exception as e:
            return _first_line(e)
        return None

    def time(n: int) -> Timing:
        t, detail = transition_lt.best_cublaslt(
            ctx.runner, ctx.M, ctx.d, n, lambda copies: launches_for(ctx.est_us(n), copies, ctx.runner.target_us),
            check_linear)
        return Timing.from_samples(t, VERIFIED, detail)

    from ..kernels.cublaslt import CublasLtConfig

    return FnSeries(CublasLtConfig.family, reason, time)   # (the series is named after the family)


# The series of every transition, in this order per n. A maker takes the SeriesContext of one shape.
SERIES: list[Callable[[SeriesContext], Series]] = [tuned_series, cublas_series, cublaslt_series]

VERIFY_ROWS = 256   # rows of W the cuBLAS answer is checked on against float64


def check_linear(torch: Any, W: Any, x: Any, y: Any, rows: int = VERIFY_ROWS) -> tuple[bool, str]:
    """(ok, why) of y[n, M] = x W^T on ``rows`` evenly spaced rows of W against a float64 reference:
    ||y - ref|| / ||ref|| within cuBLAS's bound (FP16 output; ``runners.timing.error_bound``)."""
    from ..runners.timing import error_bound

    M, d = W.shape
    idx = torch.linspace(0, M - 1, steps=min(M, rows), device=W.device).round().long().unique()
    ref = x.double() @ W[idx].double().T
    err = torch.linalg.vector_norm(y[:, idx].double() - ref) / torch.linalg.vector_norm(ref)
    rel, bound = float(err.item()), error_bound("fp16", d)
    if rel <= bound:
        return True, ""
    return False, f"relerr {rel:.3e} above the bound {bound:.3e} on {len(idx)} rows"


def time_torch_linear(runner: Any, M: int, d: int, n: int, est_us: float) -> Timing:
    """F.linear(x[n, d], W) timed as ``Baselines.measure_torch_linear`` times it (same copies, flush
    rule, graph lengths, replays), for any n: the W copies are the runner's buffers of Shape(M, d,
    min(n, 16)) (their count does not depend on n), the x copies [n, d] are drawn here. Verified first."""
    import torch

    with runner.gpu_lock.held(), runner.on_stream(), torch.cuda.device(runner.device_id):
        b = runner.buffers(Shape(M, d, min(n, MAX_BATCH)))
        out = _linear_timing(torch, runner, b, n, d, est_us)
        torch.cuda.empty_cache()    # this n's x copies and graph outputs (freed on return above)
    return out


def _linear_timing(torch: Any, runner: Any, b: Any, n: int, d: int, est_us: float) -> Timing:
    from ..runners.cuda.libtimers import fastest_graph

    Wt = [torch.from_dlpack(w) for w in b.W]
    xblk = (torch.rand((b.copies, n, d), device=Wt[0].device, dtype=torch.float32) * 2 - 1).half()
    xt = [xblk[i] for i in range(b.copies)]
    ok, why = check_linear(torch, Wt[0], xt[0], torch.nn.functional.linear(xt[0], Wt[0]))
    if not ok:
        return Timing.wrong(why, "torch F.linear")

    def calls(k: int) -> list:
        return [torch.nn.functional.linear(xt[i % b.copies], Wt[i % b.copies]) for i in range(k)]

    def before(stream: Any) -> None:   # after the runner's flush, this run's x copies back in L2
        runner.flush_l2(stream)
        xblk.sum()

    k0 = b.copies if b.flush else launches_for(est_us, b.copies, runner.target_us)
    t, k = fastest_graph(torch, calls, k0, b.copies, b.flush, runner.replays, runner.warmup,
                         before=before if b.flush else None)
    return Timing.from_samples(t, VERIFIED, f"torch F.linear, graph of {k} calls over {b.copies} "
                                                  "copies" + (" + L2 flush" if b.flush else ""))


def measure_peak_tflops(runner: Any, size: int = 8192, calls: int = 4) -> dict[str, Any]:
    """The compute ceiling, measured: torch.matmul of two [size, size] FP16 matrices (FP32 accumulate),
    ``calls`` of them in a torch CUDA graph, replayed ``runner.replays`` times; TFLOP/s of the median."""
    import torch

    from ..runners.timing import summarize

    with runner.gpu_lock.held(), runner.on_stream(), torch.cuda.device(runner.device_id):
        t = _gemm_times(torch, runner, size, calls)
        torch.cuda.empty_cache()
    st, f = summarize(t), 2.0 * size**3
    return {"peak_tflops": f / (st.median * 1e6), "peak_tflops_min": f / (st.max * 1e6),
            "peak_tflops_max": f / (st.min * 1e6), "peak_us": st.median,
            "peak_gemm": f"torch.matmul {size}x{size}x{size} FP16, FP32 accumulate, {calls} per graph"}


def _gemm_times(torch: Any, runner: Any, size: int, calls: int) -> list[float]:
    from ..runners.cuda.libtimers import torch_graph, torch_replay_times

    a, b = ((torch.rand((size, size), device="cuda", dtype=torch.float32) * 2 - 1).half() for _ in range(2))
    g, _ = torch_graph(torch, lambda: torch.matmul(a, b), lambda: [torch.matmul(a, b) for _ in range(calls)])
    return torch_replay_times(torch, g, runner.replays, calls, warmup=runner.warmup)


def default_table_path(device_name: str) -> Path:
    return Workspace.for_gpu(device_name).table


def run_transition(shapes: Sequence[tuple[int, int]], ns: Sequence[int], table_path: str | None,
                   out_dir: str | None, echo: Callable[[str], None] = print, peak_size: int = 8192) -> list[Path]:
    """Measure every series at every n for each shape (one runner, one process), then per shape a CSV
    (+ .json provenance), a PNG and a markdown table under ``out_dir`` (default
    results/<gpu>/benchmarks/transition/); echoes the tables at the end. Returns the CSV paths."""
    from ..reports.runcsv import provenance
    from ..runners.cuda import CudaRunner
    from ..runtime.table import load_table
    from .report import file_stem, plot_transition, transition_frame, transition_markdown, write_transition_csv

    runner = CudaRunner()
    dev = runner.device_info()
    echo(f"device: {dev['name']} (sm {dev.get('compute_capability')}, {dev.get('sm_count')} SMs, driver {dev['driver']})")
    table = None
    if any(n <= MAX_BATCH for n in ns):
        table_path = str(table_path or default_table_path(dev["name"]))
        table = load_table(table_path)   # a missing or corrupt table: one line, before any timing
        table._check_gpu(dev["name"])
        echo(f"table {table_path}")
    ceil = runner.ceiling()
    read = float(ceil["read_gbps"])
    peak = measure_peak_tflops(runner, peak_size)
    echo(f"read ceiling {read:.0f} GB/s; compute ceiling {peak['peak_tflops']:.0f} TFLOP/s ({peak['peak_gemm']})")
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    out = Path(out_dir) if out_dir else Workspace.for_gpu(dev["name"]).transition
    paths, tables = [], []
    for M, d in shapes:
        ctx = SeriesContext(runner, table, M, d, read, float(peak["peak_tflops"]))
        series = [make(ctx) for make in SERIES]
        echo(f"{M}x{d}: ridge n* = {ridge_n(M, d, ctx.peak_tflops, read):.1f}")
        rows = measure_series(series, ns, M, d, echo=echo)
        runner.release()
        df = transition_frame(rows, read, ctx.peak_tflops)
        stem = out / file_stem(M, d, stamp)
        meta = provenance(dev, ceiling=ceil, compute_ceiling=peak, table=table_path if table else None,
                          shape=f"{M}x{d}", batches=list(ns), series=[s.name for s in series])
        paths.append(write_transition_csv(df, stem.with_suffix(".csv"), meta))
        plot_transition(df, stem.with_suffix(".png"), dev["name"])
        tables.append(transition_markdown(df))
        write_text(stem.with_suffix(".md"), tables[-1])
    for t in tables:
        echo(t)
    echo("wrote " + ", ".join(str(p) for p in paths) + " (each with its .json, .png and .md)")
    if not out_dir:   # the workspace's benchmarks: the latest run of each shape's transition is kept
        for M, d in shapes:
            replace_previous(out, f"transition-{M}x{d}", stamp)
    return paths
