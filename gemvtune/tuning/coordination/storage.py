"""Optuna storages by URL, and the one lock each offers to the workers sharing a study.

Every storage Optuna has is accepted:
- ``journal:PATH`` (the default, under --results): Optuna's journal file, the backend Optuna
  recommends for several processes on one host (appends under a file lock; no database); a journal
  torn by a killed or failed write is repaired before use, and a failed write ends the search with
  one line (gemvtune.tuning.coordination.journal);
- any SQLAlchemy URL for Optuna's RDB storage: ``postgresql://…`` (many hosts), ``mysql+pymysql://…``,
  ``sqlite:///file.db`` (one process; SQLite is not safe for many writers), with Optuna's heartbeats;
- ``redis://…``: Optuna's journal on Redis (needs the ``redis`` package);
- ``grpc://HOST:PORT``: Optuna's gRPC storage proxy (``optuna.storages.run_grpc_proxy_server``);
- ``memory:``: in this process only.

The lock (:func:`storage_lock`) serializes the few reads and writes that must not interleave between
workers: claiming one of the study's measured-trial slots (the budget is global) and claiming the
confirmation stage. It is a file lock beside a journal or SQLite file (``<file>.gemvtune.lock``, a
``filelock.FileLock``: flock, released when its process dies), a PostgreSQL advisory lock,
a MySQL named lock, or a thread lock for ``memory:``. Redis and gRPC offer none: there the budget can
be overshot by at most (workers - 1) trials, and docs/search.md says so.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import optuna

from ...errors import UsageError
from .optuna_adapter import RecordHookJournalStorage

HEARTBEAT_S = 20.0      # a running trial's heartbeat interval; stale after GRACE_FACTOR intervals
GRACE_FACTOR = 3.0
_MEMORY_LOCKS: dict[int, threading.Lock] = {}
LOCK_POLL_S = 0.01       # a worker waiting for a journal's or SQLite file's lock tries it this often


@dataclass
class Store:
    """An opened storage with what the workers need to know about it."""
    url: str
    kind: str                # journal | rdb | redis | grpc | memory
    storage: Any
    heartbeat_s: float
    lock_path: str | None = None   # journal / sqlite: the file lock beside the data

    @property
    def grace_s(self) -> float:
        return GRACE_FACTOR * self.heartbeat_s

    @property
    def dialect(self) -> str:
        return self.storage.engine.dialect.name if self.kind == "rdb" else ""


# A trial's attributes that say who runs it: a retried trial must not inherit them from the dead one
# (else it would look dead again the moment another worker pops it, before its new runner writes its own).
WORKER_ATTRS = ("pid", "host", "worker", "device", "heartbeat", "claim")
CREATED_BY = "gemvtune_created_by"


def retry_callback() -> Any:
    """Optuna's callback that re-enqueues a trial failed for a stale heartbeat (up to 3 times), without
    the dead runner's identity."""
    import copy
    import warnings

    cls = getattr(optuna.storages, "RetryHeartbeatStaleTrialCallback", None) or optuna.storages.RetryFailedTrialCallback
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # experimental / renamed across Optuna 4.x and 5.x
        inner = cls(max_retry=3)

    def retry(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        trial = copy.copy(trial)
        trial.user_attrs = {k: v for k, v in trial.user_attrs.items() if k not in WORKER_ATTRS}
        trial.system_attrs = {k: v for k, v in trial.system_attrs.items() if k != CREATED_BY}
        inner(study, trial)

    return retry


def _stale_callback_kw() -> dict[str, Any]:
    import inspect

    params = inspect.signature(optuna.storages.RDBStorage.__init__).parameters
    name = "heartbeat_stale_trial_callback" if "heartbeat_stale_trial_callback" in params else "failed_trial_callback"
    return {name: retry_callback()}


def open_store(url: str, heartbeat_s: float = HEARTBEAT_S) -> Store:
    """Open ``url`` (see the module doc); every failure is one UsageError naming the URL."""
    if not isinstance(url, str) or not url.strip():
        raise UsageError("empty --storage URL")
    if not heartbeat_s > 0:
        raise UsageError(f"--heartbeat must be positive seconds, got {heartbeat_s!r}")
    url = url.strip()
    if url.startswith("journal:"):
        from .journal import SafeJournalFileBackend

        path = url[len("journal:"):]
        if not path:
            raise UsageError("--storage journal:PATH needs a path")
        if os.path.isdir(path):
            raise UsageError(f"journal storage {path} is a directory, not a file")
        try:
            # (refuses a FIFO, a device, a file that is not a journal and a newer Optuna's op codes with one line,
            # the file untouched; repairs a journal torn by a killed or failed write, and never tears one itself)
            st = CreatorJournalStorage(SafeJournalFileBackend(path))
        except OSError as e:
            raise UsageError(f"cannot open journal storage {path}: {e.strerror or e}") from None
        return Store(url, "journal", st, heartbeat_s, lock_path=path + ".gemvtune.lock")
    if url in ("memory:", "inmemory", "memory"):
        return Store(url, "memory", optuna.storages.InMemoryStorage(), heartbeat_s)
    if url.startswith("redis://") or url.startswith("rediss://"):
        import importlib.util

        if importlib.util.find_spec("redis") is None:
            raise UsageError(f"--storage {url} needs the redis package: pip install 'gemvtune[redis]'")
        try:
            import warnings

            from optuna.storages import JournalStorage
            from optuna.storages.journal import JournalRedisBackend

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")   # flagged experimental
                return Store(url, "redis", JournalStorage(JournalRedisBackend(url)), heartbeat_s)
        except Exception as e:
            raise UsageError(f"cannot open storage {url}: {str(e).splitlines()[0]}") from None
    if url.startswith("grpc://"):
        hostport = url[len("grpc://"):]
        host, _, port = hostport.rpartition(":")
        if not host or not port.isdigit():
            raise UsageError(f"malformed --storage {url!r}: expected grpc://HOST:PORT")
        try:
            return Store(url, "grpc", optuna.storages.GrpcStorageProxy(host=host, port=int(port)), heartbeat_s)
        except Exception as e:
            raise UsageError(f"cannot open storage {url}: {str(e).splitlines()[0]}") from None
    if "://" not in url:
        raise UsageError(f"malformed --storage {url!r}: expected journal:PATH, memory:, or a URL like "
                         "postgresql://user:pw@host/db, sqlite:///file.db, redis://host, grpc://host:port")
    refuse_memory_sqlite(url)
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # heartbeats are flagged experimental
            rdb = optuna.storages.RDBStorage(url, heartbeat_interval=max(1, round(heartbeat_s)),
                                             grace_period=max(2, round(GRACE_FACTOR * heartbeat_s)),
                                             **_stale_callback_kw())
    except Exception as e:
        raise UsageError(f"cannot open storage {url}: {str(e).splitlines()[0]}") from None
    lock_path = None
    if rdb.engine.dialect.name == "sqlite":
        db = rdb.engine.url.database
        lock_path = (db + ".gemvtune.lock") if db and db != ":memory:" else None
    return Store(url, "rdb", rdb, heartbeat_s, lock_path=lock_path)


def refuse_memory_sqlite(url: str) -> None:
    """``sqlite:///`` or ``sqlite:///:memory:`` is a database that lives in one connection: Optuna's engine pool
    opens several, so the study vanishes between them (Optuna then fails inside a commit), and workers, other
    processes, can never share it. One line naming what works instead."""
    if not url.startswith("sqlite"):
        return
    try:
        from sqlalchemy.engine import make_url

        db = make_url(url).database
    except Exception:   # a malformed URL: RDBStorage says so
        return
    if not db or db == ":memory:" or db.startswith("file::memory:"):
        raise UsageError(f"--storage {url}: an in-memory SQLite database cannot hold a study (each connection "
                         "sees its own); use a file (sqlite:///study.db) or memory: for one process")


def creator() -> dict[str, Any]:
    """Who creates a trial: written into the trial as it is created (system attribute CREATED_BY), so a
    trial whose process dies before its first attribute is written is known to be dead at once."""
    import socket

    return {"host": socket.gethostname(), "pid": os.getpid()}


class CreatorJournalStorage(RecordHookJournalStorage):
    """Optuna's journal storage whose trials carry their creator: a new trial in the record that creates
    it, a queued one (the seed, a retry) right after the record that takes it from the queue.

    A record that cannot be appended (any OSError of the backend, whatever raised it) is a
    :class:`~gemvtune.tuning.coordination.journal.StorageWriteError`, and every later write of this process is
    refused with it: no record lands after a lost one, and the search ends with its one line even where
    Optuna replaces the error with its own (its trial loop raises ``AssertionError: Should not
    reach.`` when the record that finishes a trial is lost: the trial is still RUNNING)."""

    _write_failed: Any = None

    def __init__(self, backend: Any) -> None:
        self.journal_path = getattr(backend, "path", "?")   # (SafeJournalFileBackend's file)
        super().__init__(backend)

    def write_record(self, write: Any) -> None:
        from .journal import WriteError, append_failure

        if self._write_failed is not None:
            raise type(self._write_failed)(str(self._write_failed))
        try:
            write()
        except WriteError as e:
            self._write_failed = e
            raise
        except OSError as e:
            self._write_failed = append_failure(self.journal_path, e)
            raise self._write_failed from e

    def set_trial_state_values(self, trial_id: int, state: Any, values: Any = None) -> bool:
        took = super().set_trial_state_values(trial_id, state, values)
        if took and state == optuna.trial.TrialState.RUNNING:   # (Optuna sets RUNNING only to pop a queued trial)
            self.set_trial_system_attr(trial_id, CREATED_BY, creator())
        return took

    def create_new_trial(self, study_id: int, template_trial: Any = None) -> int:
        if template_trial is None:
            import datetime as _dt

            template_trial = optuna.trial.FrozenTrial(
                number=-1, state=optuna.trial.TrialState.RUNNING, value=None, datetime_start=_dt.datetime.now(),
                datetime_complete=None, params={}, distributions={}, user_attrs={},
                system_attrs={CREATED_BY: creator()}, intermediate_values={}, trial_id=-1)
        return super().create_new_trial(study_id, template_trial)


def make_storage(url: str) -> Any:
    """The Optuna storage object for ``url`` (kept for callers that need no lock)."""
    return open_store(url).storage


@contextlib.contextmanager
def storage_lock(store: Store, name: str) -> Iterator[None]:
    """Hold the storage's lock for ``name`` (a study): one holder at a time across processes and hosts
    that share the storage (see the module doc for what each kind offers)."""
    key = int.from_bytes(hashlib.sha1(name.encode()).digest()[:8], "big", signed=True)
    if store.kind == "memory":
        with _MEMORY_LOCKS.setdefault(id(store.storage), threading.Lock()):
            yield
    elif store.lock_path is not None:   # exclusive across processes and threads; the file stays after
        from filelock import FileLock

        lock = FileLock(store.lock_path)
        lock.acquire(poll_interval=LOCK_POLL_S)   # (as runners.cuda.gpulock: acquire takes poll_interval in every filelock 3.x)
        try:
            yield
        finally:
            lock.release()
    elif store.kind == "rdb" and store.dialect in ("postgresql", "mysql"):
        from sqlalchemy import text

        with store.storage.engine.connect() as conn:
            arg: dict[str, int | str]
            if store.dialect == "postgresql":
                take, give, arg = "SELECT pg_advisory_lock(:k)", "SELECT pg_advisory_unlock(:k)", {"k": key}
            else:
                take, give, arg = "SELECT GET_LOCK(:k, 600)", "SELECT RELEASE_LOCK(:k)", {"k": f"gemvtune-{key & 0xFFFFFFFF:x}"}
            conn.execute(text(take), arg)
            conn.commit()
            try:
                yield
            finally:
                conn.execute(text(give), arg)
                conn.commit()
    else:   # redis, grpc: no lock to take (see the module doc)
        yield


def now() -> float:
    return time.time()
