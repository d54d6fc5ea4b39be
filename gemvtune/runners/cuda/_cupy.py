"""cupy, imported once for the CUDA runner package; what every module of it shares."""

from __future__ import annotations

try:
    import cupy as cp
except Exception as _e:  # pragma: no cover - depends on the host
    cp = None
    _IMPORT_ERROR = str(_e)


def cuda_available() -> str | None:
    """None if a CUDA device answers, else the reason (one line)."""
    if cp is None:
        return f"cupy cannot be imported: {_IMPORT_ERROR.splitlines()[0]}"
    try:
        n = cp.cuda.runtime.getDeviceCount()
    except Exception as e:
        return f"no CUDA device answers ({str(e).splitlines()[0]})"
    return None if n > 0 else "no CUDA device answers (device count 0)"


def _rand_half(shape, rng) -> "cp.ndarray":
    """Uniform in [-1, 1), never zeros as a whole."""
    return (rng.random(shape, dtype=cp.float32) * 2 - 1).astype(cp.float16)
