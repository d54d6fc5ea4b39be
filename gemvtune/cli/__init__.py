"""The command line (``gemvtune``): ``main`` holds the group and registers every command; ``search``
(search and worker), ``replay`` (sweeps, replay, study), ``export`` and ``percall`` add theirs;
``options`` holds the conventions they share."""
