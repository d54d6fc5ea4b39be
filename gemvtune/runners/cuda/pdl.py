"""Launches with programmatic dependent launch (Hopper+): ``cuLaunchKernelEx`` with the
programmatic-stream-serialization attribute, through ctypes (CuPy's launch has no attributes).
Captured into CUDA graphs like any stream launch; the kernel must use griddepcontrol (gemv ``pdl=on``)."""

from __future__ import annotations

import ctypes
import functools
from typing import Any

CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6


class CUlaunchAttributeValue(ctypes.Union):
    _fields_ = [("pad", ctypes.c_char * 64), ("programmaticStreamSerializationAllowed", ctypes.c_int)]


class CUlaunchAttribute(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", CUlaunchAttributeValue)]


class CUlaunchConfig(ctypes.Structure):
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(CUlaunchAttribute)), ("numAttrs", ctypes.c_uint)]


@functools.lru_cache(maxsize=1)
def _launch_fn() -> Any:
    lib = ctypes.CDLL("libcuda.so.1")
    f = lib.cuLaunchKernelEx
    f.restype = ctypes.c_int
    f.argtypes = [ctypes.POINTER(CUlaunchConfig), ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
    return f


def pack_args(args: tuple) -> tuple[Any, list]:
    """``void* params[]`` for the kernel: device arrays by their pointer, integers as 32-bit ints.
    Returns (params, keep): keep holds the values the pointers point to."""
    keep: list = []
    for a in args:
        if hasattr(a, "data") and hasattr(a.data, "ptr"):
            keep.append(ctypes.c_void_p(a.data.ptr))
        elif isinstance(a, int) or (hasattr(a, "dtype") and getattr(a.dtype, "kind", "") == "i"):
            keep.append(ctypes.c_int(int(a)))
        else:
            raise TypeError(f"PDL launch: unsupported kernel argument {type(a).__name__}")
    params = (ctypes.c_void_p * len(keep))(*[ctypes.cast(ctypes.pointer(v), ctypes.c_void_p) for v in keep])
    return params, keep


def make_config(grid: tuple, block: tuple, stream_ptr: int, attr: CUlaunchAttribute) -> CUlaunchConfig:
    g = tuple(grid) + (1,) * (3 - len(grid))
    b = tuple(block) + (1,) * (3 - len(block))
    return CUlaunchConfig(g[0], g[1], g[2], b[0], b[1], b[2], 0, ctypes.c_void_p(stream_ptr or None),
                          ctypes.pointer(attr), 1)


def function_handle(function: Any) -> int:
    """The CUfunction of a CuPy kernel: a RawModule's ``get_function`` gives a RawKernel, whose
    ``kernel`` is the loaded ``cupy.cuda.function.Function`` that holds ``ptr``."""
    inner = getattr(function, "kernel", function)
    ptr = getattr(inner, "ptr", None)
    if not ptr:
        raise RuntimeError(f"no CUfunction handle on {type(function).__name__}")
    return int(ptr)


class PdlFunction:
    """Callable like a CuPy kernel, ``f(grid, block, args)``, on the current CuPy stream."""

    def __init__(self, function: Any):
        self.function = function
        self._ptr: int | None = None
        self.attr = CUlaunchAttribute(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION)
        self.attr.value.programmaticStreamSerializationAllowed = 1

    def __call__(self, grid: tuple, block: tuple, args: tuple) -> None:
        from ._cupy import cp

        params, keep = pack_args(args)
        cfg = make_config(grid, block, cp.cuda.get_current_stream().ptr, self.attr)
        if self._ptr is None:
            self._ptr = function_handle(self.function)
        rc = _launch_fn()(ctypes.byref(cfg), ctypes.c_void_p(self._ptr), params, None)
        if rc != 0:
            raise RuntimeError(f"cuLaunchKernelEx (programmatic dependent launch) failed: CUresult {rc}")


def launcher(function: Any, config: Any) -> Any:
    """The callable that launches ``function`` for ``config``: with PDL when the config asks for it."""
    return PdlFunction(function) if getattr(config, "pdl", "off") == "on" else function
