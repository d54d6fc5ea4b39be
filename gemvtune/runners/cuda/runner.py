"""The CUDA runner's measuring half (this package is the only place that imports cupy).

Compiles with NVRTC (gemvtune.build.compile, cached on disk by source hash) and launches every variant
through its ``LaunchPlan`` (gemvtune.device.plan: cuda-bindings, raw pointers, the current CuPy stream), the
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
from collections.abc import Callable
from typing import Any

from ...build.compile import CompileError, compile_variant, precompile_variant
from ...device._cupy import cp, cuda_available, rand_elems, scope
from ...device.plan import LaunchPlan
from ...errors import NoDeviceError
from ...kernels.arch import for_device
from ...kernels.cublaslt import HEURISTIC_TOP
from ...kernels.epilogue import DEFAULT, Epilogue
from ...kernels.families import config_to_dict, is_library
from ...kernels.launchspec import launch_spec
from ...kernels.shapes import Shape
from ..base import Measurement, RunnerBase, Status
from ..fp8data import fp8_error_bound
from ..timing import error_bound, gbps, launch_bound, launches_for, summarize
from .auxkernels import AuxKernels, L2Flush, load_aux
from .buffers import ShapeBuffers, make_buffers
from .device import device_info, pci_bus_id, read_ceiling
from .gpulock import GpuLock
from .libtimers import Baselines
from .ltrunner import LtPart
from .timer import Before, Timer
from .verify import Verifier
from .verify import x_shape as _x_shape
from .verify import y_shape as _y_shape

__all__ = ["CudaRunner", "ShapeBuffers"]


class CudaRunner(RunnerBase):
    """The runner contract on one CUDA device (``gemvtune.runners.base.DeviceRunner``). Its parts, each
    given what it uses: a ``Verifier`` (``verifier``: fresh inputs, float64 reference, the check), a
    ``Timer`` (``timer``: graph and spin timing on the runner's stream), an ``L2Flush`` (``flusher``:
    the scratch flushed through before a sample), the auxiliary kernels (``aux``) and ``Baselines``
    (``baseline``: cuBLAS timed in the same harness, the runner)."""

    # set in __init__ (declared for the contract's structural check)
    device_id: int
    arch: str
    stream: Any
    rng: Any
    replays: int
    warmup: int
    target_us: float
    no_pool: bool      # GEMVTUNE_NO_POOL: the runner's arrays bypass CuPy's pool (inside on_stream only)
    gpu_lock: GpuLock  # timing is exclusive per GPU across this host's processes
    read_stream: Any   # the ceiling's streaming-read kernel (a CuPy function; launches on the current stream)
    aux: AuxKernels
    flusher: L2Flush
    timer: Timer
    verifier: Verifier
    baseline: Baselines

    def __init__(self, device: int = 0, replays: int = 15, warmup: int = 3, target_us: float = 2000.0,
                 seed: int = 0):
        why = cuda_available()
        if why:
            raise NoDeviceError(why)
        from ...settings import settings

        self.device_id = device
        self.props = cp.cuda.runtime.getDeviceProperties(device)
        # the registry's arch of this device (gemvtune.kernels.arch.for_device; an unsupported GPU is one UsageError)
        self.arch = for_device(int(self.props["major"]), int(self.props["minor"])).name
        self.pci_bus_id = pci_bus_id(self.props)
        self.gpu_lock = GpuLock(self.pci_bus_id)   # timing is exclusive per GPU across this host's processes
        self.replays, self.warmup, self.target_us = replays, warmup, target_us
        # every array of the runner its own cudaMalloc (compute-sanitizer sees exact bounds): CuPy's pool is
        # bypassed inside on_stream (a thread-local allocator), the process's allocator is left alone
        self.no_pool = settings().no_pool
        # One blocking stream of the device: every allocation, fill, random draw, launch and capture of this
        # runner is ordered on it (a non-blocking stream raced the NaN poisoning once). Its methods make it
        # (and the device) current for their work only (on_stream): the caller's are never changed.
        with cp.cuda.Device(device):
            self.stream = cp.cuda.Stream(non_blocking=False)
        with self.on_stream():
            self.rng = cp.random.default_rng(seed)
        self._functions: dict[tuple[str, str], Any] = {}
        self._plans: dict[tuple[str, Shape, Epilogue], LaunchPlan] = {}
        self._bufs: ShapeBuffers | None = None
        self._ceiling_gbps: float | None = None
        self._launch_floor_us: float | None = None
        self.verifier = Verifier(self.stream, self.rng, device, self.no_pool)
        self.baseline = Baselines(self)
        self.aux = load_aux(self.arch, self.function)
        self.read_stream = self.aux.read_stream
        self.flusher = L2Flush(self.aux, self.l2_bytes, self.sm_count)
        self.timer = Timer(self.stream, device, self.aux.spin, self.no_pool)
        self.lt = LtPart(device)   # cuBLASLt's algorithms (the library family), on this device

    def on_stream(self) -> contextlib.AbstractContextManager[None]:
        """``with runner.on_stream():`` the runner's device and stream are this thread's current CuPy device
        and stream for the block (and with GEMVTUNE_NO_POOL, CuPy's pool is bypassed); the caller's come
        back after. Every method that allocates or enqueues GPU work runs inside it; callers that enqueue
        work between the runner's (a launcher's launches, their own arrays) use it too."""
        return scope(self.device_id, self.stream, self.no_pool)

    # ---- device ------------------------------------------------------------------------------
    def device_info(self) -> dict[str, Any]:
        return device_info(self.props, self.device_id, self.pci_bus_id)

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

    # ---- timing (the Timer part; flush=True: an L2 flush before each sample) ----------------------
    def time_graph(self, launch: Callable[[int], None], n: int, flush: bool = False,
                   before: Before | None = None) -> list[float]:
        """Capture n launches (launch(i) enqueues the i-th) in a graph; µs per launch per replay (each
        replay after an L2 flush with ``flush``, or after ``before(stream)``: see replay_times)."""
        return self.timer.time_graph(launch, n, self.warmup, self.replays, self.flush_l2 if flush else before)

    def replay_times(self, g: Any, replays: int, per: int = 1, flush: bool = False,
                     before: Before | None = None) -> list[float]:
        """Replay a captured CuPy graph ``replays`` times on the runner's stream, each between two
        events (and after an L2 flush with ``flush``, or other untimed work ``before(stream)``); µs per
        replay divided by ``per`` (the launches it holds)."""
        return self.timer.replay_times(g, replays, per, self.flush_l2 if flush else before)

    def time_spin(self, op: Callable[[int], None], n: int, flush: bool = False) -> list[float]:
        """Time n calls of op (each enqueues GPU work from Python) behind a spin kernel, so the GPU
        never waits for the CPU: the launches queue up while the spin runs, then run back to back
        (each sample after an L2 flush with ``flush``)."""
        return self.timer.time_spin(op, n, self.replays, self.flush_l2 if flush else None)

    def flush_l2(self, stream: Any) -> None:
        """Enqueue an L2 flush on ``stream`` (``L2Flush``: 3x L2 of scratch written, then discarded),
        then read the current shape's x copies back in (x is hot in real decode). Its time is never inside
        a timed sample; while it runs, the CPU enqueues the sample behind it. (Its scratch is allocated on
        the runner's stream, once.)"""
        with self.on_stream():
            self.flusher.flush(stream, self._bufs.x_block if self._bufs is not None else None)

    # ---- buffers --------------------------------------------------------------------------------
    def buffers(self, shape: Shape) -> ShapeBuffers:
        """The shape's rotating copies (W, x, NaN-poisoned y), made on the runner's stream; kept until
        another shape's are asked for, or ``release``."""
        if self._bufs is None or self._bufs.shape != shape:
            self._bufs = None
            with self.on_stream():
                cp.get_default_memory_pool().free_all_blocks()
                self._bufs = make_buffers(shape, self.rng, self.l2_bytes)
        return self._bufs

    x_shape = staticmethod(_x_shape)   # x is [d] for n = 1 (plain decode) and [n, d] otherwise
    y_shape = staticmethod(_y_shape)   # y is [M] or [n, M]

    def release(self) -> None:
        self._bufs = None
        self.lt.release()
        self.verifier.release()
        self.flusher.release()
        with cp.cuda.Device(self.device_id):
            cp.get_default_memory_pool().free_all_blocks()

    # ---- ceiling and floor ------------------------------------------------------------------------
    def ceiling(self, gib: float = 1.0, copies: int = 2) -> dict[str, float]:
        """Read bandwidth of a streaming kernel (16-byte nc loads, 4 in flight, grid-stride; the best
        of a few grid sizes) and the launch floor (empty kernel in a graph): ``device.read_ceiling``."""
        with self.gpu_lock.held(), self.on_stream():
            c = read_ceiling(self.time_graph, self.rng, self.aux.read_stream, self.aux.empty, self.sm_count,
                             gib, copies)
        self._ceiling_gbps, self._launch_floor_us = c["read_gbps"], c["launch_floor_us"]
        return c

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
    @property   # RunnerBase's plain default, computed here (never assigned on a CudaRunner)
    def compile_jobs(self) -> int:  # type: ignore[override]
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
    def plan_launcher(plan: Any) -> Callable[..., None]:
        """launch(W, x, y[, bias]) with CuPy arrays, on the current CuPy stream (capturable): call it
        inside ``on_stream()`` (the runner's timers and verify do) to run it on the runner's."""
        def launch(W, x, y, bias=None):   # (W: FP8 weights, ``DeviceFp8``, also pass their scales)
            sc = getattr(W, "scales", None)
            args = (W.data.ptr, x.data.ptr, y.data.ptr, bias.data.ptr if bias is not None else 0,
                    cp.cuda.get_current_stream().ptr)
            if sc is None:   # (a library's plan, cuBLASLt's LtPlan, takes no scales argument)
                plan.launch(*args)
            else:
                plan.launch(*args, sc.data.ptr)
        return launch

    def launcher(self, config: Any, shape: Shape, epilogue: Epilogue = DEFAULT) -> Callable[..., None]:
        """Compile and plan ``config`` for ``shape`` (a library's algorithm: its plan); launch(W, x, y[, bias])
        with CuPy arrays."""
        if is_library(config):
            return self.plan_launcher(self.lt.get(config, shape, epilogue))
        return self.plan_launcher(self.prepare(config, shape, epilogue=epilogue)[1])

    def lt_problem(self) -> str | None:
        """Why cuBLASLt cannot be used on the runner's device (``HasCublasLt``), or None."""
        return self.lt.problem()

    def lt_heuristics(self, shape: Shape, top: int = HEURISTIC_TOP) -> list[tuple[Any, int]]:
        """cuBLASLt's top algorithms for ``shape`` on the runner's device with their workspace bytes (``HasCublasLt``)."""
        with self.on_stream():
            return self.lt.heuristics(shape, top)

    def verify(self, launch: Callable[..., Any], shape: Shape, bound: float,
               epilogue: Epilogue = DEFAULT) -> tuple[bool, float, float, str]:
        """(passed, relerr, rowerr, reason) of launch(W, x, y[, bias]) on fresh random inputs (the
        verifier's, on the runner's device and stream)."""
        return self.verifier.verify(launch, shape, bound, epilogue)

    def reference(self, W: Any, x: Any, dtype: str = "fp16") -> tuple[Any, Any]:
        """float64 W x and per-row scales of ``dtype`` arrays (``Verifier.reference``), on the runner's device and
        stream."""
        return self.verifier.reference(W, x, dtype)

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
        m = Measurement.of(name or (config.label + epilogue.label), kind, shape, Status.OK,
                        params=config_to_dict(config))
        why = config.invalid_reasons(shape, self.arch) + epilogue.invalid_reasons(config)
        if why:   # (on this device's arch: one it cannot run is invalid, with why, and never compiled)
            m.status, m.error = Status.INVALID, "; ".join(why)
            return m
        plan: Any
        if is_library(config):   # a library's algorithm (cuBLASLt): nothing compiled; a refusal is recorded in m
            plan = self.lt.plan(m, config, shape, epilogue)
            if plan is None:
                return m
        else:
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
        m.bound = (fp8_error_bound(shape.d, epilogue.out) if shape.weights
                   else error_bound(config.acc, shape.d, out=epilogue.out))
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
            bias = rand_elems((shape.M,), self.rng, shape.dtype) if epilogue.bias else None   # y buffers are FP32: room for 16 bits too
            if epilogue.residual:   # r [n, M] of y's dtype (read through the bias slot)
                bias = rand_elems((shape.n * shape.M,), self.rng, epilogue.out)
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
        m = Measurement.of(config.label, "spin-check", shape, Status.OK, params=config_to_dict(config))
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

    def measure_inductor(self, shape: Shape, verify: bool = True, compile: int = 0) -> Measurement:
        """torch.compile max-autotune F.linear in the torch harness (``Baselines.measure_inductor``; ``compile``
        > 0: another compile of the shape, Inductor's caches off for it)."""
        return self.baseline.measure_inductor(shape, verify, compile)

    def measure_seed(self, shape: Shape, verify: bool = True) -> Measurement:
        """llama.cpp's kernel as written, d at run time (``Baselines.measure_seed``)."""
        return self.baseline.measure_seed(shape, verify)

