"""The GEMV -> GEMM transition against n: tuned families and cuBLAS(Lt) timed per n (``measure``, the cuBLASLt series in
``lt``), its CSV and plot (``report``) and the crossover a table shows (``crossover``)."""
