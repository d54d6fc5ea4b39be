"""Runners measure configs on shapes: ``cuda`` (a real GPU, through ``gemvtune.device``), ``replay`` (recorded
sweeps), ``isolated`` (any runner in a child process, with a watchdog). What every runner offers is written down in
``base``: the ``Runner`` protocol and its defaults, ``RunnerBase``. Runners may use ``runtime`` (a table); runtime
never imports runners."""

from .base import CompilesAhead, DeviceRunner, Measurement, Runner, RunnerBase, Status

__all__ = ["CompilesAhead", "DeviceRunner", "Measurement", "Runner", "RunnerBase", "Status"]
