"""A table as a standalone CUDA header for C++ engines (``gemvtune export --format cuda``); pure text.
Each tuned (M, d, n) gets its rendered kernel(s) in ``namespace gemvtune_M_D_N`` (``..._bf16`` for a BF16 entry;
inside an anonymous one: several .cu files may include it), a generic run-time-shape kernel is the fallback,
dispatch is exact: ``gemvtune_gemv`` for FP16 W and X, and, where the table has BF16 entries, ``gemvtune_gemv_bf16``
(with its own fallback, tables and queries; the FP16 text is the same with or without them). A
shape whose winner is a library's algorithm (cuBLASLt) is marked "use your BLAS" with the algorithm's
attributes and description (``gemvtune_blas_algorithm``), and no source. An entry of FP8 weights (``Shape.weights``)
is not exported: the header's ABI has no scales yet. The C++
text is templates/export_header.h.j2; this module gives it only validated numbers, identifiers and labels,
the GPU name's safe ASCII subset, and each tuned kernel as gemvtune.build.render renders it."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

from ..build.render import render, templates_dir
from ..errors import UsageError
from ..kernels.families import is_library
from ..kernels.launchspec import launch_spec
from ..kernels.shapes import Shape
from .table import Table, entry_key
from .tableschema import ascii_words

FORMATS = ("cuda",)
# The only includes a header holds (the rendered kernels' own are dropped: see _namespaced).
_INCLUDES = {f"#include <{h}>" for h in ("cuda_runtime.h", "cuda_fp16.h", "cuda_bf16.h", "stddef.h", "stdint.h")}
TEMPLATE = "export_header.h.j2"   # in templates/: the prelude, the generic fallback kernel, the entries, the dispatch


def namespace_of(shape: Shape) -> str:
    return f"gemvtune_{shape.M}_{shape.d}_{shape.n}" + shape.dtype_suffix("_") + shape.weights_suffix("_").replace("-", "_")


def _namespaced(source: str) -> tuple[str, list[str]]:
    """The rendered source without its includes (the header includes them once, outside any namespace)
    and without ``extern "C"`` (the namespace makes the names unique); and the macros it defines."""
    body = "\n".join(ln for ln in source.splitlines() if not ln.lstrip().startswith("#include"))
    body = re.sub(r'extern\s+"C"\s+', "", body)
    macros = list(dict.fromkeys(re.findall(r"^\s*#define\s+(\w+)", body, flags=re.M)))
    return body, macros


_LABEL = re.compile(r"[A-Za-z0-9_.:+-]+")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _label(s: str) -> str:
    """A config's family or label inside a C string and a comment: built from validated values, checked again."""
    if not _LABEL.fullmatch(s):
        raise UsageError(f"export: a config label {s[:60]!r} has unexpected characters (a bug in gemvtune: please report it)")
    return s


def _ident(s: str) -> str:
    """A C++ identifier (a kernel, a namespace, a macro): checked before it reaches the header."""
    if not _IDENT.fullmatch(s):
        raise UsageError(f"export: {s[:60]!r} is not an identifier (a bug in gemvtune: please report it)")
    return s


def _ints(values: Any) -> list[int]:
    return [int(v) for v in values]


def _entry(config: Any, shape: Shape, spec: Any, arch: Any = None) -> dict[str, Any]:
    """One tuned shape's values for the template: its rendered kernel(s) (the family's template, through
    gemvtune.build.render, for ``arch``: the table's GPU's) and the launches of its ``run``."""
    body, macros = _namespaced(render(config, shape, arch=arch))
    return {"key": entry_key(shape), "family": _label(config.family), "label": _label(config.label),
            "ns": _ident(namespace_of(shape)), "body": body.strip(), "M": int(shape.M),
            "elem": "half" if shape.dtype == "fp16" else "__nv_bfloat16",
            "pdl": "true" if spec.pdl else "false", "smem": int(spec.smem), "macros": [_ident(m) for m in macros],
            "launches": [{"name": _ident(name), "grid": _ints(g), "block": _ints(b)} for name, g, b in spec.kernels]}


_WORDS = re.compile(r"[A-Za-z0-9 ,.;:()=*_+-]+")


def _blas(config: Any, shape: Shape) -> dict[str, Any]:
    """One "use your BLAS" shape's values: the library algorithm's attributes (integers) and its description."""
    words = config.describe()
    if not _WORDS.fullmatch(words) or "*/" in words:
        raise UsageError(f"export: the description of {config.label[:60]!r} has unexpected characters (a bug in "
                         "gemvtune: please report it)")
    return {"M": int(shape.M), "d": int(shape.d), "n": int(shape.n), "description": words,
            "attrs": _ints([config.algo_id] + [v for _, v in config.attributes()]),
            "label": f"{_label(config.family)}:{_label(config.label)}"}


@functools.lru_cache(maxsize=1)
def _env() -> Any:
    """Like gemvtune.build.render's (StrictUndefined, no autoescape: C++, not HTML), with block tags that leave no line."""
    import jinja2

    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates_dir())), undefined=jinja2.StrictUndefined,
                              keep_trailing_newline=True, autoescape=False, trim_blocks=True, lstrip_blocks=True)


def build_header(table: Table) -> str:
    """The whole header for a loaded table (deterministic: the same table gives the same text), from
    templates/export_header.h.j2."""
    rows: dict[str, list[dict[str, Any]]] = {"fp16": [], "bf16": []}   # the dispatch tables, one per dtype
    entries, blas = [], []
    pdl_any = False
    for shape in table.shapes:
        if shape.weights:   # (FP8 weights: their kernels take scales, which the header's ABI has not)
            continue
        cfg, how = table.lookup(shape)
        assert how == "tuned"
        if is_library(cfg):   # "use your BLAS": the algorithm, described; no source
            blas.append(_blas(cfg, shape))
            continue
        spec = launch_spec(cfg, shape)
        pdl_any |= spec.pdl
        ws, off = (spec.workspace_bytes, spec.counters_offset) if spec.needs_workspace else (0, 0)
        entries.append(_entry(cfg, shape, spec, table.recorded_arch))
        rows[shape.dtype].append({"M": int(shape.M), "d": int(shape.d), "n": int(shape.n), "align": int(spec.align),
                     "ws": int(ws), "off": int(off), "label": f"{_label(cfg.family)}:{_label(cfg.label)}",
                     "ns": _ident(namespace_of(shape))})
    cc = str(table.gpu.get("compute_capability") or "9.0").replace(".", "")
    gpu = ascii_words(table.gpu.get("name"))   # a table string: a safe ASCII subset, never a newline
    text = _env().get_template(TEMPLATE).render(
        gpu=gpu, count=len(entries), sm=cc if cc.isdigit() else "90", need=90 if pdl_any else 80,
        entries=entries, rows=rows["fp16"], rows_bf16=rows["bf16"], blas=blas)
    return _checked(text)


def _checked(text: str) -> str:
    """A last guard (a table's strings never reach the header unfiltered, see ``ascii_words``): the
    header is pure ASCII and includes nothing but its four system headers."""
    bad = next((ln.strip() for ln in text.splitlines() if ln.strip().startswith("#")
                and ln.strip().lstrip("# ").startswith("include") and ln.strip() not in _INCLUDES), None)
    if not text.isascii() or bad is not None:
        what = f"the line {bad[:60]!r}" if bad else "non-ASCII text"
        raise UsageError(f"export: the header would hold {what} (a bug in gemvtune: please report it)")
    return text


def write_header(text: str, out: str | Path) -> Path:
    """Write atomically (gemvtune.safefile: a temporary file beside it, then rename), mode 0644 as before;
    an unwritable place is a UsageError."""
    from ..safefile import atomic_write, write_failure

    if not str(out):
        raise UsageError("export --out: the path is empty")
    path = Path(out)
    try:   # (through a link to its target; a FIFO or device is refused: safefile.output_target)
        atomic_write(path, lambda f: f.write(text), mode=0o644, what="header")
    except OSError as e:
        raise write_failure("header", path, e) from None
    return path


def export(table: Table, fmt: str, out: str | Path) -> Path:
    if fmt not in FORMATS:
        raise UsageError(f"unknown export format {fmt!r}; known: {', '.join(FORMATS)}")
    return write_header(build_header(table), out)
