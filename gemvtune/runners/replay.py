"""The replay runner: serves what a sweep recorded on a GPU, so the search, the table and the reports
run unchanged on a machine with no GPU. A config the sweep did not measure is answered with the status
``not_in_sweep``, never with a made-up number. A sweep's CSV and JSON sidecar are checked when read:
their strings (the device name above all) reach tables, headers and terminals.

Replayed results are kept apart from measured ones: a replayed search's studies carry the suffix
``-replay`` (``ReplayRunner.study_suffix``), its default folder is ``results/<gpu>/replay/``, and
:func:`refuse_replay_into_measured` stops it before it writes into a table or storage holding
measured entries or studies (unless ``--allow-replay-into-measured``)."""

from __future__ import annotations

import io
import json
import math
import re
import sqlite3
import zlib
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..kernels.families import DEFAULT_FAMILY
from ..kernels.shapes import Shape
from ..runtime.tableschema import printable
from .base import Measurement, RunnerBase, Status

NOT_IN_SWEEP = "not_in_sweep"
STUDY_SUFFIX = "-replay"   # a replayed search's study: gemvtune-<gpu>-<M>x<d>x<n>-replay[-<family>]
_FIELDS = ("us_median", "us_min", "us_max", "gbps", "pct_ceiling", "relerr", "rowerr", "bound", "registers",
           "spill_bytes", "smem_bytes", "compile_s", "launches", "samples", "copies")


def sweep_files(path: str | Path) -> list[Path]:
    p = Path(path)
    if p.is_dir():
        files = sorted(p.glob("sweep-*.csv.gz"))
    elif p.is_file():
        files = [p]
    else:
        raise UsageError(f"replay sweep {p} does not exist")
    if not files:
        raise UsageError(f"no sweep-*.csv.gz files in {p}")
    return files


_STATUSES = {Status.OK, Status.WRONG, Status.COMPILE_ERROR, Status.LAUNCH_ERROR, Status.INVALID, Status.TIMEOUT}
_LABEL = re.compile(r"^[A-Za-z0-9._-]{1,200}$")


def _check_meta(meta: Any, where: str) -> dict[str, Any]:
    """A sweep's sidecar: the device (a real GPU name: it is copied into tables, headers and terminals),
    the read ceiling, the family (absent: the default family, as in the sweeps recorded before split-K)
    and the grid (each parameter's values from that family's domains)."""
    from ..kernels.families import FAMILIES
    from ..runtime.tableschema import SchemaError, check_ceiling, check_gpu, gpu_name_problem

    try:
        if not isinstance(meta, dict):
            raise SchemaError("sidecar", "is not a JSON object")
        dev = check_gpu(meta.get("device"), "device")
        why = gpu_name_problem(dev.get("name"))
        if why:
            raise SchemaError("device.name", why)
        check_ceiling(meta.get("ceiling"), "ceiling", need_read=True)
        fam = meta.get("family", DEFAULT_FAMILY)
        if not isinstance(fam, str) or fam not in FAMILIES:
            raise SchemaError("family", f"must be one of {', '.join(FAMILIES)}, got {fam!r:.40}")
        DOMAINS = FAMILIES[fam].domains
        grid = meta.get("grid") or {}
        if not isinstance(grid, dict):
            raise SchemaError("grid", "is not a JSON object")
        for k, vals in grid.items():
            if k not in DOMAINS:
                raise SchemaError("grid", f"names {k!r:.40}, not a {fam} parameter")
            if not isinstance(vals, list) or not vals or any(isinstance(v, bool) or v not in DOMAINS[k] for v in vals):
                raise SchemaError(f"grid.{k}", f"must be a list of values from {list(DOMAINS[k])}, got {vals!r:.60}")
    except SchemaError as e:
        raise UsageError(f"sweep {where}: {e}") from None
    return meta


def _check_rows(df: Any, where: str) -> None:
    """The sweep's columns: integer M, d, n (one shape), numbers where numbers belong, known statuses,
    config labels as names, and a finite positive time for every correct row."""
    import numpy as np
    import pandas as pd

    for c in ("M", "d", "n"):
        if not pd.api.types.is_integer_dtype(df[c]) or df[c].nunique() != 1 or int(df[c].iloc[0]) < 1:
            raise UsageError(f"sweep {where}: column {c} must hold one positive integer (one shape per sweep)")
    for c in _FIELDS:
        if c in df.columns and not (pd.api.types.is_numeric_dtype(df[c]) and not pd.api.types.is_bool_dtype(df[c])):
            raise UsageError(f"sweep {where}: column {c} is not numeric")
    bad = sorted(set(df.status.astype(str)) - _STATUSES)
    if bad:
        raise UsageError(f"sweep {where}: unknown status {printable(bad[0], 40)!r}; known: {', '.join(sorted(_STATUSES))}")
    names = df.name.astype(str)
    if not names.map(lambda v: bool(_LABEL.match(v))).all():
        first = names[~names.map(lambda v: bool(_LABEL.match(v)))].iloc[0]
        raise UsageError(f"sweep {where}: {printable(first, 60)!r} in column name is not a config label")
    ok = df[df.status == Status.OK]
    for c in ("us_median", "us_min", "us_max", "gbps", "pct_ceiling"):
        if c in ok.columns and len(ok):
            v = ok[c].to_numpy(dtype=float)
            if not (np.isfinite(v) & ((v > 0) if c.startswith("us") else (v >= 0))).all():
                raise UsageError(f"sweep {where}: a correct ({Status.OK}) row has no finite "
                                 f"{'positive' if c.startswith('us') else 'non-negative'} {c}")


class Sweep:
    """One recorded sweep of one family: rows by config label, and its sidecar (device, ceiling, family,
    grid), both checked when read (their strings reach tables, headers and terminals)."""

    def __init__(self, path: Path):
        import pandas as pd

        from ..userfile import JSON_BYTES, SWEEP_BYTES, check_regular, read_bytes, read_json

        side = path.with_name(path.name.replace(".csv.gz", ".json"))
        for f in (side, path):
            if not check_regular(f, "sweep file"):   # a FIFO, a device: one line, never opened
                raise UsageError(f"sweep {path}: missing {f}")
        meta = read_json(side, "sweep sidecar", JSON_BYTES)
        raw = read_bytes(path, "sweep", SWEEP_BYTES)
        try:
            df = pd.read_csv(io.BytesIO(raw), compression="gzip" if path.name.endswith(".gz") else None)
        except (ValueError, OSError, EOFError, zlib.error, RecursionError) as e:   # EOFError: a truncated .gz
            raise UsageError(f"sweep {path} cannot be read: {printable(e, 200)}") from None
        need = {"name", "M", "d", "n", "status", "us_median"}
        if not need <= set(df.columns) or df.empty:
            raise UsageError(f"sweep {path} is not a gemvtune sweep (columns {sorted(need - set(df.columns))} missing)")
        self.meta = _check_meta(meta, str(side))
        _check_rows(df, str(path))
        self.path = path
        self.shape = Shape(int(df.M.iloc[0]), int(df.d.iloc[0]), int(df.n.iloc[0]))
        if "shape" in self.meta and self.meta["shape"] != [self.shape.M, self.shape.d, self.shape.n]:
            raise UsageError(f"sweep {path}: its sidecar is of shape {self.meta['shape']!r:.40}, its rows of {self.shape}")
        self.rows: dict[str, dict[str, Any]] = {r["name"]: r for r in df.to_dict("records")}
        self.grid: dict[str, list[Any]] = {k: list(v) for k, v in self.meta.get("grid", {}).items()}
        self.family: str = self.meta.get("family", DEFAULT_FAMILY)   # the family its configs are of

    def optimum(self) -> tuple[str, float]:
        ok = [(r["us_median"], k) for k, r in self.rows.items() if r["status"] == Status.OK]
        us, label = min(ok)
        return label, us


class ReplayRunner(RunnerBase):
    """The runner contract (``gemvtune.runners.base.Runner``) served from recorded sweeps: replayed, its
    studies suffixed, only the recorded configs (``recorded``) answered; one trial in flight (it cannot
    compile ahead: no ``precompile``, compile_jobs 1)."""

    replayed = True
    arch = "replay"
    study_suffix = STUDY_SUFFIX   # replayed studies never share a name with a GPU search's

    def __init__(self, path: str | Path):
        self.sweeps: dict[Shape, Sweep] = {}
        for f in sweep_files(path):
            s = Sweep(f)
            if s.shape in self.sweeps:
                raise UsageError(f"the sweeps {self.sweeps[s.shape].path.name} and {f.name} in {path} are both of "
                                 f"{s.shape}: replay one sweep per shape")
            self.sweeps[s.shape] = s
        first = next(iter(self.sweeps.values()))
        names = {s.meta["device"]["name"] for s in self.sweeps.values()}
        if len(names) > 1:
            raise UsageError(f"the sweeps in {path} were recorded on different GPUs ({', '.join(sorted(names))}): "
                             "replay one GPU's sweeps at a time")
        self._device = {**first.meta.get("device", {}), "replayed_from": [str(s.path) for s in self.sweeps.values()]}
        self._ceiling = first.meta.get("ceiling") or {}
        self.calls = 0

    def sweep(self, shape: Shape) -> Sweep:
        if shape not in self.sweeps:
            have = ", ".join(str(s) for s in self.sweeps)
            raise UsageError(f"no recorded sweep for {shape} (have: {have})")
        return self.sweeps[shape]

    def recorded(self, shape: Shape, family: str = DEFAULT_FAMILY) -> frozenset[str]:
        """The labels a search of ``family`` can measure here: the valid configs the shape's sweep
        recorded, none when the sweep holds another family. When all are measured, the search stops
        (see spacebound.candidates)."""
        sweep = self.sweep(shape)
        if family != sweep.family:
            return frozenset()
        return frozenset(k for k, r in sweep.rows.items() if r["status"] != Status.INVALID)

    def device_info(self) -> dict[str, Any]:
        return dict(self._device)

    def ceiling(self) -> dict[str, Any]:
        return dict(self._ceiling)

    def release(self) -> None:
        pass

    def baselines(self, shape: Shape) -> list[Measurement]:
        return []  # sweeps record gemvtune variants only; cuBLAS is not replayed

    def measure(self, config: Any, shape: Shape, kind: str = "variant", verify: bool = True,
                timed: bool = True, **_: Any) -> Measurement:
        """What the shape's sweep recorded for ``config`` (a config of any family: one of another family
        than the sweep's was not measured in it)."""
        self.calls += 1
        m = Measurement.of(config.label, kind, shape, Status.OK, params=config.to_dict(),
                        method="replay")
        why = config.invalid_reasons(shape)
        if why:
            m.status, m.error = Status.INVALID, "; ".join(why)
            return m
        sweep = self.sweep(shape)
        row = sweep.rows.get(config.label) if config.family == sweep.family else None
        if row is None:
            m.status, m.error = NOT_IN_SWEEP, f"{config.label} was not measured in the sweep of {shape}"
            return m
        m.status = row["status"]
        m.error = "" if not isinstance(row.get("error"), str) else printable(row["error"], 2000)
        for k in _FIELDS:
            v = row.get(k)
            if v is not None and not (isinstance(v, float) and math.isnan(v)):
                setattr(m, k, type(getattr(m, k))(v))
        return m


# ---- replayed results are kept apart from measured ones --------------------------------------------
def _replay_study_re() -> re.Pattern:
    from ..kernels.families import FAMILY_NAMES

    return re.compile(re.escape(STUDY_SUFFIX) + "(-(" + "|".join(map(re.escape, FAMILY_NAMES)) + "))?$")
ALLOW_FLAG = "--allow-replay-into-measured"


def is_replay_study(name: str) -> bool:
    """A study a replayed search made (``...-replay`` or ``...-replay-<family>``)."""
    return bool(_replay_study_re().search(name))


def storage_studies(url: str | None) -> list[str]:
    """The study names a journal file or SQLite file holds, read without opening it for writing (no
    lock file, no schema upgrade); [] for a missing file and for storages that cannot be read this
    way (their replayed studies are still kept apart by name)."""
    url = (url or "").strip()
    try:
        if url.startswith("journal:"):
            path = Path(url[len("journal:"):]).expanduser()
            if not path.is_file():
                return []
            names = []
            with open(path, encoding="utf-8", errors="replace") as f:
                for line in f:
                    try:
                        op = json.loads(line)
                    except (ValueError, RecursionError):
                        continue   # a torn last record
                    if isinstance(op, dict) and op.get("op_code") == 0 and isinstance(op.get("study_name"), str):
                        names.append(op["study_name"])
            return names
        if url.startswith("sqlite:///"):
            path = Path(url[len("sqlite:///"):]).expanduser()
            if not path.is_file():
                return []
            con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
            try:
                return [r[0] for r in con.execute("SELECT study_name FROM studies")]
            finally:
                con.close()
    except (OSError, ValueError, sqlite3.Error):
        return []
    return []


def measured_outputs(table: str | Path, storage_url: str | None) -> list[str]:
    """What a search writing to ``table`` and ``storage_url`` would merge into that was measured on a GPU
    (entries and studies not marked replayed): one phrase per output, [] when there is nothing."""
    found = []
    table = Path(table)
    if table.is_file():
        from ..runtime.table import load_table

        entries = load_table(table).entries
        gpu = sorted(k for k, e in entries.items() if e.search.replayed is not True)
        if gpu:
            found.append(f"table {table} holds {len(gpu)} measured entr{'y' if len(gpu) == 1 else 'ies'} (e.g. {gpu[0]})")
    studies = sorted(n for n in storage_studies(storage_url) if not is_replay_study(n))
    if studies:
        found.append(f"{storage_url} holds {len(studies)} measured stud{'y' if len(studies) == 1 else 'ies'} "
                     f"(e.g. {printable(studies[0], 80)})")
    return found


def refuse_replay_into_measured(table: str | Path, storage_url: str | None, allow: bool = False) -> None:
    """Before a replayed search writes anything: refuse (one UsageError) when its table or storage holds
    measured results, unless ``allow`` (``--allow-replay-into-measured``)."""
    if allow:
        return
    found = measured_outputs(table, storage_url)
    if found:
        raise UsageError("a replayed search does not write into measured results: " + "; ".join(found)
                         + f". Use a folder of its own (the default: results/<gpu>/replay/), or {ALLOW_FLAG}")


def refuse_measured_study_names(names: list[str] | tuple[str, ...], allow: bool = False) -> None:
    """``worker --replay`` joins studies by name: refuse a GPU search's study unless ``allow``."""
    gpu = [n for n in names if not is_replay_study(n)]
    if gpu and not allow:
        raise UsageError(f"study {printable(gpu[0], 80)!r} is not a replayed search's (no {STUDY_SUFFIX} suffix): "
                         f"a replay worker does not add trials to a measured study without {ALLOW_FLAG}")
