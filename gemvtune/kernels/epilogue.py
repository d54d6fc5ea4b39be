"""What a call does with its sums before the final store: the output dtype, an optional bias, and the two fusions
a model's decode step needs around its linears (a residual add, SwiGLU).

The epilogue is not a tunable (it is what the caller asks for: ``nn.Linear`` returns FP16 and may have
a bias; ``table.gemv`` returns FP32), so it is not part of a config's search space; it is rendered
into every family's template and fused into the final store, so a swapped layer runs only its tuned
kernel(s). The default (FP32 out, no bias) is the kernel every measurement in the tables was made with.

The output is FP32 or the inputs' dtype (``Shape.dtype``: FP16 or BF16); ``shape_reasons`` refuses the rest
(an FP16 y of BF16 inputs, a BF16 y of FP16 ones). The bias, when there is one, is of the inputs' dtype.

Two fusions, rendered by the families that declare them (``config.EPILOGUE_FUSIONS``; the GEMV family):

- ``residual``: ``y = W·x + r``, ``r`` [n, M] of y's dtype added in FP32 (o_proj and down_proj followed by the
  residual add). ``r`` rides the kernel ABI's bias slot (so the ABI is unchanged), hence no bias beside it; y must
  not alias r.
- ``swiglu``: a grouped launch of two members of equal rows (gate, up: ``gemvtune.kernels.group``) writes
  ``silu(g)·u`` (each plus its bias, when there is one, in FP32) into the first member's y [n, M]: the input of the
  down projection, with no ``g``, ``u`` or elementwise kernel in between. Launch rows 2i and 2i+1 are gate row i and
  up row i (in one block: the family's reasons ask for an even number of rows per block).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import UsageError

OUT_DTYPES = ("fp32", "fp16", "bf16")
_CTYPES = {"fp32": "float", "fp16": "half", "bf16": "__nv_bfloat16"}
_LABELS = {"fp32": "", "fp16": ".o16", "bf16": ".obf16"}


@dataclass(frozen=True, order=True)
class Epilogue:
    """``out``: the dtype of y (``fp32``, ``fp16`` or ``bf16``: FP32 or the inputs' dtype); ``bias``: add a
    bias[M] of the inputs' dtype (in FP32) first."""

    out: str = "fp32"
    bias: bool = False
    residual: bool = False
    swiglu: bool = False

    def __post_init__(self) -> None:
        if self.out not in OUT_DTYPES:
            raise UsageError(f"epilogue out must be one of {', '.join(OUT_DTYPES)}, got {self.out!r}")
        for name in ("bias", "residual", "swiglu"):
            if not isinstance(getattr(self, name), bool):
                raise UsageError(f"epilogue {name} must be True or False, got {getattr(self, name)!r}")
        if self.residual and (self.bias or self.swiglu):
            raise UsageError("a residual epilogue has no bias and no SwiGLU (the residual rides the bias slot; "
                             "SwiGLU's output feeds another linear)")

    @property
    def fusions(self) -> tuple[str, ...]:
        """The fusions asked for (``residual``, ``swiglu``), in that order."""
        return tuple(f for f in ("residual", "swiglu") if getattr(self, f))

    @property
    def out_ctype(self) -> str:
        """The C type of y in the rendered kernels."""
        return _CTYPES[self.out]

    @property
    def out_bytes(self) -> int:
        return 4 if self.out == "fp32" else 2

    @property
    def label(self) -> str:
        """Suffix of a variant's name: empty for the default epilogue (FP32 out, no bias)."""
        return (_LABELS[self.out] + (".bias" if self.bias else "") + (".res" if self.residual else "")
                + (".swiglu" if self.swiglu else ""))

    @property
    def out_name(self) -> str:
        """The output dtype as the rendered sources' comments write it (FP32, FP16, BF16)."""
        return self.out.upper()

    @property
    def sixteen_bit(self) -> bool:
        """Whether y is a 16-bit type (FP16 or BF16): no FP32 atomics into it."""
        return self.out_bytes == 2

    def shape_reasons(self, shape: Any) -> list[str]:
        """Why this epilogue cannot serve ``shape`` (empty: it can): y is FP32 or the inputs' dtype."""
        dtype = getattr(shape, "dtype", "fp16")
        if self.out not in ("fp32", dtype):
            return [f"out={self.out} with {dtype} inputs: y is fp32 or the inputs' dtype ({dtype}), "
                    f"so ask for out=fp32 or out={dtype}"]
        return []

    def invalid_reasons(self, config: Any) -> list[str]:
        """Why ``config`` cannot fuse this epilogue (empty: it can): a fusion its family's template does not render
        (``config.EPILOGUE_FUSIONS``), then its family's rule (``config.epilogue_reasons``; e.g. a split-K GEMM
        combining with FP32 atomics has no 16-bit output). Whether it suits a shape's dtype is ``shape_reasons``;
        SwiGLU's group (two members of equal rows) is ``gemvtune.kernels.group.group_reasons``'s."""
        have = getattr(config, "EPILOGUE_FUSIONS", ())
        missing = [f for f in self.fusions if f not in have]
        if missing:
            return [f"the {getattr(config, 'family', '?')} family's template does not fuse {' or '.join(missing)}"]
        rule = getattr(config, "epilogue_reasons", None)
        return list(rule(self)) if rule is not None else []


def epilogues_for(dtype: str) -> tuple[Epilogue, ...]:
    """Every epilogue of inputs of ``dtype`` (``fp16`` or ``bf16``): FP32 or ``dtype`` out, without and with a bias."""
    if dtype not in OUT_DTYPES[1:]:
        raise UsageError(f"input dtype must be one of {', '.join(OUT_DTYPES[1:])}, got {dtype!r}")
    return tuple(Epilogue(o, b) for o in ("fp32", dtype) for b in (False, True))


DEFAULT = Epilogue()
# The epilogues of FP16 inputs (every shape before BF16, and the default dtype): FP32 or FP16 out, with or without bias.
EPILOGUES = epilogues_for("fp16")
# Every epilogue of every input dtype (the FP16 ones first).
ALL_EPILOGUES = tuple(dict.fromkeys(EPILOGUES + epilogues_for("bf16")))
