"""Workers sharing one Optuna study: who they are, a global budget of measured trials, stale trials
of killed workers failed and retried, and one confirmation stage per search.

Everything lives in the study's storage (trial and study user attributes), guarded by the storage's
lock (gemvtune.tuning.coordination.storage.storage_lock): no coordinator process, no side channel.

- A trial's worker writes ``worker``, ``host``, ``pid``, ``device`` and a ``heartbeat`` time (renewed
  every heartbeat interval while it runs). RDB storages also get Optuna's own heartbeats.
- Before it measures, a trial *claims* a slot under the lock: if the study already holds ``budget``
  measured-or-claimed trials it is not measured; if another trial measured (or is measuring) the same
  config, it is answered from that trial. So no config is measured twice and the budget is global.
- A RUNNING trial whose process is gone (same host, dead pid; a journal trial names its creator from
  the record that creates it, so one killed before its first attribute counts too) or whose heartbeat
  is older than the grace period is marked FAIL and re-enqueued (Optuna's retry callback for stale trials).
- After the search, one worker claims the confirmation (a study attribute written under the lock);
  the others leave the re-measurement and the table to it.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Any

import optuna

from ...safefile import pid_alive
from .optuna_adapter import study_storage, trial_id
from .storage import CREATED_BY, Store, now, retry_callback, storage_lock

RUNNING = optuna.trial.TrialState.RUNNING
FINISHED = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
CONFIRM_STALE_S = 3600.0
UNSTARTED_S = 60.0     # a trial with no worker attributes yet, older than this, was left by a killed worker


@dataclass(frozen=True)
class Worker:
    host: str
    pid: int
    index: int = 0        # offsets the sampler seed, so workers propose different configs
    device: str = ""      # e.g. "0 NVIDIA H200 00000000:19:00.0" (the CSV's device column)

    @property
    def id(self) -> str:
        return f"{self.host}:{self.pid}"


def this_worker(device: str = "", index: int = 0) -> Worker:
    """This process as a worker; ``index`` is given by the parent of --workers/--devices (search's
    hidden --worker-index), 0 for a lone search."""
    return Worker(socket.gethostname(), os.getpid(), index, device)


class Coordinator:
    def __init__(self, store: Store, worker: Worker | None = None):
        self.store = store
        self.worker = worker or this_worker()
        self._mine: dict[int, optuna.Trial] = {}
        self._mine_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- heartbeats ------------------------------------------------------------------------------
    def start_trial(self, trial: optuna.Trial) -> None:
        w = self.worker
        # pid and host first: a trial killed before them is only failed after UNSTARTED_S
        for k, v in (("pid", w.pid), ("host", w.host), ("worker", w.id), ("device", w.device),
                     ("heartbeat", now()), ("claim", None), ("measured", False)):
            trial.set_user_attr(k, v)
        with self._mine_lock:
            self._mine[trial_id(trial)] = trial
            if self._thread is None:
                self._thread = threading.Thread(target=self._beat, name="gemvtune-heartbeat", daemon=True)
                self._thread.start()

    def end_trial(self, trial: optuna.Trial) -> None:
        with self._mine_lock:
            self._mine.pop(trial_id(trial), None)

    def _beat(self) -> None:
        while not self._stop.wait(self.store.heartbeat_s):
            with self._mine_lock:
                trials = list(self._mine.values())
            for t in trials:
                try:
                    t.set_user_attr("heartbeat", now())
                except Exception:   # finished meanwhile, or the storage hiccuped: next beat
                    pass

    def close(self) -> None:
        self._stop.set()

    # ---- the study's state ---------------------------------------------------------------------
    @staticmethod
    def state(study: optuna.Study, skip: int | None = None) -> tuple[int, int, dict, dict]:
        """(measured, claimed-and-running, label -> (number, status, value) of measured trials,
        label -> number of running claimed trials), over the study as the storage holds it now."""
        measured: dict[str | None, tuple[int, str, float | None]] = {}   # (by label attribute)
        claimed: dict[str | None, int] = {}
        done = inflight = 0
        for t in study.get_trials(deepcopy=False):
            a = t.user_attrs
            if t.state in FINISHED and a.get("measured"):
                done += 1
                measured.setdefault(a.get("label"), (t.number, a.get("status", "?"), t.value))
            elif t.state == RUNNING and a.get("claim") and trial_id(t) != skip:
                inflight += 1
                claimed.setdefault(a.get("label"), t.number)
        return done, inflight, measured, claimed

    def claim(self, study: optuna.Study, trial: optuna.Trial, label: str, budget: int) -> tuple[str, Any]:
        """("go", measured so far) | ("dup", (number, status, value)) | ("busy", number) | ("full", measured)."""
        with storage_lock(self.store, study.study_name):
            self.fail_stale(study)
            done, inflight, measured, claimed = self.state(study, skip=trial_id(trial))
            if label in measured:
                return "dup", measured[label]
            if label in claimed:
                return "busy", claimed[label]
            if done + inflight >= budget:
                return "full", done
            trial.set_user_attr("claim", self.worker.id)
            return "go", done

    def fail_stale(self, study: optuna.Study) -> list[int]:
        """Mark FAIL the running trials of workers that are gone, and re-enqueue them. Returns their numbers."""
        if self.store.kind == "rdb":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")   # (experimental API)
                optuna.storages.fail_stale_trials(study)   # Optuna's heartbeats (retried by the storage's callback)
        failed = []
        w, grace, t_now = self.worker, self.store.grace_s, now()
        for t in study.get_trials(deepcopy=False, states=(RUNNING,)):
            a = t.user_attrs
            # who runs it: its worker attributes, else (killed before it wrote them all) who created it
            made = t.system_attrs.get(CREATED_BY) or {}
            host, pid = a.get("host") or made.get("host"), a.get("pid") or made.get("pid")
            if host == w.host and pid == w.pid:
                continue   # this process's own trials are alive as long as it is
            if host == w.host and pid:
                # On this host the process table is exact (heartbeats can stall behind a storage lock).
                if pid_alive(pid):
                    continue
                why = f"worker {a.get('worker') or f'{host}:{pid}'} is gone"
            else:
                # Another host's trial (heartbeats), or one asked for but never started (no attributes).
                beat = a.get("heartbeat") or (t.datetime_start.timestamp() if t.datetime_start else None)
                limit = grace if a.get("heartbeat") else max(grace, UNSTARTED_S)
                if beat is None or t_now - beat <= limit:
                    continue
                why = f"no heartbeat from {a.get('worker', '?')} for {t_now - beat:.0f} s"
            storage, tid = study_storage(study), trial_id(t)
            try:
                storage.set_trial_system_attr(tid, "gemvtune_failed", why)
                if a.get("measured"):   # measured, but its result never recorded: it does not count
                    storage.set_trial_user_attr(tid, "measured", False)
                if not storage.set_trial_state_values(tid, optuna.trial.TrialState.FAIL):
                    continue
            except (optuna.exceptions.UpdateFinishedTrialError, RuntimeError):
                continue   # another worker got there first
            retry_callback()(study, storage.get_trial(tid))
            failed.append(t.number)
        return failed

    def wait_budget(self, study: optuna.Study, budget: int, deadline: float | None) -> tuple[int, bool]:
        """After this worker's loop: wait while other workers' claimed trials run. Returns (measured,
        finished): finished is False when slots came free (a stale trial failed) and more trials are due."""
        while True:
            with storage_lock(self.store, study.study_name):
                self.fail_stale(study)
                done, inflight, _, _ = self.state(study)
            if done >= budget or (deadline is not None and time.monotonic() > deadline):
                return done, True
            if done + inflight < budget:
                return done, False
            time.sleep(min(1.0, self.store.heartbeat_s / 2))

    # ---- one confirmation per search -----------------------------------------------------------
    def claim_confirm(self, study: optuna.Study, key: str, since: float, joiner: bool = False) -> tuple[bool, str]:
        """Whether this worker confirms the search and writes the table: yes if nobody has, or the one
        who began died, or it was done before this worker started (a new run) — unless this worker
        only joined (``gemvtune worker``) and measured nothing. Else (False, who does or did it)."""
        attr = f"confirm:{key}"
        w = self.worker
        with storage_lock(self.store, study.study_name):
            rec = study.user_attrs.get(attr)
            if rec is None:
                mine = True
            elif not rec.get("done"):
                mine = ((rec.get("host") == w.host and rec.get("pid") == w.pid)   # this process's own, left unfinished
                        or (rec.get("host") == w.host and rec.get("pid") != w.pid and not pid_alive(rec.get("pid", 0)))
                        or now() - float(rec.get("started", 0)) > CONFIRM_STALE_S)
            else:
                mine = float(rec.get("finished", 0)) < since and not joiner
            if mine:
                study.set_user_attr(attr, {"worker": w.id, "host": w.host, "pid": w.pid, "started": now(), "done": False})
                return True, ""
        assert rec is not None   # (None was claimed above)
        return False, f"{rec.get('worker')} ({'done' if rec.get('done') else 'in progress'})"

    def finish_confirm(self, study: optuna.Study, key: str) -> None:
        attr = f"confirm:{key}"
        rec = dict(study.user_attrs.get(attr) or {})
        rec.update(done=True, finished=now())
        study.set_user_attr(attr, rec)
