"""The kernel families gemvtune searches, by name: the registry. A family is one module of ``gemvtune.kernels``
(its config class, whose methods say how complex a config is, which values its template renders with, when it
needs a workspace and which epilogues it can fuse; its domains, seed, template, study suffix, census, a table's
fallbacks and its sweep grid, as module names ``Family.from_module`` reads) and its template; registering it is one
line in ``MODULES``. Everything that handles "a config of some family" goes through here."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ..errors import UsageError
from . import cublaslt, fp8gemv, fp8mma, gemv, mma, ring, splitk
from .configbase import ConfigBase

# Families in registry order: the order of a search, and of a confirmation's tie-break (the gemv family first, its
# seed the llama.cpp config; cuBLASLt last, so a tie within the spread goes to gemvtune's own kernels). The FP8
# families (FP8 weights only, where no other family is valid: the CUDA-core GEMV, then the tensor-core one) after the
# FP16/BF16 template families.
MODULES: tuple[ModuleType, ...] = (gemv, splitk, mma, ring, fp8gemv, fp8mma, cublaslt)

# The names a family's module declares, by the Family field each fills: those of every family, then those of its kind.
MODULE_NAMES = {"name": "NAME", "config_cls": "CONFIG", "domains": "DOMAINS", "seed": "SEED", "seed_name": "SEED_NAME",
                "study_suffix": "STUDY_SUFFIX", "all_configs": "all_configs", "fallbacks": "FALLBACKS",
                "sweep_grid": "SWEEP_GRID", "sweep_note": "SWEEP_NOTE"}
KIND_NAMES = {"template": {"template": "TEMPLATE", "main_kernel": "MAIN_KERNEL"},
              "library": {"candidates": "candidates", "runner_problem": "runner_problem", "census_note": "CENSUS_NOTE"}}


@dataclass(frozen=True, kw_only=True)
class Family:
    name: str
    config_cls: type[ConfigBase]
    domains: dict[str, tuple[Any, ...]]
    seed: Any                       # the first trial of every study of this family (None: a library's)
    seed_name: str                  # what a study calls that trial ("llama.cpp")
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
    template: str = ""              # under build/templates/ (a template family's)
    main_kernel: str = ""           # the kernel whose registers a measurement reports (a template family's)
    candidates: Callable[[Any, Any], list[Any]] | None = None
    runner_problem: Callable[[Any], str | None] | None = None
    census_note: str = ""           # a library family's line in ``gemvtune space`` (what stands for its census)

    @classmethod
    def from_module(cls, module: ModuleType) -> Family:
        """The family a module declares (``KIND`` defaults to "template"); a missing or inconsistent name is one
        line naming the module."""
        kind = getattr(module, "KIND", "template")
        if kind not in KIND_NAMES:
            raise TypeError(f"{module.__name__}: KIND={kind!r} is not one of {', '.join(KIND_NAMES)}")
        names = {**MODULE_NAMES, **KIND_NAMES[kind]}
        missing = [n for n in names.values() if not hasattr(module, n)]
        if missing:
            raise TypeError(f"{module.__name__} does not declare {', '.join(missing)} (a {kind} family's names)")
        fam = cls(kind=kind, **{f: getattr(module, n) for f, n in names.items()})
        config = fam.config_cls
        if config.family != fam.name or config.DOMAINS is not fam.domains:
            raise TypeError(f"{module.__name__}: {config.__name__} is not the config of family {fam.name!r} "
                            "(its family and DOMAINS are the module's NAME and DOMAINS)")
        if (fam.seed is None) != fam.library or (fam.seed is not None and not isinstance(fam.seed, config)):
            raise TypeError(f"{module.__name__}: SEED is a {config.__name__} (None for a library family only)")
        return fam

    @property
    def library(self) -> bool:
        return self.kind == "library"

    def study_name(self, base: str) -> str:
        return base + self.study_suffix


def _registry(modules: Iterable[ModuleType]) -> dict[str, Family]:
    out: dict[str, Family] = {}
    for fam in map(Family.from_module, modules):
        if fam.name in out or fam.study_suffix in {f.study_suffix for f in out.values()}:
            raise TypeError(f"family {fam.name!r}: its name or study suffix {fam.study_suffix!r} is another family's")
        out[fam.name] = fam
    return out


FAMILIES: dict[str, Family] = _registry(MODULES)
# Order of families in a search; the gemv family first (its seed is the llama.cpp config).
FAMILY_NAMES = tuple(FAMILIES)
DEFAULT_FAMILY = FAMILY_NAMES[0]   # a config or table record that names no family is of this one


def families_for(shape: Any, names: Iterable[str] | None = None) -> tuple[str, ...]:
    """The families of ``names`` (None: every one) whose kernels read ``shape``'s weights (``Shape.weights``): for
    FP16/BF16 weights every family but the FP8 one, for FP8 weights the FP8 family alone."""
    return tuple(n for n in (FAMILY_NAMES if names is None else names) if FAMILIES[n].config_cls.reads(shape))


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
