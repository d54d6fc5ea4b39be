"""Baselines timed in the same harness and run as the variants: cuBLAS via cupy.matmul (spin method)
and via torch in a CUDA graph, Inductor max-autotune in that same torch harness (``inductor``), and the
seed kernel as written (llama.cpp's, d at run time: ``gemvtune.runners.cuda.seed``) in a graph of launches.
A part of the CUDA runner: ``CudaRunner`` owns a ``Baselines`` made with itself as the harness (what
``Harness`` lists)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from functools import partial
from statistics import median
from typing import Any, Protocol

from ...device._cupy import as_torch, cp
from ...kernels.shapes import Shape
from ..base import Measurement, Status
from ..timing import error_bound, library_bound


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
    arch: str

    def function(self, cubin_path: str, name: str) -> Any: ...

    def time_graph(self, launch: Callable[[int], None], n: int, flush: bool = False,
                   before: Callable[[Any], None] | None = None) -> list[float]: ...

    def on_stream(self) -> AbstractContextManager[None]: ...

    def verify(self, launch: Callable[..., Any], shape: Shape, bound: float) -> tuple[bool, float, float, str]: ...

    def buffers(self, shape: Shape) -> Any: ...

    def launches(self, shape: Shape, copies: int, cap: int = 4000, flush: bool = False) -> int: ...

    def time_spin(self, op: Callable[[int], None], n: int, flush: bool = False) -> list[float]: ...

    def flush_l2(self, stream: Any) -> None: ...

    def fill_times(self, m: Measurement, t: list[float], shape: Shape, method: str, n: int, b: Any) -> None: ...


class Baselines:
    """The baselines of one runner (``harness``), on its device and stream."""

    def __init__(self, harness: Harness):
        self.h = harness
        self._inductor: dict[Any, Any] = {}   # shape (, compile) -> inductor.InductorCompile: once per process

    def measure_cublas(self, shape: Shape) -> Measurement:
        """cuBLAS through cupy.matmul (FP16 in, FP32 compute, FP16 out), timed with the spin method
        (CuPy refuses cuBLAS inside graph capture). Verified like every variant."""
        h = self.h
        m = Measurement.of("cublas (cupy.matmul)", "cublas", shape, Status.OK)
        m.bound = library_bound(shape)   # its output is FP16: one final rounding to 2^-11
        if shape.dtype != "fp16" or shape.weights:
            m.status, m.error = Status.INVALID, (
                f"cuBLAS takes no {shape.weights} weights: their baseline is dequantize + F.linear" if shape.weights
                else f"CuPy has no {shape.dtype} arrays: cuBLAS is measured through torch (cublas-torch)")
            return m
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
        """cuBLAS via cupy.matmul (spin) and, where torch is installed, via torch in a graph (what a search's
        confirmation compares against; the benchmark adds ``measure_inductor`` and ``measure_seed``). FP8 weights:
        dequantize + F.linear, and cuBLAS on 16-bit weights of the same shape (``fp8base``)."""
        if shape.weights:
            from .fp8base import measure_dequant_linear, measure_sixteen_bit

            with self.h.gpu_lock.held():
                got = [measure_dequant_linear(self.h, shape, self.time_torch),
                       measure_sixteen_bit(self.measure_torch_linear, shape)]
            return [m for m in got if m is not None]
        with self.h.gpu_lock.held():
            out = [self.measure_cublas(shape)]
            t = self.measure_torch_linear(shape)
        if t is not None:
            out.append(t)
        return out

    def time_torch(self, torch: Any, shape: Shape, b: Any, call: Callable[[int], Any]) -> tuple[list[float], int]:
        """The torch baselines' harness: ``call(i)`` (the i-th call, over the copies of ``b``) captured in a
        torch CUDA graph at each of ``graph_lengths`` (after 3 warm-up calls on a side stream), each
        replayed like the variants (each replay after an L2 flush when ``b.flush``); (the samples of the
        fastest length in µs per call, that length).

        cuBLAS's time per call depends on how many calls one graph holds (measured on the H200: 13.45 µs
        at 96 calls of 4096x4096, 13.71 at 240 and 480, while the variants' times do not rise with
        length; docs/design-notes.md#baselines-cublas-cublaslt-inductor-llamacpp, issue 19), so it is
        timed at the runner's length and at about 96 calls, and the faster is the baseline: the fastest way
        a user gets it."""
        h = self.h

        def calls(k: int) -> list:
            return [call(i) for i in range(k)]

        out = fastest_graph(torch, calls, h.launches(shape, b.copies, flush=b.flush), b.copies, b.flush, h.replays,
                            h.warmup, before=h.flush_l2 if b.flush else None)
        torch.cuda.empty_cache()
        return out

    def measure_torch_linear(self, shape: Shape) -> Measurement | None:
        """cuBLAS through torch.nn.functional.linear (what MEASURING.md's references used), in a
        CUDA graph over the same rotating copies (``time_torch``). None where torch is not installed.
        Runs with the runner's device current (torch's too) and its stream as CuPy's (the DLPack
        hand-overs order on it)."""
        try:
            import torch
        except Exception:
            return None
        h = self.h
        m = Measurement.of("cublas (torch F.linear)", "cublas-torch", shape, Status.OK)
        with h.on_stream():
            try:
                b = h.buffers(shape)
                Wt = [as_torch(torch, w, shape.dtype) for w in b.W]
                xt = [as_torch(torch, x, shape.dtype).view(shape.n, shape.d) for x in b.x]
                t, k = self.time_torch(torch, shape, b, lambda i: torch.nn.functional.linear(xt[i % b.copies],
                                                                                            Wt[i % b.copies]))
            except Exception as e:
                m.status, m.error = Status.LAUNCH_ERROR, str(e).splitlines()[0]
                return m
            h.fill_times(m, t, shape, "graph", k, b)
        return m

    def measure_inductor(self, shape: Shape, verify: bool = True, compile: int = 0) -> Measurement:
        """torch.compile(F.linear, mode="max-autotune-no-cudagraphs") in the torch F.linear harness
        (``inductor.measure_inductor``), compiled once per shape (and ``compile``: another compile, its
        caches off) for this object's life; FP16 output, verified. A failure (no torch, no Triton, a compile
        error, dynamo running it eagerly) is a LAUNCH_ERROR measurement with its reason."""
        from .inductor import measure_inductor

        return measure_inductor(self.h, shape, self._inductor, self.time_torch, verify, compile)

    def measure_seed(self, shape: Shape, verify: bool = True) -> Measurement:
        """The seed kernel as written: llama.cpp's mul_mat_vec with d and M read at run time
        (``gemvtune.runners.cuda.seed``), launched as a CuPy function, verified and timed like a variant
        (graph of launches over the rotating copies). An odd d is INVALID, as llama.cpp refuses it."""
        from ...build.compile import CompileError
        from .seed import SEED_KERNEL, SEED_KIND, SEED_NAME, compile_seed, seed_invalid_reasons, seed_launch

        h = self.h
        m = Measurement.of(SEED_NAME, SEED_KIND, shape, Status.OK)
        why = seed_invalid_reasons(shape) if shape.dtype == "fp16" else [
            f"the seed kernel as written (llama.cpp's) is FP16 only, not {shape.dtype}"]
        if why:
            m.status, m.error = Status.INVALID, "; ".join(why)
            return m
        try:
            compiled = compile_seed(shape.n, h.arch)
        except CompileError as e:
            m.status, m.error = Status.COMPILE_ERROR, str(e)
            return m
        r = compiled.resources
        m.registers, m.spill_bytes, m.smem_bytes, m.compile_s = r.registers, r.spill_stores, r.smem_bytes, compiled.compile_s
        m.bound = error_bound("fp32", shape.d)
        grid, block, tail = seed_launch(shape)
        with h.gpu_lock.held(), h.on_stream():
            try:
                kernel = h.function(compiled.cubin_path, SEED_KERNEL)

                def launch(W: Any, x: Any, y: Any) -> None:
                    kernel(grid, block, (W, x, y, *tail))

                if verify:
                    ok, m.relerr, m.rowerr, reason = h.verify(launch, shape, m.bound)
                    if not ok:
                        m.status, m.error = Status.WRONG, reason
                        return m
                b = h.buffers(shape)
                n = h.launches(shape, b.copies, flush=b.flush)
                t = h.time_graph(lambda i: launch(b.W[i % b.copies], b.x[i % b.copies], b.y[i % b.copies]), n,
                                 flush=b.flush)
            except Exception as e:
                m.status, m.error = Status.LAUNCH_ERROR, (str(e).splitlines() or [type(e).__name__])[0]
                return m
            h.fill_times(m, t, shape, "graph", n, b)
        return m


SHORT_GRAPH = 96   # calls: where cuBLAS through F.linear ran fastest per call on the H200 (issue 19)


def fastest_graph(torch: Any, calls: Callable[[int], Any], n: int, copies: int, flush: bool, replays: int,
                  warmup: int, before: Callable[[Any], None] | None = None) -> tuple[list[float], int]:
    """``calls(k)`` (k calls over the copies) captured in a torch CUDA graph at each of ``graph_lengths(n,
    copies, flush)`` (after 3 warm-up calls on a side stream) and replayed ``replays`` times (``before`` ahead
    of each: an L2 flush); (the samples of the fastest length in µs per call, that length). Every torch
    baseline and the transition's library series time through here."""
    best: tuple[float, list[float], int] | None = None
    for k in graph_lengths(n, copies, flush):
        g, _ = torch_graph(torch, partial(calls, 3), partial(calls, k))
        t = torch_replay_times(torch, g, replays, k, warmup=warmup, before=before)
        del g
        if best is None or median(t) < best[0]:
            best = (median(t), t, k)
    assert best is not None   # graph_lengths gives at least one
    return best[1], best[2]


def graph_lengths(n: int, copies: int, flush: bool) -> list[int]:
    """The graph lengths cuBLAS's torch baseline is timed at: the runner's ``n`` and, unless each
    sample is one flushed pass, about SHORT_GRAPH calls in whole passes over the copies."""
    if flush:
        return [n]
    short = max(copies, (SHORT_GRAPH // copies) * copies)
    return [n] if short >= n else [n, short]
