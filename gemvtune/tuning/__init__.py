"""Tuning: Optuna studies over the kernel space, one per (shape, family). ``search`` (the objective,
trials, stopping: ``spacebound``), ``confirm`` (the top configs re-measured in rounds), ``search_run``
(the command's driver: trial CSVs and table entries), ``search_options`` (every search option declared
once), ``samplers``, ``storage``/``journal`` (Optuna storages kept readable), ``coord``/``workers``
(many workers sharing a study), ``sweep`` (whole grids recorded for replay) and ``study`` (search
quality on recorded sweeps). ``check`` keeps a table right: its entries re-measured, the stale ones listed."""
