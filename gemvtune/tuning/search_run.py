"""The search command's driver: per shape, search, write the trial CSV, record the table entry."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import errno
import json
import logging
import os
import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..baselines import cublas_of
from ..cells import write_csv
from ..errors import GemvtuneError, UsageError
from ..kernels.shapes import Shape
from ..provenance import provenance
from ..runtime.entry import Measured, SchemaError
from ..runtime.route import rival_of
from ..runtime.table import check_updatable, record
from ..safefile import write_text
from ..workspace import Workspace, gpu_slug
from .coordination.coord import Coordinator, this_worker
from .coordination.journal import DISK_FULL, WriteError, remedy, why_oserror
from .coordination.optuna_adapter import optimize_logger
from .coordination.storage import HEARTBEAT_S, open_store
from .search import SearchOptions, run_search, search_arch, searchable, study_name

# an OSError of one of these, while a search writes, ends it with one line (not a traceback)
WRITE_ERRNOS = DISK_FULL | {errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO}


def _ratio(a: Any, b: Any) -> str:
    try:
        return f"{a / b:.3f}"
    except (TypeError, ZeroDivisionError):
        return "-"


def device_label(dev: dict[str, Any]) -> str:
    """What the CSV's device column says: the device index this process used, its name and PCI bus id
    (tells workers pinned to different GPUs apart)."""
    return " ".join(str(x) for x in (dev.get("device", ""), dev.get("name", ""), dev.get("pci_bus_id", "")) if x != "")


def run_searches(runner: Any, shapes: list[Shape], opts: SearchOptions, results_dir: str | None,
                 table_path: str | None, echo: Callable[[str], None], writable: Callable[[str], Path],
                 heartbeat_s: float = HEARTBEAT_S, joiner: bool = False,
                 allow_replay_into_measured: bool = False, worker_index: int = 0,
                 recorded: list[Shape] | None = None) -> Path:
    """Search ``shapes`` and record each winner in the table; returns the table's path. ``recorded``: the shapes
    whose entries this process wrote are appended to it (another worker of a shared study may write the rest)."""
    opts = searchable(runner, opts, echo)   # a library family this runner cannot ask: before any work
    dev = runner.device_info()
    out = writable(results_dir or str(Workspace.for_gpu(dev["name"]).root))
    table = Path(table_path) if table_path else out / "table.json"
    storage_url = opts.storage or f"journal:{out / 'optuna-journal.log'}"
    table = preflight(table, storage_url, dev) or table   # every output writable, every table valid: before any work
    if runner.replayed:   # replayed results never merge into measured ones unasked
        from ..runners.replay import refuse_replay_into_measured

        refuse_replay_into_measured(table, storage_url, allow_replay_into_measured)
    store = open_store(storage_url, heartbeat_s)
    coord = Coordinator(store, this_worker(device_label(dev), worker_index))
    quiet = _QuietTrialFailures()
    optuna_log = optimize_logger()
    optuna_log.addFilter(quiet)
    try:
        _search_shapes(runner, shapes, opts, out, table, storage_url, coord, dev, echo, joiner,
                       recorded if recorded is not None else [])
    except Exception as e:   # a full disk (or a folder turned read-only) mid-search: one line, work kept
        failure = write_failure(e)
        if failure is None:
            raise
        raise failure from None
    finally:
        optuna_log.removeFilter(quiet)
        coord.close()
    return table


class _QuietTrialFailures(logging.Filter):
    """Drop Optuna's report (a traceback, then a line) of a trial that failed because the storage could
    not be written, or because the user pressed Ctrl-C (Optuna records the trial failed, reports it,
    then raises the KeyboardInterrupt on): the search ends with gemvtune's own line for either."""

    def __init__(self) -> None:
        super().__init__()
        self.trials: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        m = re.match(r"Trial (\d+) failed", record.getMessage())
        if m is None:
            return True
        err = record.exc_info[1] if record.exc_info else None
        if err is not None and (isinstance(err, KeyboardInterrupt) or write_failure(err) is not None):
            self.trials.add(m.group(1))
            return False
        return m.group(1) not in self.trials


def preflight(table: Path | None, storage_url: str | None, dev: dict[str, Any] | None) -> Path | None:
    """Check, before anything is measured, that the table can be written and, if it exists, is a valid
    table (of this GPU model, given ``dev``), and that a journal or SQLite storage file can be written:
    the file itself (read and appended to), its folder (the journal's lock is a file made and removed
    there at every append) and the lock file gemvtune keeps beside it. One UsageError if not, and
    nothing written. Returns the table's path to write (a symbolic link followed)."""
    from ..safefile import probe_folder

    if table is not None:
        table = check_updatable(table, dev)
    from ..userfile import check_regular
    from .coordination.journalcheck import check_journal
    from .coordination.storage import refuse_memory_sqlite

    refuse_memory_sqlite((storage_url or "").strip())
    path = storage_file(storage_url or "")
    if path is not None:
        if path.is_dir():
            raise UsageError(f"storage {path} is not a file")
        check_regular(path, "storage")   # a FIFO, a device, a dangling link: one line, before any open()
        if (storage_url or "").strip().startswith("journal:"):
            check_journal(path)
        probe_folder(path.parent, "storage folder")
        lock = path.with_name(path.name + ".gemvtune.lock")   # (gemvtune.tuning.coordination.storage.storage_lock)
        for f, what, mode in ((path, "storage", "ab"), (lock, "storage lock file", "a+")):
            if f.exists():   # (a missing one is made in the folder just probed)
                _check_writable(f, what, mode)
        if not path.exists():
            _check_writable(path, "storage", "ab")   # the empty file the storage would make anyway
    return table


def _check_writable(path: Path, what: str, mode: str) -> None:
    """``path`` can be opened as the storage opens it, read and written: else one UsageError naming it."""
    try:
        with open(path, mode):
            pass
        if not os.access(path, os.R_OK | os.W_OK):   # (root passes, except on a read-only file system)
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
    except OSError as e:
        raise UsageError(f"{what} {path} cannot be written: {why_oserror(e)}; nothing was measured: make it "
                         "writable, or give another --results (or --storage)") from None


def storage_file(url: str) -> Path | None:
    """The local file behind a journal or SQLite storage URL, else None."""
    url = url.strip()
    if url.startswith("journal:"):
        return Path(url[len("journal:"):]) if url[len("journal:"):] else None
    if url.startswith("sqlite:///"):
        db = url[len("sqlite:///"):].split("?", 1)[0]
        return Path(db) if db and db != ":memory:" else None
    return None


def write_failure(e: BaseException) -> GemvtuneError | None:
    """The one-line error for an exception caused, anywhere down its chain, by a failed write: the
    journal's own (StorageWriteError), SQLite's full disk, or an output file's OSError (a full disk, a
    read-only folder).
    None if no write failed (Optuna may wrap a storage error in an AssertionError of its own)."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [e]
    while todo:
        x = todo.pop()
        if x is None or id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, WriteError):
            return x
        if isinstance(x, OSError) and x.errno in WRITE_ERRNOS:
            what = f" {x.filename}" if x.filename else ""
            return WriteError(f"cannot write{what}: {why_oserror(x)}; the search stops here and every trial "
                              f"completed so far is kept in its storage: {remedy(x)}run the same command again to resume")
        if isinstance(x, sqlite3.Error) and ("is full" in str(x) or "disk I/O" in str(x)):   # SQLite's ENOSPC
            return WriteError(f"cannot write the SQLite storage: {x}; the search stops here and every trial "
                              "completed so far is kept in it: free some space, then run the same command again to resume")
        todo += [x.__cause__, x.__context__, getattr(x, "orig", None)]
    return None


def incumbents(table: Path, shape: Shape) -> tuple[Any, ...]:
    """What the table holds for ``shape``: its winner and the best config of each family (valid for it), then
    the same of the entry of (M, d, n) in the other dtype, each as this dtype runs it (``for_dtype``: BF16 takes
    an FP16 accumulator's config with FP32 accumulation). They are re-measured in the confirmation, so the entry's
    winner is chosen against them in the same process: a search of some families is weighed against the others,
    a search again of the same families (a re-tune) never replaces an entry by a config slower than the one it
    holds, and a search in one dtype never misses what the other dtype's search found (the same config runs
    at the same speed in both, measured on the H200 on 2026-12-02: runs/issue21d/probe). The entries of the
    shape's own weights only: an FP8 re-tune weighs the FP8 entry it would replace (keyed apart from the 16-bit
    one; without it, the H100's re-tune of 4096x4096 n = 16 e4m3-row on 2026-12-06 wrote 11.31 µs over 10.32).
    Never a config only a model's chain may choose (``ConfigBase.chain_only``: a PDL winner of an earlier search).
    Nothing from a missing or unreadable table or entry (a fresh table)."""
    from ..kernels.families import FAMILIES, for_dtype
    from ..kernels.shapes import DTYPES
    from ..runtime.table import entry_key
    from ..userfile import TABLE_BYTES, read_json

    try:
        entries = read_json(table, "table", TABLE_BYTES)["entries"]
    except (UsageError, KeyError, TypeError):   # missing, not a regular file, not JSON, not a table
        return ()
    if not isinstance(entries, dict):
        return ()
    out: list[Any] = []
    for dt in [shape.dtype] + [d for d in DTYPES if d != shape.dtype]:
        entry = entries.get(entry_key(Shape(shape.M, shape.d, shape.n, dt, shape.weights)))
        if not isinstance(entry, dict):
            continue
        for key in ("winner", *FAMILIES):   # each record on its own: a table of this version or not, whole or not
            try:
                rec = Measured.from_json(entry.get(key), key)
            except SchemaError:
                continue
            fam = rec.family if key == "winner" else key
            if fam not in FAMILIES or not rec.ok:
                continue
            try:
                cfg = for_dtype(dataclasses.replace(rec, family=fam).config_object(), shape.dtype)
            except Exception:   # a record this version cannot read is not an incumbent
                continue
            if cfg.is_valid(shape) and not cfg.chain_only() and cfg not in out:   # (PDL: a model chain's choice)
                out.append(cfg)
    return tuple(out)


def _warm(opts: SearchOptions, out: Path, shape: Shape, echo: Callable[[str], None], arch: str | None = None
          ) -> SearchOptions:
    """``opts`` with the cost model's warm start for ``shape`` on ``arch`` (the model of the results folder, if any)."""
    if not opts.warm_k or opts.warm_start is not None:
        return opts
    from ..model import model_beside
    from ..model.warm import warm_start
    from .search import family_domains

    warm = warm_start(model_beside(out, shape.weights), shape, opts.families, lambda f: family_domains(opts, f, arch),
                      opts.warm_k, echo, arch)
    return dataclasses.replace(opts, warm_start=warm) if warm else opts


def _search_shapes(runner: Any, shapes: list[Shape], opts: SearchOptions, out: Path, table: Path, storage_url: str,
                   coord: Coordinator, dev: dict[str, Any], echo: Callable[[str], None], joiner: bool,
                   recorded: list[Shape]) -> None:
    import pandas as pd

    storage, slug = coord.store.storage, gpu_slug(dev["name"])
    ceil = runner.ceiling()
    replay = " (REPLAYED from recorded sweeps)" if runner.replayed else ""
    echo(f"{dev['name']}{replay}: read ceiling {ceil['read_gbps']:.0f} GB/s; storage {storage_url}; table {table}")
    for shape in shapes:
        name = study_name(shape, slug) + runner.study_suffix   # replay: its own studies
        res = run_search(runner, shape, _warm(opts, out, shape, echo, search_arch(runner)), storage, name, echo=echo, coord=coord,
                         joiner=joiner, incumbents=incumbents(table, shape))
        if res is None:   # another worker of this study confirms and writes the table
            runner.release()
            continue
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
        csv = out / f"search-{shape.M}x{shape.d}x{shape.n}{shape.dtype_suffix('-')}{shape.weights_suffix('-')}-{stamp}.csv"
        write_csv(pd.DataFrame(res.trials), csv, float_format="%.6g")
        meta = provenance(dev, ceiling=ceil, replayed=bool(runner.replayed), study=name, storage=storage_url, shape=[shape.M, shape.d, shape.n],
                          search=res.entry["search"], winner=res.entry["winner"], baselines=res.entry["baselines"])
        write_text(csv.with_suffix(".json"), json.dumps(meta, indent=1, sort_keys=True, default=str) + "\n")
        e = record(table, shape, res.entry, dev, ceil)   # the entry as the table now holds it
        recorded.append(shape)
        w, b = e.winner, e.baselines
        c = cublas_of(b)
        cub = c.us if c else None
        rival = rival_of(shape)
        lla = b["llama.cpp"].us if "llama.cpp" in b else None   # (FP8 weights: no llama.cpp point)
        sixteen = b["cublas-16bit"].us if "cublas-16bit" in b else None
        theirs = (f"x{_ratio(lla, w.us)} llama.cpp" if lla is not None else
                  f"x{_ratio(sixteen, w.us)} cuBLAS on 16-bit weights" if sixteen is not None else "")
        fams = "  ".join(f"{f} {e.best[f].us:.2f}" for f in opts.families if f in e.best and e.best[f].kept_from is None)
        echo(f"{shape!s:>14s}  {w.label:44s} {w.us:8.2f} µs  {w.pct_ceiling:5.1f}% ceiling  "
             f"x{_ratio(cub, w.us)} {rival}  {theirs}  [{fams}]  "
             f"({res.new_measured} new / {res.measured} measured trials{', tie' if res.tie else ''}"
             f"{', launch-bound: W streams faster than an empty launch' if e.launch_bound else ''}) "
             f"-> {csv.name}")
        runner.release()
