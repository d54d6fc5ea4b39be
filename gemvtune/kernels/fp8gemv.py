"""The FP8 GEMV family (W8A16): W stored as OCP E4M3 codes (one byte each, ``gemvtune.kernels.fp8``) with FP32 scales,
one per output row (``Shape.weights`` "e4m3-row") or one per 128x128 block ("e4m3-b128"); x and y FP16 or BF16,
FP32 accumulation. Each thread loads ``vec`` bytes (``vec`` codes) of its row, converts them in pairs with
``cvt.rn.f16x2.e4m3x2`` (sm_89 on) and multiplies them by x; each W load is used for all n columns. Its configs read
FP8 weights only (every other family reads FP16/BF16 weights only: ``ConfigBase.WEIGHTS``).

Kernel ABI: the shared one (``gemvtune.kernels.launchspec``) with W as ``const unsigned char*`` and one trailing
argument ``const float* __restrict__ scales`` (``LaunchSpec.scales``)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .arch import DEFAULT as DEFAULT_ARCH
from .arch import Arch
from .configbase import ConfigBase, parse_config_text, sample_of, valid_of
from .gemv import NAME as GEMV_NAME
from .gemv import VEC_ELEMS as GEMV_VEC_ELEMS
from .shapes import FP8_LAYOUTS, Shape

NAME = "fp8gemv"
TEMPLATE = "gemv_fp8.cu.j2"
MAIN_KERNEL = "gemv_fp8"
STUDY_SUFFIX = "-fp8"
BLOCK_COLS = 128   # the block128 layout's block edge (``gemvtune.kernels.fp8``)

DOMAINS: dict[str, tuple[Any, ...]] = {
    "block": (64, 128, 256, 512),                     # threads per block
    "tpr": (8, 16, 32, 64, 128, 256),                 # threads per row (rows per block = block/tpr)
    "vec": (4, 8, 16),                                # bytes (E4M3 codes) of W per load
    "unroll": (1, 2, 4, 8),                           # independent W loads in flight per thread
    "hint": ("default", "nc", "evict_first"),         # cache hint on W loads (as the GEMV family's)
}


@dataclass(frozen=True, order=True)
class Fp8GemvConfig(ConfigBase):
    """One point of the FP8 GEMV family (864 points)."""

    block: int = 128
    tpr: int = 32
    vec: int = 16
    unroll: int = 2
    hint: str = "default"

    family = NAME
    DOMAINS = DOMAINS
    WEIGHTS = tuple(FP8_LAYOUTS)
    NEEDS = ("fp8.e4m3",)
    NEEDS_BY_DTYPE = {"bf16": ("bf16",)}
    NEEDS_BY_VALUE = {("hint", "evict_first"): "l2.cache_hint"}

    @property
    def split(self) -> int:
        return 1   # (no split of d: one block column)

    @property
    def vec_elems(self) -> int:
        """The load width in 16-bit elements (what the shared W-load helpers and a launch's alignment read): vec/2."""
        return self.vec // 2

    @property
    def rows_per_block(self) -> int:
        return self.block // self.tpr

    def sixteen_bit(self) -> tuple[str, dict[str, Any]]:
        """The GEMV config of the same block, threads per row, bytes per load, unroll and hint (its x through
        ``ldg``, FP32 accumulation, no split of d, as this family's kernel has)."""
        vec = next(v for v, e in GEMV_VEC_ELEMS.items() if 2 * e == self.vec)
        return GEMV_NAME, {"block": self.block, "vec": vec, "acc": "fp32", "tpr": self.tpr, "unroll": self.unroll,
                           "split_k": 1, "hint": self.hint, "x_load": "ldg", "pdl": "off", "occ": "auto"}

    @property
    def loads_in_flight(self) -> int:
        return self.unroll

    def grid(self, shape: Shape) -> tuple[int, int, int]:
        rows = self.rows_per_block
        return ((shape.M + rows - 1) // rows, 1, 1)

    def kernels(self, shape: Shape) -> list[tuple[str, tuple[int, int, int], tuple[int, int, int]]]:
        return [(MAIN_KERNEL, self.grid(shape), (self.block, 1, 1))]

    def workspace(self, shape: Shape) -> tuple[int, int]:
        return 1, 1

    def needs_workspace(self, shape: Shape) -> bool:
        return False

    def shape_reasons(self, shape: Shape, arch: Arch = DEFAULT_ARCH) -> list[str]:
        d, vec, tpr = shape.d, self.vec, self.tpr
        if d % vec:
            return [f"d={d} is not divisible by the {vec}-byte W vector ({vec} E4M3 codes)"]
        if tpr > self.block:
            return [f"tpr={tpr} threads per row exceed the block of {self.block}"]
        nvec = d // vec
        if self.unroll > 1 and self.unroll * tpr > nvec:
            return [f"unroll={self.unroll} x tpr={tpr} needs {self.unroll * tpr} vectors, the row has {nvec}: "
                    "the unrolled loop would never run"]
        return []

    def complexity(self) -> tuple:
        return ((self.unroll > 1) + (self.hint != "default"), self.unroll, self != SEED)

    def render_values(self, shape: Shape, arch: Arch = DEFAULT_ARCH) -> dict[str, Any]:
        return {"vec_elems": self.vec_elems, "rows": self.rows_per_block, "layout": shape.fp8_layout,
                "block_cols": BLOCK_COLS}

    @property
    def label(self) -> str:
        return f"b{self.block}.t{self.tpr}.v{self.vec}.u{self.unroll}.{self.hint}"


CONFIG = Fp8GemvConfig
SEED, SEED_NAME = Fp8GemvConfig(), "fp8 default"
FALLBACKS: tuple[tuple[Fp8GemvConfig, str], ...] = (
    (SEED, "fp8 default fallback"),
    (Fp8GemvConfig(block=64, tpr=8, vec=4, unroll=1), "fp8 generic fallback"),
)
SWEEP_GRID: dict[str, tuple[Any, ...]] = dict(DOMAINS)
SWEEP_NOTE = "The whole FP8 GEMV space."


def all_configs() -> Iterator[Fp8GemvConfig]:
    for values in itertools.product(*DOMAINS.values()):
        yield Fp8GemvConfig(*values)


def valid_configs(shape: Shape, arch: Any = None) -> list[Fp8GemvConfig]:
    return valid_of(all_configs(), shape, arch)


PRESETS = {"default": SEED}


def sample_configs(shape: Shape, k: int, seed: int = 0) -> list[Fp8GemvConfig]:
    """The default config (if valid) then k-1 distinct valid configs (on sm_90) drawn uniformly, seeded."""
    return sample_of(valid_configs(shape), SEED, k, seed)


def parse_config(text: str) -> Fp8GemvConfig:
    """A preset name (``default``), a JSON object, or ``key=value,key=value`` over the default point."""
    return parse_config_text(text, PRESETS, SEED)
