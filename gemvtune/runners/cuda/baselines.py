"""Baselines timed in the same harness and run as the variants: cuBLAS via cupy.matmul (spin method)
and via torch in a CUDA graph. A part of the CUDA runner: ``CudaRunner`` owns a ``Baselines`` made with
itself as the harness (what ``Harness`` lists)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from functools import partial
from statistics import median
from typing import Any, Protocol

from ...kernels.shapes import Shape
from ..base import Measurement, Status
from ..timing import error_bound
from ._cupy import cp


def _cublas(W, x):
    """W x for x [d] (a GEMV call), X W^T for X [n, d] (a GEMM with W transposed in place)."""
    return cp.matmul(W, x) if x.ndim == 1 else cp.matmul(x, W.T)


def torch_graph(torch: Any, warm: Callable[[], Any], body: Callable[[], Any]) -> tuple[Any, Any]:
    """Run ``warm`` on a side stream (cuBLAS picks its kernels and workspace outside the capture), then
    capture ``body`` in a torch CUDA graph; returns (graph, what body returned during the capture)."""
    cp.cuda.Device().synchronize()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        warm()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = body()
    return g, out


def torch_replay_times(torch: Any, g: Any, replays: int, per: int = 1, warmup: int = 0,
                       before: Callable[[Any], None] | None = None) -> list[float]:
    """Replay a torch CUDA graph (after ``warmup`` untimed replays) between torch events; µs per
    replay divided by ``per`` (the calls it holds). ``before(stream)`` enqueues untimed work ahead of
    each timed replay (an L2 flush) on torch's current stream, given as a CuPy stream."""
    for _ in range(warmup):
        g.replay()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    stream = cp.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream) if before is not None else None
    for _ in range(replays):
        if before is not None:
            before(stream)
        e0.record()
        g.replay()
        e1.record()
        e1.synchronize()
        out.append(e0.elapsed_time(e1) * 1000.0 / per)
    return out


class Harness(Protocol):
    """What the baselines use of the runner that owns them: its lock, verifier, buffers, timers and the
    way it fills a measurement's times (CudaRunner is one)."""

    replays: int
    warmup: int
    gpu_lock: Any

    def on_stream(self) -> AbstractContextManager[None]: ...

    def verify(self, launch: Callable[..., Any], shape: Shape, bound: float) -> tuple[bool, float, float, str]: ...

    def buffers(self, shape: Shape) -> Any: ...

    def launches(self, shape: Shape, copies: int, cap: int = 4000, flush: bool = False) -> int: ...

    def time_spin(self, op: Callable[[int], None], n: int, flush: bool = False) -> list[float]: ...

    def flush_l2(self, stream: Any) -> None: ...

    def fill_times(self, m: Measurement, t: list[float], shape: Shape, method: str, n: int, b: Any) -> None: ...


class Baselines:
    """cuBLAS baselines of one runner (``harness``), on its device and stream."""

    def __init__(self, harness: Harness):
        self.h = harness

    def measure_cublas(self, shape: Shape) -> Measurement:
        """cuBLAS through cupy.matmul (FP16 in, FP32 compute, FP16 out), timed with the spin method
        (CuPy refuses cuBLAS inside graph capture). Verified like every variant."""
        h = self.h
        m = Measurement("cublas (cupy.matmul)", "cublas", shape.M, shape.d, shape.n, Status.OK)
        m.bound = error_bound("fp16", shape.d)  # its output is FP16: one final rounding to 2^-11
        with h.on_stream():
            try:
                ok, m.relerr, m.rowerr, reason = h.verify(lambda W, x, y: _cublas(W, x), shape, m.bound)
                if not ok:
                    m.status, m.error = Status.WRONG, reason
                    return m
                b = h.buffers(shape)
                n = h.launches(shape, b.copies, cap=400, flush=b.flush)
                t = h.time_spin(lambda i: _cublas(b.W[i % b.copies], b.x[i % b.copies]), n, b.flush)
            except Exception as e:
                m.status, m.error = Status.LAUNCH_ERROR, str(e).splitlines()[0]
                return m
            h.fill_times(m, t, shape, "spin", n, b)
        return m

    def baselines(self, shape: Shape) -> list[Measurement]:
        """cuBLAS via cupy.matmul (spin) and, where torch is installed, via torch in a graph."""
        with self.h.gpu_lock.held():
            out = [self.measure_cublas(shape)]
            t = self.measure_torch_linear(shape)
        if t is not None:
            out.append(t)
        return out

    def measure_torch_linear(self, shape: Shape) -> Measurement | None:
        """cuBLAS through torch.nn.functional.linear (what MEASURING.md's references used), in a
        CUDA graph over the same rotating copies. None where torch is not installed. Runs with the
        runner's device current (torch's too) and its stream as CuPy's (the DLPack hand-overs order on it).

        cuBLAS's time per call depends on how many calls one graph holds (measured on the H200: 13.45 µs
        at 96 calls of 4096x4096, 13.71 at 240 and 480, while the variants' times do not rise with
        length; results/nvidia-h200/NOTES.md, issue 19), so it is timed at the runner's length and at
        about 96 calls, and the faster is the baseline: the fastest way a user gets cuBLAS."""
        try:
            import torch
        except Exception:
            return None
        h = self.h
        m = Measurement("cublas (torch F.linear)", "cublas-torch", shape.M, shape.d, shape.n, Status.OK)
        with h.on_stream():
            try:
                b = h.buffers(shape)
                Wt = [torch.from_dlpack(w) for w in b.W]
                xt = [torch.from_dlpack(x).view(shape.n, shape.d) for x in b.x]
                n = h.launches(shape, b.copies, flush=b.flush)
                def calls(k: int) -> list:
                    return [torch.nn.functional.linear(xt[i % b.copies], Wt[i % b.copies]) for i in range(k)]
                best: tuple[float, list[float], int] | None = None
                for k in graph_lengths(n, b.copies, b.flush):
                    g, _ = torch_graph(torch, partial(calls, 3), partial(calls, k))
                    t = torch_replay_times(torch, g, h.replays, k, warmup=h.warmup,
                                           before=h.flush_l2 if b.flush else None)
                    del g
                    if best is None or median(t) < best[0]:
                        best = (median(t), t, k)
                torch.cuda.empty_cache()
            except Exception as e:
                m.status, m.error = Status.LAUNCH_ERROR, str(e).splitlines()[0]
                return m
            assert best is not None   # graph_lengths gives at least one
            h.fill_times(m, best[1], shape, "graph", best[2], b)
        return m


SHORT_GRAPH = 96   # calls: where cuBLAS through F.linear ran fastest per call on the H200 (issue 19)


def graph_lengths(n: int, copies: int, flush: bool) -> list[int]:
    """The graph lengths cuBLAS's torch baseline is timed at: the runner's ``n`` and, unless each
    sample is one flushed pass, about SHORT_GRAPH calls in whole passes over the copies."""
    if flush:
        return [n]
    short = max(copies, (SHORT_GRAPH // copies) * copies)
    return [n] if short >= n else [n, short]
