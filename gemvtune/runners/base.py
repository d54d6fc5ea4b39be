"""The runner interface and the Measurement it returns."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from ..shapes import Shape


class Status:
    OK = "ok"
    WRONG = "wrong"                  # ran, but the answer failed verification (value recorded)
    COMPILE_ERROR = "compile_error"
    LAUNCH_ERROR = "launch_error"    # could not launch (resources), or faulted
    INVALID = "invalid"              # the config is not valid for the shape (never compiled)
    TIMEOUT = "timeout"              # no answer within the watchdog's limit (a hang): process killed


@dataclass
class Measurement:
    """What one variant (or baseline) did on one shape."""

    name: str                         # config label, or the baseline's name
    kind: str                         # "variant" | "llama.cpp" | "cublas" | ...
    M: int
    d: int
    n: int
    status: str
    us_median: float = math.nan
    us_min: float = math.nan
    us_max: float = math.nan
    gbps: float = math.nan
    pct_ceiling: float = math.nan
    relerr: float = math.nan
    rowerr: float = math.nan
    bound: float = math.nan
    registers: int = -1
    spill_bytes: int = -1
    smem_bytes: int = -1
    compile_s: float = math.nan
    method: str = ""                  # "graph" | "spin" | ...
    launches: int = 0                 # launches per timed sample
    samples: int = 0                  # timed samples (graph replays)
    copies: int = 0                   # rotating weight copies
    launch_bound: bool = False        # W streams at the ceiling in less than an empty launch: timed, but the launch's time
    error: str = ""
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == Status.OK

    @property
    def spread(self) -> float:
        return (self.us_max - self.us_min) / self.us_median if self.us_median > 0 else math.nan

    @property
    def shape(self) -> Shape:
        return Shape(self.M, self.d, self.n)

    def row(self) -> dict[str, Any]:
        r = {k: v for k, v in asdict(self).items() if k != "params"}
        r["spread"] = self.spread
        r.update({f"p_{k}": v for k, v in self.params.items()})
        return r


class Runner(Protocol):
    """What the search, the table and the reports use; one implementation per backend."""

    def measure(self, config: Any, shape: Shape) -> Measurement: ...

    def device_info(self) -> dict[str, Any]: ...
