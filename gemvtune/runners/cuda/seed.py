"""The seed kernel as written: llama.cpp's FP16 ``mul_mat_vec`` (one block of 256 threads per row, half2 loads,
FP32 accumulation, warp shuffle then shared memory across the 8 warps) with d and M read at run time
(``templates/seed_llamacpp.cu.j2``). A baseline, not a family: the GEMV family's ``llama.cpp`` config is the
same kernel with d compiled in (faster: MEASURING.md), so a benchmark reports both, each under its own name.

Only n (llama.cpp's ``ncols_dst``, a batch of columns) is compiled in: one cubin per n serves every (M, d).
An odd d is refused as llama.cpp refuses it (``GGML_ASSERT(ncols % 2 == 0)``: its half2 loads need even rows).
It is FP16 as written: a BF16 shape is refused (``seed_invalid_reasons``; ``seed_source`` raises UsageError)."""

from __future__ import annotations

from typing import Any

from ...build.compile import DEFAULT_ARCH, Compiled, compile_source
from ...errors import UsageError
from ...kernels.epilogue import DEFAULT
from ...kernels.shapes import MAX_BATCH, Shape

SEED_KIND = "seed"
SEED_NAME = "seed kernel (llama.cpp as written, d at run time)"
SEED_TEMPLATE = "seed_llamacpp.cu.j2"
SEED_KERNEL = "seed_gemv"      # the entry point: seed_gemv(W, x, y, int ncols, int nrows)
SEED_BLOCK = 256               # threads per block, one block per row


def seed_invalid_reasons(shape: Shape) -> list[str]:
    """Why the seed kernel cannot run ``shape`` (empty: it can)."""
    why = []
    dtype = getattr(shape, "dtype", "fp16")
    if dtype != "fp16":
        why.append(f"the seed kernel is llama.cpp's FP16 mul_mat_vec as written: no {dtype} version")
    if shape.d % 2:
        why.append(f"d = {shape.d} is odd: llama.cpp's FP16 mul_mat_vec loads half2 pairs and asserts ncols % 2 == 0 "
                   "(it leaves such a matrix to cuBLAS)")
    if not 1 <= shape.n <= MAX_BATCH:
        why.append(f"n = {shape.n} is outside 1..{MAX_BATCH}")
    return why


def seed_source(n: int, dtype: str = "fp16") -> str:
    """The seed kernel's CUDA source for ``n`` columns (FP32 y, no bias: the epilogue every measurement uses).
    FP16 only: ``dtype`` "bf16" raises UsageError."""
    from ...build.render import _env, dtype_values

    if dtype != "fp16":
        raise UsageError(f"the seed kernel is llama.cpp's FP16 mul_mat_vec as written: there is no {dtype!r} version "
                         "(a BF16 shape runs gemvtune's families)")
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_BATCH:
        raise ValueError(f"seed kernel: n must be an integer in 1..{MAX_BATCH}, got {n!r}")
    return _env().get_template(SEED_TEMPLATE).render(n=n, out_t=DEFAULT.out_ctype, out_name=DEFAULT.out_name,
                                                     bias=DEFAULT.bias, residual=False, swiglu=False,
                                                     **dtype_values(dtype))


def compile_seed(n: int, arch: str = DEFAULT_ARCH, dtype: str = "fp16") -> Compiled:
    """Compile (or fetch from the disk cache) the seed kernel for ``n`` columns. Raises CompileError; a
    ``dtype`` other than fp16 raises UsageError."""
    return compile_source(seed_source(n, dtype), f"seed_llamacpp_n{n}", arch, kernel=SEED_KERNEL)


def seed_launch(shape: Shape) -> tuple[tuple[int], tuple[int], tuple[Any, ...]]:
    """(grid, block, the run-time arguments after the pointers) of one launch: one block per row; d and M."""
    import numpy as np

    return (shape.M,), (SEED_BLOCK,), (np.int32(shape.d), np.int32(shape.M))
