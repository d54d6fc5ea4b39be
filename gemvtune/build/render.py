"""Templates -> CUDA source. Pure and deterministic: the same (config, shape, epilogue, arch) gives the same bytes."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..kernels.arch import DEFAULT as DEFAULT_ARCH
from ..kernels.arch import parse_arch
from ..kernels.epilogue import DEFAULT, Epilogue
from ..kernels.families import FAMILIES
from ..kernels.shapes import DTYPES, Shape

# The template values that name the element type of W, x and the bias (``Shape.dtype``). The FP16 values are the
# text the templates always had, so an FP16 source is byte-identical to its render before BF16 was added (the
# compile cache, the committed measurements and the exported headers key on those bytes).
DTYPE_VALUES: dict[str, dict[str, str]] = {
    "fp16": {
        "dtype": "fp16",
        "elem": "half",                        # the C type of one element of W, x, bias
        "elem2": "half2",                      # two packed elements
        "in_name": "FP16",                     # how the sources' comments name the input dtype
        "dtype_header": "cuda_fp16.h",         # the header declaring elem and its intrinsics
        "to_float": "__half2float",            # elem -> float
        "to_float2": "__half22float2",         # elem2 -> float2
        "from_bits": "__ushort_as_half",       # 16 raw bits -> elem
        "pair2": "__halves2half2",             # (low, high) elem -> elem2
        "as2": "as_half2",                     # the templates' 32 raw bits -> elem2 helper (its name)
        "mma_ab": "f16",                       # mma.sync's A and B type
    },
    "bf16": {
        "dtype": "bf16",
        "elem": "__nv_bfloat16",
        "elem2": "__nv_bfloat162",
        "in_name": "BF16",
        "dtype_header": "cuda_bf16.h",
        "to_float": "bf16_to_float",           # by bits, defined in _epilogue.cuh.j2 (no inline PTX)
        "to_float2": "bf16x2_to_float2",       # by bits, defined in _common.cuh.j2
        "from_bits": "__ushort_as_bfloat16",
        "pair2": "__halves2bfloat162",         # (unused: BF16 pairs are never built from halves)
        "as2": "bf16x2_word",                  # BF16 pairs stay 32-bit words
        "mma_ab": "bf16",
    },
}
assert tuple(DTYPE_VALUES) == DTYPES


def dtype_values(dtype: str) -> dict[str, str]:
    """The element-type template values of inputs of ``dtype`` (``fp16`` or ``bf16``)."""
    if dtype not in DTYPE_VALUES:
        raise UsageError(f"no kernels for input dtype {dtype!r}; one of {', '.join(DTYPE_VALUES)}")
    return dict(DTYPE_VALUES[dtype])


def templates_dir() -> Path:
    """The Jinja2 templates: package data beside this module (gemvtune/build/templates), in a checkout and a wheel."""
    return Path(__file__).resolve().parent / "templates"


@functools.lru_cache(maxsize=1)
def _env():
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def render(config: Any, shape: Shape, epilogue: Epilogue = DEFAULT, group: Any = None, arch: Any = None) -> str:
    """CUDA source of one variant of any family with ``epilogue`` (output dtype, bias) fused into its
    final store, from the family's template, for inputs (W, x, bias) of ``shape.dtype`` (FP16 or BF16; FP32
    accumulation either way), for ``arch`` (an ``Arch`` or its name; None: sm_90): a config it cannot run is refused,
    and its limits set the occupancy a config asks for. Only validated, typed values reach the template. With
    ``group`` (a ``gemvtune.kernels.group.GroupShape`` whose fused shape is ``shape``), the grouped variant: one launch
    over the rows of all its members, each with its own W, y and bias."""
    fam = FAMILIES.get(getattr(config, "family", None))   # type: ignore[arg-type]
    if fam is None or not isinstance(config, fam.config_cls):
        raise UsageError(f"render needs a config of a gemvtune family ({', '.join(FAMILIES)}), got {type(config).__name__}")
    if fam.library:
        raise UsageError(f"{config.label} is a {fam.name} algorithm: the library runs it, there is no CUDA source to render")
    if not isinstance(epilogue, Epilogue):
        raise UsageError(f"render needs an Epilogue, got {type(epilogue).__name__}")
    reasons = epilogue.shape_reasons(shape)
    if reasons:
        raise UsageError(f"the epilogue {epilogue.label or 'default'} cannot serve {shape}: " + "; ".join(reasons))
    a = parse_arch(arch)
    reasons = config.invalid_reasons(shape, a)
    if reasons:
        on = "" if a is DEFAULT_ARCH else f" on {a}"
        raise UsageError(f"config {config.label} is invalid for {shape}{on}: " + "; ".join(reasons))
    reasons = epilogue.invalid_reasons(config)
    if reasons:
        raise UsageError(f"config {config.label} cannot fuse the epilogue out={epilogue.out} bias={epilogue.bias}"
                         + "".join(f" {f}=True" for f in epilogue.fusions) + ": " + "; ".join(reasons))
    members = 0
    if group is not None:
        from ..kernels.group import GroupShape, group_reasons

        if not isinstance(group, GroupShape) or group.fused != shape:
            raise UsageError(f"render: group {group!r} is not a GroupShape whose fused shape is {shape}")
        reasons = group_reasons(config, group, epilogue)
        if reasons:
            raise UsageError(f"config {config.label} cannot run the group {group}: " + "; ".join(reasons))
        members = len(group.Ms)
    elif epilogue.swiglu:
        raise UsageError(f"config {config.label}: swiglu is the epilogue of a grouped launch (gate, up): give the group")
    values = dict(config.to_dict())
    values.update(label=config.label + epilogue.label + (f".g{members}" if members else ""), d=int(shape.d), n=int(shape.n),
                  out_t=epilogue.out_ctype, out_name=epilogue.out_name, bias=bool(epilogue.bias), group=int(members),
                  residual=bool(epilogue.residual), swiglu=bool(epilogue.swiglu))
    values.update(dtype_values(getattr(shape, "dtype", "fp16")))
    values.update(config.render_values(shape, a))
    return _env().get_template(fam.template).render(**values)


def source_hash(source: str, options: tuple[str, ...] = ()) -> str:
    h = hashlib.sha256(source.encode())
    h.update("\0".join(options).encode())
    return h.hexdigest()[:20]
