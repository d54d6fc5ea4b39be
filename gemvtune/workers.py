"""Start worker processes on this host: one per GPU (pinned with CUDA_VISIBLE_DEVICES) or N on one GPU,
each running the same ``gemvtune search`` on the same storage, so they share the studies (global trial
budget, one confirmation; see gemvtune.coord). Their output is relayed line by line, prefixed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import click

from .errors import GemvtuneError


class WorkersFailed(GemvtuneError):
    exit_code = 1


def _relay(proc: subprocess.Popen, prefix: str) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        click.echo(f"{prefix} {line.rstrip()}")


def run_workers(args: list[str], devices: list[str], workers: int) -> None:
    """Run ``gemvtune <args>`` in ``workers`` processes (device i of ``devices`` for worker i, if given);
    wait for all; raise WorkersFailed naming the ones that failed. Ctrl-C stops them all."""
    procs: list[tuple[str, subprocess.Popen]] = []
    threads = []
    t0 = time.perf_counter()
    for i in range(workers):
        env = dict(os.environ, GEMVTUNE_WORKER_INDEX=str(i), PYTHONUNBUFFERED="1")
        tag = f"[worker {i}"
        if devices:
            env["CUDA_VISIBLE_DEVICES"] = devices[i]
            tag += f" gpu {devices[i]}"
        tag += "]"
        p = subprocess.Popen([sys.executable, "-m", "gemvtune", *args], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, bufsize=1)
        procs.append((tag, p))
        th = threading.Thread(target=_relay, args=(p, tag), daemon=True)
        th.start()
        threads.append(th)
    click.echo(f"started {workers} worker(s)" + (f" on GPUs {','.join(devices)}" if devices else " on this host"))
    try:
        while any(p.poll() is None for _, p in procs):   # poll all: a dead worker is reaped at once
            time.sleep(0.2)
    except KeyboardInterrupt:
        for _, p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        for _, p in procs:
            p.wait()
        raise
    for th in threads:
        th.join(5)
    bad = [f"{tag} exit {p.returncode}" for tag, p in procs if p.returncode != 0]
    click.echo(f"{workers} worker(s) finished in {time.perf_counter() - t0:.1f} s")
    if bad:
        raise WorkersFailed("worker(s) failed: " + "; ".join(bad))
