"""The CUDA runner's cuBLASLt part: the heuristic's algorithms for a shape on the runner's device, and one
plan per algorithm (``gemvtune.device.ltplan.LtPlan``: descriptors, the checked algorithm, its workspace),
kept until the runner releases its shape. A measurement of an algorithm the library refuses records the
refusal (``launch_error`` and the library's reason) and goes on; nothing here raises out of a search."""

from __future__ import annotations

from typing import Any

from ...device.ltplan import LtPlan, bindings, handle, top_algorithms
from ...errors import GemvtuneError
from ...kernels.cublaslt import HEURISTIC_TOP, CublasLtConfig
from ...kernels.epilogue import DEFAULT, Epilogue
from ...kernels.shapes import Shape
from ..base import Measurement, Status


class LtPart:
    """cuBLASLt on one device (the runner's): its availability, its heuristic and its plans."""

    def __init__(self, device: int):
        self.device = device
        self._plans: dict[tuple[CublasLtConfig, Shape, Epilogue], LtPlan] = {}

    def problem(self) -> str | None:
        """Why cuBLASLt cannot be used on the device (one line), or None."""
        try:
            bindings()
            handle(self.device)
        except GemvtuneError as e:
            return str(e)
        return None

    def heuristics(self, shape: Shape, top: int = HEURISTIC_TOP) -> list[tuple[CublasLtConfig, int]]:
        """Up to ``top`` algorithms of the heuristic for ``shape`` with the default epilogue (what a search
        measures), best first, with their workspace bytes; LtRefused (the library's reason) when it gives none."""
        return top_algorithms(shape, DEFAULT, self.device, top)

    def get(self, config: CublasLtConfig, shape: Shape, epilogue: Epilogue = DEFAULT) -> LtPlan:
        """The algorithm's plan for ``shape`` and ``epilogue`` (built once); LtRefused when the library refuses it."""
        key = (config, shape, epilogue)
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = LtPlan(config, shape, epilogue, self.device)
        return plan

    def plan(self, m: Measurement, config: CublasLtConfig, shape: Shape, epilogue: Epilogue = DEFAULT) -> Any:
        """The plan, or None with the refusal written into ``m`` (status launch_error, the library's reason)."""
        try:
            return self.get(config, shape, epilogue)
        except GemvtuneError as e:   # LtRefused, LibraryUnavailable
            m.status, m.error = Status.LAUNCH_ERROR, str(e)
            return None
        except Exception as e:   # a driver call of the plan (the workspace) failed
            m.status, m.error = Status.LAUNCH_ERROR, f"cuBLASLt plan: {(str(e).splitlines() or [type(e).__name__])[0]}"
            return None

    def release(self) -> None:
        """Close every plan (their workspaces and descriptors)."""
        plans, self._plans = list(self._plans.values()), {}
        for p in plans:
            p.close()
