"""The build: CUDA source of a variant from the Jinja2 templates kept here (``render``, ``templates/``) and NVRTC
(``compile``: cubins for any architecture, cached on disk). Needs no GPU; above ``kernels``, below ``device``."""
