"""One measurement at a time per GPU, across processes: workers that share a GPU (``search --workers N``)
compile in parallel, but two of them timing kernels at once would each measure the other's traffic
(seen on the H200: both workers' read ceilings fell to ~2.8 TB/s). A file lock named by the GPU's PCI
bus id, in the temp folder, serializes timing across the processes of this host (a ``filelock.FileLock``:
flock, released when its process dies); reentrant within one thread, the other threads of the process wait."""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from collections.abc import Iterator

POLL_S = 0.005   # a waiting process tries the lock this often (filelock polls): the hand-over gap between workers


class GpuLock:
    def __init__(self, pci_bus_id: str):
        from filelock import FileLock

        safe = "".join(c if c.isalnum() else "-" for c in pci_bus_id)
        self.path = os.path.join(tempfile.gettempdir(), f"gemvtune-gpu-{safe}.lock")
        self._rlock = threading.RLock()   # one thread of this process at a time; the file lock counts its holds
        self._file = FileLock(self.path)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        with self._rlock:
            self._file.acquire(poll_interval=POLL_S)
            try:
                yield
            finally:
                self._file.release()
