"""Re-confirmation in a fresh process: before a tuned win counts, the kernels an entry's route can run and the
cuBLAS baselines (and, asked, Inductor) are measured again, interleaved over rounds, in a Python process of its
own (``reconfirm_child``, started by ``gemvtune check --reconfirm`` and at the end of ``gemvtune search``), so
nothing of the search's process (its compiled modules, allocator, warmed clocks) is shared. Each entry's result
is written into the table as it comes (``Entry.reconfirmed``, through ``runtime.amend``: under the table's lock,
atomic), so a run killed half-way keeps what it measured. The route then requires the win in both measurements
(``runtime.verdict``).

The parent reads the table, sends the child a job (one JSON object on its stdin: the table's GPU, per entry its
key, ``updated`` stamp and kernels), and reads the child's stdout: one JSON object per line, ``{"say": text}``
(progress), ``{"device": ...}`` (first), ``{"entry": key, "updated": ..., "reconfirmed": {...}}`` (one per entry).
The child's error is one line on its stderr and its exit code (gemvtune's: 2 bad input, 3 no GPU), which the
parent raises as its own, after writing what came before."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..baselines import cublas_of
from ..errors import GemvtuneError, UsageError
from ..kernels.shapes import Shape
from ..runtime.keys import entry_key
from ..runtime.noise import MARGIN, Contest, spread
from ..runtime.table import load_table
from .confirm import _summary

COMPILES = 2          # Inductor compiles per shape (its pick moves between compiles: MEASURING.md)
RETAKES = 1           # an entry the noise rule cannot call (a win inside the noise) is measured once more
DEFAULT_ROUNDS = 5    # the search's confirmation rounds
CHILD = [sys.executable, "-m", "gemvtune.tuning.reconfirm_child"]


class ReconfirmError(GemvtuneError):
    """The re-confirmation's process failed: its one line, and its exit code as this command's."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


def kernels_of(entry: Any) -> list[Any]:
    """The configs the entry's route can run (the fastest kernel for an FP32 output and for an output in the
    input dtype: usually the winner alone), in that order."""
    from ..runtime.route import contest

    out: list[Any] = []
    for o in ("fp32", entry.shape.dtype):
        cfg = contest(entry, "torch", entry.shape, o).config
        if cfg is not None and cfg not in out:
            out.append(cfg)
    return out


def make_job(table: Any, shapes: Sequence[Shape], rounds: int, inductor: bool) -> dict[str, Any]:
    """What the child measures: every entry of ``shapes`` with a kernel to run (configs as the table holds them)."""
    entries = []
    for s in shapes:
        e = table.entry(s)
        cfgs = kernels_of(e) if e is not None else []
        if cfgs:
            shape = [s.M, s.d, s.n, s.dtype] + ([s.weights] if s.weights else [])   # (Shape(*shape) in the child)
            entries.append({"key": entry_key(s), "shape": shape, "updated": e.updated,
                            "kernels": [{"family": c.family, "config": c.to_dict()} for c in cfgs]})
    return {"gpu": table.gpu.get("name"), "rounds": rounds, "inductor": inductor, "entries": entries}


# ---- the child's measurement -------------------------------------------------------------------------
def _clean(d: dict[str, Any]) -> dict[str, Any]:
    """A summary as a table holds it: no NaN, no None (an absent field), errors one short line."""
    out = {k: v for k, v in d.items() if v is not None and not (isinstance(v, float) and not math.isfinite(v))}
    if isinstance(out.get("error"), str):
        out["error"] = " ".join(out["error"].split())[:300]
    return out


def measure_entry(runner: Any, shape: Shape, configs: Sequence[Any], rounds: int, inductor: bool,
                  say: Callable[[str], None] = lambda s: None) -> dict[str, Any]:
    """``configs`` and the runner's baselines (cuBLAS per framework; ``inductor``: Inductor, ``COMPILES`` compiles,
    the faster kept) measured interleaved for ``rounds`` rounds; each kernel verified in its first round and no
    longer measured once it failed; a cuBLASLt algorithm left out where this process cannot call the library
    (its entry then counts as not re-confirmed). The ``kernels``, ``baselines`` and ``rounds`` of a
    re-confirmation."""
    from ..kernels.families import is_library

    lt = getattr(runner, "lt_problem", None)
    why = lt() if callable(lt) and any(is_library(c) for c in configs) else None
    if why:   # a library this process cannot call is no measurement of its algorithm: the route says so
        say(f"{shape}: cuBLASLt's algorithm is left out: {why}"[:300])
        configs = [c for c in configs if not is_library(c)]
    kernels, baselines = _take(runner, shape, configs, rounds, inductor, say)
    takes = 1
    while takes <= RETAKES and (why := _undecided(kernels, baselines)):
        # one noisy round makes a spread of round medians several % (a fresh process's first rounds, a clock
        # change): the win is then neither shown nor refuted. A second take of the same rounds, the quieter of the
        # two kept (the noise rule still weighs its win against its own spreads)
        say(f"{shape}: {why}: measured again ({rounds} more rounds), the quieter take kept")
        again = _take(runner, shape, configs, rounds, inductor, say)
        takes += 1
        if _noise(*again) < _noise(kernels, baselines):
            kernels, baselines = again
    rec: dict[str, Any] = {"kernels": kernels, "baselines": baselines, "rounds": rounds}
    if takes > 1:
        rec["takes"] = takes
    return rec


def _take(runner: Any, shape: Shape, configs: Sequence[Any], rounds: int, inductor: bool,
          say: Callable[[str], None]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One take of ``measure_entry``: (the kernels' summaries, the baselines' by name)."""
    per: dict[Any, list[Any]] = {c: [] for c in configs}
    failed: dict[Any, Any] = {}
    base: dict[str, list[Any]] = {}
    ind: list[list[Any]] = [[] for _ in range(COMPILES if inductor else 0)]
    can_inductor = callable(getattr(runner, "measure_inductor", None))
    for r in range(rounds):
        for c in configs:
            if c in failed:
                continue
            m = runner.measure(c, shape, kind="reconfirm", verify=r == 0)
            (per[c] if m.ok else failed.setdefault(c, [])).append(m)
        for m in runner.baselines(shape):
            base.setdefault(m.kind, []).append(m)
        if can_inductor:
            for i, ms in enumerate(ind):
                ms.append(runner.measure_inductor(shape, verify=r == 0, compile=i))
        say(f"{shape}: round {r + 1} of {rounds}")
    kernels = []
    for c in configs:
        s = _summary(failed.get(c) or per[c])
        kernels.append(_clean({"family": c.family, "config": c.to_dict(), "label": c.label, **s}))
    baselines = {kind: _clean(_summary(ms)) for kind, ms in base.items()}
    if ind and can_inductor:
        baselines["inductor"] = _best_compile([_clean(_summary(ms)) for ms in ind])
    return kernels, baselines


def _pair(kernels: list[dict[str, Any]], baselines: dict[str, Any]) -> Any:
    """The route's contest in one take, read as the route reads a re-confirmation (``runtime.verdict``): its first
    kernel against cuBLAS, each with ``noise.spread``; None where either did not run."""
    from ..runtime.entry import Measured

    if not kernels:
        return None
    k = Measured.from_json(kernels[0], "reconfirmed.kernels[0]")
    b = cublas_of({name: Measured.from_json(v, f"reconfirmed.baselines.{name}") for name, v in baselines.items()},
                  "torch", ok=lambda r: r.ok_us is not None)
    if k.ok_us is None or b is None:
        return None
    return Contest(k.ok_us, b.ok_us, None, spread(k), spread(b))


def _noise(kernels: list[dict[str, Any]], baselines: dict[str, Any]) -> float:
    c = _pair(kernels, baselines)
    return math.inf if c is None else c.spreads


def _undecided(kernels: list[dict[str, Any]], baselines: dict[str, Any]) -> str:
    """Why a take cannot decide the route: the kernel won, but inside the spreads of its rounds (not the 1%
    margin alone); "" where it decides."""
    c = _pair(kernels, baselines)
    if c is None or c.win is None or c.win <= 0 or c.wins or c.spreads <= MARGIN:
        return ""
    return f"a {c.win:.1%} win inside the noise {c.noise:.1%} (spreads {c.tuned_spread:.1%} + {c.cublas_spread:.1%})"


def _best_compile(sums: list[dict[str, Any]]) -> dict[str, Any]:
    """The fastest correct compile's summary, named with every compile's median (a failure: the first one)."""
    ok = [s for s in sums if s.get("status") == "ok"]
    if not ok:
        return sums[0]
    best = min(ok, key=lambda s: s["us"])
    each = ", ".join(f"{s['us']:.2f}" if s.get("status") == "ok" else str(s.get("status")) for s in sums)
    return {**best, "name": f"{best.get('name', 'inductor')}; best of {len(sums)} compiles ({each} µs)"}


def run_job(job: dict[str, Any], runner: Any, emit: Callable[[dict[str, Any]], None]) -> None:
    """The child's work: every entry of ``job`` measured on ``runner`` and emitted with its date, process and
    GPU. A GPU other than the table's is one UsageError, before anything is measured."""
    import datetime as _dt

    from ..kernels.families import config_from_dict
    from ..runtime.table import gpu_identity

    dev = runner.device_info()
    if job.get("gpu") and dev.get("name") != job["gpu"]:
        raise UsageError(f"the table was made on {job['gpu']}, this is {dev.get('name')}: re-confirm it on its GPU")
    gpu = {**gpu_identity(dev), **{k: dev[k] for k in ("pci_bus_id", "device") if dev.get(k) is not None}}
    gpu = {k: v for k, v in gpu.items() if v is not None}
    emit({"device": gpu})
    for e in job["entries"]:
        shape = Shape(*e["shape"])
        cfgs = [config_from_dict({"family": k["family"], **k["config"]}) for k in e["kernels"]]
        rec = measure_entry(runner, shape, cfgs, int(job["rounds"]), bool(job.get("inductor")),
                            lambda s: emit({"say": s}))
        if not rec["kernels"]:
            emit({"say": f"{shape}: no kernel of it could be re-measured here: not written"})
            runner.release()
            continue
        rec.update(date=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), pid=os.getpid(),
                   host=socket.gethostname()[:200], gpu=gpu)
        emit({"entry": e["key"], "updated": e["updated"], "reconfirmed": rec})
        runner.release()


# ---- the parent ------------------------------------------------------------------------------------------
def _row(entry: Any) -> dict[str, Any]:
    """One line of the command's CSV: the entry's search and re-confirmation numbers and the routes they give."""
    from ..runtime.route import judge

    s = entry.shape
    v, c = judge(entry, "torch", s, s.dtype), judge(entry, "torch-compile", s, s.dtype)
    a = v.again
    return {"shape": str(s), "M": s.M, "d": s.d, "n": s.n, "dtype": s.dtype,
            "kernel": v.config.label if v.config is not None else "",
            "table_us": v.search.tuned_us, "table_cublas_us": v.search.cublas_us,
            "again_us": a.tuned_us if a else math.nan, "again_cublas_us": a.cublas_us if a else math.nan,
            "inductor_us": c.inductor_us if c.inductor_us is not None else math.nan,
            "route": v.kind, "compiled_route": c.kind, "lost_again": v.search.wins and not v.beats_cublas,
            "why": v.says(s.dtype), "compiled_why": c.says(s.dtype)}


def reconfirm(table_path: str | Path, shapes: Sequence[Shape], rounds: int = DEFAULT_ROUNDS, inductor: bool = False,
              echo: Callable[[str], None] = print, child: Sequence[str] | None = None,
              timeout_s: float | None = None) -> list[dict[str, Any]]:
    """Re-confirm the entries of ``shapes`` of the table at ``table_path`` in a fresh process (``child``: its
    command line; default ``python -m gemvtune.tuning.reconfirm_child``) and write each result into the table
    as it comes. Returns one row per entry written (``_row``). ``timeout_s`` (a tune's budget left): the process
    is stopped then; the entries written by then keep their re-confirmation, the rest have none (their routes rest
    on the search's measurements alone), and a line says so."""
    from ..runtime.table import check_updatable

    table_path = check_updatable(table_path)   # the table can be written (its folder, its lock): before any work
    table = load_table(table_path, costmodel=None)
    job = make_job(table, shapes, rounds, inductor)
    if not job["entries"]:
        echo("nothing to re-confirm: no entry of these shapes has a kernel to run")
        return []
    from ..runtime.amend import set_reconfirmed
    from .coordination.workers import PARENT_ENV

    proc = subprocess.Popen(list(child or CHILD), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, encoding="utf-8", errors="replace",
                            env={**os.environ, PARENT_ENV: str(os.getpid())})   # (it ends with this process)
    err: list[str] = []
    drain = threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True)   # type: ignore[arg-type]
    drain.start()
    rows, device = [], None
    stopped = threading.Event()

    def stop() -> None:
        stopped.set()
        proc.kill()

    timer = threading.Timer(max(0.0, timeout_s), stop) if timeout_s is not None else None
    if timer is not None:
        timer.daemon = True
        timer.start()
    try:
        try:
            proc.stdin.write(json.dumps(job) + "\n")   # type: ignore[union-attr]
            proc.stdin.close()                         # type: ignore[union-attr]
        except BrokenPipeError:
            pass   # (the child ended at once: its exit code and line say why)
        for line in proc.stdout:                       # type: ignore[union-attr]
            try:
                msg = json.loads(line)
            except ValueError:
                continue   # (anything else the child printed)
            if not isinstance(msg, dict):
                continue
            if "say" in msg:
                echo(f"  {msg['say']}"[:300])
            elif isinstance(msg.get("device"), dict):
                device = msg["device"]
                echo(f"re-confirming {len(job['entries'])} entries in a fresh process (pid {proc.pid}) on "
                     f"{device.get('name')} {device.get('pci_bus_id', '')}, {rounds} rounds"
                     + (", Inductor too" if inductor else ""))
            elif "entry" in msg and device is not None:
                got = msg.get("reconfirmed")
                e, why = set_reconfirmed(table_path, str(msg["entry"]), got if isinstance(got, dict) else {}, device,
                                         msg.get("updated"))
                if e is None:
                    echo(f"{msg['entry']}: not written: {why}")
                    continue
                rows.append(_row(e))
                r = rows[-1]
                echo(f"{r['shape']:>16s} {r['route']:8s} {r['why']}")
        rc = proc.wait()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        if timer is not None:
            timer.cancel()
    drain.join(0.5 if stopped.is_set() else 5)   # (stopped: its stderr is not read; the budget's end is now)
    if stopped.is_set() and rc != 0:   # (stopped by the time limit, not ended by itself just before it)
        echo(f"the re-confirmation stopped at the budget's end ({timeout_s:.0f} s): {len(rows)} of "
             f"{len(job['entries'])} entries re-confirmed; the rest run on the search's measurements alone")
        return rows
    if rc != 0:
        lines = [ln.strip() for ln in err if ln.strip()]
        last = next((ln for ln in reversed(lines) if ln.startswith("gemvtune: error: ")), lines[-1] if lines else "")
        why = last.removeprefix("gemvtune: error: ") or f"it ended with exit code {rc}"
        done = (f"after {len(rows)} of {len(job['entries'])} entries (those {len(rows)} are written)" if rows
                else "before any entry was written")
        raise ReconfirmError(f"the re-confirmation process failed {done}: {why}", rc if rc in (2, 3) else 1)
    return rows


def summary(rows: list[dict[str, Any]]) -> str:
    """One line: how many entries the re-confirmation kept tuned, and for compiled callers."""
    kept = sum(r["route"] == "tuned" for r in rows)
    comp = sum(r["compiled_route"] == "tuned" for r in rows)
    lost = [r["shape"] for r in rows if r["lost_again"]]
    return (f"{len(rows)} entries re-confirmed: {kept} run the tuned kernel ({comp} under torch.compile)"
            + (f"; the re-confirmation sent {len(lost)} to cuBLAS: {', '.join(lost)}" if lost else ""))


__all__ = ["COMPILES", "DEFAULT_ROUNDS", "ReconfirmError", "make_job", "measure_entry", "reconfirm",
           "run_job", "summary"]
