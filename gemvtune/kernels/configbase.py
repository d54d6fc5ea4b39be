"""What every family's config shares: domain checks and JSON (de)serialization with clear errors, the PTX features a
config needs (``gemvtune.kernels.arch``) and why an architecture cannot run it, and the hooks each family's config
class answers for the rest of gemvtune (its complexity, its template values, its workspace rule)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, fields
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from .arch import DEFAULT as DEFAULT_ARCH
from .arch import Arch, parse_arch


class ConfigBase:
    """Mixin for the frozen config dataclasses; subclasses set ``family`` and ``DOMAINS``.

    Every config has ``split``: the slices of d across blocks (grid.y; 1: none). It is the code's one name for
    that parameter; a family whose persisted field is spelled otherwise (``split_k``: gemv, as users and the
    recorded tables, CSVs and cost model name it, and cuBLASLt, after its SPLITK_NUM) reads it through a property."""

    family = ""
    DOMAINS: dict[str, tuple[Any, ...]] = {}
    # Values a field accepts beyond its searched domain: configs that are chosen elsewhere than in a per-shape search
    # (the GEMV family's pdl=chainK: chosen in a model's chain of launches, never timed as an isolated kernel).
    EXTRA_VALUES: dict[str, tuple[Any, ...]] = {}
    # Values of the space that only a model's chain of launches may choose (``gemvtune.bench.chain``): a per-shape
    # search never proposes them and a route never runs a config holding one on an isolated search's timing
    # (``search_domains``, ``chain_only``). Programmatic dependent launch (pdl=on, chainK): a search times a graph of
    # back-to-back copies of one kernel, where each launch overlaps the one before it, a neighbour no model has
    # (1024x4096 at n = 1 on the H200, 2026-12-02: every pdl config 3.32-3.42 µs, the fastest without 4.23).
    CHAIN_ONLY: dict[str, tuple[Any, ...]] = {}
    # The epilogue fusions the family's template renders (``gemvtune.kernels.epilogue``: residual, swiglu)
    EPILOGUE_FUSIONS: tuple[str, ...] = ()
    # The PTX features (``gemvtune.kernels.arch.FEATURES``) the family's template emits that not every architecture
    # has: for every config, by input dtype, and by a field's value ((field, value) -> feature). ``features`` reads
    # them; tests/test_arch_families.py checks them against what each rendered source contains.
    NEEDS: tuple[str, ...] = ()
    NEEDS_BY_DTYPE: dict[str, tuple[str, ...]] = {}
    NEEDS_BY_VALUE: dict[tuple[str, Any], str] = {}
    # The weight formats (``Shape.weights``) the family's kernels read: "" is W in the input dtype (FP16/BF16)
    WEIGHTS: tuple[str, ...] = ("",)

    if TYPE_CHECKING:   # what every family's config defines (declared for the type checker only)
        @property
        def label(self) -> str: ...

        @property
        def split(self) -> int: ...

        def shape_reasons(self, shape: Any, arch: Arch = DEFAULT_ARCH) -> list[str]: ...

    @classmethod
    def _domain_sets(cls) -> tuple[tuple[str, frozenset], ...]:
        """(field, its allowed values as a set) of every field, built once per class: validity is asked of every
        point of a space (345,600 for gemv), and ``dataclasses.fields`` on each call was most of its cost."""
        sets = cls.__dict__.get("_DOMAIN_SETS")
        if sets is None:
            sets = tuple((f.name, frozenset(cls.DOMAINS[f.name]) | frozenset(cls.EXTRA_VALUES.get(f.name, ())))
                         for f in fields(cls))  # type: ignore[arg-type]
            cls._DOMAIN_SETS = sets   # type: ignore[attr-defined]
        return sets

    def domain_errors(self) -> list[str]:
        errs = []
        for name, allowed in self._domain_sets():
            v = getattr(self, name)
            if type(v) is bool or v not in allowed:   # (True == 1: a bool is never a domain value)
                errs.append(f"{name}={v!r} is not one of {list(self.DOMAINS[name]) + list(self.EXTRA_VALUES.get(name, ()))}")
        return errs

    def invalid_reasons(self, shape: Any, arch: Any = None) -> list[str]:
        """Why this config cannot run ``shape`` on ``arch`` (an ``Arch`` or its name; None: sm_90), one short line
        each (empty: valid): its domain errors if it has any, else the features ``arch`` lacks, then the family's
        ``shape_reasons`` (which read the arch's limits). Enumerating a space, whose points are in the domains by
        construction, asks ``feature_reasons`` and ``shape_reasons`` alone."""
        errs = self.domain_errors()
        if errs:
            return errs
        a = parse_arch(arch)
        return self.feature_reasons(getattr(shape, "dtype", "fp16"), a) + \
            (self.weights_reasons(shape) or self.shape_reasons(shape, a))

    def is_valid(self, shape: Any, arch: Any = None) -> bool:
        return not self.invalid_reasons(shape, arch)

    @classmethod
    def reads(cls, shape: Any) -> bool:
        """Whether the family's kernels read ``shape``'s weight format (``WEIGHTS``)."""
        return getattr(shape, "weights", "") in cls.WEIGHTS

    @classmethod
    def weights_reasons(cls, shape: Any) -> list[str]:
        """Why the family cannot read ``shape``'s weights (empty: it can; then ``shape_reasons`` say the rest)."""
        if cls.reads(shape):
            return []
        w = getattr(shape, "weights", "") or "FP16/BF16"
        only = "FP16/BF16 weights only" if cls.WEIGHTS == ("",) else \
            f"FP8 weights only ({', '.join(x for x in cls.WEIGHTS if x)})"
        return [f"{w} weights: the {cls.family} family reads {only}"]

    # ---- what an architecture must have ----------------------------------------------------------------
    @classmethod
    def all_needs(cls) -> frozenset[str]:
        """Every feature some config of the family may need (an arch that has them all runs each one)."""
        needs = cls.__dict__.get("_ALL_NEEDS")
        if needs is None:
            needs = frozenset(cls.NEEDS) | frozenset(f for fs in cls.NEEDS_BY_DTYPE.values() for f in fs) \
                | frozenset(cls.NEEDS_BY_VALUE.values())
            cls._ALL_NEEDS = needs   # type: ignore[attr-defined]
        return needs

    def features(self, dtype: str = "fp16") -> dict[str, str]:
        """The features this config's kernels need with ``dtype`` inputs, each with what needs it ("pdl=on")."""
        out = {f: f"the {self.family} family" for f in self.NEEDS}
        for f in self.NEEDS_BY_DTYPE.get(dtype, ()):
            out.setdefault(f, f"the {self.family} family with {dtype.upper()} inputs")
        for (name, value), f in self.NEEDS_BY_VALUE.items():
            if getattr(self, name) == value:
                out.setdefault(f, f"{name}={value}")
        return out

    def feature_reasons(self, dtype: str, arch: Arch) -> list[str]:
        """Why ``arch`` cannot run this config for want of a feature (empty: it has all it needs)."""
        if arch.features >= self.all_needs():
            return []
        return [arch.lacks(f, need) for f, need in self.features(dtype).items() if f not in arch.features]

    def limit_reasons(self, shape: Any, arch: Arch) -> list[str]:
        """Why this config exceeds a limit of ``arch`` for ``shape`` (shared memory a block opts in to, ...); none by
        default. A family's ``shape_reasons`` asks it where its limits always stood in its list of reasons."""
        return []

    def arch_reasons(self, shape: Any, arch: Any = None) -> list[str]:
        """Why ``arch`` (an ``Arch`` or its name) cannot run this config for ``shape``: the features it lacks, then the
        family's ``limit_reasons`` (empty: nothing about the architecture stands in the way). Asked before a source
        reaches NVRTC (``gemvtune.build.compile``)."""
        a = parse_arch(arch)
        return self.feature_reasons(getattr(shape, "dtype", "fp16"), a) + self.limit_reasons(shape, a)

    @classmethod
    def arch_domains(cls, domains: dict[str, Any], arch: Any = None) -> dict[str, Any]:
        """``domains`` without the values whose configs always need a feature ``arch`` lacks (pdl=on below sm_90):
        what a search of the family proposes on ``arch`` (the domains themselves where it lacks none)."""
        a = parse_arch(arch)
        drop = {(k, v) for (k, v), f in cls.NEEDS_BY_VALUE.items() if f not in a.features}
        if not drop:
            return domains
        return {k: tuple(v for v in vals if (k, v) not in drop) for k, vals in domains.items()}

    @classmethod
    def search_domains(cls, domains: dict[str, Any], arch: Any = None) -> dict[str, Any]:
        """What a per-shape search of the family proposes on ``arch``: ``arch_domains`` without the ``CHAIN_ONLY``
        values (a field keeps at least one value)."""
        out = cls.arch_domains(domains, arch)
        if not cls.CHAIN_ONLY:
            return out
        return {k: tuple(v for v in vals if v not in cls.CHAIN_ONLY.get(k, ())) or tuple(vals)
                for k, vals in out.items()}

    def chain_only(self) -> str:
        """Why only a model's chain may choose this config ("field=value ..."), "" where an isolated search's timing
        stands for what it runs in a model (``CHAIN_ONLY``)."""
        for k, vals in self.CHAIN_ONLY.items():
            v = getattr(self, k, None)
            if v in vals:
                return (f"{k}={v} is chosen in a model's chain of launches only (an isolated timing overlaps each "
                        "launch with the one before it)")
        return ""

    def needs_workspace(self, shape: Any) -> bool:
        """Whether a kernel of one call of ``shape`` reads the workspace (``ws`` or ``counters``): the
        family's rule, so launches and the exported header allocate one only where it is read."""
        raise NotImplementedError(f"{type(self).__name__} does not say when it needs a workspace")

    def complexity(self) -> tuple:
        """The family's order of simplicity (smaller is simpler): a confirmation's tie goes to the simplest config
        (``gemvtune.tuning.confirm``), and a search queues a small space's configs simplest first."""
        raise NotImplementedError(f"{type(self).__name__} does not say how complex it is")

    def render_values(self, shape: Any, arch: Arch = DEFAULT_ARCH) -> dict[str, Any]:
        """The family's own template values for ``shape`` on ``arch``, beyond its fields, the shape, dtype and
        epilogue that ``gemvtune.build.render`` always passes; none by default."""
        return {}

    def epilogue_reasons(self, epilogue: Any) -> list[str]:
        """Why this config cannot fuse ``epilogue`` (output dtype, bias) into its store; none by default."""
        return []

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]

    def sixteen_bit(self) -> tuple[str, dict[str, Any]]:
        """(family, parameter values in its domains) this config is described as among the cost model's features
        (``gemvtune.model.features``): itself, for a family of 16-bit weights; for an FP8 family, the 16-bit sibling
        that reads the same bytes per load."""
        return self.family, {k: getattr(self, k) for k in self.DOMAINS}

    @classmethod
    def from_dict(cls, data: Any) -> Any:
        fam = cls.family
        if not isinstance(data, dict):
            raise UsageError(f"a {fam} config must be a JSON object, got {type(data).__name__}")
        names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(data) - names - {"family"})
        if unknown:
            raise UsageError(f"unknown {fam} parameter(s) {', '.join(unknown)}; known: {', '.join(cls.DOMAINS)}")
        if data.get("family", fam) != fam:
            raise UsageError(f"config family {data['family']!r} is not {fam!r}")
        cfg = cls(**{k: v for k, v in data.items() if k != "family"})
        errs = cfg.domain_errors()
        if errs:
            raise UsageError(f"bad {fam} config: " + "; ".join(errs))
        return cfg


def parse_config_text(text: str, presets: dict[str, Any], base: Any) -> Any:
    """A config of ``base``'s family from ``text``: a preset name, a JSON object, or ``key=value,key=value`` over
    ``base`` (a value of ASCII digits, at most 12, is an integer; ``from_dict`` range-checks every one)."""
    from ..intparse import is_int_text

    t = text.strip()
    if t in presets:
        return presets[t]
    cls = type(base)
    if t.startswith("{"):
        from ..userfile import decode_json

        return cls.from_dict(decode_json(t, "config"))
    data: dict[str, Any] = base.to_dict()
    for item in filter(None, (p.strip() for p in t.split(","))):
        if "=" not in item:
            raise UsageError(f"malformed config item {item!r}: expected key=value, a JSON object or a preset "
                             f"({', '.join(presets)})")
        k, v = (s.strip() for s in item.split("=", 1))
        data[k] = int(v) if is_int_text(v) else v
    return cls.from_dict(data)


def valid_of(configs: Iterable[Any], shape: Any, arch: Any = None) -> list[Any]:
    """The configs of ``configs`` (points of a family's space: in its domains by construction) valid for ``shape`` on
    ``arch`` (None: sm_90); the features are asked only where ``arch`` lacks one the family may need."""
    a = parse_arch(arch)
    dtype, weights = getattr(shape, "dtype", "fp16"), getattr(shape, "weights", "")
    out, check = [], None
    for c in configs:
        if check is None:
            check = not a.features >= c.all_needs()
        if weights in c.WEIGHTS and not c.shape_reasons(shape, a) and not (check and c.feature_reasons(dtype, a)):
            out.append(c)
    return out


def sample_of(valid: list[Any], first: Any, k: int, seed: int = 0) -> list[Any]:
    """``first`` (a family's seed config, if it is among ``valid``) then k-1 distinct others of ``valid`` drawn
    uniformly, seeded: a command's ``--configs sample:N``."""
    import random

    out = [first] if first in valid else []
    rest = [c for c in valid if c != first]
    out += random.Random(seed).sample(rest, min(max(k - len(out), 0), len(rest)))
    return out
