"""The cuBLASLt family: a library's algorithms, not a template. A config is one cuBLASLt matmul algorithm,
held as the attributes that rebuild it (``cublasLtMatmulAlgoInit`` with its id, then
``cublasLtMatmulAlgoConfigSetAttribute`` of each): tile, stages, split-K, reduction scheme, CTA swizzling,
custom option, inner shape and cluster shape, as the integers cuBLASLt's enums give them.

The space of a shape is what cuBLASLt's heuristic (``cublasLtMatmulAlgoGetHeuristic``) returns for it on
the GPU, split-K algorithms included: nothing here can list it without a GPU. A search measures the
heuristic's top algorithms like every other variant (``gemvtune.device.ltplan`` builds and launches them;
a runner offers them through ``HasCublasLt``); an algorithm the library refuses is a measurement with its
reason, never an exception out of a search.

The call, in cuBLASLt's column-major terms: our row-major Y[n, M] = X[n, d] . W[M, d]^T is
D[M, n] = op(A) B with A = W as a column-major [d, M] matrix (lda = d) and op(A) = A^T, B = X as a
column-major [d, n] matrix (ldb = d), D = Y as a column-major [M, n] matrix (ldd = M); FP16 A and B,
FP32 compute and scale (CUBLAS_COMPUTE_32F, CUDA_R_32F), D in FP32 or FP16 (the epilogue's output).

The names its registry entry is built from (``gemvtune.kernels.families.Family.from_module``) include ``KIND =
"library"``, its ``candidates`` and ``runner_problem`` hooks and ``CENSUS_NOTE``; it has no template."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Protocol, runtime_checkable

from .configbase import ConfigBase
from .shapes import Shape

NAME = "cublaslt"             # the family's name in tables, CSVs and studies
KIND = "library"              # measured and launched through the library: no template, source, census or sweep
STUDY_SUFFIX = "-cublaslt"

# The attributes of an algorithm, in the order ``cublasLtMatmulAlgoConfigAttributes_t`` names them
# (CUBLASLT_ALGO_CONFIG_<NAME>), with the inclusive range a stored value may take: the library's enums
# are small integers (635 tile ids, 39 stage ids in cuBLASLt 13); the ranges leave room for new ones
# and refuse what no cuBLASLt would give (negative, or beyond the C types' sizes).
ATTRIBUTES: tuple[tuple[str, str, int], ...] = (   # (field, CUBLASLT_ALGO_CONFIG_ name, highest value)
    ("algo_id", "ID", 2**16 - 1),
    ("tile", "TILE_ID", 2**16 - 1),
    ("stages", "STAGES_ID", 2**16 - 1),
    ("split_k", "SPLITK_NUM", 2**16 - 1),
    ("reduction", "REDUCTION_SCHEME", 7),
    ("swizzle", "CTA_SWIZZLING", 2**8 - 1),
    ("custom", "CUSTOM_OPTION", 2**16 - 1),
    ("inner_shape", "INNER_SHAPE_ID", 2**16 - 1),
    ("cluster_shape", "CLUSTER_SHAPE_ID", 2**16 - 1),
)
# A library family's domains are inclusive integer ranges (low, high), not lists of values: its configs
# come from the library, and a search proposes none of its own (gemvtune.tuning.search).
DOMAINS: dict[str, tuple[Any, ...]] = {f: (0, hi) for f, _, hi in ATTRIBUTES}
REDUCTIONS = {0: "none", 1: "in place", 2: "in the compute type", 4: "in the output type"}
HEURISTIC_TOP = 16   # algorithms asked of the heuristic per (M, d, n)


@dataclass(frozen=True, order=True)
class CublasLtConfig(ConfigBase):
    """One cuBLASLt algorithm, as its attributes. Hashable like the other families' configs."""

    algo_id: int = 0
    tile: int = 0
    stages: int = 0
    split_k: int = 1
    reduction: int = 0
    swizzle: int = 0
    custom: int = 0
    inner_shape: int = 0
    cluster_shape: int = 0

    family = NAME
    DOMAINS = DOMAINS
    acc = "fp32"          # CUBLAS_COMPUTE_32F: FP32 accumulation (sets the error bound)
    vec_elems = 8         # pointers must be 16-byte aligned (the alignment the heuristic is told)

    def domain_errors(self) -> list[str]:
        errs = []
        for f in fields(self):
            v = getattr(self, f.name)
            lo, hi = DOMAINS[f.name]
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                errs.append(f"{f.name}={v!r} is not an integer in {lo}..{hi}")
        if not errs and self.reduction not in REDUCTIONS:
            errs.append(f"reduction={self.reduction} is not one scheme of {sorted(REDUCTIONS)}")
        return errs

    def invalid_reasons(self, shape: Shape, arch: Any = None) -> list[str]:
        """Only the domain: whether cuBLASLt runs the algorithm on a shape (of either dtype) and architecture is the
        library's to say (``cublasLtMatmulAlgoCheck`` when it is built), and its refusal is measured data. (FP8 weights
        are no shape of this family: ``weights_reasons``.)"""
        return self.domain_errors() or self.weights_reasons(shape)

    def needs_workspace(self, shape: Shape) -> bool:
        """Never gemvtune's workspace: cuBLASLt's own (split-K partial sums) belongs to the plan."""
        return False

    def epilogue_reasons(self, epilogue: Any) -> list[str]:
        """FP32 and 16-bit outputs; a bias through CUBLASLT_EPILOGUE_BIAS with a 16-bit output only (the
        library reads the bias in D's type: a 16-bit bias with an FP32 D is not one of its documented cases)."""
        if epilogue.bias and not epilogue.sixteen_bit:
            return ["cuBLASLt's bias epilogue reads the bias in the output's type; gemvtune's bias is of the inputs' "
                    "16-bit type, so it needs a 16-bit output"]
        return []

    @property
    def split(self) -> int:
        """The slices of d across blocks (``split_k``: the persisted name, after CUBLASLT_ALGO_CONFIG_SPLITK_NUM)."""
        return self.split_k

    def complexity(self) -> tuple:
        return (self.split > 1, self.split, self.reduction, self.algo_id, self.tile, self.stages)

    def attributes(self) -> list[tuple[str, int]]:
        """(CUBLASLT_ALGO_CONFIG_ name, value) of every attribute after the id, in the order they are set."""
        return [(name, int(getattr(self, f))) for f, name, _ in ATTRIBUTES[1:]]

    @property
    def label(self) -> str:
        extra = "".join(f".{p}{v}" for p, v in (("sw", self.swizzle), ("opt", self.custom),
                                                  ("in", self.inner_shape), ("cl", self.cluster_shape)) if v)
        return f"lt.a{self.algo_id}.tile{self.tile}.st{self.stages}.k{self.split_k}.red{self.reduction}{extra}"

    def describe(self) -> str:
        """The algorithm in words, as a C++ engine rebuilds it (one line, ASCII)."""
        red = REDUCTIONS.get(self.reduction, "?")
        attrs = ", ".join(f"{name} {v}" for name, v in self.attributes())
        return (f"cuBLASLt algo id {self.algo_id} with {attrs} (CUBLASLT_ALGO_CONFIG_*: split-K {self.split_k}, "
                f"reduction {red}); CUBLAS_COMPUTE_32F, FP16 A = W (op T, lda = d), B = X (ldb = d), D = Y (ldd = M)")


CONFIG = CublasLtConfig
SEED, SEED_NAME = None, "the heuristic's first"   # no seed of its own: a study's first trial is the library's first


def all_configs() -> tuple[CublasLtConfig, ...]:
    """None without a GPU: the space of a shape is what cuBLASLt's heuristic returns on the device."""
    return ()


FALLBACKS: tuple[tuple[CublasLtConfig, str], ...] = ()
SWEEP_GRID: dict[str, tuple[Any, ...]] = {}
SWEEP_NOTE = "No sweep: the algorithms of a shape come from cuBLASLt's heuristic on the GPU (search measures them)."
CENSUS_NOTE = ("the algorithms come from cuBLASLt's heuristic on the GPU (cublasLtMatmulAlgoGetHeuristic, "
               f"split-K ones included): no census without a device; `gemvtune search --family {CublasLtConfig.family}` "
               f"measures its top {HEURISTIC_TOP} for each (M, d, n)")


@runtime_checkable
class HasCublasLt(Protocol):
    """A runner that can ask cuBLASLt on its device (the CUDA runner); replayed sweeps cannot."""

    def lt_problem(self) -> str | None:
        """Why cuBLASLt cannot be used here (one line: no nvmath-python, no library), or None."""
        ...

    def lt_heuristics(self, shape: Shape, top: int = HEURISTIC_TOP) -> list[tuple[CublasLtConfig, int]]:
        """Up to ``top`` algorithms the heuristic gives for ``shape`` (default epilogue), best first, each with
        the workspace bytes it needs."""
        ...


def runner_problem(runner: Any) -> str | None:
    """Why ``runner`` cannot give cuBLASLt candidates (a replayed sweep, a runner in a child process), or None."""
    if runner.replayed:
        return "a replayed sweep has no cuBLASLt (sweeps record gemvtune kernels only): search this family on a GPU"
    if not isinstance(runner, HasCublasLt):
        return (f"the {type(runner).__name__} runner cannot ask cuBLASLt for algorithms (search this family with "
                "the CUDA runner, without --watchdog)")
    return runner.lt_problem()


def candidates(runner: Any, shape: Shape) -> list[CublasLtConfig]:
    """The heuristic's top algorithms for ``shape`` (its dtype's), best first, without repeats: the configs a
    search measures."""
    out: list[CublasLtConfig] = []
    for cfg, _ws in runner.lt_heuristics(shape, HEURISTIC_TOP):
        if cfg not in out:
            out.append(cfg)
    return out
