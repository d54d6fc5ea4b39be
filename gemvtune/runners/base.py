"""The runner contract (``Runner``; ``CompilesAhead`` and ``DeviceRunner`` on top of it), its defaults
(``RunnerBase``) and the Measurement a runner returns."""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..build.compile import DEFAULT_ARCH
from ..kernels.families import DEFAULT_FAMILY
from ..kernels.shapes import Shape


class Status:
    OK = "ok"
    WRONG = "wrong"                  # ran, but the answer failed verification (value recorded)
    COMPILE_ERROR = "compile_error"
    LAUNCH_ERROR = "launch_error"    # could not launch (resources), or faulted
    INVALID = "invalid"              # the config is not valid for the shape (never compiled)
    TIMEOUT = "timeout"              # no answer within the watchdog's limit (a hang): process killed


@dataclass
class Measurement:
    """What one variant (or baseline) did on one shape."""

    name: str                         # config label, or the baseline's name
    kind: str                         # "variant" | "llama.cpp" | "cublas" | ...
    M: int
    d: int
    n: int
    status: str
    us_median: float = math.nan
    us_min: float = math.nan
    us_max: float = math.nan
    gbps: float = math.nan
    pct_ceiling: float = math.nan
    relerr: float = math.nan
    rowerr: float = math.nan
    bound: float = math.nan
    registers: int = -1
    spill_bytes: int = -1
    smem_bytes: int = -1
    compile_s: float = math.nan
    method: str = ""                  # "graph" | "spin" | ...
    launches: int = 0                 # launches per timed sample
    samples: int = 0                  # timed samples (graph replays)
    copies: int = 0                   # rotating weight copies
    launch_bound: bool = False        # W streams at the ceiling in less than an empty launch: timed, but the launch's time
    error: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    dtype: str = "fp16"               # of W and x (Shape.dtype)

    @classmethod
    def of(cls, name: str, kind: str, shape: Shape, status: str, **kw: Any) -> Measurement:
        """A measurement of ``shape`` (its M, d, n and dtype)."""
        return cls(name, kind, shape.M, shape.d, shape.n, status, dtype=shape.dtype, **kw)

    @property
    def ok(self) -> bool:
        return self.status == Status.OK

    @property
    def spread(self) -> float:
        return (self.us_max - self.us_min) / self.us_median if self.us_median > 0 else math.nan

    @property
    def shape(self) -> Shape:
        return Shape(self.M, self.d, self.n, self.dtype)

    def row(self) -> dict[str, Any]:
        r = {k: v for k, v in asdict(self).items() if k != "params"}
        r["spread"] = self.spread
        r.update({f"p_{k}": v for k, v in self.params.items()})
        return r


# ---- the runner contract ----------------------------------------------------------------------------
@runtime_checkable
class Runner(Protocol):
    """What every runner offers, and all the search, the table, the reports and the command line use of
    one (gemvtune.tuning.search, search_run, spacebound, study, sweep, bench). Implemented by CudaRunner (a GPU),
    ReplayRunner (recorded sweeps, on the CPU), IsolatedRunner (any runner in a child process, with a
    watchdog) and the tests' FakeRunner; :class:`RunnerBase` gives the members most runners leave at
    their default, so a caller never needs ``getattr(runner, name, default)``.

    ``precompile`` is not part of it: only a runner that can compile ahead of measuring has it
    (:class:`CompilesAhead`), and a search keeps several trials in flight only for such a runner."""

    replayed: bool       # answers come from recorded sweeps, not a GPU (kept apart from measured results)
    study_suffix: str    # appended to a search's study names ("-replay" for replayed searches)
    arch: str            # what variants are compiled for ("sm_90"; "replay" for a replayed sweep)
    compile_jobs: int    # trials a search keeps in flight when it can compile ahead (CompilesAhead)

    def device_info(self) -> dict[str, Any]:
        """The device: name, compute_capability, sm_count, l2_bytes, driver... (provenance, table keys)."""
        ...

    def ceiling(self) -> dict[str, Any]:
        """The read ceiling (read_gbps, ...) and launch floor (launch_floor_us, ...) of the device."""
        ...

    def measure(self, config: Any, shape: Shape, kind: str = "variant", *, verify: bool = True,
                timed: bool = True) -> Measurement:
        """Verify (``verify``) and time (``timed``) one config on one shape; never raises for a bad config."""
        ...

    def baselines(self, shape: Shape) -> list[Measurement]:
        """Library baselines (cuBLAS) of the shape, timed like the variants; [] where there are none."""
        ...

    def release(self) -> None:
        """Free what the last shape held (buffers, cached blocks); the runner stays usable."""
        ...

    def recorded(self, shape: Shape, family: str = DEFAULT_FAMILY) -> frozenset[str] | None:
        """The config labels this runner can answer for ``shape`` (a replayed sweep: what it recorded),
        or None when it can measure any config."""
        ...


@runtime_checkable
class CompilesAhead(Runner, Protocol):
    """A runner that can compile a config before measuring it (CudaRunner, IsolatedRunner): a search
    compiles up to ``compile_jobs`` trials while another one measures."""

    def precompile(self, config: Any, shape: Shape) -> None:
        """Compile (into the disk cache) what ``measure(config, shape)`` will run; errors are left to measure."""
        ...


@runtime_checkable
class DeviceRunner(CompilesAhead, Protocol):
    """A runner on a real device (CudaRunner): what the benchmarks (gemvtune.bench.kernels, decodestep and
    runners.cuda.decode), the sweep, ``gemvtune ceiling``/``compile-check``, scripts/ and the GPU tests
    use besides the Runner contract. Every method that enqueues GPU work does it on the runner's
    device and stream (``on_stream``) and leaves the caller's current device and stream as they were.

    (An ``isinstance`` check against this protocol reads every member: on Python < 3.12 that includes
    ``ceiling_gbps``, which measures the ceiling the first time. Check the class, as the tests do.)"""

    device_id: int
    stream: Any          # the runner's CuPy stream (blocking): all its work is ordered on it
    rng: Any             # the runner's CuPy random generator
    replays: int
    warmup: int
    target_us: float

    @property
    def l2_bytes(self) -> int: ...

    @property
    def sm_count(self) -> int: ...

    @property
    def ceiling_gbps(self) -> float: ...

    @ceiling_gbps.setter
    def ceiling_gbps(self, gbps: float) -> None: ...

    def on_stream(self) -> AbstractContextManager[None]:
        """The runner's device and stream current in this thread for a ``with`` block (the caller's back after)."""
        ...

    def ceiling(self, gib: float = 1.0, copies: int = 2) -> dict[str, Any]: ...

    def measure(self, config: Any, shape: Shape, kind: str = "variant", verify: bool = True, timed: bool = True,
                source: str | None = None, name: str | None = None, epilogue: Any = ...) -> Measurement: ...

    def measure_spin(self, config: Any, shape: Shape) -> Measurement: ...

    def measure_cublas(self, shape: Shape) -> Measurement: ...

    def measure_torch_linear(self, shape: Shape) -> Measurement | None: ...

    def launcher(self, config: Any, shape: Shape, epilogue: Any = ...) -> Callable[..., None]: ...

    def verify(self, launch: Callable[..., Any], shape: Shape, bound: float,
               epilogue: Any = ...) -> tuple[bool, float, float, str]: ...

    def reference(self, W: Any, x: Any) -> tuple[Any, Any]: ...

    def check(self, y: Any, ref: Any, scale: Any, bound: float) -> tuple[bool, float, float, str]: ...

    def buffers(self, shape: Shape) -> Any: ...

    def x_shape(self, shape: Shape) -> tuple[int, ...]: ...

    def y_shape(self, shape: Shape) -> tuple[int, ...]: ...

    def time_graph(self, launch: Callable[[int], None], n: int, flush: bool = False,
                   before: Callable[[Any], None] | None = None) -> list[float]:
        """µs per launch of n launches captured in a graph, per replay (each after an L2 flush with ``flush``,
        or after ``before(stream)``)."""
        ...

    def replay_times(self, g: Any, replays: int, per: int = 1, flush: bool = False,
                     before: Callable[[Any], None] | None = None) -> list[float]: ...

    def time_spin(self, op: Callable[[int], None], n: int, flush: bool = False) -> list[float]: ...

    def flush_l2(self, stream: Any) -> None:
        """Enqueue an L2 flush on ``stream`` (what ``flush=True`` runs before each timed sample)."""
        ...

    def read_stream(self, grid: tuple, block: tuple, args: tuple, **kwargs: Any) -> None:
        """The ceiling's streaming-read kernel (args: uint4 pointer, count of 16-byte words, uint32 sink)."""
        ...


class RunnerBase:
    """The contract's members that most runners leave at their default: a GPU runner measuring live, with
    no study suffix, compiling for the default arch one trial at a time, able to answer any config.
    Runners subclass it and override what differs (ReplayRunner: replayed, study_suffix, arch, recorded)."""

    replayed: bool = False
    study_suffix: str = ""
    arch: str = DEFAULT_ARCH
    compile_jobs: int = 1

    def recorded(self, shape: Shape, family: str = DEFAULT_FAMILY) -> frozenset[str] | None:
        return None


def contract_members(protocol: type = Runner) -> list[str]:
    """The members (methods, properties and declared attributes) ``protocol`` asks for, sorted."""
    names: set[str] = set()
    for klass in protocol.__mro__:
        if klass in (Protocol, object) or not getattr(klass, "_is_protocol", False):
            continue
        names.update(k for k in vars(klass) if not k.startswith("_"))
        names.update(k for k in getattr(klass, "__annotations__", {}) if not k.startswith("_"))
    return sorted(names)


def missing_members(cls: type, protocol: type = Runner) -> list[str]:
    """The members of ``protocol`` that class ``cls`` neither defines nor declares (an attribute set in
    ``__init__`` counts when the class annotates it): a structural check that needs no instance."""
    declared: set[str] = set()
    for klass in cls.__mro__:
        declared.update(vars(klass))
        declared.update(getattr(klass, "__annotations__", {}))
    return [m for m in contract_members(protocol) if m not in declared]
