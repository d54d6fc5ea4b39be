"""The decode-step benchmark's GPU half (part of the CUDA runner package, the only place that imports
cupy): every linear layer of N transformer layers plus the LM head, weights all resident, one step
captured in ONE CUDA graph per implementation, replays timed between CUDA events.

Each linear reads its own fixed random x (the chain is not numerically connected: only the memory
traffic and the launch sequence of a real step are reproduced). All of it runs on the runner's device and
stream (``runner.on_stream()``); the caller's current ones are left alone. Orchestration and reports:
gemvtune.bench.step."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import Any

from ...baselines import CUBLAS_FOR
from ...device._cupy import cp, rand_elems
from ...kernels.shapes import Shape
from ..timing import error_bound
from .libtimers import torch_graph, torch_replay_times


def free_bytes(device: int | None = None) -> int:
    """Free memory of ``device`` (default: the current one) now (bytes), CuPy's cached blocks released first."""
    with cp.cuda.Device(device):
        cp.get_default_memory_pool().free_all_blocks()
        return int(cp.cuda.runtime.memGetInfo()[0])


def launchers(runner: Any, configs: dict[Shape, Any]) -> dict[Shape, Callable]:
    """One launch(W, x, y) per distinct shape (its workspace shared by that shape's layers: they run in
    order on one stream, as in the dispatcher)."""
    out = {}
    for shape, cfg in configs.items():
        out[shape] = runner.launcher(cfg, shape)
    return out


def verify(runner: Any, configs: dict[str, dict[Shape, Any]], launch: dict[str, dict[Shape, Callable]]
           ) -> dict[str, list[tuple[Shape, bool, float, str]]]:
    """Every implementation's kernel of every shape on fresh random inputs against the float64
    reference (the runner's check); shape by shape, so each reference matrix is built once. Run it
    before the step's weights are allocated: the reference of the LM head alone takes ~16 GB."""
    res: dict[str, list] = {impl: [] for impl in configs}
    shapes = list(dict.fromkeys(s for cs in configs.values() for s in cs))
    for shape in shapes:
        for impl, cs in configs.items():
            if shape in cs:
                ok, rel, _, why = runner.verify(launch[impl][shape], shape, error_bound(cs[shape].acc, shape.d))
                res[impl].append((shape, ok, rel, why))
    runner.release()
    return res


class DecodeStepBench:
    """Weights, inputs and per-implementation outputs of one decode step; ``capture_*`` builds one
    graph per implementation, ``time(impl, replays)`` replays it (µs per step per replay)."""

    def __init__(self, runner: Any, ops: list[tuple[str, Shape]]):
        self.runner, self.ops = runner, ops
        self.W: list = []
        self.x: list = []
        self.y: dict[str, list] = {}
        self.methods: dict[str, str] = {}
        self.configs: dict[str, dict[Shape, Any]] = {}
        self._timers: dict[str, Callable[[int], list[float]]] = {}
        self._keep: list = []
        self._graphs: dict[str, Any] = {}
        with runner.on_stream():
            for _, s in ops:
                self.W.append(rand_elems((s.M, s.d), runner.rng, s.dtype))
                self.x.append(rand_elems((s.d,), runner.rng, s.dtype))
            runner.stream.synchronize()

    @property
    def weight_bytes(self) -> int:
        return sum(s.weight_bytes for _, s in self.ops)

    # ---- our kernels (tuned, llama.cpp config, the fused step) -------------------------------------------
    def capture_sequence(self, key: str, calls: list[Callable[[], None]], outputs: list[Any],
                         configs: dict[Shape, Any] | None = None) -> None:
        """``calls`` (each enqueues one launch on the current stream) captured in order into one CuPy graph on the
        runner's stream, timed as ``key``; ``outputs`` are what the step writes (checked for NaN poison)."""
        s = self.runner.stream
        with self.runner.on_stream():
            s.begin_capture()
            try:
                for c in calls:
                    c()
            finally:
                g = s.end_capture()
        self._graphs[key] = g   # (a key captured again drops its old graph)
        self.y[key] = outputs
        if configs is not None:
            self.configs[key] = configs
        self.methods[key] = "graph"
        self._timers[key] = lambda replays: self.runner.replay_times(g, replays)

    def capture_kernels(self, impl: str, configs: dict[Shape, Any], launch: dict[Shape, Callable],
                        gaps: Any = None, pdl_gaps: bool = False, key: str | None = None) -> None:
        """The whole step (ops in order, with the stand-ins of ``gaps`` between them) captured into one CuPy graph on
        the runner's stream, timed as ``key`` (default ``impl``)."""
        from .fusedstep import unfused_calls

        with self.runner.on_stream():
            ys = [cp.full(sh.M, cp.nan, dtype=cp.float32) for _, sh in self.ops]

        def linear(i: int) -> None:
            launch[self.ops[i][1]](self.W[i], self.x[i], ys[i])
        self.capture_sequence(key or impl, unfused_calls(self.ops, linear, gaps, pdl_gaps), ys, configs)

    # ---- cuBLAS ---------------------------------------------------------------------------------
    def capture_cublas(self, gaps: Any = None, pdl_gaps: bool = False, suffix: str = "") -> tuple[str, str]:
        """cuBLAS for every op: torch F.linear captured in one torch CUDA graph (as the baselines do), with the
        stand-ins of ``gaps`` between; without torch, cupy.matmul enqueued op by op behind a spin kernel (CuPy refuses
        cuBLAS in capture; no stand-ins). Returns its key (its name in the baseline registry, ``cublas-torch`` or
        ``cublas``, then ``suffix``) and the method."""
        try:
            import torch
            have_torch = True
        except Exception:
            have_torch = False
        impl = CUBLAS_FOR["torch" if have_torch else "cupy"] + suffix
        if not have_torch:
            ys = self.y[impl] = [None] * len(self.ops)

            def step(_i: int) -> None:
                for i in range(len(self.ops)):
                    ys[i] = cp.matmul(self.W[i], self.x[i])
            self._timers[impl] = lambda replays: self._spin(step, replays)
            self.methods[impl] = "spin (cupy.matmul)"
            return impl, self.methods[impl]
        from .fusedstep import unfused_calls

        with self.runner.on_stream():   # the runner's device (torch's too) and stream (the DLPack hand-overs)
            Wt = [torch.from_dlpack(w) for w in self.W]
            xt = [torch.from_dlpack(x).view(1, -1) for x in self.x]

            def linears() -> list:
                outs: list = [None] * len(Wt)

                def one(i: int) -> None:
                    outs[i] = torch.nn.functional.linear(xt[i], Wt[i])
                for c in unfused_calls(self.ops, one, gaps, pdl_gaps, lambda: torch.cuda.current_stream().cuda_stream):
                    c()
                return outs
            g, outs = torch_graph(torch, lambda: [linears() for _ in range(2)], linears)
            self.y[impl] = [cp.from_dlpack(o.view(-1)) for o in outs]
        self._keep += [g, Wt, xt, outs]
        self.methods[impl] = "graph (torch F.linear)"
        self._timers[impl] = lambda replays: torch_replay_times(torch, g, replays)
        return impl, self.methods[impl]

    def keep(self, *objs: Any) -> None:
        """Keep ``objs`` (buffers a captured graph points into) until ``close``."""
        self._keep.extend(objs)

    def drop(self, key: str) -> None:
        """Forget ``key``'s graph, outputs and timer."""
        for d in (self._graphs, self._timers, self.y, self.methods, self.configs):
            d.pop(key, None)

    def _spin(self, step: Callable[[int], None], replays: int) -> list[float]:
        out: list[float] = []
        while len(out) < replays:
            out += self.runner.time_spin(step, 2)
        return out[:replays]

    # ---- timing and checks -----------------------------------------------------------------------
    def time(self, impl: str, replays: int, warmup: int = 2) -> list[float]:
        """µs per step, one sample per replay (after warm-up replays)."""
        with self.runner.on_stream():
            self._timers[impl](warmup)
            return self._timers[impl](replays)

    def written(self, impl: str) -> bool:
        """Every output of the step is finite (the NaN poison was overwritten by every op)."""
        with self.runner.on_stream():
            return all(y is not None and bool(cp.isfinite(y).all()) for y in self.y[impl])

    def max_rel_diff(self, a: str, b: str) -> float:
        """max over ops of ||y_a - y_b|| / ||y_b||: implementations computing the same products."""
        worst = 0.0
        with self.runner.on_stream():
            for ya, yb in zip(self.y[a], self.y[b]):
                if ya is None or yb is None:
                    return math.nan
                ref = yb.astype(cp.float64)
                worst = max(worst, float(cp.linalg.norm(ya.astype(cp.float64) - ref) / cp.linalg.norm(ref)))
        return worst

    def check_op(self, impl: str, i: int) -> tuple[bool, float, str]:
        """Op i's output of ``impl`` (after a replay) against the float64 reference of its W and x."""
        shape = self.ops[i][1]
        ref, scale = self.runner.reference(self.W[i], self.x[i], shape.dtype)
        acc = getattr(self.configs.get(impl, {}).get(shape), "acc", "fp16")  # cuBLAS: FP16 output
        ok, rel, _, why = self.runner.check(self.y[impl][i], ref, scale, error_bound(acc, shape.d))
        return ok, rel, why

    def close(self) -> None:
        self._timers.clear()
        self._keep.clear()
        self._graphs.clear()
        self.W, self.x, self.y = [], [], {}
        with self.runner.on_stream():
            cp.get_default_memory_pool().free_all_blocks()
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized():
            torch.cuda.empty_cache()  # the cuBLAS graph's private pool
