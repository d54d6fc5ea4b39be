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
from .configbase import ConfigBase, valid_of
from .shapes import FP8_LAYOUTS, Shape
from .tctiles import LastBlockCombine, TensorCoreTiles

NAME = "fp8mma"
TEMPLATE = "mma_fp8.cu.j2"
MAIN_KERNEL = "mma_fp8"
STUDY_SUFFIX = "-fp8mma"

SMEM_LIMIT = 48 * 1024
MAX_WARPS = 16
MAX_RING = 8            # m16 tiles x ring depth x pieces: 8 x 2 x 16 B of codes = 32 registers per lane
CODES = 64              # codes of d per piece of a warp: 4 lanes x 16 codes per row
BLOCK_EDGE = 128        # the block128 layout's scale block (rows and columns)

DOMAINS: dict[str, tuple[Any, ...]] = {
    "mt": (1, 2, 4),                    # m16 tiles per warp: rows per warp = 16 * mt
    "rw": (1, 2, 4, 8),                 # warps along rows (they share X fragments through L1)
    "kw": (1, 2, 4, 8),                 # warps along d (partial sums added in shared memory)
    "split": (1, 2, 4, 8, 16),          # d split across blocks (grid.y), combined by the last block
    "depth": (1, 2, 4, 8),              # d chunks of W in flight per warp (the register ring)
    "kv": (1, 2),                       # 16-byte code pieces per lane and row in a chunk (64 or 128 codes of d)
    "x_load": ("ldg", "smem"),          # X fragments through L1/__ldg, or the split's X slice staged in smem
    "hint": ("nc", "evict_first"),      # W loads: non-coherent no-L1, or that plus an L2 evict-first policy
    "pdl": ("off", "on"),               # programmatic dependent launch: fill the ring before waiting
}


@dataclass(frozen=True, order=True)
class Fp8MmaConfig(LastBlockCombine, TensorCoreTiles, ConfigBase):
    """One point of the FP8 mma family."""

    mt: int = 1
    rw: int = 4
    kw: int = 2
    split: int = 1
    depth: int = 4
    kv: int = 1
    x_load: str = "ldg"
    hint: str = "nc"
    pdl: str = "off"

    family = NAME
    DOMAINS = DOMAINS
    WEIGHTS = tuple(FP8_LAYOUTS)
    NEEDS = ("fp8.e4m3",)
    NEEDS_BY_DTYPE = {"fp16": ("mma.f16",), "bf16": ("mma.bf16", "bf16")}
    NEEDS_BY_VALUE = {("hint", "evict_first"): "l2.cache_hint", ("pdl", "on"): "griddepcontrol"}
    kernel_name = MAIN_KERNEL

    @property
    def kchunk(self) -> int:
        """Codes (elements) of d one warp step covers."""
        return CODES * self.kv

    @property
    def rows_per_block(self) -> int:
        return 16 * self.mt * self.rw

    @property
    def warps(self) -> int:
        return self.rw * self.kw

    @property
    def loads_in_flight(self) -> int:
        """16-byte W loads one lane has in flight: the register ring (the cost model's feature)."""
        return self.depth * self.kv * self.mt * 2

    def x_row_halves(self, d: int) -> int:
        """Elements per staged X row: the split's d range, padded so that the lanes of a shared-memory phase hit
        distinct banks (each lane reads two 16-byte pieces 16 bytes apart: the 16-bit family's two-piece rule)."""
        length = self.chunks_per_split(d) * self.kchunk
        return length + ((16 - 2 * length) % 128) // 2

    def smem_bytes(self, shape: Shape) -> int:
        red = self.kw * self.rows_per_block * 8 * self.n_tiles(shape.n) * 4 if self.kw > 1 else 0
        x = shape.n * self.x_row_halves(shape.d) * 2 if self.x_load == "smem" else 0
        return red + x

    def complexity(self) -> tuple:
        levers = ((self.split > 1) + (self.kw > 1) + (self.kv > 1) + (self.x_load != "ldg") + (self.hint != "nc")
                  + (self.pdl != "off"))
        return (levers, self.split, self.kw, self.rw, self.depth, self.mt)

    def render_values(self, shape: Shape, arch: Arch = DEFAULT_ARCH) -> dict[str, Any]:
        return {"n_tiles": self.n_tiles(shape.n), "w_hint": self.hint, "x_row": self.x_row_halves(shape.d),
                "layout": shape.fp8_layout, "block_edge": BLOCK_EDGE}

    def shape_reasons(self, shape: Shape, arch: Arch = DEFAULT_ARCH) -> list[str]:
        """Why this in-domain config cannot run ``shape`` (empty: it can). Each reason is one short line."""
        r: list[str] = []
        if shape.d % 16:
            r.append(f"d={shape.d} is not a multiple of 16: rows of codes must start 16-byte aligned")
            return r
        if self.warps > MAX_WARPS:
            r.append(f"rw={self.rw} x kw={self.kw} = {self.warps} warps exceed {MAX_WARPS} per block")
        why, stop = self.split_reasons(shape.d)
        r += why
        if stop:
            return r
        cps = self.chunks_per_split(shape.d)
        if cps < self.kw:
            r.append(f"kw={self.kw} exceeds the {cps} d chunks of a split: some warps would idle")
        if self.rw > 1 and 16 * self.mt * (self.rw - 1) >= shape.M:
            r.append(f"rw={self.rw} row warps of {16 * self.mt} rows: the last would have no row of M={shape.M}")
        if self.mt * self.depth * self.kv > MAX_RING:
            r.append(f"mt={self.mt} x depth={self.depth} x kv={self.kv} ring slots exceed {MAX_RING}")
        sm = self.smem_bytes(shape)
        if sm > SMEM_LIMIT:
            r.append(f"{sm} B of shared memory (d-warp reduction, staged X) exceed {SMEM_LIMIT // 1024} KiB")
        if self.grid(shape)[0] > 2**31 - 1:
            r.append("too many row blocks for one grid")
        return r

    @property
    def label(self) -> str:
        return (f"fp8mma.m{16 * self.mt}.r{self.rw}.k{self.kw}.s{self.split}.d{self.depth}"
                + (f".v{self.kv}" if self.kv > 1 else "") + (".xsmem" if self.x_load == "smem" else "")
                + f".{self.hint}" + (".pdl" if self.pdl == "on" else ""))


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
