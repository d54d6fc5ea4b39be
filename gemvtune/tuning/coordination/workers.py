"""Start worker processes on this host: one per GPU (pinned with CUDA_VISIBLE_DEVICES) or N on one GPU,
each running the same ``gemvtune search`` on the same storage, so they share the studies (global trial
budget, one confirmation; see gemvtune.tuning.coordination.coord). Their output is relayed line by line, prefixed.

Workers end with their parent, however it ends: SIGTERM or Ctrl-C to the parent is passed on to them,
and a parent killed outright (SIGKILL) takes them along, through the kernel's parent-death signal on
Linux (prctl PR_SET_PDEATHSIG) and a watchdog thread polling the parent's pid elsewhere. The trials a
dead worker held stay RUNNING in the storage until the next worker or run fails and retries them
(gemvtune.tuning.coordination.coord: their process is gone)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import click

from ...errors import GemvtuneError


class WorkersFailed(GemvtuneError):
    exit_code = 1


PARENT_ENV = "GEMVTUNE_PARENT_PID"   # set by run_workers in each worker: the pid it must not outlive
WATCH_S = 0.5                       # the watchdog's poll
GRACE_S = 3.0                       # after SIGTERM, SIGKILL (a worker that handles SIGTERM and hangs)


def die_with_parent() -> None:
    """In a worker started by run_workers: end when the parent ends (see the module doc). No-op in any
    other process. Removes the variable, so the worker's own children do not take it for theirs."""
    raw = os.environ.pop(PARENT_ENV, "")
    if not raw.isdigit():
        return
    parent = int(raw)
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            PR_SET_PDEATHSIG = 1
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        except (OSError, AttributeError):
            pass   # the watchdog still watches
    if os.getppid() != parent:   # the parent died before the signal was armed
        _end()
    threading.Thread(target=_watch, args=(parent,), name="gemvtune-parent-watch", daemon=True).start()


def _watch(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(WATCH_S)
    _end()


def _end() -> None:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(GRACE_S)
    os.kill(os.getpid(), signal.SIGKILL)


def _stop(procs: list[tuple[str, subprocess.Popen]], sig: int, wait_s: float) -> None:
    """Send ``sig`` to the workers still running; SIGKILL those still running after ``wait_s``."""
    for _, p in procs:
        if p.poll() is None:
            p.send_signal(sig)
    deadline = time.monotonic() + wait_s
    for _, p in procs:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


class _Terminated(KeyboardInterrupt):
    """SIGTERM to the parent: stop the workers like Ctrl-C would."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise _Terminated()


def _relay(proc: subprocess.Popen, prefix: str) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        click.echo(f"{prefix} {line.rstrip()}")


def run_workers(args: list[str], devices: list[str], workers: int) -> None:
    """Run ``gemvtune <args>`` in ``workers`` processes (device i of ``devices`` for worker i, if given);
    wait for all; raise WorkersFailed naming the ones that failed. Ctrl-C or SIGTERM stops them all.
    Call from the main thread (the workers' parent-death signal follows the thread that started them)."""
    procs: list[tuple[str, subprocess.Popen]] = []
    threads = []
    t0 = time.perf_counter()
    old_term = signal.signal(signal.SIGTERM, _on_sigterm)   # (the main thread: the workers' pdeath parent)
    try:
        for i in range(workers):
            env = dict(os.environ, PYTHONUNBUFFERED="1", **{PARENT_ENV: str(os.getpid())})
            tag = f"[worker {i}"
            if devices:
                env["CUDA_VISIBLE_DEVICES"] = devices[i]
                tag += f" gpu {devices[i]}"
            tag += "]"
            p = subprocess.Popen([sys.executable, "-m", "gemvtune", *args, "--worker-index", str(i)], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
            procs.append((tag, p))
            th = threading.Thread(target=_relay, args=(p, tag), daemon=True)
            th.start()
            threads.append(th)
        click.echo(f"started {workers} worker(s)" + (f" on GPUs {','.join(devices)}" if devices else " on this host"))
        while any(p.poll() is None for _, p in procs):   # poll all: a dead worker is reaped at once
            time.sleep(0.2)
    except KeyboardInterrupt as e:   # Ctrl-C, or SIGTERM (_Terminated): passed on to the workers
        term = isinstance(e, _Terminated)
        _stop(procs, signal.SIGTERM if term else signal.SIGINT, 10.0 if term else 60.0)
        for th in threads:   # their last lines, before the parent's own
            th.join(5)
        raise
    finally:
        signal.signal(signal.SIGTERM, old_term)
    for th in threads:
        th.join(5)
    bad = [f"{tag} exit {p.returncode}" for tag, p in procs if p.returncode != 0]
    click.echo(f"{workers} worker(s) finished in {time.perf_counter() - t0:.1f} s")
    if bad:
        raise WorkersFailed("worker(s) failed: " + "; ".join(bad))
