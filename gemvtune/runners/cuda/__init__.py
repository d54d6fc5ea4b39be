"""The CUDA runner: the only package that imports cupy. ``CudaRunner`` measures variants;
``Dispatcher`` runs a table's tuned kernels."""

from .dispatch import Dispatcher
from ._cupy import cuda_available
from .runner import CudaRunner

__all__ = ["CudaRunner", "Dispatcher", "cuda_available"]
