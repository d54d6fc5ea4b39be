"""The per-GPU lookup table: versioned JSON keyed by (M, d, n, dtype), atomic merge-on-write, lookup with
fallback, and run-time dispatch (``load_table(path).gemv(W, x)``) on the GPU it was tuned on only
(``gemvtune.runtime.tablegpu``)."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import json
import logging
import math
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..kernels.families import FAMILIES, FAMILY_NAMES
from ..kernels.shapes import Shape
from .entry import Entry, FrozenMap, built
from .keys import entry_key
from .tablegpu import GpuRule

log = logging.getLogger("gemvtune")

if TYPE_CHECKING:
    from ..device.dispatch import Dispatcher

SCHEMA_VERSION = 1
N_TRANSFER = 2   # an untuned n runs another n's winner of its (M, d) only within this factor (design-notes.md, FP8)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive advisory lock beside the table, so concurrent writers serialize their merges; the
    temporary files of killed writers are removed under it (gemvtune.safefile)."""
    from ..safefile import locked

    with locked(path):
        yield


def _read(path: Path) -> tuple[dict[str, Any], dict[str, Entry]]:
    """A table file, checked whole: its JSON object and its entries, built (key -> Entry)."""
    from ..userfile import TABLE_BYTES, decode_json, read_text

    text = read_text(path, "table", TABLE_BYTES)   # a regular file, capped: one line for anything else
    if not text.strip():
        raise UsageError(f"table {path} is empty")
    data = decode_json(text, f"table {path}")
    if not isinstance(data, dict) or "schema" not in data or not isinstance(data.get("entries"), dict):
        raise UsageError(f"table {path} is not a gemvtune table (no schema/entries)")
    if data["schema"] != SCHEMA_VERSION:
        raise UsageError(f"table {path} has schema version {data['schema']!r:.40}; this gemvtune reads version "
                         f"{SCHEMA_VERSION}" + (" (made by a newer gemvtune: upgrade)" if isinstance(data["schema"], int)
                                                 and data["schema"] > SCHEMA_VERSION else ""))
    from .tableschema import validate_table

    entries = validate_table(data, path)   # the whole schema: types, ranges, finite times, configs valid for their shape
    return data, entries


def table_json(data: dict[str, Any], entries: dict[str, Entry]) -> dict[str, Any]:
    """The JSON object of a table file: ``data``'s other fields, and each entry as ``Entry.to_json`` gives it."""
    return {**data, "entries": {k: e.to_json() for k, e in entries.items()}}


def _atomic_write_json(path: Path, data: dict[str, Any]) -> None:
    """Whole or not at all, keeping the table's mode (a new one: the umask's default)."""
    from ..safefile import atomic_write

    def write(f: Any) -> None:
        json.dump(data, f, indent=1, sort_keys=True, default=_json_default)
        f.write("\n")

    atomic_write(path, write)


def _check_same_gpu(path: Path, data: dict[str, Any], device: dict[str, Any] | None) -> None:
    gpu = data.get("gpu")
    if not isinstance(gpu, dict):
        raise UsageError(f"table {path} is not a gemvtune table (no gpu)")
    if device is not None and gpu.get("name") != device.get("name"):
        raise UsageError(f"table {path} was made on {gpu.get('name')}, not {device.get('name')}: use a table per GPU")


def check_updatable(path: str | Path, device: dict[str, Any] | None = None) -> Path:
    """Before a search measures anything: the table at ``path`` can be written (its folder made if
    missing, files created there, its lock opened) and, if it exists, is a valid table of ``device``'s
    GPU model. One UsageError if not. Returns the path writes go to (a symbolic link followed)."""
    from ..safefile import probe_folder, target

    path = target(path)
    if path.exists():
        _check_same_gpu(path, _read(path)[0], device)
    probe_folder(path.parent, "table folder")
    lock = path.with_name(path.name + ".lock")
    from ..userfile import check_lock

    check_lock(lock, "the table's lock")
    try:
        if os.path.lexists(lock):   # (a missing one is made at the first write: the folder is writable)
            with open(lock):
                pass
    except OSError as e:
        raise UsageError(f"cannot open the table's lock {lock}: {e.strerror or e}") from None
    return path


def _json_default(o: Any) -> Any:
    if isinstance(o, float) and math.isnan(o):
        return None
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


def gpu_identity(info: dict[str, Any]) -> dict[str, Any]:
    keys = ("name", "compute_capability", "sm_count", "l2_bytes", "driver", "cuda_runtime", "cuda_driver_api")
    return {k: info.get(k) for k in keys}


def record(path: str | Path, shape: Shape, entry: dict[str, Any], device: dict[str, Any],
           ceiling: dict[str, Any] | None = None) -> Entry:
    """Add or replace one (M, d, n) entry, keeping every other; atomic, and serialized across processes.
    A table made on another GPU model is refused (one table per GPU). ``entry`` (the search's JSON object) is
    checked by the table's schema and built as an ``Entry`` before it is merged: never a table we could not load.
    Returns the entry as the table now holds it."""
    from ..safefile import target
    from .tableschema import check_entry

    path = target(path)   # through a symbolic link: the link stays a link
    with _locked(path):
        entries: dict[str, Entry] = {}
        if path.exists():
            data, entries = _read(path)
            _check_same_gpu(path, data, device)
        else:
            data = {"schema": SCHEMA_VERSION, "gpu": gpu_identity(device), "ceiling": ceiling or {}, "entries": {}}
        data["gpu"] = gpu_identity(device)
        if ceiling:
            data["ceiling"] = ceiling
        key = entry_key(shape)
        raw = {"M": shape.M, "d": shape.d, "n": shape.n, "dtype": shape.dtype, "updated": _now(), **entry}
        raw.update({"weights": shape.weights} if shape.weights else {})
        # as the file will hold it (numpy scalars as numbers), then as a load would check it
        new = check_entry(key, json.loads(json.dumps(raw, default=_json_default)), path)
        old = entries.get(key)
        if old is not None:   # a family this search left out keeps its best from the earlier search
            kept = {f: dataclasses.replace(rec, kept_from=rec.kept_from or old.updated)
                    for f, rec in old.best.items() if f not in new.best}
            new = dataclasses.replace(new, best=FrozenMap({**new.best, **kept}))
        entries[key] = new
        _atomic_write_json(path, table_json(data, entries))
        return new


class Table:
    """A loaded table. ``gemv(W, x)`` runs the tuned kernel for W's shape."""

    def __init__(self, data: dict[str, Any], path: str | None = None, strict_gpu: bool = False,
                 policy: str = "fastest", costmodel: Any = None, entries: dict[str, Entry] | None = None):
        """``data``: a table's JSON object; ``entries``: its entries as the schema built them (``load_table``'s;
        None: built here from ``data``, unchecked)."""
        from .route import POLICIES, tuned_config

        if policy not in POLICIES:
            raise UsageError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
        self.data, self.path, self.strict_gpu, self.policy = data, path, strict_gpu, policy
        self.entries: dict[str, Entry] = dict(entries) if entries is not None else built(data["entries"], f"table {path or ''}")
        # gemvtune.model.costmodel.CostModel (zero-trial picks for shapes the table lacks), or a zero-argument
        # callable that loads it when a shape first needs it (load_table's: most tables never need it)
        self._costmodel = costmodel
        self._predicted: dict[tuple[Shape, str], tuple[Any, float] | None] = {}
        self._routes: dict[tuple, Any] = {}
        self._configs: dict[tuple, Any] = {_key(e.shape): tuned_config(e) for e in self.entries.values()}
        self._warned: set[Shape] = set()
        self._dispatch: Dispatcher | None = None
        self._gpu_checked = False
        self.gpu_rule = GpuRule(self.gpu, path, strict_gpu)   # its kernels run on its own GPU model only
        # where load_table found it: "path" (given), "your results" or "shipped" (load_table() with no path)
        self.origin = "path"

    @property
    def gpu(self) -> dict[str, Any]:
        return self.data.get("gpu", {})

    @property
    def shapes(self) -> list[Shape]:
        return [Shape(*k) for k in sorted(self._configs)]

    def keys(self) -> list[tuple]:
        """(M, d, n, dtype) of every entry, then its weight format where W is FP8 (``Shape(*key)`` is its shape)."""
        return sorted(self._configs)

    def entry(self, shape: Shape) -> Entry | None:
        return self.entries.get(entry_key(shape))

    def to_json(self) -> dict[str, Any]:
        """The table as its file holds it (``record`` writes this)."""
        return table_json(self.data, self.entries)

    def route(self, M: int, d: int, n: int, framework: str = "torch", out: str = "fp32", dtype: str = "fp16",
              weights: str = "") -> Any:
        """The ``gemvtune.runtime.route.Route`` of an (M, d, n) call on ``dtype`` inputs (W of ``weights``: "" for W
        in ``dtype``, else its FP8 format) under this table's policy (cached): the tuned kernel or the baseline it
        replaces, whichever the table measured faster (see ``gemvtune.runtime.route``)."""
        key = (M, d, n, framework, out, dtype) + ((weights,) if weights else ())
        r = self._routes.get(key)
        if r is None:
            from .route import Route, choose

            if self.gpu_rule.foreign:   # another GPU model: never a kernel (gemvtune.runtime.tablegpu)
                r = Route("cublas", None, self.gpu_rule.foreign)
            else:
                r = self.gpu_rule.guard(choose(self, M, d, n, framework, self.policy, out, dtype, weights),
                                        Shape(M, d, n, dtype, weights), self.policy)
            self._routes[key] = r
        return r

    @property
    def arch(self) -> Any:
        """The ``gemvtune.kernels.arch.Arch`` the table's routes run on (``GpuRule.arch``)."""
        return self.gpu_rule.arch

    @property
    def recorded_arch(self) -> Any:
        """The ``Arch`` of the GPU the table was tuned on (what ``export`` renders for; sm_90 where none is known)."""
        return self.gpu_rule.recorded or self.gpu_rule.arch

    @property
    def foreign(self) -> str:
        """Why the table's kernels never run on the device it was used on ("" where they may: ``GpuRule``)."""
        return self.gpu_rule.foreign

    def check_device(self, name: str, capability: tuple[int, int] | None = None) -> bool:
        """Whether the table's kernels may run on the device ``name`` (of compute ``capability``): another GPU model
        than the table's warns once (``strict_gpu``: UsageError) and from then on every route is cuBLAS."""
        self._gpu_checked = True
        before = (self.gpu_rule.foreign, self.gpu_rule.device_arch)
        ok = self.gpu_rule.check(name, capability)
        if (self.gpu_rule.foreign, self.gpu_rule.device_arch) != before:   # routes decided before no longer hold
            from . import grouproute

            self._routes.clear()
            grouproute.forget(self)
        return ok

    def lookup(self, shape: Shape) -> tuple[Any, str]:
        """(config, how): the tuned winner (of either family) for (M, d, n); else the winner tuned for
        the same (M, d) at the nearest batch n (in ratio; ties: the larger n) that is valid for this one and within
        ``N_TRANSFER`` times this n; else the cost model's pick; else the tuned config of the nearest shape
        (log-distance in M and d) at this n (never a library's algorithm, e.g. cuBLASLt's: it runs only the shape it
        was measured on); else the same (M, d)'s winner at a farther n; else the first of each family's fallbacks
        (``Family.fallbacks``, families in registry order) that can run it: the llama.cpp config, then generic GEMV
        configs."""
        k = _key(shape)
        if k in self._configs:
            return self._configs[k], "tuned"
        same = sorted((abs(math.log(s.n / shape.n)), -s.n, s.n, cfg) for s, cfg in self._shaped()
                      if (s.M, s.d, s.dtype, s.weights) == (shape.M, shape.d, shape.dtype, shape.weights)
                      and _transfers(cfg, shape))
        near = [t for t in same if t[0] <= math.log(N_TRANSFER) + 1e-9]
        if near:
            return near[0][3], f"winner tuned at n={near[0][2]}"
        zero = self.predicted(shape)
        if zero is not None:
            return zero[0], f"cost model's pick (predicted {zero[1]:.2f} µs, never measured on this shape)"
        best = None
        for s, cfg in self._shaped():
            if (s.n, s.dtype, s.weights) != (shape.n, shape.dtype, shape.weights) or not _transfers(cfg, shape):
                continue
            dist = abs(math.log(s.M / shape.M)) + abs(math.log(s.d / shape.d))
            if best is None or dist < best[0]:
                best = (dist, cfg, f"nearest tuned shape {s.M}x{s.d}")
        if best:
            return best[1], best[2]
        if same:
            return same[0][3], f"winner tuned at n={same[0][2]}"
        for fam in FAMILY_NAMES:
            for cfg, why in FAMILIES[fam].fallbacks:
                if cfg.is_valid(shape):
                    return cfg, why
        raise UsageError(f"no fallback config ({', '.join(FAMILY_NAMES)}) can run shape {shape}")

    def _shaped(self) -> list[tuple[Shape, Any]]:   # (shape, winning config) of every entry
        return [(Shape(*k), cfg) for k, cfg in self._configs.items()]

    @property
    def costmodel(self) -> Any:
        if callable(self._costmodel):
            self._costmodel = self._costmodel()
        return self._costmodel

    def predicted(self, shape: Shape, out: str = "fp32") -> tuple[Any, float] | None:
        """(config, predicted µs): the cost model's zero-trial pick for a shape, among configs that can give an
        ``out`` output (None: no model, or no valid candidate); computed once per shape and output."""
        if shape.weights or self.costmodel is None or shape.dtype not in getattr(self.costmodel, "dtypes", ("fp16",)):
            return None   # (a model trained on FP16 measurements only says nothing about BF16 speed, nor about FP8 W)
        k = (shape, out)
        if k not in self._predicted:
            from ..model.zerotrial import pick

            self._predicted[k] = pick(self, self.costmodel, shape, out)
        return self._predicted[k]

    def config_for(self, shape: Shape) -> Any:
        cfg, how = self.lookup(shape)
        if how != "tuned" and shape not in self._warned:
            self._warned.add(shape)
            warnings.warn(f"gemvtune: shape {shape} is not in the table; using the {how} ({cfg.label})",
                          stacklevel=3)
        return cfg

    def gemv(self, W: Any, x: Any, out: Any = None, bias: Any = None, out_dtype: str = "fp32",
             scales: Any = None) -> Any:
        """y = W x (+ bias); W [M, d] and x [d] (or X [n, d], n <= 16: Y = X W^T) FP16 on one CUDA
        device (CuPy arrays or torch tensors), bias (optional) [M] FP16, out (optional) [M] (or
        [n, M]) of ``out_dtype`` (``fp32`` or ``fp16``). Runs the table's route for (M, d, n): the
        tuned kernel with the bias and the output cast fused into it, or cuBLAS (``F.linear`` /
        ``cupy.matmul``, FP16 result, then cast) where the table measured cuBLAS faster or lacks the
        shape (policy ``fastest``, the default; ``load_table(..., policy="tuned")`` always runs a
        gemvtune kernel). Returns out (a CuPy array, or a torch tensor for torch input). Works inside
        CUDA graph capture once each shape has run once outside it. FP8 weights (torch only): W E4M3 codes with
        their float32 ``scales`` (``torch_op.table_gemv_fp8``), through the table's FP8 route."""
        # The arguments before the check of the table's GPU could warn (it runs once, at the first valid call):
        # a CPU tensor is one UsageError; NumPy arrays are one once a device answers (NoDeviceError before).
        if type(W).__module__.startswith("torch"):
            from .torch_op import check_cuda_tensors, table_gemv, table_gemv_fp8, torch_device

            if not self._gpu_checked:
                check_cuda_tensors(W, x, out, bias)
                self.check_device(*torch_device(W))
            if scales is not None:
                return table_gemv_fp8(self, W, scales, x, out, bias, out_dtype)
            return table_gemv(self, W, x, out, bias, out_dtype)
        if scales is not None:
            raise UsageError("FP8 weights (scales=...) run on torch tensors only: pass W, x and scales as CUDA tensors")
        if self._dispatch is None or not self._gpu_checked:
            # no device at all is said first (exit 3 on the command line), then arrays in host memory, and only
            # then could the check of the table's GPU warn
            from ..device.dispatch import Dispatcher, check_arrays

            if self._dispatch is None:
                self._dispatch = Dispatcher()
            check_arrays(W, x, out, bias)
            if not self._gpu_checked:
                self.check_device(self._dispatch.device_name(), self._dispatch.device_capability())
        return self._dispatch.gemv(self, W, x, out, bias, out_dtype)

    def _check_gpu(self, name: str) -> None:
        """``check_device`` by name (the benchmarks' check of the GPU they run on)."""
        self.check_device(name)


def _key(shape: Shape) -> tuple:
    """(M, d, n, dtype), then the weight format only where W is FP8: ``Shape(*key)`` is the shape either way, and
    the keys of FP16/BF16 entries stay the 4-tuples their callers compare."""
    return (shape.M, shape.d, shape.n, shape.dtype) + ((shape.weights,) if shape.weights else ())


def _transfers(config: Any, shape: Shape) -> bool:
    """Whether a config tuned for another shape may run ``shape``: a kernel valid for it may; a library's
    algorithm (cuBLASLt: chosen by the library for its own shape, its refusal known only on the GPU) may not."""
    return config.is_valid(shape) and not FAMILIES[config.family].library


def load_table(path: str | Path | None = None, strict_gpu: bool = False, policy: str = "fastest",
               costmodel: str | Path | None = "auto", gpu: str | None = None) -> Table:
    """Load a table written by ``gemvtune search``; any problem is one clear UsageError. With no ``path``, the
    table of the GPU this runs on (or of ``gpu``, a GPU name as the driver reports it): your own
    ``results/<gpu>/table.json`` if there is one, else the one shipped with gemvtune (``Table.origin`` says which;
    ``gemvtune which-table`` shows it); a table of another GPU is never picked, and no table for this GPU is one
    UsageError. A table of another GPU given by its path is read whole (lookups, reports, export), but its kernels
    never run there: on another GPU model every call runs cuBLAS, with one warning (``strict_gpu``: an error instead;
    ``gemvtune.runtime.tablegpu``). ``policy``:
    ``fastest`` (default) runs, per (M, d, n), whichever of the tuned kernel and cuBLAS the table
    measured faster, and for a shape it lacks the cost model's pick where it predicts that faster than
    cuBLAS by a margin, else cuBLAS; ``tuned`` always runs a gemvtune kernel. ``costmodel``: a model file,
    ``"auto"`` (the ``costmodel.json`` beside the table, if there is one and LightGBM is installed: a file
    that is not a model is a warning, never an error) or None (no zero-trial picks)."""
    origin = "path"
    if path is None:
        from .tables import current_gpu_name, find_table

        found = find_table(gpu if gpu is not None else current_gpu_name())
        path, origin = found.path, found.origin
        log.info("load_table: %s", found)
    data, entries = _read(Path(path))
    from ..model.zerotrial import table_model

    table = Table(data, str(path), strict_gpu, policy, table_model(Path(path), costmodel), entries)
    table.origin = origin
    return table
