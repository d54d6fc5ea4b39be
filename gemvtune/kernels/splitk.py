"""The split-K GEMM family: Y[n, M] = X[n, d] . W^T on tensor cores (mma.sync m16n8k16, FP16 or BF16 in, FP32
accumulate), d split across blocks. Its partial sums are FP32 whatever the combine (FP32 atomics into y, or an
FP32 workspace added by a second kernel), so no option accumulates in 16 bits. A frozen config, its domains, validity
with reasons, and the names its registry entry is built from (``gemvtune.kernels.families.Family.from_module``)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .arch import DEFAULT as DEFAULT_ARCH
from .arch import Arch
from .configbase import ConfigBase, valid_of
from .shapes import Shape
from .tctiles import TensorCoreTiles

NAME = "splitk"               # the family's name in tables, CSVs, studies and the cost model
TEMPLATE = "splitk_gemm.cu.j2"
MAIN_KERNEL = "splitk_gemm"
STUDY_SUFFIX = "-splitk"

SMEM_LIMIT = 48 * 1024   # static shared memory a block may take without an opt-in
MAX_GRID_Y = 65535

DOMAINS: dict[str, tuple[Any, ...]] = {
    "mt": (1, 2, 4),                    # m16 tiles per block: rows of W per block = 16 * mt
    "warps": (1, 2, 4, 8),              # warps per block; they split the block's d range
    "split": (1, 2, 4, 8, 16, 32),      # d split across blocks (grid.y)
    "combine": ("atomic", "pass2"),     # partial sums: atomicAdd into y, or a second reduction kernel
    "w_load": ("reg", "cpasync"),       # W tiles: 16-byte loads to registers, or cp.async into smem
    "depth": (1, 2, 4),                 # d chunks of W in flight per warp (cp.async: pipeline stages)
    "x_load": ("ldg", "smem"),          # X fragments through L1/__ldg, or the block's X slice in smem
}


@dataclass(frozen=True, order=True)
class SplitKConfig(TensorCoreTiles, ConfigBase):
    """One point of the split-K GEMM family. Hashable like GemvConfig."""

    mt: int = 2
    warps: int = 4
    split: int = 4
    combine: str = "atomic"
    w_load: str = "reg"
    depth: int = 2
    x_load: str = "ldg"

    family = NAME
    DOMAINS = DOMAINS
    NEEDS_BY_DTYPE = {"fp16": ("mma.f16",), "bf16": ("mma.bf16", "bf16")}
    NEEDS_BY_VALUE = {("w_load", "cpasync"): "cp.async"}

    # ---- derived values (the tiles, chunks, grid and staged X rows: TensorCoreTiles) ---------
    @property
    def rows_per_block(self) -> int:
        return 16 * self.mt

    @property
    def loads_in_flight(self) -> int:
        """16-byte W loads (or cp.async copies) one lane has in flight (the cost model's feature)."""
        return self.depth * self.mt * 2

    def kernels(self, shape: Shape) -> list[tuple[str, tuple[int, int, int], tuple[int, int, int]]]:
        """The launches of one call, in order: (kernel name, grid, block)."""
        main = (MAIN_KERNEL, self.grid(shape), (self.block, 1, 1))
        if self.split == 1:
            return [main]
        total = shape.n * shape.M
        aux = (min(-(-total // 256), 65535 * 4), 1, 1)
        if self.combine == "atomic":
            return [("zero_y", aux, (256, 1, 1)), main]
        return [main, ("reduce_splits", aux, (256, 1, 1))]

    def workspace(self, shape: Shape) -> tuple[int, int]:
        """(float workspace elements, counters) one call needs."""
        ws = self.split * shape.n * shape.M if self.needs_workspace(shape) else 1
        return ws, 1

    def needs_workspace(self, shape: Shape) -> bool:
        """Whether a kernel of one call reads ``ws``: split partial sums combined in a second pass
        (atomics add them straight into y)."""
        return self.split > 1 and self.combine == "pass2"

    def epilogue_reasons(self, epilogue: Any) -> list[str]:
        """Why this config cannot fuse ``epilogue`` (gemvtune.kernels.epilogue.Epilogue) into its store."""
        if self.split > 1 and self.combine == "atomic" and epilogue.out != "fp32":   # any 16-bit y (FP16, BF16)
            article = "an" if epilogue.out == "fp16" else "a"
            return [f"combine=atomic adds FP32 partial sums into y; {article} {epilogue.out.upper()} output needs combine=pass2"]
        return []

    def smem_bytes(self, shape: Shape) -> int:
        npad = 8 * self.n_tiles(shape.n)
        red = self.warps * self.rows_per_block * npad * 4 if self.warps > 1 else 0
        w = self.depth * self.warps * 32 * self.mt * 2 * 16 if self.w_load == "cpasync" else 0
        x = shape.n * self.x_row_halves(shape.d) * 2 if self.x_load == "smem" else 0
        return red + w + x

    # ---- what the rest of gemvtune asks of a family's config ---------------------------------
    def complexity(self) -> tuple:
        levers = (self.split > 1) + (self.w_load != "reg") + (self.x_load != "ldg") + (self.combine != "atomic")
        return (levers, self.split, self.depth, self.warps, self.mt)

    def render_values(self, shape: Shape, arch: Arch = DEFAULT_ARCH) -> dict[str, Any]:
        return {"n_tiles": self.n_tiles(shape.n), "x_row": self.x_row_halves(shape.d), "w_hint": "nc"}

    # ---- validity -------------------------------------------------------------------------
    def shape_reasons(self, shape: Shape, arch: Arch = DEFAULT_ARCH) -> list[str]:
        """Why this in-domain config cannot run ``shape`` (empty: it can). Each reason is one short line."""
        r: list[str] = []
        why, stop = self.split_reasons(shape.d)
        r += why
        if stop:
            return r
        cps = self.chunks_per_split(shape.d)
        if cps < self.warps:
            r.append(f"warps={self.warps} exceed the {cps} d chunks of a split: some warps would idle")
        if self.split == 1 and self.combine != "atomic":
            r.append("split=1 has no partial sums to combine (combine=atomic is its canonical value)")
        if self.w_load == "cpasync" and shape.d % 8:
            r.append(f"cp.async needs 16-byte aligned W rows; d={shape.d} is not a multiple of 8")
        if self.w_load == "reg" and self.mt * self.depth > 8:
            r.append(f"mt={self.mt} x depth={self.depth} register tiles exceed 8 (128 registers of W in flight)")
        sm = self.smem_bytes(shape)
        if sm > SMEM_LIMIT:
            r.append(f"{sm} B of shared memory (reduction, W stages, X) exceed {SMEM_LIMIT // 1024} KiB")
        if self.grid(shape)[0] > 2**31 - 1:
            r.append("too many row blocks for one grid")
        return r

    @property
    def label(self) -> str:
        comb = f".{self.combine}" if self.split > 1 else ""
        return f"sk.m{self.rows_per_block}.w{self.warps}.s{self.split}{comb}.{self.w_load}{self.depth}.x{self.x_load}"


# The point tried first: 32 rows per block, 4 warps, d split 4 ways, atomics, 2 chunks in flight.
SPLITK_SEED = SplitKConfig()
CONFIG = SplitKConfig
SEED, SEED_NAME = SPLITK_SEED, "splitk seed"
# A table's fallbacks for a shape it lacks: none (the GEMV family's run any shape).
FALLBACKS: tuple[tuple[SplitKConfig, str], ...] = ()
# A sweep measures the whole space (1,728 points before validity).
SWEEP_GRID: dict[str, tuple[Any, ...]] = dict(DOMAINS)
SWEEP_NOTE = "Nothing left out: the whole split-K space."


def all_configs() -> Iterator[SplitKConfig]:
    for values in itertools.product(*DOMAINS.values()):
        yield SplitKConfig(*values)


def valid_configs(shape: Shape, arch: Any = None) -> list[SplitKConfig]:
    """Every config of the space valid for ``shape`` on ``arch`` (None: sm_90)."""
    return valid_of(all_configs(), shape, arch)
