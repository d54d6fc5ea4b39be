"""Benchmarks of the kernels as a user meets them: the tuned table against its baselines (``kernels``), a whole
decode step (``step``), the per-call CPU cost in eager PyTorch (``percall``), sibling linears in one launch
(``groupbench``), the never-slower check of swapped layers against stock ``nn.Linear`` in a torch-only harness
(``guard``, its rule and summary in ``guardverdict``) and their summaries (``report``)."""
