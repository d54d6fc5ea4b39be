"""A table's kernels run only where they were tuned: on the GPU model the table records, and only the configs that
GPU's architecture can run (``gemvtune.kernels.arch``). ``GpuRule`` is a table's half of that rule.

- The first call on a device (``Table.check_device``: its name, and its compute capability where the caller has it)
  decides. A device of another model than the table's makes the table *foreign*: from then on every route is the
  table's fallback, cuBLAS (``F.linear`` for torch callers, ``cupy.matmul`` for CuPy), as for a shape the table
  lacks, with one warning saying so (``strict_gpu=True``: one UsageError instead). A table's timings are the tuned
  GPU's; another model's best kernel is another one, and its architecture may lack what the tuned kernels use. The
  rule is per table, not per device: a host with two GPU models runs cuBLAS for both once one of them was seen.
- On its own GPU, a route whose config that architecture cannot run (the device's arch, else the one the table
  records) falls back as a route does for a config that cannot give the wanted output: cuBLAS, or with the policy
  ``tuned`` the first family fallback that can run there (the llama.cpp config).

Loading another GPU's table by its path (``load_table(path)``) still reads it whole: lookups, reports, ``explain``
and ``export`` are unchanged; only dispatch is refused.
"""

from __future__ import annotations

import warnings
from typing import Any

from ..errors import UsageError
from ..kernels.arch import DEFAULT, Arch, capability_arch, for_device


class GpuRule:
    """Which device a table's kernels may run on, and the routes that follow (``guard``)."""

    def __init__(self, gpu: dict[str, Any], path: str | None = None, strict: bool = False):
        self.made = gpu.get("name")
        self.recorded = capability_arch(gpu.get("compute_capability"))
        self.path, self.strict = path, strict
        self.foreign = ""                    # why no kernel runs here ("" until a device the rule refuses is seen)
        self.device_arch: Arch | None = None
        self._seen: dict[str, bool] = {}

    @property
    def arch(self) -> Arch:
        """The architecture the table's routes are checked for: the device's, else the one the table records, else
        sm_90 (tables made before compute capabilities were recorded are the H200's)."""
        return self.device_arch or self.recorded or DEFAULT

    def check(self, name: str, capability: tuple[int, int] | None = None) -> bool:
        """Whether the table's kernels may run on the device ``name`` (of compute ``capability``); decided once per
        device name. Another model: warns once (``strict``: UsageError) and makes the table foreign."""
        ok = self._seen.get(name)
        if ok is not None:
            return ok
        ok = True
        if self.made and self.made != name:
            msg = (f"table {self.path or ''} was tuned on {self.made}, this is {name}: its kernels never run on another "
                   "GPU; every call runs cuBLAS (F.linear, cupy.matmul)")
            if self.strict:
                raise UsageError(msg)
            warnings.warn("gemvtune: " + msg, stacklevel=4)
            self.foreign, ok = f"the table was tuned on {self.made}, this is {name}: its kernels never run here", False
        elif capability is not None:
            try:
                self.device_arch = for_device(*capability)
            except UsageError as e:
                self.foreign, ok = str(e), False
        self._seen[name] = ok
        return ok

    def guard(self, route: Any, shape: Any, policy: str) -> Any:
        """``route`` (``gemvtune.runtime.route.Route``, of a table that is not foreign) as this device may run it: a
        tuned config the architecture cannot run replaced by the fallback (module docstring)."""
        from .route import Route

        if not route.tuned:
            return route
        why = route.config.arch_reasons(shape, self.arch)
        if not why:
            return route
        cannot = f"{route.config.label} cannot run on {self.arch} ({why[0]})"
        if policy == "tuned":
            from ..kernels.families import FAMILIES

            for fam in FAMILIES.values():
                for cfg, what in fam.fallbacks:
                    if cfg.is_valid(shape, self.arch):
                        return Route("tuned", cfg, f"{cannot}: the {what} {cfg.label}")
        return Route("cublas", None, cannot)
