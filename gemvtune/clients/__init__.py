"""Measurements in clients, as a user meets the kernels: the tuned-vs-baselines benchmark (``bench``),
per-call CPU cost in eager PyTorch (``percall``), a whole decode step (``decodestep``), the GEMV -> GEMM
transition against n (``transition``, ``transition_lt``) and a Hugging
Face model's tokens/s, eager and compiled (``hfbench`` with ``hfmodel``, ``hfrounds``, ``hfcheck``,
``hfcompile``, ``hfprofile``)."""
