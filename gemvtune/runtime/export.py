"""A table as a standalone CUDA header for C++ engines (``gemvtune export --format cuda``); pure text.
Each tuned (M, d, n) gets its rendered kernel(s) in ``namespace gemvtune_M_D_N`` (``..._bf16`` for a BF16 entry;
inside an anonymous one: several .cu files may include it), a generic run-time-shape kernel is the fallback,
dispatch is exact: ``gemvtune_gemv`` for FP16 W and X, and, where the table has BF16 entries, ``gemvtune_gemv_bf16``
(with its own fallback, tables and queries; the FP16 text is the same with or without them). A
shape whose winner is a library's algorithm (cuBLASLt) is marked "use your BLAS" with the algorithm's
attributes and description (``gemvtune_blas_algorithm``), and no source. The C++
text is templates/export_header.h.j2; this module gives it only validated numbers, identifiers and labels,
the GPU name's safe ASCII subset, and each tuned kernel as gemvtune.build.render renders it.

Entries of FP8 weights (``Shape.weights``: the FP8 families, W as E4M3 codes and a trailing ``scales`` argument,
``LaunchSpec.scales``) get a part of their own after the 16-bit one (``FP8_TEMPLATE``, below; the 16-bit text is the
same with or without them but for the three places ``_with_fp8`` names): their kernels, and per X dtype and scale
layout the table has, a dispatcher named like the entries' namespaces (``gemvtune_gemv_e4m3_row``,
``gemvtune_gemv_bf16_e4m3_b128``, ...) with its queries. There is no generic FP8 kernel: a shape without a kernel
(not in the table, misaligned, or one whose route, ``gemvtune.runtime.route.choose``, is the dequantize + F.linear
baseline: the kernel did not beat it beyond the noise) returns ``gemvtune_not_handled`` (cudaErrorNotSupported) and the caller runs its own
dequantize + GEMM, as a "use your BLAS" shape's caller runs its BLAS."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

from ..baselines import FP8_FALLBACK
from ..build.render import render, templates_dir
from ..errors import UsageError
from ..kernels.arch import FEATURES, features_in
from ..kernels.families import is_library
from ..kernels.launchspec import launch_spec
from ..kernels.shapes import DTYPES, FP8_LAYOUTS, Shape
from .table import Table, entry_key
from .tableschema import ascii_words

FORMATS = ("cuda",)
# The only includes a header holds (the rendered kernels' own are dropped: see _namespaced).
_INCLUDES = {f"#include <{h}>" for h in ("cuda_runtime.h", "cuda_fp16.h", "cuda_bf16.h", "stddef.h", "stdint.h")}
TEMPLATE = "export_header.h.j2"   # in templates/: the prelude, the generic fallback kernel, the entries, the dispatch


def suffix_of(shape: Shape) -> str:
    """What names of ``shape``'s dtype and weight format end with ("" for FP16, "_bf16", "_e4m3_row", "_bf16_e4m3_b128")."""
    return shape.dtype_suffix("_") + shape.weights_suffix("_").replace("-", "_")


def namespace_of(shape: Shape) -> str:
    return f"gemvtune_{shape.M}_{shape.d}_{shape.n}" + suffix_of(shape)


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
    fp8 = [s for s in table.shapes if s.weights]   # (their own part: _with_fp8)
    for shape in table.shapes:
        if shape.weights:
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
    part = _fp8_part(table, fp8) if fp8 else None
    need = max(90 if pdl_any else 80, part["need"] if part else 0)   # (FP8 kernels: cvt e4m3x2, sm_89 on)
    text = _env().get_template(TEMPLATE).render(
        gpu=gpu, count=len(entries), sm=cc if cc.isdigit() else "90", need=need,
        entries=entries, rows=rows["fp16"], rows_bf16=rows["bf16"], blas=blas)
    return _checked(_with_fp8(text, part, bool(rows["bf16"])) if part else text)


# The header's FP8 part (rendered like templates/export_header.h.j2, by the same environment; only validated values):
# TOP goes into the header's opening comment, after the 16-bit declarations; the rest after the 16-bit part.
FP8_TOP = """\
// and for FP8 weights, W E4M3 codes with FP32 scales ({{ count }} tuned shape(s){% if dequant %}, {{ dequant|length }} that \
run{{ "s" if dequant|length == 1 }} your
// dequantize + GEMM{% endif %}; see "FP8 weights" below), one set per X dtype and scale layout of the table's entries:
{% for g in groups %}
//   size_t gemvtune_workspace_bytes{{ g.sfx }}(int M, int d, int n);
//   cudaError_t gemvtune_gemv{{ g.sfx }}(int M, int d, int n, const unsigned char* W, const float* scales,
//{{ " " * (29 + g.sfx|length) }}const {{ g.T }}* X, float* Y, void* workspace, cudaStream_t stream);
//   int gemvtune_is_tuned{{ g.sfx }}(int M, int d, int n);
//   const char* gemvtune_kernel_label{{ g.sfx }}(int M, int d, int n);
{% endfor %}
"""
FP8_TEMPLATE = """\

// ---- FP8 weights ----
// W: OCP E4M3 codes (one byte each), row-major [M, d], aligned to the config's load width (16 bytes always is);
// scales: FP32, by the layout the dispatcher's name ends with:
//   e4m3_row:  one per output row, scales[M]: y[c, m] = scales[m] * sum_k W[m, k] X[c, k];
//   e4m3_b128: one per 128x128 block, scales[ceil(M/128)][ceil(d/128)] row-major: W[m, k] is scaled by
//              scales[(m / 128) * ceil(d / 128) + k / 128].
// X [n, d] FP16 (BF16 for the _bf16_ ones) and Y [n, M] FP32 as above, FP32 accumulation; no bias, no workspace
// (gemvtune_workspace_bytes_* gives 0 for every FP8 kernel of today: pass nullptr). W, scales, X and Y must not overlap.
// Kernel ABI: gemvtune's (see the top of this header) with W as E4M3 codes and one more argument after M:
//   typedef void (*kernel_fp8_t)(const unsigned char* W, const half* x, float* y, const half* bias, float* ws,
//                                unsigned int* counters, int M, const float* scales);
// There is no generic FP8 kernel here. An exact (M, d, n) match runs the tuned kernel when W and X are aligned to
// its load width and scales to 4 bytes; anything else (another shape, misaligned pointers, or a shape whose route in
// the table is dequantize + F.linear) launches nothing and returns gemvtune_not_handled (cudaErrorNotSupported):
// the caller's fallback for FP8 weights is its own dequantize + GEMM (codes times scales to FP16/BF16, then its
// BLAS), what the table measured the kernels against. Null pointers or M, d, n < 1: cudaErrorInvalidValue.
{% if dequant %}
// Dequantize + GEMM (the table's route: the tuned kernel did not beat dequantize + F.linear beyond the noise;
// no kernel here, gemvtune_kernel_label_* gives "{{ fallback }}"):
{% for x in dequant %}
//   {{ x.key }}: dequantize + F.linear {{ x.base }}, the tuned kernel {{ x.tuned }}
{% endfor %}
{% endif %}
static constexpr cudaError_t gemvtune_not_handled = cudaErrorNotSupported;
{% if entries %}

namespace {
namespace gemvtune_detail {

// One launch of an FP8 kernel: as launch above, with the trailing scales (and bias nullptr).
template <typename T>
inline cudaError_t launch_fp8(void (*k)(const unsigned char*, const T*, float*, const T*, float*, unsigned int*, int,
                                        const float*),
                              dim3 grid, dim3 block, bool pdl, size_t smem, cudaStream_t stream, const unsigned char* W,
                              const T* X, float* Y, float* ws, unsigned int* counters, int M, const float* scales) {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {grid, block, smem, stream, attr, pdl ? 1u : 0u};
    const cudaError_t e = smem > 0 ? cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)
                                   : cudaSuccess;
    return e != cudaSuccess ? e : cudaLaunchKernelEx(&cfg, k, W, X, Y, (const T*)nullptr, ws, counters, M, scales);
}

}  // namespace gemvtune_detail
}  // namespace
{% endif %}
{% for e in entries %}

// ---- {{ e.key }}: {{ e.family }} {{ e.label }} ----
namespace {
namespace {{ e.ns }} {
{{ e.body }}

inline cudaError_t run(const unsigned char* W, const float* scales, const {{ e.elem }}* X, float* Y, float* ws,
                       unsigned int* counters, cudaStream_t stream) {
    cudaError_t e;
{% for k in e.launches %}
    e = gemvtune_detail::launch_fp8({{ k.name }}, dim3({{ k.grid|join(", ") }}), dim3({{ k.block|join(", ") }}), {{ e.pdl }}, {{ e.smem }}, stream, W, X, Y, ws, counters, {{ e.M }}, scales);
    if (e != cudaSuccess) return e;
{% endfor %}
    return cudaSuccess;
}

}  // namespace {{ e.ns }}
}  // namespace
{% for m in e.macros %}
#undef {{ m }}
{% endfor %}
{% endfor %}

namespace {
namespace gemvtune_detail {
{% for g in groups %}

struct entry{{ g.sfx }} {
    int M, d, n;
    unsigned int align;        // bytes: W and X must be aligned to the config's load width
    size_t ws_bytes;           // 0: no workspace
    size_t counters_offset;    // bytes into the workspace: the counters, after the float partial sums
    const char* label;
    // nullptr: the table's route is dequantize + F.linear (no kernel here)
    cudaError_t (*run)(const unsigned char*, const float*, const {{ g.T }}*, float*, float*, unsigned int*, cudaStream_t);
};

const entry{{ g.sfx }} entries{{ g.sfx }}[] = {
{% for r in g.rows %}
    { {{- r.M }}, {{ r.d }}, {{ r.n }}, {{ r.align }}u, {{ r.ws }}u, {{ r.off }}u, "{{ r.label }}", {{ r.ns ~ "::run" if r.ns else "nullptr" }}},
{% endfor %}
};

inline const entry{{ g.sfx }}* find{{ g.sfx }}(int M, int d, int n) {
    for (size_t i = 0; i < sizeof(entries{{ g.sfx }}) / sizeof(entries{{ g.sfx }}[0]); ++i)
        if (entries{{ g.sfx }}[i].M == M && entries{{ g.sfx }}[i].d == d && entries{{ g.sfx }}[i].n == n) return &entries{{ g.sfx }}[i];
    return nullptr;
}
{% endfor %}

}  // namespace gemvtune_detail
}  // namespace
{% for g in groups %}

static inline int gemvtune_is_tuned{{ g.sfx }}(int M, int d, int n) {
    const gemvtune_detail::entry{{ g.sfx }}* e = gemvtune_detail::find{{ g.sfx }}(M, d, n);
    return e && e->run;
}

static inline const char* gemvtune_kernel_label{{ g.sfx }}(int M, int d, int n) {
    const gemvtune_detail::entry{{ g.sfx }}* e = gemvtune_detail::find{{ g.sfx }}(M, d, n);
    return e ? e->label : "fallback";
}

static inline size_t gemvtune_workspace_bytes{{ g.sfx }}(int M, int d, int n) {
    const gemvtune_detail::entry{{ g.sfx }}* e = gemvtune_detail::find{{ g.sfx }}(M, d, n);
    return e ? e->ws_bytes : 0;
}

static inline cudaError_t gemvtune_gemv{{ g.sfx }}(int M, int d, int n, const unsigned char* W, const float* scales,
{{ " " * (40 + g.sfx|length) }}const {{ g.T }}* X, float* Y, void* workspace, cudaStream_t stream) {
    if (M < 1 || d < 1 || n < 1 || !W || !scales || !X || !Y) return cudaErrorInvalidValue;
    const gemvtune_detail::entry{{ g.sfx }}* e = gemvtune_detail::find{{ g.sfx }}(M, d, n);
    if (!e || !e->run || reinterpret_cast<uintptr_t>(W) % e->align || reinterpret_cast<uintptr_t>(X) % e->align ||
        reinterpret_cast<uintptr_t>(scales) % 4)
        return gemvtune_not_handled;   // the caller's dequantize + GEMM
    float* ws = nullptr;
    unsigned int* counters = nullptr;
    if (e->ws_bytes) {
        if (!workspace || reinterpret_cast<uintptr_t>(workspace) % 16) return cudaErrorInvalidValue;
        ws = static_cast<float*>(workspace);
        counters = reinterpret_cast<unsigned int*>(static_cast<char*>(workspace) + e->counters_offset);
    }
    return e->run(W, scales, X, Y, ws, counters, stream);
}
{% endfor %}
"""
_TOP_BEFORE = '//\n// "Use your BLAS": where'   # where FP8_TOP goes: after the 16-bit (FP16, BF16) declarations
_FP16_INCLUDE = "#include <cuda_fp16.h>\n"


def fp8_route(table: Table, shape: Shape) -> Any:
    """The route of the FP8 entry ``shape`` for a caller that wants FP32 out (the header's kernels): policy fastest,
    against dequantize + F.linear (``gemvtune.runtime.route.choose``; the table's own GPU: no device rule)."""
    from .route import choose

    return choose(table, shape.M, shape.d, shape.n, "torch", "fastest", "fp32", shape.dtype, shape.weights)


def fp8_kernel(table: Table, shape: Shape) -> Any:
    """The config whose kernel the header holds for the FP8 entry ``shape`` (its route's), or None where the route
    is dequantize + F.linear (the caller's dequantize + GEMM)."""
    r = fp8_route(table, shape)
    return r.config if r.tuned and r.config is not None and not is_library(r.config) else None


def _us(v: Any) -> str:
    return f"{float(v):.2f} us" if isinstance(v, (int, float)) and not isinstance(v, bool) else "not measured"


def _fp8_part(table: Table, shapes: list[Shape]) -> dict[str, Any]:
    """The FP8 part's values: the kernels, one dispatch group per (X dtype, layout) present, the dequantize shapes."""
    entries, dequant = [], []
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for shape in shapes:
        if shape.weights not in FP8_LAYOUTS:   # (Shape checks it; a new format needs its own ABI here first)
            raise UsageError(f"export: weights {shape.weights[:30]!r} (a bug in gemvtune: please report it)")
        rows = groups.setdefault((shape.dtype, shape.weights), [])
        cfg = fp8_kernel(table, shape)
        if cfg is None:
            r = fp8_route(table, shape)
            dequant.append({"key": entry_key(shape), "base": _us(r.cublas_us), "tuned": _us(r.tuned_us)})
            rows.append({"M": int(shape.M), "d": int(shape.d), "n": int(shape.n), "align": 1, "ws": 0, "off": 0,
                         "label": _label(FP8_FALLBACK), "ns": ""})
            continue
        spec = launch_spec(cfg, shape)
        if not spec.scales:
            raise UsageError(f"export: {entry_key(shape)} launches without scales (a bug in gemvtune: please report it)")
        ws, off = (spec.workspace_bytes, spec.counters_offset) if spec.needs_workspace else (0, 0)
        entries.append(_entry(cfg, shape, spec, table.recorded_arch))
        rows.append({"M": int(shape.M), "d": int(shape.d), "n": int(shape.n), "align": int(spec.align), "ws": int(ws),
                     "off": int(off), "label": f"{_label(cfg.family)}:{_label(cfg.label)}",
                     "ns": _ident(namespace_of(shape))})
    order = [(t, w) for t in DTYPES for w in FP8_LAYOUTS if (t, w) in groups]
    need = max((FEATURES[f].since for e in entries for f in features_in(e["body"])), default=(8, 0))
    return {"entries": entries, "dequant": dequant, "fallback": _label(FP8_FALLBACK), "need": need[0] * 10 + need[1],
            "groups": [{"sfx": _ident("x" + suffix_of(Shape(1, 1, 1, t, w)))[1:], "rows": groups[(t, w)],
                        "T": "__half" if t == "fp16" else "__nv_bfloat16", "bf16": t == "bf16"} for t, w in order]}


def _with_fp8(text: str, part: dict[str, Any], has_bf16: bool) -> str:
    """The 16-bit header with the FP8 part: its declarations in the opening comment (before the "Use your BLAS"
    paragraph), cuda_bf16.h where only FP8 entries need it, and its kernels, tables and dispatchers at the end."""
    env = _env()
    top = env.from_string(FP8_TOP).render(count=len(part["entries"]), **{k: part[k] for k in ("dequant", "groups")})
    rest = env.from_string(FP8_TEMPLATE).render(**part)
    if text.count(_TOP_BEFORE) != 1 or text.count(_FP16_INCLUDE) != 1:
        raise UsageError("export: the header template lacks the places of the FP8 part (a bug in gemvtune: please report it)")
    text = text.replace(_TOP_BEFORE, top + _TOP_BEFORE)
    if not has_bf16 and any(g["bf16"] for g in part["groups"]):
        text = text.replace(_FP16_INCLUDE, _FP16_INCLUDE + "#include <cuda_bf16.h>\n")
    return text + rest


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
