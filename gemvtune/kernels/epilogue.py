"""What a call does with its sums before the final store: the output dtype and an optional bias.

The epilogue is not a tunable (it is what the caller asks for: ``nn.Linear`` returns FP16 and may have
a bias; ``table.gemv`` returns FP32), so it is not part of a config's search space; it is rendered
into every family's template and fused into the final store, so a swapped layer runs only its tuned
kernel(s). The default (FP32 out, no bias) is the kernel every measurement in the tables was made with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import UsageError

OUT_DTYPES = ("fp32", "fp16")


@dataclass(frozen=True, order=True)
class Epilogue:
    """``out``: the dtype of y (``fp32`` or ``fp16``); ``bias``: add a FP16 bias[M] (in FP32) first."""

    out: str = "fp32"
    bias: bool = False

    def __post_init__(self) -> None:
        if self.out not in OUT_DTYPES:
            raise UsageError(f"epilogue out must be one of {', '.join(OUT_DTYPES)}, got {self.out!r}")
        if not isinstance(self.bias, bool):
            raise UsageError(f"epilogue bias must be True or False, got {self.bias!r}")

    @property
    def out_ctype(self) -> str:
        """The C type of y in the rendered kernels."""
        return "float" if self.out == "fp32" else "half"

    @property
    def out_bytes(self) -> int:
        return 4 if self.out == "fp32" else 2

    @property
    def label(self) -> str:
        """Suffix of a variant's name: empty for the default epilogue (FP32 out, no bias)."""
        return ("" if self.out == "fp32" else ".o16") + (".bias" if self.bias else "")

    def invalid_reasons(self, config: Any) -> list[str]:
        """Why ``config`` cannot fuse this epilogue (empty: it can): its family's rule
        (``config.epilogue_reasons``; e.g. a split-K GEMM combining with FP32 atomics has no FP16 output)."""
        rule = getattr(config, "epilogue_reasons", None)
        return list(rule(self)) if rule is not None else []


DEFAULT = Epilogue()
EPILOGUES = tuple(Epilogue(o, b) for o in OUT_DTYPES for b in (False, True))
