"""FP8 weights (W8A16) in a PyTorch model: ``GemvFp8Linear`` runs a linear layer whose weights are E4M3 codes with
FP32 scales (``gemvtune.kernels.fp8``) through the table's route for its FP8 format, and ``quantize_fp8`` turns a
model's ``nn.Linear`` layers into such layers in place.

Where a layer's weights come from:
- ``quantize_fp8(model, table)``: each ``nn.Linear`` quantised round-to-nearest with saturation
  (``gemvtune.runtime.fp8torch.quantize``: per output row by default, or 128x128 blocks), on the weight's own device;
  the layer holds ``weight`` (float8_e4m3fn [M, d]) and its scales as a checkpoint would (``weight_scale`` [M, 1] per
  row, ``weight_scale_inv`` [ceil(M/128), ceil(d/128)] per block), and the same bias Parameter. The 16-bit weight is
  dropped (its memory freed once nothing else holds it) unless ``keep_fp16=True``.
- ``swap_linears(model, table)`` on a model transformers loaded with an FP8 quantisation (``FineGrainedFP8Config``,
  FBGEMM per-channel FP8, compressed-tensors FP8): each FP8 linear it recognises (``gemvtune.runtime.hffp8``) is
  wrapped, holding the *same* Parameters under the same names (``state_dict`` unchanged).

A call runs the tuned FP8 kernel where the table's entry for (M, d, n, x's dtype, format) measured it faster than
dequantize + F.linear beyond the noise of both (``gemvtune.runtime.route``), else dequantize + F.linear
(``gemvtune.runtime.fp8linear``): what the model would run without a kernel. A layer whose weights the kernels cannot
take (scales of the wrong shape, NaN, inf, zero or negative scales, codes not contiguous or not 16-byte aligned) is
never wrapped: it keeps its own forward, and ``explain`` says why. ``restore_linears`` puts back the module each
wrapper replaced (an ``nn.Linear`` quantised without ``keep_fp16`` comes back with the dequantised weights).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..kernels.shapes import FP8_LAYOUTS, MAX_BATCH
from .fp8linear import fallback_linear
from .torch_op import device_allows, register_table, route_flags, run_fp8_linear

WEIGHTS_OF = {layout: weights for weights, layout in FP8_LAYOUTS.items()}   # "row" -> "e4m3-row"
SCALE_NAMES = {"row": "weight_scale", "block128": "weight_scale_inv"}       # as checkpoints name them


class GemvFp8Linear(torch.nn.Module):
    """A linear layer of FP8 weights: ``weight`` E4M3 codes [M, d] (float8_e4m3fn, or uint8) and FP32 scales in
    ``layout`` ("row" or "block128"), computing ``F.linear(x, codes x scales, bias)`` in x's dtype (FP16 or BF16)
    through the table's route (module docstring). Build it with ``from_linear`` or ``from_source``."""

    weight: torch.Tensor     # registered in __init__ (declared for the type checker)
    _scales: torch.Tensor

    def __init__(self, params: dict[str, torch.nn.Parameter | torch.Tensor], scales: torch.Tensor, layout: str,
                 bias_name: str | None, table: Any, max_batch: int = MAX_BATCH, original: torch.nn.Module | None = None,
                 restore_dtype: torch.dtype | None = None, origin: str = "", note: str = ""):
        """``params``: the tensors registered under their names, ``weight`` (the codes) among them (Parameters as
        Parameters, the rest as buffers); ``scales``: float32 in ``layout``'s shape, contiguous (the kernel's; a
        view of a registered tensor or its conversion, kept as a non-persistent buffer); ``bias_name``: the bias
        among ``params`` (None: no bias); ``original``: the module ``restore_linears`` puts back (None: an
        ``nn.Linear`` of ``restore_dtype`` made from the dequantised weights)."""
        super().__init__()
        if layout not in WEIGHTS_OF:
            raise ValueError(f"unknown FP8 layout {layout!r} (one of {', '.join(WEIGHTS_OF)})")
        if isinstance(max_batch, bool) or not isinstance(max_batch, int) or not 1 <= max_batch <= MAX_BATCH:
            raise ValueError(f"max_batch must be in 1..{MAX_BATCH}, got {max_batch!r}")
        for name, t in params.items():
            if isinstance(t, torch.nn.Parameter):
                self.register_parameter(name, t)
            else:
                self.register_buffer(name, t)
        self.register_buffer("_scales", scales, persistent=False)
        self._bias_name = bias_name
        self.out_features, self.in_features = params["weight"].shape
        self.layout, self.weights = layout, WEIGHTS_OF[layout]
        self.table, self.max_batch = table, max_batch
        self._tid = register_table(table) if table is not None else 0
        self._original = (original,)   # a tuple: not a submodule (state_dict keys stay the same)
        self._restore_dtype = restore_dtype
        self.origin, self.note = origin, note
        if table is not None:
            device_allows(table)
        # per x dtype: which n run the tuned kernel (index 0 unused), eager and under torch.compile (constants)
        self._tuned = self._routes("torch")
        self._compiled = self._routes("torch-compile")

    def _routes(self, framework: str) -> dict[torch.dtype, tuple[bool, ...]]:
        if self.table is None:
            return {}
        return route_flags(self.table, self.out_features, self.in_features, self.max_batch, framework, self.weights)

    @classmethod
    def from_linear(cls, linear: torch.nn.Linear, table: Any, layout: str = "row", keep_fp16: bool = False,
                    max_batch: int = MAX_BATCH) -> GemvFp8Linear:
        """``linear``'s weight quantised to E4M3 with ``layout`` scales (``fp8torch.quantize``), its bias the same
        Parameter; ``keep_fp16``: ``linear`` itself is kept for ``restore_linears`` (its 16-bit weight with it)."""
        from .fp8torch import quantize

        w = linear.weight
        with torch.no_grad():
            codes, scales = quantize(w.detach(), layout)
        stored = scales.view(-1, 1) if layout == "row" else scales
        params: dict[str, Any] = {"weight": torch.nn.Parameter(codes.view(torch.float8_e4m3fn), requires_grad=False),
                                  SCALE_NAMES[layout]: torch.nn.Parameter(stored, requires_grad=False)}
        if linear.bias is not None:
            params["bias"] = linear.bias
        return cls(params, scales, layout, "bias" if linear.bias is not None else None, table, max_batch,
                   linear if keep_fp16 else None, w.dtype, f"quantised by gemvtune ({layout} scales)")

    @classmethod
    def from_source(cls, module: torch.nn.Module, src: Any, table: Any, max_batch: int = MAX_BATCH) -> GemvFp8Linear:
        """Wrap an FP8 linear ``module`` a checkpoint loaded (``src``: its ``hffp8.Fp8Source``), holding its own
        Parameters and buffers under their names; ``restore_linears`` puts ``module`` back."""
        params: dict[str, Any] = dict(module.named_parameters(recurse=False))
        params.update(module.named_buffers(recurse=False))
        weight = params.get("weight")
        if weight is None or weight.data_ptr() != src.codes.data_ptr():
            raise ValueError(f"{type(module).__name__}: its FP8 codes are not its 'weight'")
        bias_name = next((k for k, v in params.items() if src.bias is not None and v is src.bias), None)
        if src.bias is not None and bias_name is None:
            params["bias"], bias_name = src.bias, "bias"
        return cls(params, src.scales.contiguous(), src.layout, bias_name, table, max_batch, module, None,
                   src.origin, src.note)

    @property
    def bias_tensor(self) -> torch.Tensor | None:
        return getattr(self, self._bias_name) if self._bias_name else None

    @property
    def codes(self) -> torch.Tensor:
        return self.weight

    @property
    def scales(self) -> torch.Tensor:
        return self._scales

    @property
    def original(self) -> torch.nn.Module | None:
        return self._original[0]

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, weights={self.weights}, "
                f"bias={self._bias_name is not None}, max_batch={self.max_batch}")

    def static_reason(self) -> str:
        """Why no call of this layer can run a tuned kernel ("" when some can)."""
        from .fp8torch import check

        if self.table is None:
            return "no table (quantize_fp8 without one): dequantize + F.linear runs"
        if not self.weight.is_cuda:
            return f"weight on {self.weight.device}, not a CUDA device"
        why = check(self.weight, self._scales, self.layout, self.out_features, self.in_features)
        if why:
            return why
        b = self.bias_tensor
        if b is not None and (b.device != self.weight.device or b.dim() != 1 or b.shape[0] != self.out_features):
            return "bias is not a vector of the output size on the weight's device"
        return ""

    def dequantized(self, dtype: torch.dtype | None = None) -> torch.Tensor:
        """The weights as ``dtype`` (default: the dtype the layer was quantised from, else FP16): code x scale in
        float32, rounded once (``fp8torch.dequantize``; the fallback's own, ``fp8linear.dequantized``, rounds the
        scale and the product in ``dtype``, as transformers does)."""
        from .fp8torch import dequantize

        return dequantize(self.weight, self._scales, self.layout, dtype or self._restore_dtype or torch.float16)

    def restored(self) -> torch.nn.Module:
        """What ``restore_linears`` puts back: the original module, or an ``nn.Linear`` of the dequantised weights."""
        if self.original is not None:
            return self.original
        dt = self._restore_dtype or torch.float16
        b = self.bias_tensor
        lin = torch.nn.Linear(self.in_features, self.out_features, bias=b is not None, device="meta", dtype=dt)
        lin.weight = torch.nn.Parameter(self.dequantized(dt), requires_grad=False)
        if b is not None:
            lin.bias = b if isinstance(b, torch.nn.Parameter) else torch.nn.Parameter(b, requires_grad=False)
        self._original = (lin,)
        return lin

    def _fallback(self, x: torch.Tensor) -> torch.Tensor:
        b = self.bias_tensor
        return fallback_linear(x, self.weight, self._scales, self.layout, None if b is None else b.to(x.dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        compiling = torch.compiler.is_compiling()
        routes = (self._compiled if compiling else self._tuned).get(x.dtype)
        n = x.numel() // self.in_features if self.in_features else 0
        w, b = self.weight, self.bias_tensor
        if (routes is None or not 1 <= n <= self.max_batch or not routes[n] or not x.is_cuda
                or x.device != w.device or x.shape[-1] != self.in_features or (b is not None and b.dtype != x.dtype)
                or (torch.is_grad_enabled() and x.requires_grad)):
            return self._fallback(x)
        if compiling:
            return torch.ops.gemvtune.linear_fp8(x, w, self._scales, b, self.weights, self._tid)
        return run_fp8_linear(x, w, self._scales, b, self.weights, self.table, self._tid)


def _weight_bytes(m: torch.nn.Module) -> int:
    """Bytes of a module's own parameters and buffers, each storage once (the kernel's scales are a view)."""
    seen: dict[tuple[int, str], int] = {}
    for t in (*m.parameters(recurse=False), *m.buffers(recurse=False)):
        s = t.untyped_storage()
        key = (s.data_ptr(), str(t.device))
        seen[key] = max(seen.get(key, 0), s.nbytes())
    return sum(seen.values())


class Fp8Report(list[str]):
    """What ``quantize_fp8`` answers: the names of the layers it quantised or wrapped (a list), ``layout``, the bytes
    of the quantised layers' weights before, in FP8 (``fp8``: codes, scales and bias) and after (``after``: FP8 plus
    the 16-bit weights kept; ``saved`` = before - after), ``kept`` (``keep_fp16``) and ``skipped``: (name, why) of
    layers left alone."""

    def __init__(self, names: list[str], layout: str, before: int, fp8: int, kept: bool,
                 skipped: list[tuple[str, str]]):
        super().__init__(names)
        self.layout, self.before, self.fp8, self.kept, self.skipped = layout, before, fp8, kept, skipped

    @property
    def after(self) -> int:
        return self.fp8 + (self.before if self.kept else 0)

    @property
    def saved(self) -> int:
        return self.before - self.after

    def __str__(self) -> str:
        kept = " (the 16-bit weights kept for restore_linears: nothing freed yet)" if self.kept else ""
        skipped = f"; {len(self.skipped)} left as they were" if self.skipped else ""
        return (f"{len(self)} linear layers in FP8 ({WEIGHTS_OF[self.layout]}): {self.before / 1e9:.3f} GB of weights "
                f"-> {self.fp8 / 1e9:.3f} GB, {(self.before - self.fp8) / 1e9:.3f} GB saved{kept}{skipped}")


def quantize_fp8(model: torch.nn.Module, table: Any = None, layout: str = "row", keep_fp16: bool = False,
                 filter: Callable[[str, torch.nn.Module], bool] | None = None,
                 max_batch: int = MAX_BATCH) -> Fp8Report:
    """Quantise, in place, every submodule of type exactly ``nn.Linear`` (or a ``GemvLinear``'s original) for which
    ``filter(name, module)`` is true to FP8 weights with ``layout`` scales ("row": per output channel, the default;
    "block128"), as ``GemvFp8Linear`` layers running ``table``'s FP8 routes (None: no table, every call dequantize +
    F.linear). FP8 linears a checkpoint loaded are wrapped as they are. Weights that are not FP16, BF16 or FP32, on
    the meta device, or empty are left alone (``Fp8Report.skipped`` says why). Returns the names and the memory
    saved."""
    from .torchmods import check_table, linear_children

    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"quantize_fp8: model must be a torch.nn.Module, got {type(model).__name__}")
    if table is not None:
        check_table(table, "quantize_fp8")
    if layout not in WEIGHTS_OF:
        raise ValueError(f"quantize_fp8: layout must be one of {', '.join(WEIGHTS_OF)}, got {layout!r}")
    if not isinstance(keep_fp16, bool):
        raise TypeError(f"quantize_fp8: keep_fp16 must be True or False, got {keep_fp16!r}")
    done: dict[int, GemvFp8Linear] = {}
    names: list[str] = []
    skipped: list[tuple[str, str]] = []
    before = fp8 = 0
    for name, parent, cname, child in list(linear_children(model)):
        # a swapped layer (GemvLinear: a wrapper of the nn.Linear it holds as ``original``) is quantised from it
        wrapped = getattr(child, "original", None) if not isinstance(child, GemvFp8Linear) else None
        lin = wrapped if type(wrapped) is torch.nn.Linear else child
        if type(lin) is not torch.nn.Linear or (filter is not None and not filter(name, lin)):
            continue
        if id(child) not in done:
            w = lin.weight
            why = ("an empty weight" if not w.numel() else "a weight on the meta device" if w.is_meta
                   else f"weight is {str(w.dtype).replace('torch.', '')}" if w.dtype not in
                   (torch.float16, torch.bfloat16, torch.float32) else "")
            if why:
                skipped.append((name, why))
                continue
            before += _weight_bytes(lin)
            done[id(child)] = GemvFp8Linear.from_linear(lin, table, layout, keep_fp16, max_batch)
            fp8 += _weight_bytes(done[id(child)])
        setattr(parent, cname, done[id(child)])
        names.append(name)
    wrapped, refused = wrap_fp8_modules(model, table, filter, max_batch)
    return Fp8Report(names + wrapped, layout, before, fp8, keep_fp16, skipped + refused)


def wrap_fp8_modules(model: torch.nn.Module, table: Any, filter: Callable[[str, torch.nn.Module], bool] | None = None,
                     max_batch: int = MAX_BATCH) -> tuple[list[str], list[tuple[str, str]]]:
    """Wrap, in place, every FP8 linear a checkpoint loaded (``hffp8.fp8_linears``) whose weights the kernels can
    take as a ``GemvFp8Linear`` sharing its tensors; (names wrapped, (name, why) of FP8 layers left with their own
    forward). A layer on a CUDA device is also checked as the kernels would take it (``fp8torch.check``)."""
    from .fp8torch import check
    from .hffp8 import fp8_linears

    names: list[str] = []
    refused: list[tuple[str, str]] = []
    done: dict[int, GemvFp8Linear] = {}
    for name, parent, cname, module, src in fp8_linears(model):
        if isinstance(module, GemvFp8Linear) or (filter is not None and not filter(name, module)):
            continue
        if isinstance(src, str):
            refused.append((name, src))
            continue
        if id(module) not in done:
            why = check(src.codes, src.scales, src.layout, src.out_features, src.in_features)
            if why:
                refused.append((name, why))
                continue
            done[id(module)] = GemvFp8Linear.from_source(module, src, table, max_batch)
        setattr(parent, cname, done[id(module)])
        names.append(name)
    return names, refused


def fp8_rows(model: torch.nn.Module, n: int) -> dict[str, dict[str, Any]]:
    """``explain``'s rows of the FP8 layers of ``model`` by qualified name: each ``GemvFp8Linear`` (route "tuned" or
    "dequant": dequantize + F.linear, and why) and each FP8 linear a checkpoint loaded that is not wrapped (route
    "module": its own forward, and why: not swapped, or the reason its weights cannot be taken)."""
    from .fp8torch import check
    from .hffp8 import fp8_linears

    rows: dict[str, dict[str, Any]] = {}
    for name, mod in model.named_modules():
        if not isinstance(mod, GemvFp8Linear):
            continue
        row = {"name": name, "M": mod.out_features, "d": mod.in_features, "bias": mod._bias_name is not None,
               "weights": mod.weights, "tuned_us": None, "cublas_us": None, "compiled_route": None,
               "compiled_why": None}
        why = mod.static_reason()
        if why or n > mod.max_batch:
            rows[name] = {**row, "route": "dequant", "why": why or f"n={n} above this layer's max_batch={mod.max_batch}"}
            continue
        device_allows(mod.table, mod.weight.get_device())
        dt = "bf16" if mod._restore_dtype == torch.bfloat16 else "fp16"   # (the dtype x will most likely have)
        r = mod.table.route(mod.out_features, mod.in_features, n, "torch", dt, dt, mod.weights)
        c = mod.table.route(mod.out_features, mod.in_features, n, "torch-compile", dt, dt, mod.weights)
        if c.tuned != r.tuned:
            row.update(compiled_route="tuned" if c.tuned else "dequant", compiled_why=c.why)
        rows[name] = {**row, "route": "tuned" if r.tuned else "dequant", "why": f"{dt} x: {r.why}",
                      "tuned_us": r.tuned_us, "cublas_us": r.cublas_us}
    for name, _parent, _cname, module, src in fp8_linears(model):
        if name in rows:
            continue
        shape = getattr(getattr(module, "weight", None), "shape", (0, 0))
        M, d = (src.out_features, src.in_features) if not isinstance(src, str) else (int(shape[0]), int(shape[-1]))
        why = src if isinstance(src, str) else (
            check(src.codes, src.scales, src.layout, M, d) or "not swapped (swap_linears left it, or a filter excluded it)")
        rows[name] = {"name": name, "M": M, "d": d, "bias": getattr(module, "bias", None) is not None,
                      "weights": "" if isinstance(src, str) else WEIGHTS_OF[src.layout], "route": "module",
                      "why": f"{type(module).__name__}'s own forward: {why}", "tuned_us": None, "cublas_us": None,
                      "compiled_route": None, "compiled_why": None}
    return rows
