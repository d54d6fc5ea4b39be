"""Inductor max-autotune as a baseline: what a PyTorch user picks instead of a hand-tuned kernel.
``torch.compile(F.linear, mode="max-autotune-no-cudagraphs", dynamic=False)`` autotunes Inductor's Triton GEMM
templates against cuBLAS per shape; ``measure_inductor`` times the compiled call in the same harness as the
torch ``F.linear`` baseline (a torch CUDA graph over the runner's rotating copies, ``Baselines.time_torch``).

Compiling takes tens of seconds per shape (autotuning), so it happens once per (M, d, n) and process, outside
any capture, and the caller keeps the result (``InductorCompile``) for the later rounds. Each shape compiles
its own function object with its own code object, so dynamo's per-code recompile limit (8 by default; past
it dynamo silently runs the function eagerly) is never reached; the limits are raised for the compile all the
same, and a call that compiled no graph is recorded as a failure with its reason, never timed as Inductor.

Inductor's pick moves between compiles (MEASURING.md: 4096x4096 ran 9.21 µs after one compile, 10.33 after
another), so a route that must never hide a faster Inductor kernel times more than one compile of a shape: each
compile after the first (``compile`` > 0) is of its own code object with Inductor's caches off for it
(``force_disable_caches``), so it autotunes again instead of loading the first one's choice."""

from __future__ import annotations

import contextlib
import importlib
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ...device._cupy import as_torch, from_torch
from ...kernels.shapes import Shape
from ..base import Measurement, Status
from ..timing import library_bound

INDUCTOR_KIND = "inductor"
INDUCTOR_MODE = "max-autotune-no-cudagraphs"
INDUCTOR_NAME = f"inductor ({INDUCTOR_MODE})"
RECOMPILE_LIMIT = 4096   # dynamo's limits while a shape compiles (each shape has its own code object anyway)


@dataclass
class InductorCompile:
    """One shape's compiled F.linear: the callable (None where it failed), the compile's wall time (first call,
    autotuning included), what Inductor chose (``kernel``) and, on failure, the one-line reason."""

    fn: Callable[..., Any] | None
    compile_s: float
    kernel: str = ""
    error: str = ""
    notes: list[str] = field(default_factory=list)


def one_line(e: BaseException) -> str:
    """An exception as one short line: the innermost cause's type and first non-empty line."""
    inner = getattr(e, "inner_exception", None) or e.__cause__ or e
    text = next((ln.strip() for ln in str(inner).splitlines() if ln.strip()), "")
    return f"{type(inner).__name__}: {text}"[:240] if text else type(inner).__name__


def fresh_linear(linear: Callable[..., Any], tag: str) -> Callable[..., Any]:
    """``linear(x, w)`` in a new function whose code object is its own (named for ``tag``): dynamo keeps its
    compiled graphs and counts recompiles per code object, so each shape starts with an empty cache."""
    def call(x: Any, w: Any) -> Any:
        return linear(x, w)

    name = "inductor_linear_" + "".join(ch if ch.isalnum() else "_" for ch in tag)
    code = call.__code__.replace(co_name=name)
    return types.FunctionType(code, call.__globals__, name, None, call.__closure__)


@contextlib.contextmanager
def _dynamo_limits(torch: Any) -> Iterator[None]:
    """Dynamo's recompile limits raised, and hitting one an error (where this torch has the switch), for the
    block only (torch 2.11 and 2.13 name them differently: whichever exists is patched)."""
    cfg = torch._dynamo.config
    patch: dict[str, Any] = {}
    for names, value in ((("recompile_limit", "cache_size_limit"), RECOMPILE_LIMIT),
                         (("accumulated_recompile_limit", "accumulated_cache_size_limit"), RECOMPILE_LIMIT),
                         (("fail_on_recompile_limit_hit",), True)):
        name = next((n for n in names if hasattr(cfg, n)), None)
        if name is not None:
            patch[name] = value
    with cfg.patch(**patch):
        yield


@contextlib.contextmanager
def _seen_code(codes: list[str]) -> Iterator[None]:
    """Inductor's generated wrapper code of what compiles in the block, appended to ``codes`` (its own
    ``run_and_get_code`` hook, without the ``torch._dynamo.reset()`` that would drop every other compiled
    shape); nothing where this torch has no such hook."""
    try:
        from torch._inductor.graph import GraphLowering
    except Exception:
        yield
        return
    if not hasattr(GraphLowering, "save_output_code"):
        yield
        return
    old = GraphLowering.save_output_code
    GraphLowering.save_output_code = staticmethod(codes.append)
    try:
        yield
    finally:
        GraphLowering.save_output_code = old


def chosen_kernel(codes: list[str]) -> str:
    """What Inductor's generated code runs for the matmul: a Triton GEMM template, cuBLAS (an extern mm),
    Triton pointwise/reduction kernels (the matmul decomposed), or "unknown" where no code was seen."""
    text = "\n".join(codes)
    if not text:
        return "unknown (no generated code seen)"
    found = [label for key, label in (("triton_tem_", "triton template"), ("extern_kernels.mm", "extern mm (aten: cuBLAS)"),
                                      ("extern_kernels.addmm", "extern addmm (aten: cuBLAS)"),
                                      ("extern_kernels.bmm", "extern bmm (aten: cuBLAS)"), ("triton_red_", "triton reduction"),
                                      ("triton_per_", "triton persistent reduction"), ("triton_poi_", "triton pointwise"))
             if key in text]
    return " + ".join(found) if found else "other"


@contextlib.contextmanager
def _no_caches(torch: Any, off: bool) -> Iterator[None]:
    """Inductor's caches (FX graphs, autotuning) off for the block where ``off`` and this torch has the switch."""
    try:
        cfg = importlib.import_module(f"{torch.__name__}._inductor.config") if off else None
    except Exception:   # (a torch without Inductor: nothing to switch off)
        cfg = None
    if cfg is None or not hasattr(cfg, "force_disable_caches"):
        yield
        return
    with cfg.patch(force_disable_caches=True):
        yield


def compile_linear(torch: Any, tag: str, args: tuple[Any, ...], mode: str | None = INDUCTOR_MODE,
                   backend: str = "inductor", fresh: bool = False) -> InductorCompile:
    """Compile F.linear for the shape of ``args`` (x, w) with its first call, outside any capture, and check
    that dynamo compiled a graph for it (the call did not run eagerly). Never raises: a failure is returned
    with its reason. ``fresh``: with Inductor's caches off (it autotunes again). ``backend``/``mode``: the tests'
    cheap stand-ins for Inductor on the CPU."""
    t0 = time.perf_counter()
    codes: list[str] = []
    try:
        from torch._dynamo.utils import counters

        kw: dict[str, Any] = {"mode": mode} if backend == "inductor" and mode else {}
        fn = torch.compile(fresh_linear(torch.nn.functional.linear, tag), backend=backend, dynamic=False,
                           fullgraph=True, **kw)
        before = counters["stats"]["unique_graphs"]
        with _dynamo_limits(torch), _seen_code(codes), _no_caches(torch, fresh and backend == "inductor"):
            fn(*args)
            if args[0].is_cuda:
                torch.cuda.synchronize()
        graphs = counters["stats"]["unique_graphs"] - before
    except Exception as e:
        return InductorCompile(None, time.perf_counter() - t0, error=f"compile failed: {one_line(e)}")
    dt = time.perf_counter() - t0
    if graphs < 1:
        return InductorCompile(None, dt, error="dynamo compiled no graph for the call (it ran eagerly): not Inductor")
    kernel = chosen_kernel(codes) if backend == "inductor" else f"backend {backend}"
    return InductorCompile(fn, dt, kernel, notes=[f"{graphs} graphs compiled"] if graphs > 1 else [])


def measure_inductor(h: Any, shape: Shape, cache: dict[Any, InductorCompile],
                     time_torch: Callable[..., tuple[list[float], int]], verify: bool = True,
                     compile: int = 0) -> Measurement:
    """Inductor's F.linear on ``shape``, verified like cuBLAS (FP16 output) and timed with ``time_torch`` (the
    torch F.linear baseline's harness: graph lengths, flush rule, the runner's copies) on runner ``h``.
    The compile comes from ``cache`` (made there on first use); ``compile`` > 0: another compile of the shape,
    with Inductor's caches off (see the module doc). Failures are a LAUNCH_ERROR measurement."""
    m = Measurement.of(INDUCTOR_NAME if not compile else f"{INDUCTOR_NAME} #{compile + 1}", INDUCTOR_KIND, shape,
                       Status.OK)
    m.bound = library_bound(shape)   # output in the input's dtype: one final rounding
    if shape.weights:
        m.status, m.error = Status.INVALID, (f"Inductor of {shape.weights} weights (dequantize + F.linear compiled) "
                                             "is not measured")
        return m
    try:
        import torch
    except Exception as e:
        m.status, m.error = Status.LAUNCH_ERROR, f"torch cannot be imported: {one_line(e)}"
        return m
    with h.gpu_lock.held(), h.on_stream():
        try:
            b = h.buffers(shape)
            Wt = [as_torch(torch, w, shape.dtype) for w in b.W]
            xt = [as_torch(torch, x, shape.dtype).view(shape.n, shape.d) for x in b.x]
            key: Any = shape if not compile else (shape, compile)
            c = cache.get(key)
            if c is None:
                c = cache[key] = compile_linear(torch, shape.key + (f"_{compile}" if compile else ""), (xt[0], Wt[0]),
                                                fresh=compile > 0)
            m.compile_s, m.params = c.compile_s, {"kernel": c.kernel}
            if c.fn is None:
                m.status, m.error = Status.LAUNCH_ERROR, c.error
                return m
            fn = c.fn
            if verify:
                def run(W: Any, x: Any, y: Any) -> Any:
                    return from_torch(torch, fn(as_torch(torch, x, shape.dtype).view(shape.n, shape.d),
                                                as_torch(torch, W, shape.dtype)))

                ok, m.relerr, m.rowerr, reason = h.verify(run, shape, m.bound)
                if not ok:
                    m.status, m.error = Status.WRONG, reason
                    return m
            t, k = time_torch(torch, shape, b, lambda i: fn(xt[i % b.copies], Wt[i % b.copies]))
        except Exception as e:
            m.status, m.error = Status.LAUNCH_ERROR, one_line(e)
            return m
        h.fill_times(m, t, shape, "graph", k, b)
        m.error = "; ".join(c.notes)
    return m
