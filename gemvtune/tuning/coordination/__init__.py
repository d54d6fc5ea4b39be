"""Distributed coordination of a search: the Optuna storages by URL and the lock each offers (``storage``),
Optuna's journal file kept readable whatever happens to a write (``journal``, ``journalcheck``), the workers
sharing one study with a global budget, stale trials failed and retried and one confirmation (``coord``), worker
processes on this host (``workers``), and every private Optuna name gemvtune relies on, behind small named
functions tested across the pinned Optuna range (``optuna_adapter``)."""
