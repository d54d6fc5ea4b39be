"""The launch plan of a library family: one cuBLASLt algorithm ready to run one (M, d, n) call with one
epilogue on one device, through nvmath-python's low-level bindings (``nvmath.bindings.cublasLt``,
imported on first use; ``pip install 'gemvtune[blas]'``).

``LtProblem`` holds the descriptors of a call (the matmul descriptor: FP32 compute and scale, A transposed,
the bias epilogue; the layouts of W, X and Y in cuBLASLt's column-major terms, see
``gemvtune.kernels.cublaslt``) and asks the heuristic (``cublasLtMatmulAlgoGetHeuristic``) for algorithms.
``LtPlan`` rebuilds one algorithm from its stored attributes (``cublasLtMatmulAlgoInit`` and
``cublasLtMatmulAlgoConfigSetAttribute``), has the library check it (``cublasLtMatmulAlgoCheck``: a refusal
is ``LtRefused``, with the library's status) and allocates the workspace it needs once; ``launch(W, x, y,
bias, stream)`` is then one ``cublasLtMatmul`` call with raw pointers on the caller's stream, capturable in
a CUDA graph (the workspace is the plan's, like a kernel plan's). It has a kernel plan's interface
(``align``, ``launch``, ``close``), so the runner, the dispatcher and the PyTorch op use either alike;
``route_plan`` gives the one a table's route needs.

Lives beside ``gemvtune.device.plan`` (not in the CuPy runner package) because the PyTorch op launches it
too, with no CuPy in the process. Handles are made once per device and kept for the process.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Iterator
from typing import Any

from ..errors import GemvtuneError, UsageError
from ..kernels.cublaslt import ATTRIBUTES, HEURISTIC_TOP, CublasLtConfig
from ..kernels.epilogue import DEFAULT, Epilogue
from ..kernels.shapes import Shape

# The C ABI values of cudaDataType_t, cublasComputeType_t and cublasOperation_t (library_types.h,
# cublas_api.h): what cuBLASLt's descriptors and layouts take.
CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF = 0, 2, 14   # cudaDataType values
_TYPES = {"fp32": CUDA_R_32F, "fp16": CUDA_R_16F, "bf16": CUDA_R_16BF}
COMPUTE_32F = 68
OP_N, OP_T = 0, 1
ALIGN = 16                      # bytes: the alignment the heuristic is told W, x, y and bias have (launch checks it)
WORKSPACE_LIMIT = 32 << 20      # bytes of workspace an algorithm may ask for (split-K partial sums)
BLAS_HINT = "pip install 'gemvtune[blas]' (nvmath-python, NVIDIA's cuBLASLt bindings)"


class LibraryUnavailable(GemvtuneError):
    """cuBLASLt cannot be used in this process (no nvmath-python, no libcublasLt): one line saying why."""


class LtRefused(GemvtuneError):
    """cuBLASLt refused an algorithm or a problem (the message names the call and the library's status)."""


_lt: Any = None


def bindings() -> Any:
    """``nvmath.bindings.cublasLt``, imported once; LibraryUnavailable (one line) when it cannot be."""
    global _lt
    if _lt is None:
        try:
            from nvmath.bindings import cublasLt
        except Exception as e:   # ImportError, or nvmath's own import of cuda.core failing
            why = " ".join(str(e).split()) or type(e).__name__
            raise LibraryUnavailable(f"cuBLASLt bindings cannot be imported ({why[:200]}): {BLAS_HINT}") from None
        _lt = cublasLt
    return _lt


def _why(e: BaseException) -> str:
    return " ".join(str(e).split())[:300] or type(e).__name__


@contextlib.contextmanager
def _context(device: int) -> Iterator[None]:
    """The device's primary context current for the block (cuBLASLt asks the current device for its properties)."""
    from .plan import device_context

    with device_context(device):
        yield


def _alloc(device: int, nbytes: int) -> int:
    """``nbytes`` of device memory in the device's primary context (the workspace)."""
    from .plan import _driver, check

    with _context(device):
        return int(check(_driver().cuMemAlloc(nbytes), "cuMemAlloc"))


def _free(device: int, ptr: int) -> None:
    from .plan import _driver

    with _context(device):
        _driver().cuMemFree(ptr)


_handles: dict[int, int] = {}
_handles_lock = threading.Lock()


def handle(device: int) -> int:
    """The process's cuBLASLt handle of ``device`` (made on first use, kept)."""
    h = _handles.get(device)
    if h is None:
        with _handles_lock:
            h = _handles.get(device)
            if h is None:
                lt = bindings()
                try:
                    with _context(device):
                        h = _handles[device] = int(lt.create())
                except GemvtuneError:
                    raise
                except Exception as e:   # no libcublasLt, no driver
                    raise LibraryUnavailable(f"cuBLASLt cannot start on device {device} ({_why(e)}): {BLAS_HINT}") from None
    return h


def _set(set_fn: Any, dtype_fn: Any, obj: int, attr: Any, value: int) -> None:
    """One ``*SetAttribute`` call: ``value`` in the attribute's own C type (the bindings say which)."""
    import numpy as np

    buf = np.array([value], dtype=dtype_fn(attr))
    set_fn(obj, int(attr), buf.ctypes.data, buf.itemsize)


class LtProblem:
    """The descriptors of one (M, d, n) call with ``epilogue`` on ``device``: the matmul descriptor and the
    layouts of A = W (column-major [d, M], op T), B = X (column-major [d, n]) and C = D = Y (column-major
    [M, n]). ``heuristics`` asks cuBLASLt for algorithms; ``algorithm`` and ``check`` rebuild one and have it checked."""

    def __init__(self, shape: Shape, epilogue: Epilogue = DEFAULT, device: int = 0):
        lt = self.lt = bindings()
        self.shape, self.epilogue, self.device = shape, epilogue, device
        self.handle = handle(device)
        M, d, n = shape.M, shape.d, shape.n
        self.in_type, self.out_type = _TYPES[shape.dtype], _TYPES[epilogue.out]
        self.types = (self.in_type, self.in_type, self.out_type, self.out_type)   # A, B, C, D
        self.desc = self.a = self.b = self.d = 0
        try:
            with _context(device):
                self.desc = int(lt.matmul_desc_create(COMPUTE_32F, CUDA_R_32F))
                A = lt.MatmulDescAttribute
                self.set_desc(A.TRANSA, OP_T)
                self.set_desc(A.TRANSB, OP_N)
                if epilogue.bias:
                    self.set_desc(A.EPILOGUE, int(lt.Epilogue.BIAS))
                    self.set_desc(A.BIAS_DATA_TYPE, self.in_type)
                self.a = int(lt.matrix_layout_create(self.in_type, d, M, d))
                self.b = int(lt.matrix_layout_create(self.in_type, d, n, d))
                self.d = int(lt.matrix_layout_create(self.out_type, M, n, M))
        except Exception as e:
            self.close()
            raise LtRefused(f"cuBLASLt descriptors of {shape}{epilogue.label}: {_why(e)}") from None
        self.c = self.d   # beta = 0: C is D's layout (and pointer); never read

    def set_desc(self, attr: Any, value: int) -> None:
        _set(self.lt.matmul_desc_set_attribute, self.lt.get_matmul_desc_attribute_dtype, self.desc, attr, value)

    def heuristics(self, top: int, workspace_limit: int = WORKSPACE_LIMIT) -> tuple[list[tuple[CublasLtConfig, int]], str]:
        """(up to ``top`` algorithms of the heuristic, best first, each with the workspace bytes it needs; why
        there are none, when there are none): the library's refusal is an answer, not an exception."""
        import numpy as np

        lt = self.lt
        pref = 0
        try:
            with _context(self.device):
                pref = int(lt.matmul_preference_create())
                P = lt.MatmulPreferenceAttribute
                pset, pdtype = lt.matmul_preference_set_attribute, lt.get_matmul_preference_attribute_dtype
                _set(pset, pdtype, pref, P.MAX_WORKSPACE_BYTES, workspace_limit)
                for a in (P.MIN_ALIGNMENT_A_BYTES, P.MIN_ALIGNMENT_B_BYTES, P.MIN_ALIGNMENT_C_BYTES,
                          P.MIN_ALIGNMENT_D_BYTES):
                    _set(pset, pdtype, pref, a, ALIGN)
                res = np.zeros(top, dtype=lt.matmul_heuristic_result_dtype)
                count = np.zeros(1, dtype=np.int32)
                lt.matmul_algo_get_heuristic(self.handle, self.desc, self.a, self.b, self.c, self.d, pref, top,
                                             res.ctypes.data, count.ctypes.data)
        except Exception as e:
            return [], f"cuBLASLt's heuristic gave no algorithm for {self.shape}{self.epilogue.label}: {_why(e)}"
        finally:
            if pref:
                lt.matmul_preference_destroy(pref)
        out = []
        offset = res.dtype.fields["algo"][1]
        for i in range(int(count[0])):
            if int(res[i]["state"]) != 0:   # CUBLAS_STATUS_SUCCESS: the others are not algorithms
                continue
            cfg = self.config_of(res.ctypes.data + i * res.dtype.itemsize + offset)
            out.append((cfg, int(res[i]["workspace_size"])))
        return out, ("" if out else f"cuBLASLt's heuristic returned no algorithm for {self.shape}{self.epilogue.label}")

    def config_of(self, algo_ptr: int) -> CublasLtConfig:
        """The attributes of the algorithm at ``algo_ptr`` (a ``cublasLtMatmulAlgo_t``), as a config."""
        import numpy as np

        lt = self.lt
        values = {}
        written = np.zeros(1, dtype=np.uint64)
        for field, name, _ in ATTRIBUTES:
            attr = lt.MatmulAlgoConfigAttribute[name]
            buf = np.zeros(1, dtype=lt.get_matmul_algo_config_attribute_dtype(attr))
            lt.matmul_algo_config_get_attribute(algo_ptr, int(attr), buf.ctypes.data, buf.itemsize, written.ctypes.data)
            values[field] = int(buf[0])
        return CublasLtConfig(**values)

    def algorithm(self, config: CublasLtConfig) -> Any:
        """A ``cublasLtMatmulAlgo_t`` (a NumPy array holding it) rebuilt from ``config``; LtRefused when the
        library does not know the algorithm id for these types, or refuses an attribute."""
        import numpy as np

        lt = self.lt
        algo = np.zeros(1, dtype=lt.matmul_algo_dtype)
        try:
            with _context(self.device):
                lt.matmul_algo_init(self.handle, COMPUTE_32F, CUDA_R_32F, *self.types, config.algo_id, algo.ctypes.data)
                for name, value in config.attributes():
                    _set(lt.matmul_algo_config_set_attribute, lt.get_matmul_algo_config_attribute_dtype,
                         algo.ctypes.data, lt.MatmulAlgoConfigAttribute[name], value)
        except Exception as e:
            raise LtRefused(f"cuBLASLt refused to rebuild {config.label}: {_why(e)}") from None
        return algo

    def check(self, algo: Any, label: str = "") -> int:
        """The workspace bytes the algorithm needs for this problem; LtRefused when cuBLASLt refuses it."""
        import numpy as np

        lt = self.lt
        res = np.zeros(1, dtype=lt.matmul_heuristic_result_dtype)
        try:
            with _context(self.device):
                lt.matmul_algo_check(self.handle, self.desc, self.a, self.b, self.c, self.d, algo.ctypes.data,
                                     res.ctypes.data)
        except Exception as e:
            raise LtRefused(f"cuBLASLt refused {label} for {self.shape}{self.epilogue.label}: {_why(e)}") from None
        if int(res[0]["state"]) != 0:
            raise LtRefused(f"cuBLASLt refused {label} for {self.shape}{self.epilogue.label}: state {int(res[0]['state'])}")
        return int(res[0]["workspace_size"])

    def close(self) -> None:
        lt = self.lt
        for attr in ("a", "b", "d"):
            if getattr(self, attr):
                lt.matrix_layout_destroy(getattr(self, attr))
                setattr(self, attr, 0)
        if self.desc:
            lt.matmul_desc_destroy(self.desc)
            self.desc = 0


def top_algorithms(shape: Shape, epilogue: Epilogue = DEFAULT, device: int = 0,
                   top: int = HEURISTIC_TOP) -> list[tuple[CublasLtConfig, int]]:
    """Up to ``top`` of the heuristic's algorithms for ``shape`` with ``epilogue``, best first, with their
    workspace bytes; LtRefused (the library's reason) when it proposes none. The descriptors live for the call."""
    prob = LtProblem(shape, epilogue, device)
    try:
        found, why = prob.heuristics(top)
    finally:
        prob.close()
    if not found:
        raise LtRefused(why)
    return found


class LtPlan:
    """One cuBLASLt algorithm of one (M, d, n) call with one epilogue on one device: descriptors, the
    algorithm (checked by the library) and its workspace, made once; ``launch`` is one ``cublasLtMatmul``.
    Build outside CUDA-graph capture (it allocates); launches may be captured."""

    def __init__(self, config: CublasLtConfig, shape: Shape, epilogue: Epilogue = DEFAULT, device: int = 0):
        import numpy as np

        why = list(config.invalid_reasons(shape)) + epilogue.invalid_reasons(config)
        if why:
            raise LtRefused(f"{config.label}{epilogue.label} cannot run {shape}: " + "; ".join(why))
        self.config, self.shape, self.epilogue, self.device = config, shape, epilogue, device
        self.align = ALIGN
        self.workspace, self.workspace_bytes = 0, 0
        self.problem = LtProblem(shape, epilogue, device)
        try:
            self.algo = self.problem.algorithm(config)
            self.workspace_bytes = self.problem.check(self.algo, config.label)
            if self.workspace_bytes:
                self.workspace = _alloc(device, self.workspace_bytes)
        except BaseException:
            self.problem.close()
            raise
        self._lock = threading.Lock()
        self._scalars = np.array([1.0, 0.0], dtype=np.float32)   # alpha, beta (host pointer mode)
        self._alpha = self._scalars.ctypes.data
        self._beta = self._alpha + 4
        self._algo_ptr = self.algo.ctypes.data
        self._bias = 0   # the bias pointer the descriptor holds now
        self._matmul = self.problem.lt.matmul
        self._bias_attr = self.problem.lt.MatmulDescAttribute.BIAS_POINTER

    def launch(self, W: int, x: int, y: int, bias: int = 0, stream: int = 0) -> None:
        """Enqueue one call on ``stream`` (a raw ``cudaStream_t``). Raw device pointers, each ALIGN-byte aligned."""
        if (W | x | y | bias) % ALIGN:
            raise UsageError(f"W, x, y and bias must be {ALIGN}-byte aligned for the cuBLASLt algorithm "
                             f"{self.config.label} (is one an offset view?)")
        p = self.problem
        with self._lock:   # the descriptor's bias pointer is shared: one launch at a time per plan
            if self.epilogue.bias and bias != self._bias:
                if not bias:
                    raise UsageError(f"{self.config.label}{self.epilogue.label} was planned with a bias: give one")
                p.set_desc(self._bias_attr, bias)
                self._bias = bias
            args = (p.handle, p.desc, self._alpha, W, p.a, x, p.b, self._beta, y, p.c, y, p.d, self._algo_ptr,
                    self.workspace, self.workspace_bytes, stream)
            try:
                self._matmul(*args)
            except Exception:
                try:   # a thread that never made the device's context current: once more inside it
                    with _context(self.device):
                        self._matmul(*args)
                except Exception as e:
                    from .plan import LaunchError

                    raise LaunchError(f"cublasLtMatmul of {self.config.label}{self.epilogue.label} failed: {_why(e)}") from None

    def close(self) -> None:
        """Free the workspace and the descriptors (the plan cannot launch afterwards)."""
        if self.workspace:
            _free(self.device, self.workspace)
            self.workspace = 0
        self.problem.close()


class LtPlanCache:
    """Plans by (config, shape, epilogue, device), built on first use and kept for the process (the
    dispatcher's and the PyTorch op's). An algorithm the library refuses for a call, or a process without
    the library's bindings, is warned about once and answered with None: the caller runs cuBLAS instead."""

    def __init__(self) -> None:
        self._plans: dict[tuple, LtPlan | None] = {}
        self._lock = threading.Lock()

    def get(self, config: CublasLtConfig, shape: Shape, epilogue: Epilogue, device: int,
            stream: int | None = None) -> LtPlan | None:
        key = (config, shape, epilogue, device)
        if key in self._plans:
            return self._plans[key]
        with self._lock:
            if key not in self._plans:
                from .plan import capturing

                if stream is not None and capturing(stream):
                    raise GemvtuneError(
                        f"gemvtune: the cuBLASLt algorithm for {shape} is not ready yet and the stream is capturing "
                        f"a CUDA graph; run the layer once outside capture first (it allocates its workspace)")
                try:
                    self._plans[key] = LtPlan(config, shape, epilogue, device)
                except (LtRefused, LibraryUnavailable) as e:   # (a table read where nvmath-python is missing)
                    warnings.warn(f"gemvtune: {e}; cuBLAS runs {shape}{epilogue.label} instead", stacklevel=4)
                    self._plans[key] = None
        return self._plans[key]

    def __len__(self) -> int:
        return len(self._plans)


LT_PLANS = LtPlanCache()


def route_plan(config: Any, shape: Shape, epilogue: Epilogue, device: int, stream: int | None = None) -> Any:
    """The plan a route's config runs with: a compiled kernel's (``gemvtune.device.plan.PLANS``) or a library
    algorithm's (``LT_PLANS``; None where the library refuses it for this call: the caller runs cuBLAS)."""
    from ..kernels.families import is_library
    from .plan import PLANS

    if is_library(config):
        return LT_PLANS.get(config, shape, epilogue, device, stream)
    return PLANS.get(config, shape, epilogue, device, stream)
