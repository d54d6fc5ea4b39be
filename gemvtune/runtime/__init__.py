"""Run time: the per-GPU table a search writes (``table``, checked whole by ``tableschema``), which
implementation runs a call (``route``: tuned kernel or cuBLAS), the PyTorch operator and drop-in
(``torch_op``, ``torch_linear``) and the standalone C++ header (``export``). CuPy arrays go through
``gemvtune.device.dispatch.Dispatcher``; runtime never imports runners."""
