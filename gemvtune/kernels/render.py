"""Templates -> CUDA source. Pure and deterministic: the same (config, shape, epilogue) gives the same bytes."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Any

from ..errors import UsageError
from .epilogue import DEFAULT, Epilogue
from .families import FAMILIES
from .shapes import Shape


def templates_dir() -> Path:
    """templates/ inside an installed wheel (gemvtune/templates), else the checkout's top level."""
    here = Path(__file__).resolve().parents[1]   # the package (gemvtune/)
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


def render(config: Any, shape: Shape, epilogue: Epilogue = DEFAULT) -> str:
    """CUDA source of one variant of any family with ``epilogue`` (output dtype, bias) fused into its
    final store, from the family's template. Only validated, typed values reach the template."""
    fam = FAMILIES.get(getattr(config, "family", None))   # type: ignore[arg-type]
    if fam is None or not isinstance(config, fam.config_cls):
        raise UsageError(f"render needs a config of a gemvtune family ({', '.join(FAMILIES)}), got {type(config).__name__}")
    if fam.library:
        raise UsageError(f"{config.label} is a {fam.name} algorithm: the library runs it, there is no CUDA source to render")
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
    values.update(fam.render_values(config, shape))
    return _env().get_template(fam.template).render(**values)


def source_hash(source: str, options: tuple[str, ...] = ()) -> str:
    h = hashlib.sha256(source.encode())
    h.update("\0".join(options).encode())
    return h.hexdigest()[:20]
