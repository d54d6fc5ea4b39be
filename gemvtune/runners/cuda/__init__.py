"""The CUDA runner: the only package that imports cupy. ``CudaRunner`` measures variants;
``Dispatcher`` runs a table's tuned kernels.

``runner`` (CudaRunner) is made of parts, each given what it uses: ``verify`` (Verifier), ``timer``
(Timer: graph and spin timing), ``auxkernels`` (the auxiliary kernels and the L2 flush), ``buffers``
(one shape's rotating copies), ``device`` (device info, the read ceiling) and ``baselines`` (cuBLAS);
``_cupy`` holds cupy and ``scope`` (device, stream and allocator for a block, the caller's back after)."""

from ._cupy import cuda_available
from .dispatch import Dispatcher
from .runner import CudaRunner

__all__ = ["CudaRunner", "Dispatcher", "cuda_available"]
