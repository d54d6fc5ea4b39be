"""A table entry as a typed, frozen value: ``Entry`` (one (M, d, n, dtype[, weights]) of a table), its ``Measured``
records (the winner, each family's best, the confirmation's candidates, the baselines), its ``SearchRecord`` (the
search's provenance) and its ``Reconfirmation`` (the route's kernels and baselines measured again: ``check``).

``from_json`` reads the object a table file holds (types only: ranges, configs valid for the shape and the rest are
the schema's, ``tableschema``, which builds every entry of a table once, when it is loaded); ``to_json`` gives the
same object back: a key the file held as null or empty stays so, and a key this version does not read is kept as
it was, so the file format is the JSON it always was. Readers go through attributes, never string keys."""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..errors import UsageError
from ..kernels.families import DEFAULT_FAMILY, FAMILY_NAMES
from ..kernels.shapes import Shape


class SchemaError(Exception):
    """One bad field: ``field`` (dotted path) and what is wrong with it."""

    def __init__(self, field: str, problem: str):
        super().__init__(f"{field} {problem}")
        self.field, self.problem = field, problem


class FrozenMap(Mapping[str, Any]):
    """A read-only mapping (a copy of the one it is made from) that, unlike ``MappingProxyType``, serializes and
    deep-copies: a model holding a table can be copied."""

    __slots__ = ("_d",)

    def __init__(self, d: Mapping[str, Any] | None = None):
        self._d = dict(d or {})

    def __getitem__(self, key: str) -> Any:
        return self._d[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __repr__(self) -> str:
        return repr(self._d)

    def __getstate__(self) -> dict[str, Any]:
        return self._d

    def __setstate__(self, d: dict[str, Any]) -> None:
        self._d = d


def _frozen(d: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    return FrozenMap(d)


def _is(kind: str, v: Any) -> bool:
    if kind == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if kind == "integer":
        return isinstance(v, int) and not isinstance(v, bool)
    if kind == "string":
        return isinstance(v, str)
    if kind == "bool":
        return isinstance(v, bool)
    if kind == "object":
        return isinstance(v, dict)
    if kind == "strings":
        return isinstance(v, list) and all(isinstance(x, str) for x in v)
    if kind == "strings-or-bool":   # (searches of 2026-12-02 06:30-07:05 wrote one bool for all their families)
        return isinstance(v, bool) or _is("strings", v)
    if kind == "counts":
        return isinstance(v, dict) and all(isinstance(k, str) and _is("integer", x) for k, x in v.items())
    raise AssertionError(kind)


_WANT = {"number": "a number", "integer": "an integer", "string": "a string", "bool": "true or false",
         "object": "a JSON object", "strings": "a list of strings", "strings-or-bool": "a list of strings or a bool",
         "counts": "an object of integer counts"}


def _value(kind: str, v: Any) -> Any:
    """The frozen value of a JSON value of ``kind`` (lists become tuples, objects read-only mappings)."""
    if kind == "object":
        return _frozen(copy.deepcopy(v))
    if kind == "counts":
        return _frozen(v)
    if kind in ("strings", "strings-or-bool") and isinstance(v, list):
        return tuple(v)
    return v


def _json(v: Any) -> Any:
    if isinstance(v, (Measured, SearchRecord, Reconfirmation)):
        return v.to_json()
    if isinstance(v, Mapping):
        return {k: _json(x) for k, x in v.items()}
    if isinstance(v, tuple):
        return [_json(x) for x in v]
    return v


def _where(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


_REQUIRED = object()   # the "default" of a field that has none (M, d, winner)


@functools.cache
def _defaults(cls: type) -> dict[str, Any]:
    """Each field's default (``extra`` and ``blank`` aside): a field at its default is not written."""
    def default(f: Any) -> Any:
        if f.default is not dataclasses.MISSING:
            return f.default
        return f.default_factory() if f.default_factory is not dataclasses.MISSING else _REQUIRED
    return {f.name: default(f) for f in dataclasses.fields(cls) if f.name not in ("extra", "blank")}


def _read(cls: type, raw: Any, where: str, convert: Mapping[str, Callable[[Any, str], Any]] | None = None) -> Any:
    """``cls`` from the JSON object ``raw``: each of ``cls.KINDS`` type-checked (null: as absent), each of
    ``convert`` through its function, the rest kept as ``extra``; a key held as null or as its field's empty
    default is remembered in ``blank`` (written back as it was)."""
    if not isinstance(raw, dict):
        raise SchemaError(where or "entry", f"must be a JSON object, got {'null' if raw is None else type(raw).__name__}")
    convert = convert or {}
    defaults = _defaults(cls)
    vals: dict[str, Any] = {}
    blank: dict[str, Any] = {}
    for key, kind in cls.KINDS.items():   # type: ignore[attr-defined]
        if key not in raw:
            continue
        v = raw[key]
        if key in convert:
            v = convert[key](v, _where(where, key))
        elif v is not None:
            if not _is(kind, v):
                raise SchemaError(_where(where, key), f"must be {_WANT[kind]}, got {type(v).__name__}")
            v = _value(kind, v)
        if v is None or v == defaults[key]:
            blank[key] = copy.deepcopy(raw[key])
        else:
            vals[key] = v
    extra = {k: copy.deepcopy(v) for k, v in raw.items() if k not in cls.KINDS}   # type: ignore[attr-defined]
    return cls(**vals, extra=_frozen(extra), blank=_frozen(blank))


def _write(obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    cls: type = obj.__class__
    for key, default in _defaults(cls).items():
        v = getattr(obj, key)
        if v is not None and v != default:
            out[key] = _json(v)
        elif key in obj.blank:
            out[key] = copy.deepcopy(obj.blank[key])
    out.update(copy.deepcopy(dict(obj.extra)))
    return out


_MEASURED_KINDS = {"status": "string", "us": "number", "us_min": "number", "us_max": "number", "gbps": "number",
                   "pct_ceiling": "number", "spread": "number", "rounds": "integer", "label": "string",
                   "name": "string", "error": "string", "kept_from": "string", "family": "string",
                   "config": "object"}


@dataclass(frozen=True, slots=True, kw_only=True)
class Measured:
    """A measured record: an entry's winner, a family's best, a confirmation candidate or a baseline. Every
    field may be absent (None); ``config`` is the config's JSON object as the table holds it."""

    KINDS: ClassVar[dict[str, str]] = _MEASURED_KINDS
    status: str | None = None     # absent: "ok"
    us: float | None = None       # the median µs of the confirmation's rounds
    us_min: float | None = None
    us_max: float | None = None
    gbps: float | None = None
    pct_ceiling: float | None = None
    spread: float | None = None
    rounds: int | None = None
    label: str | None = None
    name: str | None = None
    error: str | None = None
    kept_from: str | None = None  # a family best kept from an earlier search: when that search was
    family: str | None = None     # absent: the default family (tables before split-K)
    config: Mapping[str, Any] | None = None
    extra: Mapping[str, Any] = field(default_factory=_frozen, repr=False)
    blank: Mapping[str, Any] = field(default_factory=_frozen, repr=False, compare=False)

    @classmethod
    def from_json(cls, raw: Any, where: str = "") -> Measured:
        return _read(cls, raw, where)

    def to_json(self) -> dict[str, Any]:
        return _write(self)

    def __bool__(self) -> bool:
        """An empty record (``{}``) is false, as its dict was (``baselines.cublas_of`` skips it)."""
        return bool(self.to_json())

    @property
    def ok(self) -> bool:
        """No status (absent, not null) or "ok"."""
        return self.status == "ok" or (self.status is None and "status" not in self.blank)

    @property
    def ok_us(self) -> float | None:
        """The time of a correct measurement: ``us`` when the status is ok and ``us`` a positive number."""
        v = self.us
        return float(v) if self.ok and isinstance(v, (int, float)) and v == v and v > 0 else None

    def config_object(self) -> Any:
        """The record's config (of its family; none named: the default one). Raises on a record that holds no
        readable config (no config, an unknown family or value)."""
        from ..kernels.families import config_from_dict

        if self.config is None:
            raise SchemaError("config", "is missing")
        return config_from_dict({"family": self.family or DEFAULT_FAMILY, **self.config})


_SEARCH_KINDS = {"sampler": "string", "seed": "integer", "trials_budget": "integer", "families": "strings",
                 "measured_trials": "integer", "total_trials": "integer", "study": "string", "started": "string",
                 "finished": "string", "search_s": "number", "confirm_rounds": "integer", "top_k": "integer", "replayed":
                 "bool", "family_trials": "counts", "space_measured": "strings-or-bool", "family_budgets": "counts"}


@dataclass(frozen=True, slots=True, kw_only=True)
class SearchRecord:
    """How an entry was searched (``tuning.search`` writes it): sampler, budget, trials, times, families."""

    KINDS: ClassVar[dict[str, str]] = _SEARCH_KINDS
    sampler: str | None = None
    seed: int | None = None
    trials_budget: int | None = None
    families: tuple[str, ...] | None = None
    measured_trials: int | None = None     # the studies' measured trials (resumed studies count whole)
    total_trials: int | None = None
    study: str | None = None
    started: str | None = None
    finished: str | None = None
    search_s: float | None = None
    confirm_rounds: int | None = None
    top_k: int | None = None
    replayed: bool | None = None
    family_trials: Mapping[str, int] | None = None          # per family: its study's measured trials
    space_measured: tuple[str, ...] | bool | None = None    # families whose whole valid space was measured
    family_budgets: Mapping[str, int] | None = None         # per family: its trials (a whole-model tune's split)
    extra: Mapping[str, Any] = field(default_factory=_frozen, repr=False)
    blank: Mapping[str, Any] = field(default_factory=_frozen, repr=False, compare=False)

    @classmethod
    def from_json(cls, raw: Any, where: str = "search") -> SearchRecord:
        return _read(cls, raw, where)

    def to_json(self) -> dict[str, Any]:
        return _write(self)


_RECONFIRM_KINDS = {"kernels": "list", "baselines": "object", "rounds": "integer", "date": "string",
                    "pid": "integer", "host": "string", "gpu": "object"}


@dataclass(frozen=True, slots=True, kw_only=True)
class Reconfirmation:
    """The entry's route measured again in a fresh process (``tuning.reconfirm``): each kernel the route can run
    (``kernels``, configs with their medians and spreads) and the baselines by name (cuBLAS per framework;
    ``inductor`` when asked), interleaved over ``rounds``; when (``date``), by which process (``pid`` on ``host``)
    and on which GPU (``gpu``: its name and PCI bus id)."""

    KINDS: ClassVar[dict[str, str]] = _RECONFIRM_KINDS
    kernels: tuple[Measured, ...] = ()
    baselines: Mapping[str, Measured] = field(default_factory=_frozen)
    rounds: int | None = None
    date: str | None = None
    pid: int | None = None
    host: str | None = None
    gpu: Mapping[str, Any] | None = None
    extra: Mapping[str, Any] = field(default_factory=_frozen, repr=False)
    blank: Mapping[str, Any] = field(default_factory=_frozen, repr=False, compare=False)

    @classmethod
    def from_json(cls, raw: Any, where: str = "reconfirmed") -> Reconfirmation:
        return _read(cls, raw, where, {"kernels": _candidates, "baselines": _baselines})

    def to_json(self) -> dict[str, Any]:
        return _write(self)


def _record(v: Any, where: str) -> Measured:
    return Measured.from_json(v, where)


def _candidates(v: Any, where: str) -> tuple[Measured, ...] | None:
    if v is None:
        return None
    if not isinstance(v, list):
        raise SchemaError(where, f"must be a list, got {type(v).__name__}")
    return tuple(Measured.from_json(c, f"{where}[{i}]") for i, c in enumerate(v))


def _baselines(v: Any, where: str) -> Mapping[str, Measured] | None:
    if not v:   # (null, {} and any other empty value read as none, as the schema reads them)
        return None
    if not isinstance(v, dict):
        raise SchemaError(where, f"must be a JSON object, got {type(v).__name__}")
    return _frozen({k: Measured.from_json(b, f"{where}.{k}") for k, b in v.items()})


def _search(v: Any, where: str) -> SearchRecord | None:
    return SearchRecord.from_json(v, where) if v else None


def _reconfirmed(v: Any, where: str) -> Reconfirmation | None:
    return Reconfirmation.from_json(v, where) if v else None


_ENTRY_KINDS = {"M": "integer", "d": "integer", "n": "integer", "dtype": "string", "weights": "string", "winner": "object",
                "candidates": "list", "baselines": "object", "search": "object", "tie": "bool", "launch_bound": "bool",
                "updated": "string", "reconfirmed": "object"}
_CONVERT = {"winner": _record, "candidates": _candidates, "baselines": _baselines, "search": _search,
            "reconfirmed": _reconfirmed}


@dataclass(frozen=True, slots=True, kw_only=True)
class Entry:
    """One entry of a table: its shape's numbers, the winner, each family's best (``best``: family name ->
    record; in the file, a key per family), the confirmation's candidates, the baselines by name
    (``gemvtune.baselines``), the search record, whether the winner tied and was launch-bound, and its
    re-confirmation in a fresh process (``reconfirmed``)."""

    KINDS: ClassVar[dict[str, str]] = {**_ENTRY_KINDS, **{f: "object" for f in FAMILY_NAMES}}
    M: int
    d: int
    n: int | None = None          # absent: 1
    dtype: str | None = None      # absent: fp16 (every table before BF16)
    weights: str | None = None    # absent: W in dtype (every table before FP8); "e4m3-row" / "e4m3-b128"
    winner: Measured
    best: Mapping[str, Measured] = field(default_factory=_frozen)
    candidates: tuple[Measured, ...] = ()
    baselines: Mapping[str, Measured] = field(default_factory=_frozen)
    search: SearchRecord = field(default_factory=SearchRecord)
    tie: bool | None = None
    launch_bound: bool | None = None
    updated: str | None = None
    reconfirmed: Reconfirmation | None = None   # absent: never re-confirmed in a fresh process
    extra: Mapping[str, Any] = field(default_factory=_frozen, repr=False)
    blank: Mapping[str, Any] = field(default_factory=_frozen, repr=False, compare=False)

    @classmethod
    def from_json(cls, raw: Any) -> Entry:
        """An entry from its JSON object; a missing or mistyped field is a SchemaError naming it."""
        if not isinstance(raw, dict):
            raise SchemaError("entry", f"must be a JSON object, got {type(raw).__name__}")
        for key in ("M", "d", "winner"):
            if raw.get(key) is None:
                raise SchemaError(key, "is missing" if key not in raw else "is null")
        if not isinstance(raw["winner"], dict) or "config" not in raw["winner"]:
            raise SchemaError("winner.config", "is missing")
        fams = {f: raw[f] for f in FAMILY_NAMES if f in raw}
        rest = {k: v for k, v in raw.items() if k not in fams}
        e: Entry = _read(cls, rest, "", _CONVERT)
        best = _frozen({f: Measured.from_json(v, f) for f, v in fams.items()})
        return dataclasses.replace(e, best=best)

    def to_json(self) -> dict[str, Any]:
        out = _write(dataclasses.replace(self, best=_frozen()))
        out.update({f: rec.to_json() for f, rec in self.best.items()})
        return out

    @property
    def shape(self) -> Shape:
        return Shape(int(self.M), int(self.d), int(self.n or 1), self.dtype or "fp16", self.weights or "")

    def winner_config(self) -> Any:
        """The winning config, of whichever family won (tables before split-K: the default family)."""
        return self.winner.config_object()

    def records(self) -> list[Measured]:
        """The winner, then each family's best (registry order): the entry's measured kernels."""
        return [self.winner] + [self.best[f] for f in FAMILY_NAMES if f in self.best]


def built(entries: Mapping[str, Any], where: str) -> dict[str, Entry]:
    """A table's entries (key -> JSON object) built unchecked (a table made in code, not loaded); a missing or
    mistyped field is one UsageError naming ``where``, the entry and the field."""
    out = {}
    for key, e in entries.items():
        try:
            out[key] = Entry.from_json(e)
        except SchemaError as err:
            raise UsageError(f"{where}: entry {key!r:.60} is malformed: {err}") from None
    return out
