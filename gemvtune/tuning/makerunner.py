"""The runner a search measures with: the replay runner on recorded sweeps, else the CUDA runner (in a watched child
process with a watchdog). What ``gemvtune search``, ``worker``, ``tune`` and ``gemvtune.tune`` start."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ..errors import NoDeviceError
from ..kernels.shapes import Shape
from ..workspace import Workspace


def make_runner(shapes: Sequence[Shape], replay_path: str | None, watchdog_s: float | None = None
                ) -> tuple[Any, Any, str | None]:
    """(runner, family -> the domains to search or None, the default results folder or None): the replay runner on
    recorded sweeps (its results go to ``results/<gpu>/replay``), else the CUDA runner (NoDeviceError, one line,
    where no device answers), in a watched child process with ``watchdog_s``."""
    if replay_path:
        from ..runners.replay import ReplayRunner

        runner = ReplayRunner(replay_path)
        for s in shapes:
            runner.sweep(s)  # a shape with no recorded sweep fails before anything is written
        grids = {json.dumps([runner.sweep(s).family, runner.sweep(s).grid], sort_keys=True) for s in shapes}
        grid = runner.sweep(shapes[0]).grid if len(grids) == 1 else None
        domains = {runner.sweep(shapes[0]).family: grid} if grid else None   # the family the sweeps recorded
        return runner, domains, str(Workspace.for_gpu(runner.device_info().get("name", "gpu")).replay)
    from ..runners.cuda import CudaRunner, cuda_available

    why = cuda_available()
    if why:
        raise NoDeviceError(why)
    if watchdog_s:
        from ..runners.isolated import IsolatedRunner

        return IsolatedRunner(CudaRunner, timeout_s=watchdog_s), None, None
    return CudaRunner(), None, None
