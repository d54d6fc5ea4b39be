"""Templates -> CUDA source. Pure and deterministic: the same (config, shape, epilogue) gives the same bytes."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

from .epilogue import DEFAULT, Epilogue
from .errors import UsageError
from .shapes import Shape
from .space import GemvConfig
from .space_splitk import SplitKConfig

KERNEL_NAME = "gemv"


def templates_dir() -> Path:
    """templates/ inside an installed wheel (gemvtune/templates), else the checkout's top level."""
    here = Path(__file__).resolve().parent
    for cand in (here / "templates", here.parent / "templates"):
        if (cand / "gemv.cu.j2").is_file():
            return cand
    raise FileNotFoundError(f"gemvtune templates not found next to {here}")


@functools.lru_cache(maxsize=1)
def _env():
    import jinja2

    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def render(config: GemvConfig | SplitKConfig, shape: Shape, epilogue: Epilogue = DEFAULT) -> str:
    """CUDA source of one variant with ``epilogue`` (output dtype, bias) fused into its final store.
    Only validated, typed values reach the template."""
    if not isinstance(config, (GemvConfig, SplitKConfig)):
        raise UsageError(f"render needs a GemvConfig or SplitKConfig, got {type(config).__name__}")
    if not isinstance(epilogue, Epilogue):
        raise UsageError(f"render needs an Epilogue, got {type(epilogue).__name__}")
    reasons = config.invalid_reasons(shape)
    if reasons:
        raise UsageError(f"config {config.label} is invalid for {shape}: " + "; ".join(reasons))
    reasons = epilogue.invalid_reasons(config)
    if reasons:
        raise UsageError(f"config {config.label} cannot fuse the epilogue out={epilogue.out} bias={epilogue.bias}: "
                         + "; ".join(reasons))
    values = dict(config.to_dict())
    values.update(label=config.label + epilogue.label, d=int(shape.d), n=int(shape.n),
                  out_t=epilogue.out_ctype, bias=bool(epilogue.bias))
    if isinstance(config, GemvConfig):
        values.update(vec_elems=config.vec_elems, rows=config.rows_per_block, min_blocks=config.min_blocks)
        return _env().get_template("gemv.cu.j2").render(**values)
    values.update(n_tiles=config.n_tiles(shape.n), x_row=config.x_row_halves(shape.d))
    return _env().get_template("splitk_gemm.cu.j2").render(**values)


def source_hash(source: str, options: tuple[str, ...] = ()) -> str:
    h = hashlib.sha256(source.encode())
    h.update("\0".join(options).encode())
    return h.hexdigest()[:20]
