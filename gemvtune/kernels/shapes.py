"""Shapes of a GEMV: y[n, M] = x[n, d] . W[M, d]^T, and their parsing."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import UsageError
from ..intparse import is_int_text

# The largest memory of any single GPU on sale (288 GB, e.g. B300 / MI355X): a weight matrix larger
# than this fits in no GPU, so such a shape is refused up front.
MAX_WEIGHT_BYTES = 288 * 10**9
MAX_BATCH = 16
DTYPES = ("fp16", "bf16")   # of W and x (two bytes per weight either way); y is FP32 or the same dtype
# the unit roundoff of each input dtype (half an ulp at 1): what one rounding to it may err by, relatively
UNIT_ROUNDOFF = {"fp16": 2.0**-11, "bf16": 2.0**-8}
# How W is stored: "" in the input dtype; "e4m3-row" / "e4m3-b128": OCP E4M3 codes (one byte each) with FP32 scales,
# one per output row or one per 128x128 block (``gemvtune.kernels.fp8``: its layouts "row" and "block128").
WEIGHTS = ("", "e4m3-row", "e4m3-b128")
FP8_LAYOUTS = {"e4m3-row": "row", "e4m3-b128": "block128"}
_INT32_MAX = 2**31 - 1
_SHAPE_RE = re.compile(r"^[ \t]*([0-9]{1,12})[ \t]*[xX][ \t]*([0-9]{1,12})[ \t]*$", re.ASCII)   # ASCII digits only


@dataclass(frozen=True, order=True)
class Shape:
    """W is [M, d] row-major, x is [n, d], both of ``dtype`` (``fp16`` or ``bf16``); y is [n, M] FP32 (or
    the input dtype, by the epilogue); n = 1 is plain decode."""

    M: int
    d: int
    n: int = 1
    dtype: str = "fp16"
    weights: str = ""   # "": W in ``dtype``; "e4m3-row" / "e4m3-b128": FP8 codes and FP32 scales (``WEIGHTS``)

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise UsageError(f"shape: dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if not isinstance(self.weights, str) or self.weights not in WEIGHTS:
            raise UsageError(f"shape: weights must be one of {', '.join(w for w in WEIGHTS if w)} "
                             f"(or none: W in the input dtype), got {self.weights!r}")
        for name in ("M", "d", "n"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise UsageError(f"shape: {name} must be an integer, got {v!r}")
            if v < 1:
                raise UsageError(f"shape: {name} must be >= 1, got {v}")
        if self.M > _INT32_MAX or self.d > _INT32_MAX:
            raise UsageError(f"shape {self.M}x{self.d}: M and d must each be below 2^31")
        if self.n > MAX_BATCH:
            raise UsageError(f"shape: batch n={self.n} is above the supported {MAX_BATCH}")
        if self.weight_bytes > MAX_WEIGHT_BYTES:
            raise UsageError(
                f"shape {self.M}x{self.d}: its {(self.weights or self.dtype).upper()} weight matrix is {self.weight_bytes / 1e9:.0f} GB, "
                f"more than any GPU holds ({MAX_WEIGHT_BYTES / 1e9:.0f} GB)"
            )

    @property
    def fp8_layout(self) -> str:
        """The ``gemvtune.kernels.fp8`` layout of FP8 weights ("row", "block128"), or "" for W in the input dtype."""
        return FP8_LAYOUTS.get(self.weights, "")

    @property
    def scale_bytes(self) -> int:
        """Bytes of the FP32 scales of FP8 weights (0 for W in the input dtype)."""
        if self.weights == "e4m3-row":
            return 4 * self.M
        if self.weights == "e4m3-b128":
            return 4 * (-(-self.M // 128)) * (-(-self.d // 128))
        return 0

    @property
    def weight_bytes(self) -> int:
        """Bytes of W: two per weight, or one per FP8 code plus its scales."""
        return self.M * self.d * 2 if not self.weights else self.M * self.d + self.scale_bytes

    @property
    def bytes_moved(self) -> int:
        """The fewest bytes a GEMV must move: W once (with its scales), x once (two bytes each), y once (FP32)."""
        return self.weight_bytes + self.n * self.d * 2 + self.n * self.M * 4

    def dtype_suffix(self, sep: str) -> str:
        """``sep`` + the dtype in names of keys, files and studies, or "" for FP16 (the names from before BF16)."""
        return "" if self.dtype == "fp16" else f"{sep}{self.dtype}"

    def weights_suffix(self, sep: str) -> str:
        """``sep`` + the weight format in names of keys, files and studies, after the dtype suffix ("" for W in the
        input dtype: the names from before FP8)."""
        return f"{sep}{self.weights}" if self.weights else ""

    @property
    def key(self) -> str:
        return f"{self.M}x{self.d}" + (f"@n{self.n}" if self.n != 1 else "") + self.dtype_suffix(".") + self.weights_suffix(".")

    def __str__(self) -> str:
        return self.key


def parse_shape(text: str, n: int = 1, dtype: str = "fp16", weights: str = "") -> Shape:
    """Parse ``"14336x4096"`` (M x d) into a Shape of ``dtype`` (and ``weights``); anything else raises UsageError."""
    if not isinstance(text, str):
        raise UsageError(f"shape must be a string like 14336x4096, got {text!r}")
    m = _SHAPE_RE.match(text)
    if not m:
        raise UsageError(f"malformed shape {text[:40]!r}: expected MxD with positive integers, e.g. 14336x4096")
    return Shape(int(m.group(1)), int(m.group(2)), n, dtype, weights)


def parse_batches(text: str) -> list[int]:
    """Parse ``"1,2,4"`` into a sorted list of distinct batch sizes n in 1..MAX_BATCH."""
    out: set[int] = set()
    for part in str(text).split(","):
        p = part.strip(" \t")
        if not is_int_text(p) or p.startswith(("+", "-")):
            raise UsageError(f"malformed batch list {str(text)[:40]!r}: expected positive integers like 1,2,4")
        v = int(p)
        if not 1 <= v <= MAX_BATCH:
            raise UsageError(f"batch n={v} is outside 1..{MAX_BATCH}")
        out.add(v)
    return sorted(out)


# The suite every speed claim is made on (MEASURING.md).
DECODE_SUITE: list[tuple[int, int]] = [
    (4096, 4096), (6144, 4096), (14336, 4096), (28672, 4096),
    (4096, 14336), (128256, 4096), (1024, 16384),
]
