"""What the CUDA runner knows of its device: the provenance it records (``device_info``), the PCI bus id
(its GPU lock's name, nvidia-smi's key) and the read ceiling and launch floor it measures (``read_ceiling``)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from typing import Any

import numpy as np

from ...device._cupy import cp
from ..timing import summarize


def pci_bus_id(props: dict[str, Any]) -> str:
    """``DDDDDDDD:BB:DD.0`` of the device with these properties (``cudaGetDeviceProperties``)."""
    p = props
    return f"{int(p.get('pciDomainID', 0)):08X}:{int(p.get('pciBusID', 0)):02X}:{int(p.get('pciDeviceID', 0)):02X}.0"


def device_info(props: dict[str, Any], device: int, pci: str) -> dict[str, Any]:
    """The device: name, compute capability, SMs, L2, memory, driver and CUDA versions, its index here
    and its PCI bus id (provenance of every result, and the table's keys)."""
    p = props
    try:  # by PCI bus id: the device index here is CUDA_VISIBLE_DEVICES-relative, nvidia-smi's is not
        drv = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader",
                              f"--id={pci}"], capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception:
        drv = ""
    return {
        "name": p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"]),
        "compute_capability": f"{p['major']}.{p['minor']}",
        "sm_count": int(p["multiProcessorCount"]),
        "l2_bytes": int(p["l2CacheSize"]),
        "memory_bytes": int(p["totalGlobalMem"]),
        "driver": drv or str(cp.cuda.runtime.driverGetVersion()),
        "cuda_driver_api": cp.cuda.runtime.driverGetVersion(),
        "cuda_runtime": cp.cuda.runtime.runtimeGetVersion(),
        "cupy": cp.__version__,
        "device": device,
        "pci_bus_id": pci,
        "visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
    }


def read_ceiling(time_graph: Callable[[Callable[[int], None], int], list[float]], rng: Any, read_stream: Any,
                 empty: Any, sm_count: int, gib: float, copies: int) -> dict[str, float]:
    """Read bandwidth of a streaming kernel (``read_stream``: 16-byte nc loads, 4 in flight, grid-stride;
    the best of a few grid sizes) over ``copies`` buffers of ``gib`` GiB drawn from ``rng``, and the launch
    floor (the ``empty`` kernel in a graph), each timed by ``time_graph(launch, n)``. Allocates on the
    current stream (the caller makes the runner's current) and frees the pool's blocks after."""
    nbytes = int(gib * 2**30) // 16 * 16
    bufs = [rng.random(nbytes // 4, dtype=cp.float32) for _ in range(copies)]
    sink = cp.zeros(1, dtype=cp.uint32)
    best: tuple[Any, int] | None = None
    per_grid = {}
    for blocks_per_sm in (2, 4, 8, 16):
        grid = (sm_count * blocks_per_sm,)
        n = 8 * copies

        def launch(i: int, grid: tuple[int] = grid) -> None:
            read_stream(grid, (256,), (bufs[i % copies], np.uint64(nbytes // 16), sink))
        t = time_graph(launch, n)
        st = summarize(t)
        per_grid[blocks_per_sm] = nbytes / (st.median * 1e-6) / 1e9
        if best is None or st.median < best[0].median:
            best = (st, blocks_per_sm)
    assert best is not None   # the loop above ran (over four grid sizes)
    st, bps = best
    t_empty = summarize(time_graph(lambda i: empty((1,), (32,), ()), 2000))
    bufs.clear()
    cp.get_default_memory_pool().free_all_blocks()
    return {
        "read_gbps": nbytes / (st.median * 1e-6) / 1e9,
        "read_gbps_min": nbytes / (st.max * 1e-6) / 1e9,
        "read_gbps_max": nbytes / (st.min * 1e-6) / 1e9,
        "read_bytes": nbytes,
        "read_blocks_per_sm": bps,
        **{f"read_gbps_grid{k}": v for k, v in per_grid.items()},
        "launch_floor_us": t_empty.median,
        "launch_floor_us_min": t_empty.min,
        "launch_floor_us_max": t_empty.max,
    }
