"""The kernel families gemvtune searches, by name: their config class, domains, seed point, template
and the values it renders with, study naming, complexity order, every config (the census), a table's
fallbacks and the grid a sweep measures. Everything that handles "a config of some family" goes through
here; a new family is its config module (its config class says when it needs a workspace and which
epilogues it can fuse), its template and one entry."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from . import cublaslt as space_lt
from . import gemv as space
from . import mma as space_mma
from . import ring as space_ring
from . import splitk as space_splitk
from .configbase import ConfigBase


@dataclass(frozen=True)
class Family:
    name: str
    config_cls: type[ConfigBase]
    domains: dict[str, tuple[Any, ...]]
    seed: Any                       # the first trial of every study of this family (None: a library's)
    seed_name: str                  # what a study calls that trial ("llama.cpp")
    template: str                   # under templates/ ("" for a library family)
    main_kernel: str                # ("" for a library family)
    complexity: Callable[[Any], tuple]   # smaller is simpler: ties go to the simplest
    render_values: Callable[[Any, Any], dict[str, Any]]   # (config, shape) -> the family's own template values
    study_suffix: str               # appended to a shape's study name ("" for the first family)
    all_configs: Callable[[], Iterable[Any]]   # every point of the space, valid or not (the census)
    fallbacks: tuple[tuple[Any, str], ...]     # (config, why) a table runs for a shape it lacks, in order
    sweep_grid: dict[str, tuple[Any, ...]]     # the part of the domains a sweep measures
    sweep_note: str                 # what the sweep grid leaves out of the domains (in each sweep's sidecar)
    # "template": configs rendered from ``template`` and compiled (NVRTC); "library": a library's algorithms
    # (cuBLASLt), measured and launched through the library: no template, no source, no census, no sweep;
    # its space for a shape is ``candidates(runner, shape)``, asked of the runner on its device, and
    # ``runner_problem(runner)`` says (one line) why a runner cannot give them, or None.
    kind: str = "template"
    candidates: Callable[[Any, Any], list[Any]] | None = None
    runner_problem: Callable[[Any], str | None] | None = None
    census_note: str = ""           # a library family's line in ``gemvtune space`` (what stands for its census)

    @property
    def library(self) -> bool:
        return self.kind == "library"

    def study_name(self, base: str) -> str:
        return base + self.study_suffix


def _gemv_complexity(c: space.GemvConfig) -> tuple:
    levers = (c.split_k > 1) + (c.unroll > 1) + (c.hint != "default") + (c.x_load != "ldg") + (c.acc != "fp32")
    return (levers, c.split_k, c.unroll, c != space.LLAMA_CPP)


def _splitk_complexity(c: space_splitk.SplitKConfig) -> tuple:
    levers = (c.split > 1) + (c.w_load != "reg") + (c.x_load != "ldg") + (c.combine != "atomic")
    return (levers, c.split, c.depth, c.warps, c.mt)


def _mma_complexity(c: space_mma.MmaConfig) -> tuple:
    levers = (c.split > 1) + (c.kw > 1) + (c.kv > 1) + (c.x_load != "ldg") + (c.hint != "nc") + (c.pdl != "off")
    return (levers, c.split, c.kw, c.rw, c.depth, c.mt)


def _ring_complexity(c: space_ring.RingConfig) -> tuple:
    levers = (c.split > 1) + (c.kw > 1) + (c.ipb > 1) + (c.x_load != "ring") + (c.prefetch != "none")
    return (levers, c.split, c.kw, c.ipb, c.rw, c.stages, c.mt, c.bk)


def _lt_complexity(c: space_lt.CublasLtConfig) -> tuple:
    return (c.split_k > 1, c.split_k, c.reduction, c.algo_id, c.tile, c.stages)


def _ring_values(c: space_ring.RingConfig, shape: Any) -> dict[str, Any]:
    return {"n_tiles": c.n_tiles(shape.n), "w_hint": "nc", "x_rows": c.x_rows(shape.n),
            "stage_bytes": c.stage_bytes(shape.n)}


def _no_values(c: Any, shape: Any) -> dict[str, Any]:
    return {}   # (a library family renders nothing)


def _gemv_values(c: space.GemvConfig, shape: Any) -> dict[str, Any]:
    return {"vec_elems": c.vec_elems, "rows": c.rows_per_block, "min_blocks": c.min_blocks}


def _splitk_values(c: space_splitk.SplitKConfig, shape: Any) -> dict[str, Any]:
    return {"n_tiles": c.n_tiles(shape.n), "x_row": c.x_row_halves(shape.d), "w_hint": "nc"}


def _mma_values(c: space_mma.MmaConfig, shape: Any) -> dict[str, Any]:
    return {"n_tiles": c.n_tiles(shape.n), "w_hint": c.hint, "x_row": c.x_row_halves(shape.d)}


FAMILIES: dict[str, Family] = {
    # CUDA-core GEMV, each W load used for all n columns (llama.cpp's kernel is a point)
    "gemv": Family("gemv", space.GemvConfig, space.DOMAINS, space.LLAMA_CPP, "llama.cpp", "gemv.cu.j2", "gemv",
                   _gemv_complexity, _gemv_values, "", space.all_configs, space.FALLBACKS, space.SWEEP_GRID,
                   space.SWEEP_NOTE),
    # tensor-core GEMM (mma.sync m16n8k16) with d split across blocks
    "splitk": Family("splitk", space_splitk.SplitKConfig, space_splitk.DOMAINS, space_splitk.SPLITK_SEED,
                     "splitk seed", "splitk_gemm.cu.j2", "splitk_gemm", _splitk_complexity, _splitk_values, "-splitk",
                     space_splitk.all_configs, space_splitk.FALLBACKS, space_splitk.SWEEP_GRID,
                     space_splitk.SWEEP_NOTE),
    # tensor-core GEMV streaming W once for every n <= 16 (row warps share X, register ring, in-kernel split)
    "mma": Family("mma", space_mma.MmaConfig, space_mma.DOMAINS, space_mma.MMA_SEED, "mma seed", "mma_gemv.cu.j2",
                  "mma_gemv", _mma_complexity, _mma_values, "-mma", space_mma.all_configs, space_mma.FALLBACKS,
                  space_mma.SWEEP_GRID, space_mma.SWEEP_NOTE),
    # tensor-core GEMV streaming W through a cp.async shared-memory ring (long row runs, tiles per block)
    "ring": Family("ring", space_ring.RingConfig, space_ring.DOMAINS, space_ring.RING_SEED, "ring seed",
                   "ring_gemv.cu.j2", "ring_gemv", _ring_complexity, _ring_values, "-ring", space_ring.all_configs,
                   space_ring.FALLBACKS, space_ring.SWEEP_GRID, space_ring.SWEEP_NOTE),
}
# cuBLASLt's algorithms (nvmath-python's bindings): the heuristic's top ones per (M, d, n), split-K included.
# Last in the registry: a tie within the spread goes to gemvtune's own kernels (gemvtune.tuning.confirm).
FAMILIES["cublaslt"] = Family("cublaslt", space_lt.CublasLtConfig, space_lt.DOMAINS, None, "the heuristic's first", "", "",
                              _lt_complexity, _no_values, "-cublaslt", space_lt.all_configs, space_lt.FALLBACKS,
                              space_lt.SWEEP_GRID, space_lt.SWEEP_NOTE, kind="library", candidates=space_lt.candidates,
                              runner_problem=space_lt.runner_problem, census_note=space_lt.CENSUS_NOTE)
# Order of families in a search; the gemv family first (its seed is the llama.cpp config).
FAMILY_NAMES = tuple(FAMILIES)
DEFAULT_FAMILY = FAMILY_NAMES[0]   # a config or table record that names no family is of this one


def family_of(config: Any) -> Family:
    try:
        return FAMILIES[config.family]
    except (AttributeError, KeyError):
        raise UsageError(f"not a gemvtune config: {type(config).__name__}") from None


def is_library(config: Any) -> bool:
    """Whether ``config`` is a library's algorithm (no source: nothing to render or compile)."""
    return family_of(config).library


def get_family(name: str) -> Family:
    if name not in FAMILIES:
        raise UsageError(f"unknown family {name!r}; choose one of {', '.join(FAMILIES)}")
    return FAMILIES[name]


def parse_families(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(p.strip() for p in text.split(",") if p.strip()))
    if not names:
        raise UsageError("--family needs at least one of " + ", ".join(FAMILIES))
    for n in names:
        get_family(n)
    return names


def config_from_dict(data: Any) -> Any:
    """A config of any family from its JSON object (``family`` defaults to gemv)."""
    if not isinstance(data, dict):
        raise UsageError(f"a config must be a JSON object, got {type(data).__name__}")
    fam = data.get("family", DEFAULT_FAMILY)
    if not isinstance(fam, str):
        raise UsageError(f"config family must be a string, got {fam!r}")
    return get_family(fam).config_cls.from_dict(data)


def record_config(rec: Any) -> Any:
    """The config of a table record (a winner, candidate or family best: ``{"family": …, "config": {…}, …}``; no
    family: the default one, as in tables before split-K). Raises on a record that holds no readable config."""
    return config_from_dict({"family": rec.get("family", DEFAULT_FAMILY), **rec["config"]})


def for_dtype(config: Any, dtype: str) -> Any:
    """The config a ``dtype`` shape runs in place of ``config`` (one tuned for the other dtype): itself, or for
    BF16 with an FP32 accumulator where it accumulates in FP16 (BF16 accumulates in FP32 only). Loads, tiles and
    the rest are the same in both dtypes: two bytes per weight."""
    if dtype == "bf16" and getattr(config, "acc", None) == "fp16":
        return dataclasses.replace(config, acc="fp32")
    return config


def config_to_dict(config: Any) -> dict[str, Any]:
    """JSON object of a config, naming its family (tables and CSVs keep both families apart)."""
    return {"family": config.family, **config.to_dict()}


def load_configs(path: str) -> list[Any]:
    """A JSON file holding a list of config objects (or one object); each may name its ``family``
    (gemv when it does not)."""
    from ..userfile import JSON_BYTES, read_json

    data = read_json(path, "config file", JSON_BYTES)   # a regular file, capped; every decoder error one line
    items = data if isinstance(data, list) else [data]
    if not items:
        raise UsageError(f"config file {path} holds no configs")
    return [config_from_dict(x) for x in items]
