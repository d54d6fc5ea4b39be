"""The CUDA runner: ``CudaRunner`` measures variants on a GPU through ``gemvtune.device``.

``runner`` (CudaRunner) is made of parts, each given what it uses: ``verify`` (Verifier), ``timer`` (Timer: graph
and spin timing), ``auxkernels`` (the auxiliary kernels and the L2 flush), ``buffers`` (one shape's rotating
copies), ``device`` (device info, the read ceiling), ``ltrunner`` (the cuBLASLt family) and ``libtimers`` (the
baselines timed in the same harness: cuBLAS, Inductor in ``inductor``, the llama.cpp ``seed`` kernel); ``decode``
is the decode-step benchmark's GPU half."""

from ...device._cupy import cuda_available
from .runner import CudaRunner

__all__ = ["CudaRunner", "cuda_available"]
