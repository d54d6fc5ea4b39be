"""A test hook, never part of gemvtune: the Python of a test's subprocess loads it at start-up when the
test puts tests/hooks on its PYTHONPATH (tests/slowreplay.py does). With GEMVTUNE_TESTS_REPLAY_DELAY
set to some seconds, every replayed measurement (ReplayRunner.measure of a valid config) takes that
long, standing in for GPU time, so that worker processes really overlap. It patches the replay
runner when gemvtune first imports it, and imports nothing itself."""

import importlib.abc
import os
import sys
import time

ENV = "GEMVTUNE_TESTS_REPLAY_DELAY"
TARGET = "gemvtune.runners.replay"


def _slow_down(runner_cls, seconds):
    measure = runner_cls.measure

    def slow_measure(self, config, shape, *args, **kw):
        m = measure(self, config, shape, *args, **kw)
        if m.status != "invalid":   # (an invalid config is refused before any measurement)
            time.sleep(seconds)
        return m

    runner_cls.measure = slow_measure


class _PatchOnImport(importlib.abc.MetaPathFinder):
    def __init__(self, seconds):
        self.seconds = seconds

    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        sys.meta_path.remove(self)   # once, and let the other finders find the module
        for finder in sys.meta_path:
            spec = finder.find_spec(name, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None:
                break
        else:
            return None
        exec_module, seconds = spec.loader.exec_module, self.seconds

        def exec_and_slow_down(module):
            exec_module(module)
            _slow_down(module.ReplayRunner, seconds)

        spec.loader.exec_module = exec_and_slow_down
        return spec


_seconds = float(os.environ.get(ENV) or 0)
if _seconds > 0:
    sys.meta_path.insert(0, _PatchOnImport(_seconds))
