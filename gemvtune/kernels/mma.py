"""The mma GEMV family: Y[n, M] = X[n, d] . W^T on tensor cores (mma.sync m16n8k16, FP16 or BF16 in, FP32
accumulate), built so that its time is the time of reading W for every n <= 16: warps along rows share
each X fragment through L1, a register ring per warp keeps W loads in flight, an optional split of d
is combined inside the kernel (no second launch). A frozen config, its domains, validity with reasons, and the names
its registry entry is built from (``gemvtune.kernels.families.Family.from_module``)."""

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

NAME = "mma"                  # the family's name in tables, CSVs, studies and the cost model
TEMPLATE = "mma_gemv.cu.j2"
MAIN_KERNEL = "mma_gemv"
STUDY_SUFFIX = "-mma"

SMEM_LIMIT = 48 * 1024   # static shared memory a block may take without an opt-in
MAX_WARPS = 16           # warps per block (rw x kw)
MAX_RING = 8             # m16 tiles x ring depth x pieces: 8 x 2 x 16 B = 64 registers of W in flight per lane

DOMAINS: dict[str, tuple[Any, ...]] = {
    "mt": (1, 2, 4),                    # m16 tiles per warp: rows per warp = 16 * mt
    "rw": (1, 2, 4, 8),                 # warps along rows (they share X fragments through L1)
    "kw": (1, 2, 4, 8),                 # warps along d (partial sums added in shared memory)
    "split": (1, 2, 4, 8, 16),          # d split across blocks (grid.y), combined by the last block
    "depth": (1, 2, 4, 8),              # d chunks of W in flight per warp (the register ring)
    "kv": (1, 2),                       # contiguous 16-byte pieces per lane and row in a chunk (64 or 128 B per row)
    "x_load": ("ldg", "smem"),          # X fragments through L1/__ldg, or the split's X slice staged in smem
    "hint": ("nc", "evict_first"),      # W loads: non-coherent no-L1, or that plus an L2 evict-first policy
    "pdl": ("off", "on"),               # programmatic dependent launch: fill the ring before waiting
}


@dataclass(frozen=True, order=True)
class MmaConfig(LastBlockCombine, TensorCoreTiles, ConfigBase):
    """One point of the mma GEMV family. Hashable like GemvConfig."""

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
    NEEDS_BY_DTYPE = {"fp16": ("mma.f16",), "bf16": ("mma.bf16", "bf16")}
    NEEDS_BY_VALUE = {("hint", "evict_first"): "l2.cache_hint", ("pdl", "on"): "griddepcontrol"}
    CHAIN_ONLY = {"pdl": ("on",)}
    kernel_name = MAIN_KERNEL

    # ---- derived values (the tiles, chunks, grid and staged X rows: TensorCoreTiles) ---------
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

    def smem_bytes(self, shape: Shape) -> int:
        red = self.kw * self.rows_per_block * 8 * self.n_tiles(shape.n) * 4 if self.kw > 1 else 0
        x = shape.n * self.x_row_halves(shape.d) * 2 if self.x_load == "smem" else 0
        return red + x

    # ---- what the rest of gemvtune asks of a family's config ---------------------------------
    def complexity(self) -> tuple:
        levers = ((self.split > 1) + (self.kw > 1) + (self.kv > 1) + (self.x_load != "ldg") + (self.hint != "nc")
                  + (self.pdl != "off"))
        return (levers, self.split, self.kw, self.rw, self.depth, self.mt)

    def render_values(self, shape: Shape, arch: Arch = DEFAULT_ARCH) -> dict[str, Any]:
        return {"n_tiles": self.n_tiles(shape.n), "w_hint": self.hint, "x_row": self.x_row_halves(shape.d)}

    # ---- validity -------------------------------------------------------------------------
    def shape_reasons(self, shape: Shape, arch: Arch = DEFAULT_ARCH) -> list[str]:
        """Why this in-domain config cannot run ``shape`` (empty: it can). Each reason is one short line."""
        r: list[str] = []
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
            r.append(f"mt={self.mt} x depth={self.depth} x kv={self.kv} ring slots exceed {MAX_RING} "
                     f"({8 * self.mt * self.depth * self.kv} registers of W per lane)")
        sm = self.smem_bytes(shape)
        if sm > SMEM_LIMIT:
            r.append(f"{sm} B of shared memory (d-warp reduction, staged X) exceed {SMEM_LIMIT // 1024} KiB")
        if self.grid(shape)[0] > 2**31 - 1:
            r.append("too many row blocks for one grid")
        return r

    @property
    def label(self) -> str:
        return (f"mma.m{16 * self.mt}.r{self.rw}.k{self.kw}.s{self.split}.d{self.depth}"
                + (f".v{self.kv}" if self.kv > 1 else "") + (".xsmem" if self.x_load == "smem" else "")
                + f".{self.hint}" + (".pdl" if self.pdl == "on" else ""))


# The point tried first: 16 rows per warp, 4 row warps x 2 d warps, no split, 4 chunks in flight.
MMA_SEED = MmaConfig()
CONFIG = MmaConfig
SEED, SEED_NAME = MMA_SEED, "mma seed"
# A table's fallbacks for a shape it lacks: none (the GEMV family's run any shape).
FALLBACKS: tuple[tuple[MmaConfig, str], ...] = ()
# A sweep measures the tiling and the ring (3,840 points before validity); a search also tries the rest.
SWEEP_GRID: dict[str, tuple[Any, ...]] = {**DOMAINS, "kv": (1,), "x_load": ("ldg",), "hint": ("nc",), "pdl": ("off",)}
SWEEP_NOTE = ("Left out of the full space: two-piece chunks (kv=2), X staged in shared memory, the evict-first "
              "hint and programmatic dependent launch (a search tries them; a sweep measures the tiling and the ring).")


def all_configs() -> Iterator[MmaConfig]:
    for values in itertools.product(*DOMAINS.values()):
        yield MmaConfig(*values)


def valid_configs(shape: Shape, arch: Any = None) -> list[MmaConfig]:
    """Every config of the space valid for ``shape`` on ``arch`` (None: sm_90)."""
    return valid_of(all_configs(), shape, arch)
