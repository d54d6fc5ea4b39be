"""The FP8 mma family: Y[n, M] = X[n, d] . (codes x scales)^T on tensor cores for FP8 weights (``Shape.weights``:
E4M3 codes, one byte each, with FP32 scales per output row or per 128x128 block) and FP16/BF16 x, FP32 accumulation:
the mma GEMV family's tiling (``gemvtune.kernels.mma``: warps along rows sharing X fragments through L1, a register
ring of W loads per warp, a split of d combined by the last block) with W read as codes and widened in registers.

Why a tensor-core family for FP8: a CUDA-core GEMV does n FMAs per weight, and at n = 8..16 that work, not the
halved bytes, bounds it (the H200: 14336x4096 at n = 16 is ~940 M FMAs, ~28 µs at the FP32 peak, against ~14 µs to
read its 59 MB of codes). mma.sync m16n8k16 does the n <= 16 columns of a 16x16 weight tile in one instruction.

Each lane loads 16 contiguous codes of rows g and g + 8 of every m16 tile per piece (``kv`` pieces per chunk: a chunk
is 64 x kv codes of d), converts them in pairs with ``cvt.rn.f16x2.e4m3x2`` (exact: every E4M3 value is a normal FP16
one or zero; for BF16 x the FP16 bits are re-biased to BF16, also exact) into two 8-element A pieces, and reads the
matching two 8-element X pieces: A and B see the same permutation of k, as in the 16-bit family. Row scales multiply
each output's FP32 sum once; 128x128 block scales multiply each chunk's partial sum (a chunk lies in one column block,
an m16 tile in one row block) before it is added.

Kernel ABI: the shared one with W as ``const unsigned char*`` and a trailing ``const float* __restrict__ scales``."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .arch import DEFAULT as DEFAULT_ARCH
from .arch import Arch
from .configbase import valid_of
from .mma import DOMAINS as MMA_DOMAINS
from .mma import NAME as MMA_NAME
from .mma import MmaConfig
from .shapes import FP8_LAYOUTS, Shape

NAME = "fp8mma"
TEMPLATE = "mma_fp8.cu.j2"
MAIN_KERNEL = "mma_fp8"
STUDY_SUFFIX = "-fp8mma"

CODES = 64              # codes of d per piece of a warp: 4 lanes x 16 codes per row
BLOCK_EDGE = 128        # the block128 layout's scale block (rows and columns)

# The mma family's parameters and values (its own dict: a family's domains are its own object), with kv counting
# 16-byte pieces of codes (64 or 128 codes of d per chunk) instead of 16-byte pieces of 16-bit elements.
DOMAINS: dict[str, tuple[Any, ...]] = dict(MMA_DOMAINS)


@dataclass(frozen=True, order=True)
class Fp8MmaConfig(MmaConfig):
    """One point of the FP8 mma family: the mma family's tiling, ring, split and options over FP8 weights (its
    validity rules, shared memory and complexity), with chunks of 64 x kv codes."""

    family = NAME
    DOMAINS = DOMAINS
    WEIGHTS = tuple(FP8_LAYOUTS)
    NEEDS = ("fp8.e4m3",)
    kernel_name = MAIN_KERNEL

    def sixteen_bit(self) -> tuple[str, dict[str, Any]]:
        """The mma config of the same fields: the same tiling of 16-byte pieces (kv counts pieces in both)."""
        return MMA_NAME, {k: getattr(self, k) for k in MMA_DOMAINS}

    @property
    def kchunk(self) -> int:
        """Codes (elements) of d one warp step covers."""
        return CODES * self.kv

    def x_row_halves(self, d: int) -> int:
        """Elements per staged X row: the split's d range, padded so that the lanes of a shared-memory phase hit
        distinct banks (each lane reads two 16-byte pieces 16 bytes apart: the 16-bit family's two-piece rule)."""
        length = self.chunks_per_split(d) * self.kchunk
        return length + ((16 - 2 * length) % 128) // 2

    def render_values(self, shape: Shape, arch: Arch = DEFAULT_ARCH) -> dict[str, Any]:
        return {**super().render_values(shape, arch), "layout": shape.fp8_layout, "block_edge": BLOCK_EDGE}

    def shape_reasons(self, shape: Shape, arch: Arch = DEFAULT_ARCH) -> list[str]:
        """The mma family's reasons, after the FP8 one: rows of codes start 16-byte aligned (d a multiple of 16)."""
        if shape.d % 16:
            return [f"d={shape.d} is not a multiple of 16: rows of codes must start 16-byte aligned"]
        return super().shape_reasons(shape, arch)

    @property
    def label(self) -> str:
        return "fp8" + super().label


CONFIG = Fp8MmaConfig
SEED, SEED_NAME = Fp8MmaConfig(), "fp8 mma seed"
FALLBACKS: tuple[tuple[Fp8MmaConfig, str], ...] = ()   # (the FP8 GEMV family's fallbacks run any FP8 shape)
SWEEP_GRID: dict[str, tuple[Any, ...]] = {**DOMAINS, "x_load": ("ldg",), "hint": ("nc",), "pdl": ("off",)}
SWEEP_NOTE = ("Left out of the full space: X staged in shared memory, the evict-first hint and programmatic dependent "
              "launch (a search tries them; a sweep measures the tiling, the pieces and the ring).")


def all_configs() -> Iterator[Fp8MmaConfig]:
    for values in itertools.product(*DOMAINS.values()):
        yield Fp8MmaConfig(*values)


def valid_configs(shape: Shape, arch: Any = None) -> list[Fp8MmaConfig]:
    """Every config of the space valid for ``shape`` on ``arch`` (None: sm_90)."""
    return valid_of(all_configs(), shape, arch)
