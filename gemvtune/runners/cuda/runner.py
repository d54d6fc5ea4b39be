"""The CUDA runner's measuring half (this package is the only place that imports cupy).

Compiles with NVRTC (gemvtune.compile, cached on disk by source hash) and launches every variant
through its ``LaunchPlan`` (gemvtune.plan: cuda-bindings, raw pointers, the current CuPy stream), the
same launch path users get; all of the runner's work runs on its own device and stream (``on_stream``),
never changing the caller's current device or stream; verifies every variant on fresh random inputs against a float64 reference before
timing it; times like real decode: CUDA graphs of many launches over rotating weight copies whose
working set is >= 3x L2, replayed several times between events. A weight too small for that (more than
MAX_COPIES copies) is timed over MAX_COPIES copies, one pass per sample, each sample after an L2 flush
(write 3x L2 of scratch, then discard it): every launch still reads its weight from HBM. A shape whose bytes stream
faster than an empty launch is marked launch-bound.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np

from ...compile import CompileError, compile_source, compile_variant, precompile_variant
from ...epilogue import DEFAULT, Epilogue
from ...launchspec import launch_spec
from ...plan import LaunchPlan
from ...errors import NoDeviceError
from ...shapes import Shape
from ...families import config_to_dict
from ...timing import copies_for, error_bound, flushes_l2, gbps, launch_bound, launches_for, summarize
from ..base import Measurement, RunnerBase, Status
from ._cupy import _rand_half, cp, cuda_available
from .baselines import Baselines
from .gpulock import GpuLock
from .verify import Verifier, x_shape as _x_shape, y_shape as _y_shape

_AUX_SRC = r"""
extern "C" __global__ void read_stream(const uint4* __restrict__ p, unsigned long long n, unsigned int* out) {
    uint4 a = make_uint4(0u, 0u, 0u, 0u);
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        uint4 v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u)
            asm volatile("ld.global.nc.L1::no_allocate.v4.b32 {%0,%1,%2,%3}, [%4];"
                         : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w) : "l"(p + i + u * stride));
#pragma unroll
        for (int u = 0; u < 4; ++u) { a.x ^= v[u].x; a.y ^= v[u].y; a.z ^= v[u].z; a.w ^= v[u].w; }
    }
    for (; i < n; i += stride) { uint4 v = p[i]; a.x ^= v.x; a.y ^= v.y; a.z ^= v.z; a.w ^= v.w; }
    if ((a.x ^ a.y ^ a.z ^ a.w) == 0x9e3779b9u) out[0] = 1u;   // keeps the loads; practically never true
}
extern "C" __global__ void l2_fill(uint4* __restrict__ p, unsigned long long n) {
    // Writes evict what L2 holds (a streaming read does not, on H200: see results/nvidia-h200/NOTES.md)
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        p[i] = make_uint4(0u, 0u, 0u, 0u);
}
extern "C" __global__ void l2_discard(char* __restrict__ p, unsigned long long lines) {
    // ... then drop the written lines without writing them back: L2 is left empty and clean
#if __CUDA_ARCH__ >= 800
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < lines; i += stride)
        asm volatile("discard.global.L2 [%0], 128;" :: "l"(p + i * 128) : "memory");
#endif
}
extern "C" __global__ void empty_kernel() {}
extern "C" __global__ void spin(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}
"""


@dataclass
class ShapeBuffers:
    """One shape's rotating weight copies, inputs and NaN-poisoned outputs (``CudaRunner.buffers``)."""

    shape: Shape
    W: list
    x: list
    y: list
    copies: int
    flush: bool = False   # copies < 3x L2: each sample is one pass after an L2 flush
    x_block: Any = None   # with flush: the x copies, contiguous (read back into L2 after each flush)


_ShapeBuffers = ShapeBuffers   # the old private name


class CudaRunner(RunnerBase):
    """The runner contract on one CUDA device (``gemvtune.runners.base.DeviceRunner``). Its parts:
    a ``Verifier`` (``verifier``: fresh inputs, float64 reference, the check) and ``Baselines``
    (``baseline``: cuBLAS timed in the same harness), each given what it uses."""

    # set in __init__ (declared for the contract's structural check)
    device_id: int
    arch: str
    stream: Any
    rng: Any
    replays: int
    warmup: int
    target_us: float
    gpu_lock: GpuLock  # timing is exclusive per GPU across this host's processes
    read_stream: Any   # the ceiling's streaming-read kernel (a CuPy function; launches on the current stream)
    verifier: Verifier
    baseline: Baselines

    def __init__(self, device: int = 0, replays: int = 15, warmup: int = 3, target_us: float = 2000.0,
                 seed: int = 0):
        why = cuda_available()
        if why:
            raise NoDeviceError(why)
        self.device_id = device
        self.props = cp.cuda.runtime.getDeviceProperties(device)
        self.arch = f"sm_{self.props['major']}{self.props['minor']}"
        p = self.props
        self.pci_bus_id = f"{int(p.get('pciDomainID', 0)):08X}:{int(p.get('pciBusID', 0)):02X}:{int(p.get('pciDeviceID', 0)):02X}.0"
        self.gpu_lock = GpuLock(self.pci_bus_id)   # timing is exclusive per GPU across this host's processes
        self.replays, self.warmup, self.target_us = replays, warmup, target_us
        from ...settings import settings

        if settings().no_pool:
            cp.cuda.set_allocator(None)  # every array its own cudaMalloc: compute-sanitizer sees exact bounds (global)
        # One blocking stream of the device: every allocation, fill, random draw, launch and capture of this
        # runner is ordered on it (a non-blocking stream raced the NaN poisoning once). Its methods make it
        # (and the device) current for their work only (on_stream): the caller's are never changed.
        with cp.cuda.Device(device):
            self.stream = cp.cuda.Stream(non_blocking=False)
            with self.stream:
                self.rng = cp.random.default_rng(seed)
        self._functions: dict[tuple[str, str], Any] = {}
        self._plans: dict[tuple[str, Shape, Epilogue], LaunchPlan] = {}
        self._bufs: ShapeBuffers | None = None
        self._ceiling_gbps: float | None = None
        self._launch_floor_us: float | None = None
        self._flush_buf: Any = None
        self.verifier = Verifier(self.stream, self.rng, device)
        self.baseline = Baselines(self)
        aux = compile_source(_AUX_SRC, "aux", self.arch, kernel="read_stream")
        self.read_stream = self.function(aux.cubin_path, "read_stream")
        self._empty = self.function(aux.cubin_path, "empty_kernel")
        self._l2_fill = self.function(aux.cubin_path, "l2_fill")
        self._l2_discard = self.function(aux.cubin_path, "l2_discard")
        self._spin = self.function(aux.cubin_path, "spin")

    @contextlib.contextmanager
    def on_stream(self) -> Iterator[None]:
        """``with runner.on_stream():`` the runner's device and stream are this thread's current CuPy device
        and stream for the block; the caller's come back after. Every method that allocates or enqueues
        GPU work runs inside it; callers that enqueue work between the runner's (a launcher's launches,
        their own arrays) use it too."""
        with cp.cuda.Device(self.device_id), self.stream:
            yield

    # ---- device ------------------------------------------------------------------------------
    def device_info(self) -> dict[str, Any]:
        p = self.props
        pci = self.pci_bus_id
        try:  # by PCI bus id: the device index here is CUDA_VISIBLE_DEVICES-relative, nvidia-smi's is not
            drv = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader",
                                  f"--id={pci}"], capture_output=True, text=True, timeout=20).stdout.strip()
        except Exception:
            drv = ""
        return {
            "name": p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"]),
            "compute_capability": f"{p['major']}.{p['minor']}",
            "sm_count": int(p["multiProcessorCount"]),
            "l2_bytes": int(p["l2CacheSize"]),
            "memory_bytes": int(p["totalGlobalMem"]),
            "driver": drv or str(cp.cuda.runtime.driverGetVersion()),
            "cuda_driver_api": cp.cuda.runtime.driverGetVersion(),
            "cuda_runtime": cp.cuda.runtime.runtimeGetVersion(),
            "cupy": cp.__version__,
            "device": self.device_id,
            "pci_bus_id": pci,
            "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
        }

    @property
    def l2_bytes(self) -> int:
        return int(self.props["l2CacheSize"])

    @property
    def sm_count(self) -> int:
        return int(self.props["multiProcessorCount"])

    def function(self, cubin_path: str, name: str):
        """Kernel ``name`` of a cubin, loaded once on the runner's device (a CuPy function: it launches
        on the current stream unless given ``stream=``)."""
        key = (cubin_path, name)
        if key not in self._functions:
            with cp.cuda.Device(self.device_id):
                self._functions[key] = cp.RawModule(path=cubin_path).get_function(name)
        return self._functions[key]

    # ---- timing primitives ---------------------------------------------------------------------
    def time_graph(self, launch: Callable[[int], None], n: int, flush: bool = False,
                   before: Callable[[Any], None] | None = None) -> list[float]:
        """Capture n launches (launch(i) enqueues the i-th) in a graph; µs per launch per replay (each
        replay after an L2 flush with ``flush``, or after ``before(stream)``: see replay_times)."""
        s = self.stream
        with self.on_stream():
            s.begin_capture()
            try:
                for i in range(n):
                    launch(i)
            finally:
                g = s.end_capture()
            for _ in range(self.warmup):
                g.launch(s)
        return self.replay_times(g, self.replays, n, flush, before)

    def replay_times(self, g: Any, replays: int, per: int = 1, flush: bool = False,
                     before: Callable[[Any], None] | None = None) -> list[float]:
        """Replay a captured CuPy graph ``replays`` times on the runner's stream, each between two
        events (and after an L2 flush with ``flush``, or other untimed work ``before(stream)``); µs per
        replay divided by ``per`` (the launches it holds)."""
        s = self.stream
        if flush:
            before = self.flush_l2
        out = []
        with self.on_stream():
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

    def flush_l2(self, stream: Any) -> None:
        """Enqueue an L2 flush on ``stream``: write 3x L2 of scratch (evicting everything, the weights of
        a shape too small to rotate out of L2 included, as the rest of a model's layers do in real
        decode), then discard those lines so no write-back lands in the timed sample; then read the
        current shape's x copies back in (x is hot in real decode: the kernel before wrote it). Measured against
        full rotation in scripts/flush_check.py (a streaming read does not evict on H200). Its time is
        never inside a timed sample; while it runs, the CPU enqueues the sample behind it. (Its scratch is
        allocated on the runner's stream, once.)"""
        with self.on_stream():
            if self._flush_buf is None:
                self._flush_buf = cp.empty(int(3 * self.l2_bytes) // 128 * 128, dtype=cp.uint8)
                self._flush_sink = cp.zeros(1, dtype=cp.uint32)
            n = self._flush_buf.size
            grid = (self.sm_count * 8,)
            self._l2_fill(grid, (256,), (self._flush_buf, np.uint64(n // 16)), stream=stream)
            self._l2_discard(grid, (256,), (self._flush_buf, np.uint64(n // 128)), stream=stream)
            xb = self._bufs.x_block if self._bufs is not None else None
            if xb is not None:   # x is hot in real decode (the previous kernel just wrote it): read it back in
                self.read_stream(grid, (256,), (xb, np.uint64(xb.nbytes // 16), self._flush_sink), stream=stream)

    def time_spin(self, op: Callable[[int], None], n: int, flush: bool = False) -> list[float]:
        """Time n calls of op (each enqueues GPU work from Python) behind a spin kernel, so the GPU
        never waits for the CPU: the launches queue up while the spin runs, then run back to back
        (each sample after an L2 flush with ``flush``)."""
        s = self.stream
        with self.on_stream():
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
            for _ in range(self.replays):
                if flush:
                    self.flush_l2(s)
                self._spin((1,), (1,), (np.uint64(spin_ns),))
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

    # ---- buffers --------------------------------------------------------------------------------
    def buffers(self, shape: Shape) -> ShapeBuffers:
        """The shape's rotating copies (W, x, NaN-poisoned y), made on the runner's stream; kept until
        another shape's are asked for, or ``release``."""
        if self._bufs is None or self._bufs.shape != shape:
            self._bufs = None
            with self.on_stream():
                cp.get_default_memory_pool().free_all_blocks()
                c = copies_for(shape.weight_bytes, self.l2_bytes)
                flush = flushes_l2(shape.weight_bytes, c, self.l2_bytes)
                xs = self.x_shape(shape)
                size = shape.d * shape.n
                stride = -(-size // 128) * 128   # each copy 256-byte aligned, like its own allocation
                x_block = _rand_half((c, stride), self.rng) if flush else None
                self._bufs = ShapeBuffers(
                    shape,
                    [_rand_half((shape.M, shape.d), self.rng) for _ in range(c)],
                    ([x_block[i, :size].reshape(xs) for i in range(c)] if flush
                     else [_rand_half(xs, self.rng) for _ in range(c)]),
                    [cp.full(self.y_shape(shape), cp.nan, dtype=cp.float32) for _ in range(c)],
                    c,
                    flush,
                    x_block,
                )
        return self._bufs

    x_shape = staticmethod(_x_shape)   # x is [d] for n = 1 (plain decode) and [n, d] otherwise
    y_shape = staticmethod(_y_shape)   # y is [M] or [n, M]

    def release(self) -> None:
        self._bufs = None
        self.verifier.release()
        self._flush_buf = None
        with cp.cuda.Device(self.device_id):
            cp.get_default_memory_pool().free_all_blocks()

    # ---- ceiling and floor ------------------------------------------------------------------------
    def ceiling(self, gib: float = 1.0, copies: int = 2) -> dict[str, float]:
        """Read bandwidth of a streaming kernel (16-byte nc loads, 4 in flight, grid-stride; the best
        of a few grid sizes) and the launch floor (empty kernel in a graph)."""
        with self.gpu_lock.held(), self.on_stream():
            return self._ceiling(gib, copies)

    def _ceiling(self, gib: float, copies: int) -> dict[str, float]:
        nbytes = int(gib * 2**30) // 16 * 16
        bufs = [self.rng.random(nbytes // 4, dtype=cp.float32) for _ in range(copies)]
        sink = cp.zeros(1, dtype=cp.uint32)
        best: tuple[float, Any] | None = None
        per_grid = {}
        for blocks_per_sm in (2, 4, 8, 16):
            grid = (self.sm_count * blocks_per_sm,)
            n = 8 * copies
            t = self.time_graph(lambda i: self.read_stream(grid, (256,), (bufs[i % copies], np.uint64(nbytes // 16),
                                                                        sink)), n)
            st = summarize(t)
            per_grid[blocks_per_sm] = nbytes / (st.median * 1e-6) / 1e9
            if best is None or st.median < best[0].median:
                best = (st, blocks_per_sm)
        st, bps = best
        t_empty = summarize(self.time_graph(lambda i: self._empty((1,), (32,), ()), 2000))
        self._ceiling_gbps = nbytes / (st.median * 1e-6) / 1e9
        self._launch_floor_us = t_empty.median
        bufs.clear()
        cp.get_default_memory_pool().free_all_blocks()
        return {
            "read_gbps": self._ceiling_gbps,
            "read_gbps_min": nbytes / (st.max * 1e-6) / 1e9,
            "read_gbps_max": nbytes / (st.min * 1e-6) / 1e9,
            "read_bytes": nbytes,
            "read_blocks_per_sm": bps,
            **{f"read_gbps_grid{k}": v for k, v in per_grid.items()},
            "launch_floor_us": t_empty.median,
            "launch_floor_us_min": t_empty.min,
            "launch_floor_us_max": t_empty.max,
        }

    @property
    def ceiling_gbps(self) -> float:
        """The read ceiling measurements' pct_ceiling is against: the last ``ceiling()``'s (measured on
        first use), or what was set."""
        if self._ceiling_gbps is None:
            self.ceiling()
        return self._ceiling_gbps  # type: ignore[return-value]

    @ceiling_gbps.setter
    def ceiling_gbps(self, gbps: float) -> None:
        """Keep percentages against this ceiling (e.g. the full 1 GiB one after measuring a smaller read's)."""
        self._ceiling_gbps = float(gbps)

    # ---- variants -------------------------------------------------------------------------------
    @property
    def compile_jobs(self) -> int:
        """Trials a search keeps in flight: their compiles overlap; measurement is serialized."""
        return max(1, min(8, os.cpu_count() or 1))

    def precompile(self, config: Any, shape: Shape) -> None:
        precompile_variant(config, shape, self.arch)

    def prepare(self, config: Any, shape: Shape, source: str | None = None, name: str | None = None,
                epilogue: Epilogue = DEFAULT) -> tuple[Any, LaunchPlan]:
        """Compile (or fetch) one variant and its launch plan (kept for the runner's life: graphs and
        launchers made from it stay valid); returns (compiled, plan)."""
        compiled = compile_variant(config, shape, self.arch, source, name, epilogue=epilogue)
        key = (compiled.cubin_path, shape, epilogue)
        plan = self._plans.get(key)
        if plan is None:
            with open(compiled.cubin_path, "rb") as f:
                plan = self._plans[key] = LaunchPlan(launch_spec(config, shape, epilogue), f.read(), self.device_id)
        return compiled, plan

    def launches(self, shape: Shape, copies: int, cap: int = 4000, flush: bool = False) -> int:
        """Launches per timed sample: ~target_us of work at the read ceiling, whole passes over copies
        (one pass with ``flush``: after it, the copies would be in L2)."""
        if flush:
            return copies
        return launches_for(shape.bytes_moved / (self.ceiling_gbps * 1e3) + 1.0, copies, self.target_us, cap)

    @staticmethod
    def plan_launcher(plan: LaunchPlan) -> Callable[..., None]:
        """launch(W, x, y[, bias]) with CuPy arrays, on the current CuPy stream (capturable): call it
        inside ``on_stream()`` (the runner's timers and verify do) to run it on the runner's."""
        def launch(W, x, y, bias=None):
            plan.launch(W.data.ptr, x.data.ptr, y.data.ptr, bias.data.ptr if bias is not None else 0,
                        cp.cuda.get_current_stream().ptr)
        return launch

    def launcher(self, config: Any, shape: Shape, epilogue: Epilogue = DEFAULT) -> Callable[..., None]:
        """Compile and plan ``config`` for ``shape``; launch(W, x, y[, bias]) with CuPy arrays."""
        return self.plan_launcher(self.prepare(config, shape, epilogue=epilogue)[1])

    def verify(self, launch: Callable[..., Any], shape: Shape, bound: float,
               epilogue: Epilogue = DEFAULT) -> tuple[bool, float, float, str]:
        """(passed, relerr, rowerr, reason) of launch(W, x, y[, bias]) on fresh random inputs (the
        verifier's, on the runner's device and stream)."""
        return self.verifier.verify(launch, shape, bound, epilogue)

    def reference(self, W: Any, x: Any) -> tuple[Any, Any]:
        """float64 W x and per-row scales (``Verifier.reference``), on the runner's device and stream."""
        return self.verifier.reference(W, x)

    def check(self, y: Any, ref: Any, scale: Any, bound: float) -> tuple[bool, float, float, str]:
        """(passed, relerr, rowerr, reason) of y against a reference (``Verifier.check``), on the runner's
        device and stream."""
        with self.on_stream():
            return self.verifier.check(y, ref, scale, bound)

    def measure(self, config: Any, shape: Shape, kind: str = "variant", verify: bool = True,
                timed: bool = True, source: str | None = None, name: str | None = None,
                epilogue: Epilogue = DEFAULT) -> Measurement:
        """Compile, verify on fresh inputs, then time. ``source`` replaces the rendered source (used
        to plant faulty kernels: the check must catch them). Nothing raises out of here."""
        with self.on_stream(), self.gpu_lock.held():  # (device, stream: per thread in CuPy)
            return self._measure(config, shape, kind, verify, timed, source, name, epilogue)

    def _measure(self, config: Any, shape: Shape, kind: str, verify: bool, timed: bool, source: str | None,
                 name: str | None, epilogue: Epilogue = DEFAULT) -> Measurement:
        m = Measurement(name or (config.label + epilogue.label), kind, shape.M, shape.d, shape.n, Status.OK,
                        params=config_to_dict(config))
        why = config.invalid_reasons(shape) + epilogue.invalid_reasons(config)
        if why:
            m.status, m.error = Status.INVALID, "; ".join(why)
            return m
        try:
            compiled, plan = self.prepare(config, shape, source, name, epilogue)
        except CompileError as e:
            m.status, m.error = Status.COMPILE_ERROR, str(e)
            return m
        except Exception as e:  # module load failure (bad image, too many resources)
            m.status, m.error = Status.LAUNCH_ERROR, f"load: {str(e).splitlines()[0]}"
            return m
        r = compiled.resources
        m.registers, m.spill_bytes, m.smem_bytes, m.compile_s = r.registers, r.spill_stores, r.smem_bytes, compiled.compile_s
        m.bound = error_bound(config.acc, shape.d, out=epilogue.out)
        try:
            launch = self.plan_launcher(plan)
            if verify:
                ok, m.relerr, m.rowerr, reason = self.verify(launch, shape, m.bound, epilogue)
                if not ok:
                    m.status, m.error = Status.WRONG, reason
                    return m
            if not timed:
                return m
            b = self.buffers(shape)
            n = self.launches(shape, b.copies, flush=b.flush)
            bias = _rand_half((shape.M,), self.rng) if epilogue.bias else None   # y buffers are FP32: room for FP16 too
            t = self.time_graph(lambda i: launch(b.W[i % b.copies], b.x[i % b.copies], b.y[i % b.copies], bias), n,
                                flush=b.flush)
        except Exception as e:
            m.status, m.error = Status.LAUNCH_ERROR, (str(e).splitlines() or [type(e).__name__])[0]
            return m
        self.fill_times(m, t, shape, "graph", n, b)
        return m

    def fill_times(self, m: Measurement, t: list[float], shape: Shape, method: str, n: int, b: ShapeBuffers) -> None:
        """Put the samples ``t`` (µs per launch) and what they were timed over into ``m``."""
        st = summarize(t)
        m.us_median, m.us_min, m.us_max = st.median, st.min, st.max
        m.gbps = gbps(shape.bytes_moved, st.median)
        m.pct_ceiling = 100.0 * m.gbps / self.ceiling_gbps
        m.method = method + ("+flush" if b.flush else "")
        m.launches, m.samples, m.copies = n, st.n, b.copies
        m.launch_bound = launch_bound(shape.bytes_moved, self.ceiling_gbps, self._launch_floor_us or 0.0)

    def measure_spin(self, config: Any, shape: Shape) -> Measurement:
        """The same variant timed with the spin method (to show it agrees with the graph method)."""
        m = Measurement(config.label, "spin-check", shape.M, shape.d, shape.n, Status.OK, params=config_to_dict(config))
        launch = self.launcher(config, shape)
        b = self.buffers(shape)
        n = self.launches(shape, b.copies, cap=400, flush=b.flush)
        t = self.time_spin(lambda i: launch(b.W[i % b.copies], b.x[i % b.copies], b.y[i % b.copies]), n, b.flush)
        self.fill_times(m, t, shape, "spin", n, b)
        return m

    # ---- baselines (the Baselines part) -----------------------------------------------------------------
    def measure_cublas(self, shape: Shape) -> Measurement:
        """cuBLAS through cupy.matmul, spin-timed and verified (``Baselines.measure_cublas``)."""
        return self.baseline.measure_cublas(shape)

    def baselines(self, shape: Shape) -> list[Measurement]:
        """cuBLAS via cupy.matmul and, where torch is installed, via torch in a graph (``Baselines.baselines``)."""
        return self.baseline.baselines(shape)

    def measure_torch_linear(self, shape: Shape) -> Measurement | None:
        """cuBLAS through torch F.linear in a CUDA graph; None without torch (``Baselines.measure_torch_linear``)."""
        return self.baseline.measure_torch_linear(shape)

