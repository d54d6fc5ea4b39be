"""The whole table schema, checked when a table is loaded: every field that ``report``, ``export``, the
run-time route (``gemvtune.runtime.route``) and a merging ``record`` read has the type and range they rely on, so
a table that loads never crashes them. A bad table is one UsageError that names the entry and the field. Each
checked entry is built once as a ``gemvtune.runtime.entry.Entry``, which every reader then uses.

Also the two ways table and sidecar strings reach a person or a file safely: :func:`printable` escapes
any string for a terminal, :func:`ascii_words` keeps a conservative ASCII subset for generated code."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from ..errors import UsageError
from .entry import Entry, SchemaError

_GPU_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._()+/,:@-]{0,99}$")
_CC_RE = re.compile(r"^\d{1,2}\.\d{1,2}$")
_SAFE_CODE = re.compile(r"[^A-Za-z0-9 ._()+,-]")
_MAX_STR = 4096   # longer strings in a table are not gemvtune's
SAMPLER_NAMES = ("tpe", "random", "gp", "exhaustive")   # what a search record's sampler can be (tuning.samplers)


def printable(v: Any, limit: int = 200) -> str:
    """``v`` as text that cannot move a terminal's cursor, colour it or reorder it: control, format
    (bidi), separator and surrogate characters become ``\\n``/``\\x1b``/``\\u202e`` escapes, a backslash
    is doubled; cut at ``limit`` characters."""
    s = "" if v is None else str(v)
    out = []
    for ch in s[:limit]:
        if ch == "\\":
            out.append("\\\\")
        elif ch.isprintable():
            out.append(ch)
        else:
            out.append(ascii(ch)[1:-1])   # \n, \x1b, \u202e, \U000e0001
    return "".join(out) + ("..." if len(s) > limit else "")


def ascii_words(v: Any, limit: int = 100, default: str = "unknown") -> str:
    """``v`` reduced to letters, digits, space and ``._()+,-`` (anything else becomes ``_``), cut at
    ``limit``: safe inside a C/C++ ``//`` comment or string literal (no newline, quote, backslash or ``?``)."""
    s = _SAFE_CODE.sub("_", "" if v is None else str(v))[:limit].strip()
    return s or default


def gpu_name_problem(name: Any) -> str | None:
    """Why ``name`` is not a GPU name a driver reports (None: it is one). Sweep sidecars are held to this."""
    if not isinstance(name, str):
        return f"must be a string, got {_show(name)}"
    if not _GPU_NAME_RE.match(name):
        return (f"{_show(name)} is not a GPU name (letters, digits, space and ._()+/,:@- only, "
                f"at most 100 characters)")
    return None


def _show(v: Any) -> str:
    r = repr(v)   # repr escapes every non-printable character of a string
    return r if len(r) <= 60 else r[:57] + "..."


def _type_name(v: Any) -> str:
    return "null" if v is None else type(v).__name__


def _num(rec: dict, key: str, where: str, *, required: bool = False, positive: bool = False,
         integer: bool = False) -> None:
    """rec[key] is a finite number (>= 0; > 0 when ``positive``; an int when ``integer``); absent or
    null only when not ``required``."""
    f = f"{where}.{key}" if where else key
    if key not in rec or rec[key] is None:
        if required:
            raise SchemaError(f, "is missing" if key not in rec else "is null; expected a number")
        return
    v = rec[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (integer and not isinstance(v, int)):
        raise SchemaError(f, f"must be {'an integer' if integer else 'a number'}, got {_type_name(v)} {_show(v)}")
    if not math.isfinite(v):
        raise SchemaError(f, f"is {v!r}; expected a finite number")
    if positive and not v > 0:
        raise SchemaError(f, f"is {v!r}; expected a positive number")
    if not positive and v < 0:
        raise SchemaError(f, f"is {v!r}; expected a number >= 0")


def _str(rec: dict, key: str, where: str, *, required: bool = False, pattern: re.Pattern | None = None) -> None:
    f = f"{where}.{key}" if where else key
    if key not in rec or rec[key] is None:
        if required:
            raise SchemaError(f, "is missing")
        return
    v = rec[key]
    if not isinstance(v, str):
        raise SchemaError(f, f"must be a string, got {_type_name(v)} {_show(v)}")
    if len(v) > _MAX_STR:
        raise SchemaError(f, f"is {len(v)} characters long (at most {_MAX_STR})")
    if pattern is not None and not pattern.match(v):
        raise SchemaError(f, f"is {_show(v)}; expected the form {pattern.pattern}")


def _bool(rec: dict, key: str, where: str) -> None:
    if key in rec and rec[key] is not None and not isinstance(rec[key], bool):
        raise SchemaError(f"{where}.{key}" if where else key, f"must be true or false, got {_show(rec[key])}")


def _dict(v: Any, field: str) -> dict:
    if not isinstance(v, dict):
        raise SchemaError(field, f"must be a JSON object, got {_type_name(v)}")
    return v


_TIMES = ("us", "us_min", "us_max")   # µs: finite and positive


def _measured(rec: Any, where: str, need_us: bool = False) -> dict:
    """A measured record (winner, family best, candidate, baseline): its times, rates and words."""
    rec = _dict(rec, where)
    _str(rec, "status", where)
    ok = rec.get("status", "ok") == "ok"
    for k in _TIMES:
        _num(rec, k, where, positive=True, required=(k == "us" and (need_us or (ok and "status" in rec))))
    for k in ("gbps", "pct_ceiling", "spread"):
        _num(rec, k, where)
    _num(rec, "rounds", where, integer=True)
    for k in ("label", "name", "error", "kept_from"):
        _str(rec, k, where)
    return rec


def _config(rec: dict, where: str, shape: Any, family: str | None = None, required: bool = True) -> Any:
    """The record's config, as gemvtune.runtime.route and export parse it, valid for ``shape``."""
    from ..kernels.families import DEFAULT_FAMILY, config_from_dict

    if "config" not in rec:
        if required:
            raise SchemaError(f"{where}.config", "is missing")
        return None
    _str(rec, "family", where)
    cfg_d = _dict(rec["config"], f"{where}.config")
    try:
        cfg = config_from_dict({"family": rec.get("family", DEFAULT_FAMILY), **cfg_d})
    except (UsageError, TypeError, ValueError) as e:
        raise SchemaError(f"{where}.config", f"is not a config: {printable(e, 300)}") from None
    if family is not None and cfg.family != family:
        raise SchemaError(f"{where}.family", f"is {cfg.family!r}; the {family} best must be a {family} config"
                          + ("" if "family" in rec else " (give \"family\")"))
    why = cfg.invalid_reasons(shape)
    if why:
        raise SchemaError(f"{where}.config", f"{cfg.label} cannot run this shape: {why[0]}")
    return cfg


def _family_trials(search: dict[str, Any]) -> None:
    """search.family_trials {family: measured trials} and search.space_measured [families whose whole valid
    space the search measured] (searches of 2026-12-02 06:30-07:05 wrote one bool for all their families)."""
    from ..kernels.families import FAMILY_NAMES

    ft = search.get("family_trials")
    if ft is not None:
        if not isinstance(ft, dict) or not all(k in FAMILY_NAMES and isinstance(v, int) and not isinstance(v, bool)
                                               and v >= 0 for k, v in ft.items()):
            raise SchemaError("search.family_trials", f"must map families to trial counts, got {_show(ft)}")
    sm = search.get("space_measured")
    if sm is not None and not isinstance(sm, bool) and (
            not isinstance(sm, list) or not all(isinstance(f, str) and f in FAMILY_NAMES for f in sm)):
        raise SchemaError("search.space_measured", f"must be a list of families, got {_show(sm)}")


_DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")
_MAX_US = 1e7          # µs (ten seconds): no GEMV re-measured takes longer; a larger time is not a measurement
_MAX_SPREAD = 100.0    # a relative spread of round medians
_MAX_ROUNDS = 1000
_MAX_TAKES = 10          # takes of a re-confirmation (tuning.reconfirm.RETAKES + 1 today)
_MAX_KERNELS = 16


def _bounded(rec: dict, where: str) -> dict:
    """A re-confirmation's measured record: ``_measured``'s checks, and its times, spread and rounds in range."""
    _measured(rec, where)
    for k, top in (*((t, _MAX_US) for t in _TIMES), ("spread", _MAX_SPREAD), ("rounds", _MAX_ROUNDS)):
        v = rec.get(k)
        if v is not None and v > top:
            raise SchemaError(f"{where}.{k}", f"is {v!r}; expected at most {top:g}")
    return rec


def _reconfirmed(rec: Any, shape: Any) -> None:
    """The entry's re-confirmation in a fresh process (``tuning.reconfirm``): its kernels (configs valid for the
    shape), its baselines (registered names), rounds, takes, date, process and GPU."""
    from ..baselines import BASELINES

    if rec is None:
        return
    rec = _dict(rec, "reconfirmed")
    kernels = rec.get("kernels")
    if not isinstance(kernels, list) or not 1 <= len(kernels) <= _MAX_KERNELS:
        raise SchemaError("reconfirmed.kernels", f"must be a list of 1 to {_MAX_KERNELS} measured kernels, got "
                          f"{_type_name(kernels) if not isinstance(kernels, list) else f'{len(kernels)} of them'}")
    for i, k in enumerate(kernels):
        _config(_bounded(_dict(k, f"reconfirmed.kernels[{i}]"), f"reconfirmed.kernels[{i}]"),
                f"reconfirmed.kernels[{i}]", shape)
    for name, b in _dict(rec.get("baselines") or {}, "reconfirmed.baselines").items():
        if name not in BASELINES:
            raise SchemaError("reconfirmed.baselines", f"names {_show(name)}, not a baseline ({', '.join(BASELINES)})")
        _bounded(_dict(b, f"reconfirmed.baselines.{name}"), f"reconfirmed.baselines.{name}")
    _num(rec, "rounds", "reconfirmed", required=True, positive=True, integer=True)
    _num(rec, "pid", "reconfirmed", positive=True, integer=True)
    _num(rec, "takes", "reconfirmed", positive=True, integer=True)   # (more than one: an undecided take retaken)
    for k, top in (("rounds", _MAX_ROUNDS), ("pid", 2**31), ("takes", _MAX_TAKES)):
        if rec.get(k) is not None and rec[k] > top:
            raise SchemaError(f"reconfirmed.{k}", f"is {rec[k]!r}; expected at most {top}")
    _str(rec, "date", "reconfirmed", required=True, pattern=_DATE_RE)
    _str(rec, "host", "reconfirmed")
    check_gpu(rec.get("gpu") or {}, "reconfirmed.gpu")


_SEARCH_INTS = ("seed", "measured_trials", "total_trials", "trials_budget", "confirm_rounds", "top_k")
_SEARCH_STRS = ("sampler", "study", "started", "finished")


def _entry(key: Any, e: Any) -> Entry:
    from ..kernels.families import FAMILY_NAMES
    from ..kernels.shapes import DTYPES, WEIGHTS, Shape
    from .keys import entry_key

    e = _dict(e, "entry")
    for k in ("M", "d"):
        _num(e, k, "", required=True, positive=True, integer=True)
    _num(e, "n", "", positive=True, integer=True)
    dtype = e.get("dtype", "fp16")
    if dtype not in DTYPES:
        raise SchemaError("dtype", f"must be one of {', '.join(DTYPES)}, got {_show(dtype)}")
    weights = e.get("weights", "")
    if weights not in WEIGHTS or weights is None:
        raise SchemaError("weights", f"must be one of {', '.join(w for w in WEIGHTS if w)} (or absent), got {_show(weights)}")
    try:
        shape = Shape(e["M"], e["d"], e.get("n") or 1, dtype, weights)
    except UsageError as err:
        raise SchemaError("M/d/n", f"are not a shape: {err}") from None
    want = entry_key(shape)
    if key != want:
        raise SchemaError("key", f"{_show(key)} does not match its M, d, n, dtype{', weights' if weights else ''} "
                                 f"(expected {want!r})")
    if "winner" not in e:
        raise SchemaError("winner", "is missing")
    _config(_measured(e["winner"], "winner"), "winner", shape)
    for fam in FAMILY_NAMES:
        if fam in e:
            _config(_measured(e[fam], fam), fam, shape, family=fam, required=False)
    cands = e.get("candidates")
    if cands is not None:
        if not isinstance(cands, list):
            raise SchemaError("candidates", f"must be a list, got {_type_name(cands)}")
        for i, c in enumerate(cands):
            _config(_measured(c, f"candidates[{i}]"), f"candidates[{i}]", shape, required=False)
    base = _dict(e.get("baselines") or {}, "baselines")
    for name, b in base.items():
        _measured(b, f"baselines.{name}")
    search = _dict(e.get("search") or {}, "search")
    for k in _SEARCH_INTS:
        _num(search, k, "search", integer=True)
    for k in _SEARCH_STRS:
        _str(search, k, "search")
    _num(search, "search_s", "search")
    _bool(search, "replayed", "search")
    _family_trials(search)
    fams = search.get("families")
    if fams is not None and not (isinstance(fams, list) and all(isinstance(f, str) for f in fams)):
        raise SchemaError("search.families", f"must be a list of family names, got {_show(fams)}")
    _bool(e, "tie", "")
    _bool(e, "launch_bound", "")
    _str(e, "updated", "")
    _reconfirmed(e.get("reconfirmed"), shape)
    return Entry.from_json(e)


def check_entry(key: str, e: Any, path: Any) -> Entry:
    """One entry, checked as a table's are on load, and built; a problem is one UsageError."""
    try:
        return _entry(key, e)
    except SchemaError as err:
        raise UsageError(f"table {path}: entry {printable(key, 60)} is malformed: {err}") from None


_GPU_INTS = ("sm_count", "l2_bytes", "cuda_runtime", "cuda_driver_api", "memory_bytes", "device")


def _scalars(rec: dict, where: str) -> None:
    """Fields nothing reads by name: JSON scalars (no nested objects, no huge strings)."""
    for k, v in rec.items():
        if not isinstance(k, str) or len(k) > 100:
            raise SchemaError(where, f"has a key {_show(k)}")
        if v is not None and not isinstance(v, (str, int, float, bool)):
            raise SchemaError(f"{where}.{k}", f"must be a string or a number, got {_type_name(v)}")
        if isinstance(v, str):
            _str(rec, k, where)


def check_gpu(gpu: Any, where: str = "gpu") -> dict:
    """A GPU identity (a table's ``gpu``, a sweep sidecar's ``device``): the fields' types."""
    gpu = _dict(gpu, where)
    _scalars(gpu, where)
    _str(gpu, "name", where)
    _str(gpu, "compute_capability", where, pattern=_CC_RE)
    for k in _GPU_INTS:
        _num(gpu, k, where, integer=True)
    drv = gpu.get("driver")
    if isinstance(drv, (bool, float)):
        raise SchemaError(f"{where}.driver", f"must be a string, got {_show(drv)}")
    return gpu


def check_ceiling(ceiling: Any, where: str = "ceiling", need_read: bool = False) -> dict:
    """A read ceiling: ``read_gbps`` a finite positive number (required: ``need_read``), its other
    numbers finite and >= 0."""
    ceiling = _dict(ceiling, where)
    _scalars(ceiling, where)
    _num(ceiling, "read_gbps", where, positive=True, required=need_read)
    if "read_gbps" in ceiling and ceiling["read_gbps"] is None:
        raise SchemaError(f"{where}.read_gbps", "is null; expected a number")
    for k, v in ceiling.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            _num(ceiling, k, where)
    return ceiling


def _unencodable(v: Any, where: str) -> str | None:
    """The first field under ``v`` holding a string (or key) that cannot be written as UTF-8: a lone surrogate,
    which JSON's ``\\ud800`` escape lets into a parsed table and which no file can then hold."""
    if isinstance(v, str):
        try:
            v.encode("utf-8")
        except UnicodeEncodeError:
            return where or "the table"
        return None
    items = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else ()
    for k, x in items:
        sub = f"{where}.{printable(k, 60)}" if where else printable(k, 60)
        bad = _unencodable(k, sub) if isinstance(k, str) else None
        if bad or (bad := _unencodable(x, sub)):
            return bad
    return None


def validate_table(data: dict[str, Any], path: Any) -> dict[str, Entry]:
    """Check a parsed table (schema version already checked) whole; the first problem is one UsageError.
    Returns its entries, built (key -> Entry)."""
    try:
        json.dumps(data, ensure_ascii=False).encode("utf-8")   # fast: only a failure walks the table
        bad = None
    except (UnicodeEncodeError, TypeError, ValueError):
        bad = _unencodable(data, "")
    if bad is not None:
        raise UsageError(f"table {path}: {bad} holds a string that is not valid Unicode (a lone surrogate); "
                         "gemvtune never writes one")
    try:
        if isinstance(data.get("schema"), bool):
            raise SchemaError("schema", "must be an integer")
        check_gpu(data.get("gpu"), "gpu")
        check_ceiling(data.get("ceiling") or {}, "ceiling")
        _bool(data, "replayed", "")
    except SchemaError as err:
        raise UsageError(f"table {path}: {err}") from None
    return {key: check_entry(key, e, path) for key, e in data["entries"].items()}
