"""gemvtune: autotuned FP16 GEMV kernels for LLM decode.

Importing this package is light: no cupy, optuna or pandas is loaded until a GPU, search or report
function needs it.
"""

from .errors import GemvtuneError, NoDeviceError, UsageError
from .shapes import DECODE_SUITE, MODELS, Shape, model_shapes, parse_batches, parse_shape
from .space import DOMAINS, LLAMA_CPP, GemvConfig, parse_config, sample_configs, valid_configs
from .space_splitk import SPLITK_SEED, SplitKConfig

__version__ = "0.1.0"

__all__ = [
    "DECODE_SUITE", "DOMAINS", "LLAMA_CPP", "MODELS", "GemvConfig", "GemvtuneError", "NoDeviceError",
    "Shape", "UsageError", "model_shapes", "parse_batches", "parse_config", "parse_shape",
    "sample_configs", "valid_configs", "SplitKConfig", "SPLITK_SEED",
]

_TORCH_NAMES = ("GemvLinear", "explain", "format_explain", "restore_linears", "swap_linears")


def __getattr__(name: str):
    """``gemvtune.GemvLinear``, ``swap_linears`` and ``restore_linears`` load torch (through
    gemvtune.torch_linear) only when first asked for; ``import gemvtune`` stays light."""
    if name in _TORCH_NAMES:
        from . import torch_linear

        return getattr(torch_linear, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
