"""Reports of tables and searches, pure functions of data already measured: CSVs of every variant with their
provenance (``runcsv``), the summary of a bench CSV (``summary``), a table's contents (``tablereport``), pictures of a
search's studies (``studyplots``) and Kernel Tuner's cache format (``ktexport``). A benchmark's own summary lives in
its room (``gemvtune.bench``, ``gemvtune.hf``, ``gemvtune.transition``)."""
