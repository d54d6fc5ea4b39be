"""PyTorch drop-in: ``GemvLinear`` runs an ``nn.Linear`` through the table's tuned kernels where it can
(CUDA FP16, 1..16 rows of input) and through ``torch.nn.functional.linear`` everywhere else.

This is the only gemvtune module that imports torch; ``import gemvtune`` does not load it.

    table = gemvtune.table.load_table("results/nvidia-h200/table.json")
    names = swap_linears(model, table)        # in place; the same Parameters, nothing copied
    with torch.no_grad():
        y = model(x)                          # warm-up: compiles each shape's kernel once
    ...                                       # (now capturable in torch.cuda.graph)
    restore_linears(model)                    # the original nn.Linear objects are back

CUDA graphs: the table's dispatcher compiles a kernel and allocates its workspace the first time it
sees a shape (M, d, n); that must happen outside capture. Run the model once with every batch size you
will capture (on a side stream, as PyTorch's CUDA-graph documentation asks for any warm-up) before
``torch.cuda.graph(...)``.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

from .shapes import MAX_BATCH

_ALIGN = 16  # bytes: the widest vector load of any tuned kernel (half8); the dispatcher checks it too


class GemvLinear(torch.nn.Module):
    """Wraps an ``nn.Linear``: holds the *same* weight and bias Parameters (registered under the same
    names, so ``state_dict`` keys do not change) and the original module, for ``restore_linears``.

    ``forward(x)`` runs ``table.gemv`` (FP32 accumulate and output), adds the bias in FP32 and casts
    to FP16 when x and the weight are FP16 on one CUDA device, the weight is contiguous, both are
    16-byte aligned, 1 <= n <= max_batch for the flattened batch n = x.numel() // in_features, and no
    gradient is needed (``torch.no_grad()``/``inference_mode()``, or weights without requires_grad).
    Anything else (CPU, FP32/BF16, larger batches, training) is ``F.linear(x, weight, bias)``, unchanged.
    """

    def __init__(self, linear: torch.nn.Linear, table: Any, max_batch: int = MAX_BATCH):
        super().__init__()
        if not isinstance(linear, torch.nn.Linear):
            raise TypeError(f"GemvLinear wraps an nn.Linear, got {type(linear).__name__}")
        if not 1 <= max_batch <= MAX_BATCH:
            raise ValueError(f"max_batch must be in 1..{MAX_BATCH}, got {max_batch}")
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_parameter("weight", linear.weight)
        self.register_parameter("bias", linear.bias)
        self.table, self.max_batch = table, max_batch
        self._original = (linear,)  # a tuple: not registered as a submodule (state_dict keys stay the same)

    @property
    def original(self) -> torch.nn.Linear:
        return self._original[0]

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}, max_batch={self.max_batch}")

    def _fast(self, x: torch.Tensor) -> bool:
        w = self.weight
        if not (x.is_cuda and x.dtype == torch.float16 and w.dtype == torch.float16 and x.device == w.device):
            return False
        if x.dim() == 0 or x.shape[-1] != self.in_features or not w.is_contiguous():
            return False
        if torch.is_grad_enabled() and (x.requires_grad or w.requires_grad
                                        or (self.bias is not None and self.bias.requires_grad)):
            return False  # the tuned kernels have no backward: autograd gets F.linear
        n = x.numel() // self.in_features
        return 1 <= n <= self.max_batch and w.data_ptr() % _ALIGN == 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self._fast(x):
            return F.linear(x, self.weight, self.bias)
        k = self.in_features
        n = x.numel() // k
        xv = x.reshape(k) if n == 1 else x.reshape(n, k)
        if not xv.is_contiguous() or xv.data_ptr() % _ALIGN:
            xv = xv.clone(memory_format=torch.contiguous_format)  # fresh allocations are aligned
        y = self.table.gemv(self.weight.detach(), xv.detach())  # FP32 [M] (n = 1) or [n, M]; same memory
        if self.bias is not None:
            y.add_(self.bias)  # in FP32
        return y.to(x.dtype).reshape(*x.shape[:-1], self.out_features)


def _linear_children(model: torch.nn.Module):
    """(qualified name, parent, attribute name, child) for every direct child of every module."""
    for pname, parent in model.named_modules(remove_duplicate=False):
        for cname, child in list(parent.named_children()):
            yield (f"{pname}.{cname}" if pname else cname), parent, cname, child


def swap_linears(model: torch.nn.Module, table: Any,
                 filter: Callable[[str, torch.nn.Module], bool] | None = None,
                 max_batch: int = MAX_BATCH) -> list[str]:
    """Replace, in place, every submodule of type exactly ``nn.Linear`` (subclasses such as quantized
    or LoRA layers have their own forward and are left alone) for which ``filter(name, module)`` is
    true (default: all) by a ``GemvLinear`` sharing its Parameters. Any dtype and device may be
    swapped: what the tuned kernels cannot run falls back to ``F.linear``. A module shared under two
    names gets one wrapper. The root module itself is never replaced. Returns the names replaced."""
    done: dict[int, GemvLinear] = {}
    names = []
    for name, parent, cname, child in list(_linear_children(model)):
        if type(child) is not torch.nn.Linear or (filter is not None and not filter(name, child)):
            continue
        if id(child) not in done:
            done[id(child)] = GemvLinear(child, table, max_batch)
        setattr(parent, cname, done[id(child)])
        names.append(name)
    return names


def restore_linears(model: torch.nn.Module) -> list[str]:
    """Put back the original ``nn.Linear`` objects where ``swap_linears`` put a ``GemvLinear`` (a
    Parameter reassigned on the wrapper meanwhile is carried over). Returns the names restored."""
    names = []
    for name, parent, cname, child in list(_linear_children(model)):
        if not isinstance(child, GemvLinear):
            continue
        orig = child.original
        if orig.weight is not child.weight:
            orig.weight = child.weight
        if orig.bias is not child.bias:
            orig.register_parameter("bias", child.bias)
        setattr(parent, cname, orig)
        names.append(name)
    return names
