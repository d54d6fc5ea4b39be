"""The ring GEMV family: Y[n, M] = X[n, d] . W^T on tensor cores (mma.sync m16n8k16, FP16 or BF16 in, FP32
accumulate), W streamed through a shared-memory ring filled by cp.async. Where the mma family keeps W in
registers (a few 64-byte pieces per row per warp, the ring's depth bounded by registers), a block here
copies whole row runs of ``bk`` halves (128-512 contiguous bytes per row, as the n = 1 GEMV reads them)
``stages`` deep without holding a register, and walks ``ipb`` consecutive row tiles in one continuous
pipeline (the ring never drains between tiles; the grid is ``ipb`` times smaller). X comes through L1
(``ldg``) or rides in the same ring stages (``ring``). An optional split of d is combined inside the
kernel by the last block of each row tile. A frozen config, its domains, validity with reasons, and the names its
registry entry is built from (``gemvtune.kernels.families.Family.from_module``)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .arch import DEFAULT as DEFAULT_ARCH
from .arch import Arch
from .configbase import ConfigBase, valid_of
from .shapes import Shape
from .tctiles import LastBlockCombine, TensorCoreTiles

NAME = "ring"                 # the family's name in tables, CSVs, studies and the cost model
TEMPLATE = "ring_gemv.cu.j2"
MAIN_KERNEL = "ring_gemv"
STUDY_SUFFIX = "-ring"

MAX_WARPS = 16           # warps per block (rw x kw)
MAX_GRID_X = 2**31 - 1

DOMAINS: dict[str, tuple[Any, ...]] = {
    "mt": (1, 2, 4),                    # m16 tiles per warp: rows per warp = 16 * mt
    "rw": (1, 2, 4, 8),                 # warps along rows (rows per tile = 16 * mt * rw)
    "kw": (1, 2, 4, 8),                 # warps along a stage's d range (partial sums added in shared memory)
    "bk": (64, 128, 256, 512),          # halves of d per row per stage: 128 to 1024 contiguous bytes
    "stages": (2, 3, 4, 6, 8),          # ring slots: stages - 1 copies in flight while one is multiplied
    "ipb": (1, 2, 4, 8),                # consecutive row tiles per block, one pipeline over all of them
    "split": (1, 2, 4, 8, 16),          # d split across blocks (grid.y), combined by the last block
    "x_load": ("ldg", "ring"),          # X fragments through L1/__ldg, or copied into each ring stage
    "prefetch": ("none", "128B", "256B"),   # cp.async's L2 prefetch size hint on W copies
}


@dataclass(frozen=True, order=True)
class RingConfig(LastBlockCombine, TensorCoreTiles, ConfigBase):
    """One point of the ring GEMV family. Hashable like GemvConfig."""

    mt: int = 1
    rw: int = 2
    kw: int = 4
    bk: int = 256
    stages: int = 4
    ipb: int = 1
    split: int = 1
    x_load: str = "ring"
    prefetch: str = "none"

    family = NAME
    DOMAINS = DOMAINS
    NEEDS = ("cp.async",)
    NEEDS_BY_DTYPE = {"fp16": ("mma.f16",), "bf16": ("mma.bf16", "bf16")}
    kernel_name = MAIN_KERNEL

    # ---- derived values ------------------------------------------------------------------
    @property
    def rows_per_block(self) -> int:
        """Rows of one row tile (a block walks ``ipb`` of them)."""
        return 16 * self.mt * self.rw

    @property
    def warps(self) -> int:
        return self.rw * self.kw

    @property
    def loads_in_flight(self) -> float:
        """16-byte copies per thread in flight: the stages ahead, spread over the block (the cost model's feature)."""
        return (self.stages - 1) * self.rows_per_block * self.bk / 8 / self.block

    @property
    def kchunk(self) -> int:
        """Halves of d one ring stage holds per row."""
        return self.bk

    def tiles(self, M: int) -> int:
        """Row tiles of M (a block walks ``ipb`` of them; one split counter each)."""
        return self.row_groups(M)

    def grid(self, shape: Shape) -> tuple[int, int, int]:
        return (-(-self.tiles(shape.M) // self.ipb), self.split, 1)

    def x_rows(self, n: int) -> int:
        """X rows a ring stage carries (none when X comes through L1)."""
        return n if self.x_load == "ring" else 0

    def stage_bytes(self, n: int) -> int:
        return (self.rows_per_block + self.x_rows(n)) * self.bk * 2

    def dynamic_smem(self, shape: Shape) -> int:
        """Bytes of dynamic shared memory per block: the ring (a launch opts in past 48 KiB)."""
        return self.stages * self.stage_bytes(shape.n)

    def smem_bytes(self, shape: Shape) -> int:
        red = self.kw * self.rows_per_block * 8 * self.n_tiles(shape.n) * 4 if self.kw > 1 else 0
        return self.dynamic_smem(shape) + red

    # ---- what the rest of gemvtune asks of a family's config ---------------------------------
    def complexity(self) -> tuple:
        levers = (self.split > 1) + (self.kw > 1) + (self.ipb > 1) + (self.x_load != "ring") + (self.prefetch != "none")
        return (levers, self.split, self.kw, self.ipb, self.rw, self.stages, self.mt, self.bk)

    def render_values(self, shape: Shape, arch: Arch = DEFAULT_ARCH) -> dict[str, Any]:
        return {"n_tiles": self.n_tiles(shape.n), "w_hint": "nc", "x_rows": self.x_rows(shape.n),
                "stage_bytes": self.stage_bytes(shape.n)}

    # ---- validity -------------------------------------------------------------------------
    def shape_reasons(self, shape: Shape, arch: Arch = DEFAULT_ARCH) -> list[str]:
        """Why this in-domain config cannot run ``shape`` (empty: it can). Each reason is one short line."""
        r: list[str] = []
        if shape.d % 8:
            r.append(f"d={shape.d} is not a multiple of 8: rows are not 16-byte aligned for cp.async")
        if self.warps > MAX_WARPS:
            r.append(f"rw={self.rw} x kw={self.kw} = {self.warps} warps exceed {MAX_WARPS} per block")
        if self.bk % (32 * self.kw):
            r.append(f"bk={self.bk} does not split into kw={self.kw} d warps of whole 32-half steps")
        why, stop = self.split_reasons(shape.d)
        r += why
        if stop:
            return r
        if self.rw > 1 and 16 * self.mt * (self.rw - 1) >= shape.M:
            r.append(f"rw={self.rw} row warps of {16 * self.mt} rows: the last would have no row of M={shape.M}")
        tiles = self.tiles(shape.M)
        if self.ipb > 1 and self.ipb >= 2 * tiles:
            r.append(f"ipb={self.ipb} tiles per block for {tiles} row tile(s): a smaller ipb runs the same grid")
        r += self.limit_reasons(shape, arch)
        if self.grid(shape)[0] > MAX_GRID_X:
            r.append("too many row blocks for one grid")
        return r

    def limit_reasons(self, shape: Shape, arch: Arch) -> list[str]:
        """The ring is dynamic shared memory: a block opts in to at most ``arch.smem_optin`` (227 KiB on sm_90, 163
        on sm_80, 99 on sm_86)."""
        sm = self.smem_bytes(shape)
        if sm > arch.smem_optin:
            return [f"{sm} B of shared memory ({self.stages} stages of {self.stage_bytes(shape.n)} B"
                    + (", d-warp reduction" if self.kw > 1 else "") + f") exceed {arch.smem_optin // 1024} KiB"
                    + ("" if arch is DEFAULT_ARCH else f" (the most a block may opt in to on {arch})")]
        return []

    @property
    def label(self) -> str:
        return (f"ring.m{16 * self.mt}.r{self.rw}.k{self.kw}.b{self.bk}.st{self.stages}.i{self.ipb}.s{self.split}"
                + (".xldg" if self.x_load == "ldg" else "") + (f".pf{self.prefetch}" if self.prefetch != "none" else ""))


# The point tried first: 32 rows per tile (2 row warps x 4 d warps), 512-byte row runs, 4 stages, X in the ring
# (the best one-at-a-time change of the first seed, kw=1, at 4096x4096 n = 1: runs/issue19b/ring-first/).
RING_SEED = RingConfig()
CONFIG = RingConfig
SEED, SEED_NAME = RING_SEED, "ring seed"
# A table's fallbacks for a shape it lacks: none (the GEMV family's run any shape).
FALLBACKS: tuple[tuple[RingConfig, str], ...] = ()
# A sweep measures the tiling, the ring and the grid; a search also tries the L2 prefetch sizes. (No evict-first
# policy: cp.async.cg with both a src-size and an L2::cache_hint operand compiled, and raised an illegal
# instruction on the H200, driver 580.159.04.)
SWEEP_GRID: dict[str, tuple[Any, ...]] = {**DOMAINS, "prefetch": ("none",)}
SWEEP_NOTE = ("Left out of the full space: cp.async's L2 prefetch sizes (a search tries them; a sweep measures "
              "the tiling, the ring and the grid).")


def all_configs() -> Iterator[RingConfig]:
    for values in itertools.product(*DOMAINS.values()):
        yield RingConfig(*values)


def valid_configs(shape: Shape, arch: Any = None) -> list[RingConfig]:
    """Every config of the space valid for ``shape`` on ``arch`` (None: sm_90)."""
    return valid_of(all_configs(), shape, arch)
