"""The kernel space: shapes (and the model presets they come from), each family's configs and their
validity (``gemv``, ``splitk``, ``mma``, ``ring`` with their shared tensor-core tiling in ``tctiles``, the library family ``cublaslt`` with its
cuBLASLt plans in ``ltplan``, registered in ``families``; the seed kernel as written in ``seed``), epilogues, the launches of one call
(``launchspec``), CUDA source from the Jinja2 templates (``render``), NVRTC (``compile``) and a
compiled variant ready to launch (``plan``). Pure Python except ``compile`` and ``plan``; no cupy."""
