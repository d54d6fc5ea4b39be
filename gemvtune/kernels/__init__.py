"""The kernel space, pure Python: shapes (and the model presets they come from, ``shapes``, ``census``, HF configs in
``hfconfig``), each family's configs and their validity (``gemv``, ``splitk``, ``mma``, ``ring`` with their shared
tensor-core tiling in ``tctiles``, the library family ``cublaslt``), registered in ``families``, epilogues
(``epilogue``), the launches of one call (``launchspec``) and FP8 (E4M3) weights with their scales (``fp8``). No
NVRTC, no GPU: the build is ``gemvtune.build``, launching is ``gemvtune.device``."""
