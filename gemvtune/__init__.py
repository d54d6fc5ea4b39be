"""gemvtune: autotuned FP16 and BF16 GEMV kernels for LLM decode, ``y = W x`` and skinny GEMMs of n <= 16 tokens.

Importing this package is light: no cupy, optuna, pandas or torch is loaded until a GPU, search or
report function needs it. ``load_table`` (and ``Table``) load on first use; ``GemvLinear``,
``swap_linears``, ``restore_linears``, ``explain``, ``format_explain``, ``quantize_fp8`` and ``GemvFp8Linear`` load torch
on first use.
"""

from .errors import GemvtuneError, NoDeviceError, UsageError
from .kernels.cublaslt import CublasLtConfig
from .kernels.gemv import DOMAINS, LLAMA_CPP, GemvConfig, parse_config, sample_configs, valid_configs
from .kernels.hfconfig import MODELS, model_shapes
from .kernels.mma import MmaConfig
from .kernels.ring import RingConfig
from .kernels.shapes import DECODE_SUITE, Shape, parse_batches, parse_shape
from .kernels.splitk import SPLITK_SEED, SplitKConfig
from .provenance import VERSION

__version__ = VERSION

_TABLE_NAMES = ("Table", "load_table")
_TUNE_NAMES = ("tune",)
_TORCH_NAMES = ("GemvLinear", "explain", "format_explain", "restore_linears", "swap_linears")
_FP8_NAMES = ("GemvFp8Linear", "quantize_fp8")

__all__ = [
    "DECODE_SUITE", "DOMAINS", "LLAMA_CPP", "MODELS", "GemvConfig", "GemvtuneError", "NoDeviceError",
    "Shape", "UsageError", "model_shapes", "parse_batches", "parse_config", "parse_shape",
    "sample_configs", "valid_configs", "SplitKConfig", "SPLITK_SEED", "MmaConfig", "RingConfig", "CublasLtConfig",
    *_TABLE_NAMES, *_TUNE_NAMES, *_TORCH_NAMES, *_FP8_NAMES,
]


def __getattr__(name: str):
    """The lazy names: ``load_table``/``Table`` from gemvtune.runtime.table, and the PyTorch drop-in from
    gemvtune.runtime.torch_linear (which imports torch; without torch, one clear ImportError)."""
    if name in _TABLE_NAMES:
        from .runtime import table

        return getattr(table, name)
    if name in _TUNE_NAMES:
        from .tuning import api

        return getattr(api, name)
    if name in _TORCH_NAMES or name in _FP8_NAMES:
        try:
            from .runtime import torch_fp8, torch_linear
        except ModuleNotFoundError as e:
            if e.name != "torch" and not str(e.name).startswith("torch."):
                raise
            raise ImportError(f"gemvtune.{name} needs PyTorch, which is not installed "
                              "(pip install torch, or 'gemvtune[torch]')") from None
        return getattr(torch_linear if name in _TORCH_NAMES else torch_fp8, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
