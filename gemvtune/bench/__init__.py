"""Benchmarks of the kernels as a user meets them: the tuned table against its baselines (``kernels``), a whole
decode step (``step``), the per-call CPU cost in eager PyTorch (``percall``) and their summaries (``report``)."""
