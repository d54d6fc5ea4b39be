"""What every family's config shares: domain checks and JSON (de)serialization with clear errors, and the hooks each
family's config class answers for the rest of gemvtune (its complexity, its template values, its workspace rule)."""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import TYPE_CHECKING, Any

from ..errors import UsageError


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
    # The epilogue fusions the family's template renders (``gemvtune.kernels.epilogue``: residual, swiglu)
    EPILOGUE_FUSIONS: tuple[str, ...] = ()

    if TYPE_CHECKING:   # what every family's config defines (declared for the type checker only)
        @property
        def label(self) -> str: ...

        @property
        def split(self) -> int: ...

        def shape_reasons(self, shape: Any) -> list[str]: ...

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

    def invalid_reasons(self, shape: Any) -> list[str]:
        """Why this config cannot run ``shape`` (empty: valid), one short line each: its domain errors if it has
        any, else the family's ``shape_reasons``. Enumerating a space, whose points are in the domains by
        construction, asks ``shape_reasons`` alone."""
        return self.domain_errors() or self.shape_reasons(shape)

    def is_valid(self, shape: Any) -> bool:
        return not self.invalid_reasons(shape)

    def needs_workspace(self, shape: Any) -> bool:
        """Whether a kernel of one call of ``shape`` reads the workspace (``ws`` or ``counters``): the
        family's rule, so launches and the exported header allocate one only where it is read."""
        raise NotImplementedError(f"{type(self).__name__} does not say when it needs a workspace")

    def complexity(self) -> tuple:
        """The family's order of simplicity (smaller is simpler): a confirmation's tie goes to the simplest config
        (``gemvtune.tuning.confirm``), and a search queues a small space's configs simplest first."""
        raise NotImplementedError(f"{type(self).__name__} does not say how complex it is")

    def render_values(self, shape: Any) -> dict[str, Any]:
        """The family's own template values for ``shape``, beyond its fields, the shape, dtype and epilogue that
        ``gemvtune.build.render`` always passes; none by default."""
        return {}

    def epilogue_reasons(self, epilogue: Any) -> list[str]:
        """Why this config cannot fuse ``epilogue`` (output dtype, bias) into its store; none by default."""
        return []

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]

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
