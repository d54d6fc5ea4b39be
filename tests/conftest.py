import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _cuda_device_reason() -> str | None:
    """None if a CUDA device answers, else why not (shown in the skip line): gemvtune's own one-line
    diagnosis (no CuPy, no driver, a driver too old for the CUDA build, no device). Imported only when
    a collected test is marked gpu (it imports cupy)."""
    try:
        from gemvtune.device._cupy import cuda_available
    except Exception as e:  # pragma: no cover - the CUDA runner package itself does not import
        return f"gemvtune.runners.cuda cannot be imported: {(str(e) or type(e).__name__).splitlines()[0][:200]}"
    return cuda_available()


_GPU_REASON: list = []

SLOW_REASON = "marked slow: runs with --runslow, -m slow or CI=true (CI runs every test)"


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False,
                     help="also run the tests marked slow (skipped by default, except where CI=true)")
    parser.addoption("--shard", default=None, metavar="I/K",
                     help="run the I-th of K parts of the selected tests, whole files balanced by their recorded GPU "
                          "seconds (tests/shard.py; scripts/gpu-check.sh suite runs the K parts at once)")


def pytest_configure(config):
    spec = config.getoption("--shard")
    if spec:
        from shard import ShardPlugin

        try:
            plugin = ShardPlugin(spec)
        except ValueError as e:
            raise pytest.UsageError(str(e)) from None
        config.pluginmanager.register(plugin, "gemvtune-shard")


def run_slow(runslow: bool, markexpr: str = "", environ=None) -> bool:
    """Whether the tests marked slow run: asked for (--runslow, or a -m expression that names slow), or
    on CI (CI=true, which CI services set; .ci/run runs there), so CI still runs every test."""
    ci = (os.environ if environ is None else environ).get("CI", "").strip().lower()
    return bool(runslow) or "slow" in (markexpr or "") or ci in ("true", "1", "yes")


def pytest_collection_modifyitems(config, items):
    if config is not None and not run_slow(config.getoption("--runslow"), config.getoption("markexpr", "")):
        skip_slow = pytest.mark.skip(reason=SLOW_REASON)
        for it in items:
            if "slow" in it.keywords:
                it.add_marker(skip_slow)
    if not any("gpu" in it.keywords for it in items):
        return
    if not _GPU_REASON:
        _GPU_REASON.append(_cuda_device_reason())
    reason = _GPU_REASON[0]
    if reason:
        skip = pytest.mark.skip(reason=reason)
        for it in items:
            if "gpu" in it.keywords:
                it.add_marker(skip)


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    # One compile cache per test session, never the user's; GEMVTUNE_TEST_CACHE_DIR: one a run's sessions share
    # (gpu-check.sh suite: its shards, a fresh folder of that run; the cache writes each file whole)
    shared = os.environ.get("GEMVTUNE_TEST_CACHE_DIR", "").strip()
    monkeypatch.setenv("GEMVTUNE_CACHE_DIR", shared or str(tmp_path_factory.getbasetemp() / "cache"))


def flock_free(path) -> bool:
    """Whether the flock on ``path`` can be taken right now (and it is released again at once)."""
    import fcntl

    with open(path) as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(f, fcntl.LOCK_UN)
        return True


COMMITTED_GPU = "NVIDIA H200"   # the GPU model of results/nvidia-h200/table.json


def on_committed_gpu() -> bool:
    """Whether the CUDA device is the committed table's GPU model. Elsewhere that table never launches a kernel
    (gemvtune.runtime.tablegpu: every route is cuBLAS), so a GPU test of its tuned routes checks that refusal
    instead, or skips with the reason."""
    from gemvtune.runtime.tables import current_gpu_name

    return current_gpu_name() == COMMITTED_GPU


def committed_gpu_or_skip() -> None:
    from gemvtune.runtime.tables import current_gpu_name

    name = current_gpu_name()
    if name != COMMITTED_GPU:
        pytest.skip(f"the committed table is the {COMMITTED_GPU}'s: on {name} it runs no kernel (its refusal is "
                    f"checked by the tests of the committed table on any GPU)")


def run_cli(*args: str, cwd: Path = ROOT, env: dict | None = None) -> subprocess.CompletedProcess:
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "gemvtune", *args], cwd=cwd, env=e,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="session")
def runner():
    """One CUDA runner for the session's verification tests (3 replays: they verify, and time only to show a
    variant runs): its aux kernels, read ceiling and launch plans are made once. A module that needs other
    timing settings defines its own ``runner``."""
    from gemvtune.runners.cuda import CudaRunner

    return CudaRunner(replays=3)
