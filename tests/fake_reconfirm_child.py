"""The re-confirmation's process (``gemvtune.tuning.reconfirm_child``) on a fake runner, for the CPU tests:
``python tests/fake_reconfirm_child.py SETTINGS`` where SETTINGS is a JSON object: ``gpu`` (the device name),
``scale`` (every kernel's fake time times this), ``cublas`` (cuBLAS's µs), ``inductor`` (Inductor's µs per compile,
or absent: no Inductor), ``wrong`` (kernel labels that fail verification), ``die_after`` (entries measured before
the process dies without a word), ``hang_after`` (entries measured before the process hangs)."""

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fakes import FakeRunner  # noqa: E402

from gemvtune.runners.base import Measurement, Status  # noqa: E402
from gemvtune.tuning import reconfirm_child  # noqa: E402

SET = json.loads(sys.argv[1])


class Runner(FakeRunner):
    releases = 0

    def device_info(self):
        return {**super().device_info(), "name": SET.get("gpu", "NVIDIA H200"), "pci_bus_id": "0000:01:00.0"}

    def measure(self, config, shape, kind="variant", verify=True, timed=True, **kw):
        m = super().measure(config, shape, kind, verify, timed, **kw)
        if config.label in SET.get("wrong", ()):
            m.status, m.error = Status.WRONG, "planted: relative error 1 above the bound"
        m.us_median = m.us_min = m.us_max = m.us_median * SET.get("scale", 1.0)
        return m

    def baselines(self, shape):
        c = SET.get("cublas", 15.0)
        return [Measurement(n, k, shape.M, shape.d, shape.n, Status.OK, us_median=c, us_min=c, us_max=c)
                for n, k in (("cublas (fake)", "cublas"), ("cublas (torch, fake)", "cublas-torch"))]

    def release(self):
        Runner.releases += 1
        if Runner.releases >= SET.get("die_after", 10**9):
            os._exit(9)
        if Runner.releases >= SET.get("hang_after", 10**9):
            time.sleep(600)

    if "inductor" in SET:
        def measure_inductor(self, shape, verify=True, compile=0):
            us = SET["inductor"][compile]
            return Measurement("inductor (fake)", "inductor", shape.M, shape.d, shape.n, Status.OK, us_median=us,
                               us_min=us, us_max=us)


sys.exit(reconfirm_child.main(Runner))
