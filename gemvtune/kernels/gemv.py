"""The GEMV family: CUDA-core GEMV, each W load used for all n columns (llama.cpp's kernel is a point). Its parameter
space (a frozen config, its domains, validity with reasons) and the names its registry entry is built from
(``gemvtune.kernels.families.Family.from_module``)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .arch import DEFAULT as DEFAULT_ARCH
from .arch import Arch
from .configbase import ConfigBase, parse_config_text, sample_of, valid_of
from .shapes import Shape

NAME = "gemv"                 # the family's name in tables, CSVs, studies and the cost model
TEMPLATE = "gemv.cu.j2"       # under gemvtune/build/templates/
MAIN_KERNEL = "gemv"          # the kernel of one call whose registers and spills a measurement reports
STUDY_SUFFIX = ""             # the first family's studies are the shape's own

VEC_ELEMS = {"half": 1, "half2": 2, "half4": 4, "half8": 8}
SMEM_X_LIMIT = 48 * 1024  # static shared memory a block may take without an opt-in
MAX_GRID_Y = 65535

# Every tunable and its domain, in the order they are shown and searched.
DOMAINS: dict[str, tuple[Any, ...]] = {
    "block": (32, 64, 128, 256, 512, 1024),          # threads per block
    "vec": tuple(VEC_ELEMS),                           # bytes per W load: 2, 4, 8, 16
    "acc": ("fp32", "fp16"),                           # per-thread accumulator type (fp16: FP16 inputs only)
    "tpr": (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024),  # threads per row (rows per block = block/tpr)
    "unroll": (1, 2, 4, 8),                            # independent W loads in flight per thread
    "split_k": (1, 2, 4, 8, 16),                       # d split across blocks (grid.y)
    "hint": ("default", "nc", "evict_first"),          # cache hint on W loads
    "x_load": ("ldg", "smem"),                         # x read through L1/__ldg, or staged in smem
    "pdl": ("off", "on"),                              # programmatic dependent launch (W prefetch, then wait)
    "occ": ("auto", "half", "full"),                   # blocks per SM asked of the compiler (caps registers)
}

# Programmatic dependent launch as a chain of a model's linears runs it (outside the searched space: a per-shape search
# times isolated kernels, where it means nothing): each thread loads its first K W vectors into registers before
# ``griddepcontrol.wait`` (W is never written by an earlier kernel) and reads x only after it. ``chainK`` releases the
# next kernel (``launch_dependents``) once the block's last W load is issued; ``earlyK`` at the block's start, so the
# next kernel is launched as soon as this one's last wave is on the SMs and its blocks take the slots this one's
# finishing blocks free (a block waits holding nothing this kernel still needs: all of its blocks have started). K and
# the trigger are chosen where the kernel runs: in the decode step's chain (``gemvtune bench step --pdl``).
CHAIN_DEPTHS = (1, 2, 4, 8)
CHAIN_TRIGGERS = {"chain": "end", "early": "start"}
CHAIN_VALUES = tuple(f"{t}{k}" for t in CHAIN_TRIGGERS for k in CHAIN_DEPTHS)


# A 16-bit accumulator is offered for FP16 inputs only: with BF16 ones it would be a BF16 accumulator (8 significant
# bits, u = 2^-8), whose error at any useful chain length passes every bound a GEMV is held to.
BF16_ACC_REASON = ("a BF16 accumulator is invalid: 8 significant bits lose the sum "
                   "(acc=fp16 is for FP16 inputs only)")


def fp16_max_chain(d: int) -> int:
    """Longest FP16 accumulation chain allowed: its expected relative error u*sqrt(L/6) (u = 2^-11)
    then stays at half of the FP16 error bound 4*u*sqrt(1 + d/3072) (see timing.error_bound)."""
    return max(16, d // 128)


@dataclass(frozen=True, order=True)
class GemvConfig(ConfigBase):
    """One point of the GEMV family. Hashable, so measurements are ``dict[GemvConfig, ...]``."""

    block: int = 256
    vec: str = "half2"
    acc: str = "fp32"
    tpr: int = 256
    unroll: int = 1
    split_k: int = 1
    hint: str = "default"
    x_load: str = "ldg"
    pdl: str = "off"
    occ: str = "auto"

    family = NAME
    DOMAINS = DOMAINS
    EXTRA_VALUES = {"pdl": CHAIN_VALUES}
    CHAIN_ONLY = {"pdl": ("on",) + CHAIN_VALUES}
    EPILOGUE_FUSIONS = ("residual", "swiglu")
    NEEDS_BY_DTYPE = {"bf16": ("bf16",)}
    NEEDS_BY_VALUE = {("hint", "evict_first"): "l2.cache_hint",
                      **{("pdl", v): "griddepcontrol" for v in ("on",) + CHAIN_VALUES}}

    # ---- derived values -------------------------------------------------------------------
    @property
    def split(self) -> int:
        """The slices of d across blocks (``split_k``: the parameter's persisted and user-facing name)."""
        return self.split_k

    @property
    def vec_elems(self) -> int:
        return VEC_ELEMS[self.vec]

    @property
    def min_blocks(self) -> int:
        """``min_blocks_on`` sm_90 (2048 threads, 32 blocks per SM)."""
        return self.min_blocks_on(DEFAULT_ARCH)

    def min_blocks_on(self, arch: Arch) -> int:
        """``__launch_bounds__``'s minimum blocks per SM on ``arch``: 1 (the compiler's choice of registers), or
        enough blocks for half / all of an SM's resident threads (2048 on sm_90, 1536 on sm_86; at most its resident
        blocks), which caps the registers per thread (e.g. 32 at full occupancy) so that more blocks fit in one wave."""
        if self.occ == "auto":
            return 1
        threads = arch.threads_per_sm // (2 if self.occ == "half" else 1)
        return max(1, min(arch.blocks_per_sm, threads // self.block))

    @property
    def rows_per_block(self) -> int:
        return self.block // self.tpr

    @property
    def chain_depth(self) -> int:
        """W vectors each thread loads before ``griddepcontrol.wait`` (pdl=chainK or earlyK: K; otherwise 0)."""
        return int(self.pdl[5:]) if self.pdl[:5] in CHAIN_TRIGGERS else 0

    @property
    def chain_trigger(self) -> str:
        """Where a chain variant releases the next kernel: ``end`` (chainK), ``start`` (earlyK); "" otherwise."""
        return CHAIN_TRIGGERS.get(self.pdl[:5], "") if self.chain_depth else ""

    @property
    def loads_in_flight(self) -> int:
        """Independent W loads one thread has in flight (the cost model's feature)."""
        return self.unroll

    def grid(self, shape: Shape) -> tuple[int, int, int]:
        rows = self.rows_per_block
        return ((shape.M + rows - 1) // rows, self.split, 1)

    def vectors_per_split(self, d: int) -> int:
        nvec = d // self.vec_elems
        return (nvec + self.split - 1) // self.split

    def kernels(self, shape: Shape) -> list[tuple[str, tuple[int, int, int], tuple[int, int, int]]]:
        """The launches of one call, in order: (kernel name, grid, block)."""
        return [(MAIN_KERNEL, self.grid(shape), (self.block, 1, 1))]

    def workspace(self, shape: Shape) -> tuple[int, int]:
        """(float workspace elements, counters) one call needs."""
        return max(1, self.split * shape.n * shape.M), max(1, self.grid(shape)[0])

    def needs_workspace(self, shape: Shape) -> bool:
        """Whether a kernel of one call reads ``ws`` or ``counters``: only split-K (partial sums, then
        the last block of each row group adds them up)."""
        return self.split > 1

    def fp16_chain(self, d: int, n: int = 1) -> int:
        """Most sequential additions into one accumulator lane (what sets the FP16 error).

        A thread loads ceil(vps / tpr) vectors; with n = 1 the unrolled loop spreads them over
        ``unroll`` accumulators, the remainder goes to the first one (with n > 1 each column has one
        accumulator); each vector adds vec/lanes terms per lane."""
        lanes = 1 if self.vec == "half" else 2
        per_thread = -(-self.vectors_per_split(d) // self.tpr)
        if n > 1:
            return max(1, per_thread * self.vec_elems // lanes)
        pf = min(self.chain_depth, per_thread)   # pdl=chainK: the first K vectors go to the slots in turn
        rest = per_thread - pf                    # then the loops start K vectors later: rest // unroll iterations
        runs = self.unroll * self.tpr <= self.vectors_per_split(d) if not pf else True
        main = rest // self.unroll if self.unroll > 1 and runs else 0
        slot0 = -(-pf // self.unroll) + main + (rest - main * self.unroll)
        return max(1, slot0 * self.vec_elems // lanes)

    # ---- validity -------------------------------------------------------------------------
    def shape_reasons(self, shape: Shape, arch: Arch = DEFAULT_ARCH) -> list[str]:
        """Why this in-domain config cannot run ``shape`` (empty: it can). Each reason is one short line.
        (Asked of every point of the space when it is enumerated: fields are read into locals once.) No limit here
        differs between architectures (the x slice is static shared memory: 48 KiB on every one); their occupancy
        sets ``min_blocks_on``."""
        r: list[str] = []
        d, vec, tpr, split = shape.d, self.vec, self.tpr, self.split_k
        ve = VEC_ELEMS[vec]
        if d % ve:
            r.append(f"d={d} is not divisible by the {vec} width ({ve} halves)")
            return r
        if tpr > self.block:
            r.append(f"tpr={tpr} threads per row exceed the block of {self.block}")
            return r
        nvec = d // ve
        if split > nvec:
            r.append(f"split_k={split} exceeds the {nvec} {vec} vectors of a row")
            return r
        vps = (nvec + split - 1) // split   # vectors_per_split(d)
        if split > 1 and vps < tpr:
            r.append(f"split_k={split} leaves {vps} vectors per split for {tpr} threads per row")
        unroll = self.unroll
        if unroll > 1 and unroll * tpr > vps:
            r.append(
                f"unroll={unroll} x tpr={tpr} needs {unroll * tpr} vectors per split, "
                f"the row has {vps}: the unrolled loop would never run"
            )
        if self.acc == "fp16":
            if getattr(shape, "dtype", "fp16") != "fp16":
                r.append(BF16_ACC_REASON)
            else:
                chain, most = self.fp16_chain(d, shape.n), fp16_max_chain(d)
                if chain > most:
                    r.append(f"fp16 accumulation chains of {chain} terms exceed {most} "
                             f"(max(16, d/128)): the error would pass the fp16 bound; use more threads per row, "
                             f"more unroll, or fp32")
        pf = self.chain_depth
        if pf and pf * tpr > vps:
            r.append(f"pdl={self.pdl} loads {pf} vectors per thread before the wait: {pf * tpr} vectors per split for "
                     f"{tpr} threads per row, the row has {vps}")
        if self.x_load == "smem" and shape.n * vps * ve * 2 > SMEM_X_LIMIT:
            r.append(f"x slice of {shape.n * vps * ve * 2} B ({shape.n} column(s)) does not fit the {SMEM_X_LIMIT // 1024} KiB of shared memory")
        return r

    # ---- what the rest of gemvtune asks of a family's config ---------------------------------
    def complexity(self) -> tuple:
        """Levers away from the llama.cpp point, then the split, the unroll, and the point itself first."""
        levers = (self.split > 1) + (self.unroll > 1) + (self.hint != "default") + (self.x_load != "ldg") + (self.acc != "fp32")
        return (levers, self.split, self.unroll, self != LLAMA_CPP)

    def render_values(self, shape: Shape, arch: Arch = DEFAULT_ARCH) -> dict[str, Any]:
        return {"vec_elems": self.vec_elems, "rows": self.rows_per_block, "min_blocks": self.min_blocks_on(arch),
                "pf": self.chain_depth, "trigger": self.chain_trigger}

    def epilogue_reasons(self, epilogue: Any) -> list[str]:
        """SwiGLU pairs launch rows 2i (gate) and 2i+1 (up) inside one block: an even number of rows per block."""
        if getattr(epilogue, "swiglu", False) and self.rows_per_block % 2:
            return [f"swiglu pairs a gate row with an up row in one block: {self.rows_per_block} row(s) per block "
                    f"(block {self.block} / tpr {self.tpr}) is odd"]
        return []

    @property
    def label(self) -> str:
        return (
            f"b{self.block}.{self.vec}.{self.acc}.t{self.tpr}.u{self.unroll}.k{self.split_k}"
            f".{self.hint}.{self.x_load}" + (".pdl" if self.pdl == "on" else f".{self.pdl}" if self.pdl != "off" else "")
            + (f".occ{self.occ}" if self.occ != "auto" else "")
        )


# The llama.cpp kernel (seed 000): 256 threads on one row, half2 loads, FP32 accumulation, no split.
LLAMA_CPP = GemvConfig(block=256, vec="half2", acc="fp32", tpr=256, unroll=1, split_k=1,
                       hint="default", x_load="ldg")
PRESETS = {"llama": LLAMA_CPP, "llama.cpp": LLAMA_CPP}
CONFIG = GemvConfig
SEED, SEED_NAME = LLAMA_CPP, "llama.cpp"   # the first trial of every study of this family, and what a study calls it
# What a table runs for a shape it has no entry for (and no tuned config can run), tried in order:
# the llama.cpp config, then scalar-half configs that run any d (one warp of a block per row; two
# threads per row in blocks of 32).
FALLBACKS: tuple[tuple[GemvConfig, str], ...] = (
    (LLAMA_CPP, "llama.cpp fallback"),
    (GemvConfig(vec="half", tpr=32, block=256), "generic fallback"),
    (GemvConfig(vec="half", tpr=2, block=32), "generic fallback"),
)

# A sweep (gemvtune.tuning.sweep) measures every valid config of this grid (5,184 points before validity).
SWEEP_GRID: dict[str, tuple[Any, ...]] = {
    "block": (64, 128, 256, 512),
    "vec": ("half2", "half4", "half8"),
    "acc": ("fp32", "fp16"),
    "tpr": (8, 16, 32, 64, 128, 256),
    "unroll": (1, 2, 4, 8),
    "split_k": (1, 2, 4),
    "hint": ("default", "nc", "evict_first"),
    "x_load": ("ldg",),
    "pdl": ("off",),
    "occ": ("auto",),
}
SWEEP_NOTE = (
    "Left out of the full space (57,600 points before pdl was added) to fit one session's GPU time: block 32 and 1024, "
    "scalar half loads, tpr 2, 4, 512 and 1024, split_k 8 and 16, and x staged in shared memory; "
    "programmatic dependent launch (pdl=on) and the occupancy lever (occ=half/full), both added later, "
    "are not in the recorded sweeps. "
    "In the 200-config random samples of the decode suite (2026-11-29) none of these won a shape."
)


def all_configs() -> Iterator[GemvConfig]:
    for values in itertools.product(*DOMAINS.values()):
        yield GemvConfig(*values)


def valid_configs(shape: Shape, arch: Any = None) -> list[GemvConfig]:
    """Every config of the space valid for ``shape`` on ``arch`` (None: sm_90)."""
    return valid_of(all_configs(), shape, arch)


def sample_configs(shape: Shape, k: int, seed: int = 0) -> list[GemvConfig]:
    """The llama.cpp config (if valid) then k-1 distinct valid configs (on sm_90) drawn uniformly, seeded."""
    return sample_of(valid_configs(shape), LLAMA_CPP, k, seed)


def parse_config(text: str) -> GemvConfig:
    """A preset name (``llama``), a JSON object, or ``key=value,key=value`` over the llama.cpp point."""
    return parse_config_text(text, PRESETS, LLAMA_CPP)
