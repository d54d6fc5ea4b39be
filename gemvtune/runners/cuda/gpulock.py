"""One measurement at a time per GPU, across processes: workers that share a GPU (``search --workers N``)
compile in parallel, but two of them timing kernels at once would each measure the other's traffic
(seen on the H200: both workers' read ceilings fell to ~2.8 TB/s). A file lock named by the GPU's PCI
bus id, in the temp folder, serializes timing across the processes of this host; reentrant within one."""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import threading
from typing import Iterator


class GpuLock:
    def __init__(self, pci_bus_id: str):
        safe = "".join(c if c.isalnum() else "-" for c in pci_bus_id)
        self.path = os.path.join(tempfile.gettempdir(), f"gemvtune-gpu-{safe}.lock")
        self._rlock = threading.RLock()
        self._depth = 0
        self._fd: int | None = None

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        with self._rlock:
            if self._depth == 0:
                self._fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o666)
                fcntl.flock(self._fd, fcntl.LOCK_EX)
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
                if self._depth == 0 and self._fd is not None:
                    fcntl.flock(self._fd, fcntl.LOCK_UN)
                    os.close(self._fd)
                    self._fd = None
