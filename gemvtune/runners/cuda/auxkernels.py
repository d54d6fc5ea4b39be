"""The CUDA runner's auxiliary kernels (one small module, compiled once per arch) and the L2 flush built
on them, a part of the runner: a streaming read (the read ceiling; x read back into L2 after a flush),
an empty kernel (the launch floor), an L2 fill and discard (the flush), and a spin on the global timer
(the spin timing method)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...build.compile import compile_source
from ...device._cupy import cp

AUX_SRC = r"""
extern "C" __global__ void read_stream(const uint4* __restrict__ p, unsigned long long n, unsigned int* out) {
    uint4 a = make_uint4(0u, 0u, 0u, 0u);
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        uint4 v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u)
            asm volatile("ld.global.nc.L1::no_allocate.v4.b32 {%0,%1,%2,%3}, [%4];"
                         : "=r"(v[u].x), "=r"(v[u].y), "=r"(v[u].z), "=r"(v[u].w) : "l"(p + i + u * stride));
#pragma unroll
        for (int u = 0; u < 4; ++u) { a.x ^= v[u].x; a.y ^= v[u].y; a.z ^= v[u].z; a.w ^= v[u].w; }
    }
    for (; i < n; i += stride) { uint4 v = p[i]; a.x ^= v.x; a.y ^= v.y; a.z ^= v.z; a.w ^= v.w; }
    if ((a.x ^ a.y ^ a.z ^ a.w) == 0x9e3779b9u) out[0] = 1u;   // keeps the loads; practically never true
}
extern "C" __global__ void l2_fill(uint4* __restrict__ p, unsigned long long n) {
    // Writes evict what L2 holds (a streaming read does not, on H200:
    // see docs/design-notes.md#keeping-l2-cold-and-tiny-shapes)
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        p[i] = make_uint4(0u, 0u, 0u, 0u);
}
extern "C" __global__ void l2_discard(char* __restrict__ p, unsigned long long lines) {
    // ... then drop the written lines without writing them back: L2 is left empty and clean
#if __CUDA_ARCH__ >= 800
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < lines; i += stride)
        asm volatile("discard.global.L2 [%0], 128;" :: "l"(p + i * 128) : "memory");
#endif
}
extern "C" __global__ void empty_kernel() {}
extern "C" __global__ void spin(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}
"""


@dataclass(frozen=True)
class AuxKernels:
    """The auxiliary kernels as CuPy functions (each launches on the current stream unless given ``stream=``)."""

    read_stream: Any   # (uint4 pointer, count of 16-byte words, uint32 sink): a streaming read
    empty: Any         # empty_kernel
    l2_fill: Any       # (uint4 pointer, count of 16-byte words): zeros written
    l2_discard: Any    # (pointer, count of 128-byte lines): discard.global.L2 (sm_80 and up)
    spin: Any          # (ns): spins on %globaltimer


def load_aux(arch: str, function: Callable[[str, str], Any]) -> AuxKernels:
    """Compile (or fetch from the disk cache) the auxiliary module for ``arch``; ``function(cubin_path,
    name)`` loads one kernel of it (the runner's, on its device)."""
    aux = compile_source(AUX_SRC, "aux", arch, kernel="read_stream")
    return AuxKernels(*(function(aux.cubin_path, k) for k in ("read_stream", "empty_kernel", "l2_fill",
                                                             "l2_discard", "spin")))


class L2Flush:
    """The L2 flush: write 3x L2 of scratch (evicting everything, the weights of a shape too small to
    rotate out of L2 included, as the rest of a model's layers do in real decode), then discard those
    lines so no write-back lands in the timed sample; then read the current shape's x copies back in (x
    is hot in real decode: the kernel before wrote it). Measured against full rotation on the H200 (a
    streaming read does not evict there; docs/design-notes.md#keeping-l2-cold-and-tiny-shapes). Its scratch is allocated on the
    current stream at the first flush (the caller makes the runner's current), kept until ``release``."""

    def __init__(self, kernels: AuxKernels, l2_bytes: int, sm_count: int):
        self.k, self.l2_bytes, self.sm_count = kernels, l2_bytes, sm_count
        self.scratch: Any = None
        self.sink: Any = None

    def flush(self, stream: Any, x_block: Any = None) -> None:
        """Enqueue the flush on ``stream``, then the read of ``x_block`` (None: nothing read back)."""
        if self.scratch is None:
            self.scratch = cp.empty(int(3 * self.l2_bytes) // 128 * 128, dtype=cp.uint8)
            self.sink = cp.zeros(1, dtype=cp.uint32)
        n = self.scratch.size
        grid = (self.sm_count * 8,)
        self.k.l2_fill(grid, (256,), (self.scratch, np.uint64(n // 16)), stream=stream)
        self.k.l2_discard(grid, (256,), (self.scratch, np.uint64(n // 128)), stream=stream)
        if x_block is not None:   # x is hot in real decode (the previous kernel just wrote it): read it back in
            self.k.read_stream(grid, (256,), (x_block, np.uint64(x_block.nbytes // 16), self.sink), stream=stream)

    def release(self) -> None:
        """Drop the scratch (made again at the next flush)."""
        self.scratch = None
