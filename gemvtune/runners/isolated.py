"""A watchdog around any runner: the runner lives in a child process and every call must answer
within a time limit. A call that does not (a kernel that hangs, a driver that wedges) is answered
with a ``timeout`` measurement, the child is killed (which tears its CUDA context down) and a fresh
one is started for the next call. The search never stalls on one variant."""

from __future__ import annotations

import multiprocessing as mp
import time
from collections.abc import Callable
from typing import Any

from ..build.compile import precompile_variant
from ..kernels.shapes import Shape
from .base import Measurement, RunnerBase, Status


def _serve(factory: Callable[[], Any], conn: Any) -> None:
    """Child: build the runner, then answer (method, args, kwargs) requests until told to stop."""
    try:
        runner = factory()
    except BaseException as e:  # the parent re-raises it: e.g. NoDeviceError
        conn.send(("error", e))
        return
    conn.send(("ready", None))
    while True:
        try:
            req = conn.recv()
        except EOFError:
            return
        if req is None:
            return
        name, args, kwargs = req
        try:
            if name == "__attr__":  # a plain attribute (a member of the runner contract)
                conn.send(("ok", getattr(runner, args[0])))
                continue
            conn.send(("ok", getattr(runner, name)(*args, **kwargs)))
        except BaseException as e:
            conn.send(("error", e))


class IsolatedRunner(RunnerBase):
    """The runner contract (``gemvtune.runners.base.Runner``, and ``CompilesAhead``) of the runner it wraps:
    device_info, arch and compile_jobs read once from the child; measure, baselines, ceiling and release
    answered by it, each call bounded by ``timeout_s`` (``start_s`` for the child's start); precompile
    here. Never replayed, no study suffix, any config (RunnerBase's defaults)."""

    def __init__(self, factory: Callable[[], Any], timeout_s: float = 60.0, start_s: float = 300.0):
        self.factory, self.timeout_s, self.start_s = factory, float(timeout_s), float(start_s)
        self._ctx = mp.get_context("spawn")   # a fresh interpreter: no CUDA state inherited
        self._proc: Any = None
        self._conn: Any = None
        self.restarts = 0
        self._info: dict[str, Any] | None = None
        self._start()
        self._info = self._call("device_info", (), {}, self.timeout_s)
        self.compile_jobs = int(self._call("__attr__", ("compile_jobs",), {}, self.timeout_s))
        self.arch = str(self._call("__attr__", ("arch",), {}, self.timeout_s))

    # ---- child management --------------------------------------------------------------------
    def _start(self) -> None:
        parent, child = self._ctx.Pipe()
        self._proc = self._ctx.Process(target=_serve, args=(self.factory, child), daemon=True)
        self._proc.start()
        child.close()
        self._conn = parent
        if not parent.poll(self.start_s):
            self._kill()
            raise TimeoutError(f"the runner process did not start within {self.start_s:.0f} s")
        kind, val = parent.recv()
        if kind == "error":
            self._kill()
            raise val

    def _kill(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            self._proc.kill()
            self._proc.join(10)
        self._proc = None
        if self._conn is not None:
            self._conn.close()
        self._conn = None

    def _call(self, name: str, args: tuple, kwargs: dict, timeout: float) -> Any:
        if self._proc is None:
            self._start()
            self.restarts += 1
        self._conn.send((name, args, kwargs))
        if not self._conn.poll(timeout):
            self._kill()
            raise TimeoutError(f"{name} gave no answer within {timeout:g} s: runner process killed")
        try:
            kind, val = self._conn.recv()
        except EOFError:
            self._kill()
            raise RuntimeError(f"the runner process died during {name}") from None
        if kind == "error":
            raise val
        return val

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.send(None)
            except OSError:
                pass
        if self._proc is not None:
            self._proc.join(5)
        self._kill()

    # ---- the runner interface ----------------------------------------------------------------
    def device_info(self) -> dict[str, Any]:
        return dict(self._info or {})

    def measure(self, config: Any, shape: Shape, kind: str = "variant", **kwargs: Any) -> Measurement:
        t0 = time.perf_counter()
        try:
            return self._call("measure", (config, shape), {"kind": kind, **kwargs}, self.timeout_s)
        except (TimeoutError, RuntimeError) as e:
            m = Measurement.of(config.label, kind, shape, Status.TIMEOUT)
            m.error = f"{e} (after {time.perf_counter() - t0:.1f} s; a hang?)"
            return m

    def baselines(self, shape: Shape) -> list[Measurement]:
        return self._call("baselines", (shape,), {}, self.timeout_s)

    def ceiling(self) -> dict[str, Any]:
        return self._call("ceiling", (), {}, self.timeout_s)

    def release(self) -> None:
        self._call("release", (), {}, self.timeout_s)

    def precompile(self, config: Any, shape: Shape) -> None:
        """Compiles need no GPU: in this process, into the disk cache the child reads."""
        precompile_variant(config, shape, self.arch)
