"""gemlite's FP8-weight layer as a baseline (issue 37): gemlite's "A16W8 FP8" (FP16/BF16 x, E4M3 weights with one
FP32 scale per output row, gemlite's own Triton autotune), built from *our* codes and scales so that it and gemvtune's
FP8 GEMV compute the same product y = x · (decode(codes) × scale[m])ᵀ.

**Target.** gemlite 0.6.0, https://github.com/dropbox/gemlite (the home of mobiusml/gemlite since 2025) at commit
fd3f9338a96b (2026-06-30); it asks for triton >= 3.6 (setup.py). The API: ``gemlite.helper.A16W8_FP8(device, dtype)
.from_weights(weight, bias, scales)`` with pre-quantised ``weight`` (torch.float8_e4m3fn [M, d]) and ``scales``
([M, 1]; W ≈ weight × scales, the same convention as ours: gemlite's own quantiser stores amax/448 per row). It makes
a ``GemLiteLinearTriton(8, group_size=d, input_dtype=output_dtype=FP16|BF16)`` and ``pack``s it: the codes are not
copied (W_q is their [d, M] transposed view), the scales are copied to a [1, M] float32 row. Pre-scaling (gemlite's
NVIDIA default, ``post_scale=False``): each tile of codes is dequantised in the kernel as ``float32(code) × scale``,
one float32 product, exactly our ``kernels.fp8.dequantize``; ``post_scale=True`` multiplies the FP32 sum instead.

**Kernels** (``gemlite.core.get_matmul_type`` for 8-bit weights): n ≤ 2 runs GEMV_SPLITK (FP32 products and sums,
y rounded once to x's dtype); 3 ≤ n < 64 runs GEMM_SPLITK (the dequantised tile rounded to x's dtype for ``tl.dot``,
FP32 accumulation; with SPLIT_K > 1 its fast configs use up to 8, each slice's sum is rounded to x's dtype and
``atomic_add``-ed into y, after a ``zero_()`` of y by the config's pre-hook: a second launch, and bits that may vary
run to run). A bias is one more launch (``out += bias``).

**Autotune.** gemlite's mode is process-wide, "fast" at import (``gemlite.set_autotune("fast"|"max"|"default")``
before the first layer; it reloads the kernel modules and forgets every tuned key). Triton's autotuner runs on the first
call of each key and keeps the winner in memory only (per process): GEMV_SPLITK's key holds the exact n, GEMM_SPLITK's
the bucket of n (3-4 → 4, 5-8 → 8, 9-16 → 16: the first n of a bucket tunes it for the others; gemlite's own
``helper.warmup`` tunes at 1, 2, 4, 8, 16), and both hold our M and d (gemlite's N and K, compile-time constants:
every shape compiles every config) and the tensors' dtypes. gemlite ships no H200 config file (``gemlite/configs``: h100, a100, ...; none is
matched by "NVIDIA H200"), so every key is tuned fresh. Call the layer once per n (and dtype and shape) before timing
it or capturing it in a CUDA graph: a tuning call benchmarks and synchronises. Once tuned, a call is a torch custom op
(``gemlite::forward_functional``) whose body allocates y (``torch.empty``), maybe zeroes it, and launches one Triton
kernel: nothing syncs, so it can be captured. Eager calls pay that Python path (custom op, Triton's autotuner and
launcher) on the host each time: time the kernels in a graph, the eager path apart.

**Importing.** gemlite is carried as source (pure Python and Triton): the folder named by ``GEMVTUNE_GEMLITE``, else
``.peers/gemlite`` under the current directory, is put first on ``sys.path`` (the folder that holds the ``gemlite``
package). ``import gemlite`` needs a CUDA device (it reads the device's properties at import) and Triton; its helper
imports tqdm only for a progress bar, so where tqdm is missing a stand-in is lent for the import. It also sets Triton's
global allocator (``triton.set_allocator``, torch.empty on CUDA), for every Triton kernel of the process."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import types
from collections.abc import Iterator
from typing import Any

from ..errors import GemvtuneError, UsageError

GEMLITE_KIND = "gemlite-fp8"
GEMLITE_LABEL = "gemlite A16W8_FP8 (Triton, its autotune)"
GEMLITE_TARGET = "gemlite 0.6.0 (dropbox/gemlite fd3f9338a96b, 2026-06-30)"
ENV = "GEMVTUNE_GEMLITE"
PEER_DIR = os.path.join(".peers", "gemlite")
MIN_D = 32   # GemLiteLinearTriton.MIN_SIZE: d must be a multiple of it


def _has_package(folder: str) -> bool:
    return os.path.isfile(os.path.join(folder, "gemlite", "__init__.py"))


def _carried() -> tuple[str | None, str]:
    """(the folder of the carried gemlite, or None where there is none: an installed one may still import; why not,
    where ``GEMVTUNE_GEMLITE`` names a folder without the package)."""
    named = os.environ.get(ENV, "").strip()
    if named:
        if not _has_package(named):
            return None, f"{ENV}={named} holds no gemlite package (no {os.path.join(named, 'gemlite', '__init__.py')})"
        return os.path.abspath(named), ""
    if _has_package(PEER_DIR):
        return os.path.abspath(PEER_DIR), ""
    return None, ""


@contextlib.contextmanager
def _tqdm_stand_in() -> Iterator[None]:
    """A ``tqdm`` module for the length of the import where none imports (gemlite.helper imports it for the progress
    bar of its ``warmup``, which the baseline does not call); ``sys.modules`` is as it was afterwards."""
    if importlib.util.find_spec("tqdm") is not None:
        yield
        return
    had, before = "tqdm" in sys.modules, sys.modules.get("tqdm")
    stand_in = types.ModuleType("tqdm")
    stand_in.__dict__["tqdm"] = lambda iterable=None, *args, **kwargs: iterable
    sys.modules["tqdm"] = stand_in
    try:
        yield
    finally:
        if had:
            sys.modules["tqdm"] = before  # type: ignore[assignment]
        else:
            sys.modules.pop("tqdm", None)


def _forget_gemlite() -> None:
    """Drop a half-imported gemlite (a failed import leaves its submodules behind), so a later attempt starts clean."""
    for name in [n for n in sys.modules if n == "gemlite" or n.startswith("gemlite.")]:
        del sys.modules[name]


def gemlite_available() -> str:
    """"" where gemlite imports (the carried copy first on ``sys.path``: module docstring) and has
    ``helper.A16W8_FP8``; else one line saying why not."""
    folder, why = _carried()
    if why:
        return why
    if folder is not None and folder not in sys.path:
        sys.path.insert(0, folder)
    where = f" ({folder})" if folder else " (none carried: no $GEMVTUNE_GEMLITE, no ./.peers/gemlite)"
    try:
        with _tqdm_stand_in():   # by name: gemlite is no pip dependency of gemvtune but source carried beside it
            gemlite = importlib.import_module("gemlite")
            helper = importlib.import_module("gemlite.helper")
    except Exception as e:
        _forget_gemlite()
        line = (str(e).strip().splitlines() or [""])[0][:200]
        return f"gemlite{where} cannot be imported: {type(e).__name__}{': ' + line if line else ''}"
    if not hasattr(helper, "A16W8_FP8"):
        return (f"gemlite {getattr(gemlite, '__version__', '?')}{where} has no helper.A16W8_FP8 "
                f"(this baseline targets {GEMLITE_TARGET})")
    return ""


def _check(codes_u8: Any, scales: Any, dtype: Any, bias: Any) -> None:
    """One UsageError line for inputs gemlite's FP8 layer cannot take (before gemlite is imported)."""
    import torch

    if not isinstance(codes_u8, torch.Tensor) or codes_u8.dtype != torch.uint8 or codes_u8.dim() != 2 \
            or 0 in codes_u8.shape:
        got = f"{codes_u8.dtype} of shape {tuple(codes_u8.shape)}" if isinstance(codes_u8, torch.Tensor) \
            else type(codes_u8).__name__
        raise UsageError(f"gemlite FP8 codes must be a non-empty 2-D uint8 tensor [M, d] of E4M3 codes, got {got}")
    M, d = codes_u8.shape
    if not codes_u8.is_contiguous():
        raise UsageError(f"gemlite FP8 codes must be row-major contiguous [M, d] (gemvtune's layout), got strides "
                         f"{codes_u8.stride()}")
    if d % MIN_D:
        raise UsageError(f"gemlite needs d a multiple of {MIN_D} (GemLiteLinearTriton's in_features), got d = {d}")
    if dtype not in (torch.float16, torch.bfloat16):
        raise UsageError(f"gemlite's A16W8 FP8 layer takes float16 or bfloat16 activations, got {dtype}")
    if not isinstance(scales, torch.Tensor) or scales.dtype != torch.float32 or tuple(scales.shape) != (M,):
        got = f"{scales.dtype} of shape {tuple(scales.shape)}" if isinstance(scales, torch.Tensor) \
            else type(scales).__name__
        raise UsageError(f"gemlite FP8 scales must be float32 [M] = [{M}] (one per output row), got {got}")
    if bias is not None and (not isinstance(bias, torch.Tensor) or not bias.is_floating_point()
                             or tuple(bias.shape) != (M,)):
        got = f"{bias.dtype} of shape {tuple(bias.shape)}" if isinstance(bias, torch.Tensor) else type(bias).__name__
        raise UsageError(f"a gemlite bias must be a floating tensor [M] = [{M}], got {got}")
    for name, t in (("scales", scales), ("bias", bias)):
        if t is not None and t.device != codes_u8.device:
            raise UsageError(f"gemlite FP8 {name} are on {t.device} but the codes on {codes_u8.device}")
    if codes_u8.device.type != "cuda":
        raise UsageError(f"gemlite's kernels run on a CUDA device; the codes are on {codes_u8.device}")


def gemlite_fp8_layer(codes_u8: Any, scales: Any, dtype: Any, bias: Any = None, *, post_scale: bool = False) -> Any:
    """gemlite's A16W8 FP8 layer of our FP8 weight: ``codes_u8`` uint8 [M, d] E4M3 codes (row-major, on a CUDA
    device; not copied: the layer reads them in place), ``scales`` float32 [M] (W[m] = decode(codes[m]) × scales[m]),
    activations of ``dtype`` (torch.float16 or torch.bfloat16), an optional ``bias`` [M] (cast to ``dtype``).
    Returns the ``gemlite.GemLiteLinearTriton`` module: ``layer(x)`` with x [n, d] of ``dtype`` gives y [n, M] of
    ``dtype`` (x is not checked per call, so timing sees gemlite's own path). ``post_scale``: gemlite's option to
    scale the FP32 sums rather than each dequantised weight (off: gemlite's NVIDIA default). Raises UsageError (one
    line) for inputs it cannot take, GemvtuneError where gemlite does not import (``gemlite_available``)."""
    _check(codes_u8, scales, dtype, bias)
    why = gemlite_available()
    if why:
        raise GemvtuneError(why)
    import torch

    M = codes_u8.shape[0]
    maker = sys.modules["gemlite.helper"].A16W8_FP8(device=codes_u8.device, dtype=dtype, post_scale=post_scale)
    return maker.from_weights(codes_u8.view(torch.float8_e4m3fn), bias=bias, scales=scales.reshape(M, 1))



def gemlite_bound(dtype: str, d: int) -> float:
    """The bound gemlite's answer is verified against (||y - ref|| / ||s||, gemvtune's verifier's measure): 8u of x's
    dtype plus gemvtune's FP8 bound. Its terms (tests/test_gemlite_peer.py has the derivation): y rounded once to x's
    dtype (n <= 2), or each dequantised weight rounded to x's dtype for ``tl.dot`` and split-K slices rounded and
    atomic-added in x's dtype (n >= 3): ~1.5u (~1.9u at split-K 16) in the random model; 8u leaves 4x margin and is
    still ~1/30 (BF16) of what one wrong scale gives."""
    from ..kernels.shapes import UNIT_ROUNDOFF
    from ..runners.fp8data import fp8_error_bound

    return 8 * UNIT_ROUNDOFF[dtype] + fp8_error_bound(d)
