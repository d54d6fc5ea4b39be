"""The CUDA runner's timers, a part of the runner: CUDA graphs replayed between events (the graph method)
and Python-enqueued work queued up behind a spin kernel (the spin method). All of it on the runner's
stream, with its device current (the caller's back after); what runs untimed before each sample (an L2
flush) is the caller's ``before(stream)``."""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import numpy as np

from ...device._cupy import cp, scope

Before = Callable[[Any], None]   # before(stream): enqueues untimed work ahead of a timed sample


class Timer:
    """Times work on ``stream`` of ``device`` (each method makes both current for its block; with
    ``no_pool``, its arrays bypass CuPy's memory pool); ``spin`` is the auxiliary spin kernel (ns)."""

    def __init__(self, stream: Any, device: int, spin: Any, no_pool: bool = False):
        self.stream, self.device, self.spin, self.no_pool = stream, device, spin, no_pool

    def _scope(self) -> AbstractContextManager[None]:
        return scope(self.device, self.stream, self.no_pool)

    def time_graph(self, launch: Callable[[int], None], n: int, warmup: int, replays: int,
                   before: Before | None = None) -> list[float]:
        """Capture n launches (launch(i) enqueues the i-th, on the current stream) in a graph, replay it
        ``warmup`` times, then time ``replays`` replays (see replay_times); µs per launch per replay."""
        s = self.stream
        with self._scope():
            s.begin_capture()
            try:
                for i in range(n):
                    launch(i)
            finally:
                g = s.end_capture()
            for _ in range(warmup):
                g.launch(s)
        return self.replay_times(g, replays, n, before)

    def replay_times(self, g: Any, replays: int, per: int = 1, before: Before | None = None) -> list[float]:
        """Replay a captured CuPy graph ``replays`` times on the stream, each between two events (after
        untimed work ``before(stream)``, when given); µs per replay divided by ``per`` (the launches it holds)."""
        s = self.stream
        out = []
        with self._scope():
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            for _ in range(replays):
                if before is not None:
                    before(s)
                e0.record(s)
                g.launch(s)
                e1.record(s)
                e1.synchronize()
                out.append(cp.cuda.get_elapsed_time(e0, e1) * 1000.0 / per)
        return out

    def time_spin(self, op: Callable[[int], None], n: int, replays: int,
                  before: Before | None = None) -> list[float]:
        """Time n calls of op (each enqueues GPU work from Python) behind a spin kernel, so the GPU
        never waits for the CPU: the launches queue up while the spin runs, then run back to back
        (``replays`` samples, each after ``before(stream)`` when given). Samples where the CPU fell
        behind the spin are dropped."""
        s = self.stream
        with self._scope():
            for i in range(min(n, 8)):
                op(i)
            s.synchronize()
            t0 = time.perf_counter()
            for i in range(n):
                op(i)
            cpu_s = time.perf_counter() - t0
            s.synchronize()
            spin_ns = int(cpu_s * 1e9 * 2 + 500_000)
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            out = []
            for _ in range(replays):
                if before is not None:
                    before(s)
                self.spin((1,), (1,), (np.uint64(spin_ns),))
                e0.record(s)
                t0 = time.perf_counter()
                for i in range(n):
                    op(i)
                enq = time.perf_counter() - t0
                e1.record(s)
                e1.synchronize()
                if enq * 1e9 > spin_ns:  # the CPU fell behind the spin: this sample timed the CPU
                    continue
                out.append(cp.cuda.get_elapsed_time(e0, e1) * 1000.0 / n)
        if not out:
            raise RuntimeError("spin timing: the CPU never stayed ahead of the GPU")
        return out
