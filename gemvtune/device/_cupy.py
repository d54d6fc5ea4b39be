"""cupy, imported once for the CUDA runner package; what every module of it shares."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from ..build.compile import CUDA_WHEELS

try:
    import cupy as cp
except Exception as _e:  # pragma: no cover - depends on the host
    cp = None
    _IMPORT_ERROR = str(_e) or type(_e).__name__

# The extras that bring one CUDA build each (pyproject.toml): CuPy, NVRTC and the CUDA headers.
EXTRA_FOR_MAJOR = {12: "gemvtune[cu12]", 13: "gemvtune[cu13]"}
_PACKAGES = {major: " ".join((f"cupy-cuda{major}x", *wheels)) for major, wheels in CUDA_WHEELS.items()}
_DRIVER_FOR_MAJOR = {12: 525, 13: 580}   # the first Linux driver branch that runs each CUDA major


def cuda_available() -> str | None:
    """None if a CUDA device answers, else the reason (one line): no CuPy, no NVIDIA driver at all,
    a driver too old for the installed CUDA build (and the extra to install instead), or no device."""
    if cp is None:
        return (f"CuPy cannot be imported ({_IMPORT_ERROR.splitlines()[0]}): install the CUDA build that "
                f"matches the driver, the extra {EXTRA_FOR_MAJOR[13]} (driver >= 580) or {EXTRA_FOR_MAJOR[12]} "
                "(from a checkout: pip install -e '.[cu13]')" + _two_cupys())
    try:
        n = cp.cuda.runtime.getDeviceCount()
    except Exception as e:
        return diagnose(str(e).splitlines()[0] if str(e) else type(e).__name__, driver_version(), runtime_version())
    return None if n > 0 else "no CUDA device answers (device count 0)"


def driver_version() -> int | None:
    """The CUDA version the installed driver supports (e.g. 12080 for 12.8), from libcuda through
    ``cuda.bindings.driver.cuDriverGetVersion``; None where no driver library loads."""
    try:
        from cuda.bindings import driver

        err, v = driver.cuDriverGetVersion()
        return int(v) if err == driver.CUresult.CUDA_SUCCESS and int(v) > 0 else None
    except Exception:  # no libcuda (cuda.pathfinder's DynamicLibNotFoundError), no bindings
        pass
    try:  # CuPy's own view: cudaDriverGetVersion answers 0 where no driver is installed
        v = int(cp.cuda.runtime.driverGetVersion()) if cp is not None else 0
    except Exception:
        v = 0
    return v or None


def runtime_version() -> int | None:
    """The CUDA version CuPy was built for (e.g. 13020), or None."""
    try:
        return int(cp.cuda.runtime.runtimeGetVersion()) if cp is not None else None
    except Exception:
        return None


def _dotted(v: int) -> str:
    return f"{v // 1000}.{v % 1000 // 10}"


def diagnose(error: str, driver: int | None, runtime: int | None) -> str:
    """The one line for a CUDA runtime that does not answer: which case applies."""
    if driver is None:
        return (f"no CUDA device answers: no NVIDIA driver is installed (libcuda cannot be loaded; "
                f"CuPy says: {error})")
    if runtime is not None and driver // 1000 < runtime // 1000:
        have, want = runtime // 1000, driver // 1000
        upgrade = f"a driver >= {_DRIVER_FOR_MAJOR[have]}" if have in _DRIVER_FOR_MAJOR else "a newer driver"
        fix = (f"install the CUDA {want} build instead (pip uninstall -y {_PACKAGES[have]}; then the "
               f"{EXTRA_FOR_MAJOR[want]} extra, from a checkout pip install -e '.[cu{want}]') or {upgrade}"
               if want in EXTRA_FOR_MAJOR and have in _PACKAGES else f"install {upgrade}")
        return (f"no CUDA device answers: the NVIDIA driver supports CUDA {_dotted(driver)}, too old for this "
                f"install's CUDA {_dotted(runtime)} build; {fix}")
    return f"no CUDA device answers ({error}; driver supports CUDA {_dotted(driver)})" + _two_cupys()


def _two_cupys() -> str:
    """A note where more than one CuPy package is installed (they overwrite each other's files)."""
    try:
        from importlib.metadata import distributions

        names = sorted({(d.metadata["Name"] or "").lower() for d in distributions()
                        if (d.metadata["Name"] or "").lower().startswith("cupy")})
    except Exception:  # pragma: no cover
        return ""
    return f"; more than one CuPy is installed ({', '.join(names)}): keep one" if len(names) > 1 else ""


def rand_elems(shape, rng, dtype: str = "fp16") -> cp.ndarray:
    """Uniform in [-1, 1), never zeros as a whole, of element type ``dtype`` (``gemvtune.device.elems``: FP16,
    or BF16 as uint16 bits), rounded to nearest from FP32."""
    from .elems import from_float32

    return from_float32(rng.random(shape, dtype=cp.float32) * 2 - 1, dtype)


def as_torch(torch: Any, a: Any, dtype: str) -> Any:
    """A CuPy array as a torch tensor (DLPack, no copy); BF16 bits (uint16) as torch.bfloat16."""
    t = torch.from_dlpack(a)
    return t.view(torch.bfloat16) if dtype == "bf16" else t


def from_torch(torch: Any, t: Any) -> Any:
    """A torch tensor as a CuPy array (DLPack, no copy); torch.bfloat16 as its bits (uint16)."""
    return cp.from_dlpack(t.view(torch.uint16) if t.dtype == torch.bfloat16 else t)


@contextlib.contextmanager
def scope(device: int | None, stream: Any, no_pool: bool = False) -> Iterator[None]:
    """``device`` (None: the caller's) and ``stream`` current in this thread for the block, and with
    ``no_pool`` CuPy's memory pool bypassed (``cupy.cuda.using_allocator(None)``: every array its own
    cudaMalloc, so compute-sanitizer sees exact bounds); thread-local, the caller's back after. CuPy's
    global allocator is never changed."""
    with contextlib.ExitStack() as held:
        if device is not None:
            held.enter_context(cp.cuda.Device(device))
        held.enter_context(stream)
        if no_pool:
            held.enter_context(cp.cuda.using_allocator(None))
        yield
