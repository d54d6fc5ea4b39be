"""Reports: CSVs of every variant with their provenance (``report``), summaries of benchmarks
(``benchreport``, ``hfbench_report``, ``summary``), a table's contents (``tablereport``), the GEMV ->
GEMM crossover (``crossover``) and transition (``transition``), pictures of a search's studies (``studyplots``) and Kernel Tuner's
cache format (``ktexport``). Pure functions of data already measured."""
