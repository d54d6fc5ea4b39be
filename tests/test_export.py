"""``gemvtune export --format cuda``: the header names every tuned shape, compiles with nvcc (two
translation units linked together), bad input is one line and exit 2; on a GPU, the header's
dispatch (tuned, split-K with workspace, fallback) matches a float64 reference. FP8 entries (W E4M3 codes with
scales): their dispatchers, their NVRTC and nvcc compiles, the not-handled answers, and on a GPU their results."""

import ctypes
import json
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import ROOT, run_cli

from gemvtune.kernels.families import is_library
from gemvtune.kernels.fp8gemv import Fp8GemvConfig
from gemvtune.kernels.gemv import GemvConfig
from gemvtune.kernels.launchspec import launch_spec
from gemvtune.kernels.shapes import Shape
from gemvtune.kernels.splitk import SplitKConfig
from gemvtune.runtime.export import build_header, export, fp8_kernel, namespace_of, suffix_of
from gemvtune.runtime.table import entry_key, load_table

TABLE = ROOT / "results" / "nvidia-h200" / "table.json"
BF16 = any(s.dtype == "bf16" for s in load_table(TABLE).shapes)   # the header then has gemvtune_gemv_bf16

WRAPPER = r"""
#include "%s"
extern "C" int gt_gemv(int M, int d, int n, const void* W, const void* X, float* Y, void* ws, void* stream) {
    return (int)gemvtune_gemv(M, d, n, (const __half*)W, (const __half*)X, Y, ws, (cudaStream_t)stream);
}
extern "C" unsigned long long gt_ws_%s(int M, int d, int n) { return gemvtune_workspace_bytes(M, d, n); }
extern "C" int gt_tuned_%s(int M, int d, int n) { return gemvtune_is_tuned(M, d, n); }
extern "C" const char* gt_label(int M, int d, int n) { return gemvtune_kernel_label(M, d, n); }
"""
WRAPPER_BF16 = r"""
extern "C" int gt_gemv_bf16(int M, int d, int n, const void* W, const void* X, float* Y, void* ws, void* stream) {
    return (int)gemvtune_gemv_bf16(M, d, n, (const __nv_bfloat16*)W, (const __nv_bfloat16*)X, Y, ws,
                                   (cudaStream_t)stream);
}
extern "C" unsigned long long gt_ws_w_bf16(int M, int d, int n) { return gemvtune_workspace_bytes_bf16(M, d, n); }
extern "C" int gt_tuned_w_bf16(int M, int d, int n) { return gemvtune_is_tuned_bf16(M, d, n); }
extern "C" const char* gt_label_bf16(int M, int d, int n) { return gemvtune_kernel_label_bf16(M, d, n); }
"""


def _nvcc() -> str | None:
    return shutil.which("nvcc") or next((p for p in ("/usr/local/cuda/bin/nvcc",) if os.path.exists(p)), None)


def _wrapper(header: Path, tag: str, label: bool = True) -> str:
    text = WRAPPER % (header.name, tag, tag)
    return text if label else text.replace("gt_gemv(", f"gt_gemv_{tag}(").replace("gt_label(", f"gt_label_{tag}(")


def _compile(nvcc: str, arch: str, folder: Path, sources: list[Path], out: Path, strict: bool = True) -> None:
    """Compile each .cu to an object in parallel, then link them into one shared library (strict: and
    no warning from the compiler)."""
    def one(src: Path) -> Path:
        obj = src.with_suffix(".o")
        r = subprocess.run([nvcc, f"-arch={arch}", "-std=c++17", "-Xcompiler", "-fPIC,-Wall", "-c", str(src),
                            "-o", str(obj)], cwd=folder, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-4000:]
        assert not strict or "warning" not in r.stderr.lower(), r.stderr[-4000:]
        return obj
    with ThreadPoolExecutor(len(sources)) as ex:
        objs = list(ex.map(one, sources))
    r = subprocess.run([nvcc, f"-arch={arch}", "-shared", *map(str, objs), "-o", str(out)], cwd=folder,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]


def _synthetic_table(path: Path) -> Path:
    """A table with what the committed one lacks: pdl=on, odd d, a split-K GEMM with d % 8 != 0."""
    winners = {
        Shape(4096, 4096, 1): ("gemv", GemvConfig(block=128, vec="half8", tpr=64, pdl="on")),
        Shape(7, 4101, 3): ("gemv", GemvConfig(block=256, vec="half", tpr=32)),
        Shape(100, 4100, 2): ("gemv", GemvConfig(block=128, vec="half4", tpr=32, split_k=4)),
        Shape(300, 1004, 5): ("splitk", SplitKConfig(mt=1, warps=2, split=4, combine="pass2")),
    }
    data = json.loads(TABLE.read_text())
    data["entries"] = {entry_key(s): {"M": s.M, "d": s.d, "n": s.n, "winner": {"family": f, "config": c.to_dict()}}
                       for s, (f, c) in winners.items()}
    path.write_text(json.dumps(data))
    return path


# FP8 entries (Shape.weights): row and block128 scales, FP16 and BF16 x, n = 1, 2, 3, M off the 128-row blocks, every
# hint; (tuned µs, dequantize + F.linear µs): the last one's route is dequantize + F.linear (measured faster)
FP8_WINNERS = {
    Shape(4096, 4096, 1, "fp16", "e4m3-row"): (Fp8GemvConfig(), 10.0, 20.0),
    Shape(300, 1024, 3, "fp16", "e4m3-b128"): (Fp8GemvConfig(block=64, tpr=8, vec=4, unroll=1), 5.0, 9.0),
    Shape(1000, 4096, 2, "bf16", "e4m3-row"): (Fp8GemvConfig(block=256, tpr=64, vec=8, unroll=4, hint="evict_first"),
                                               10.0, 20.0),
    Shape(4096, 1024, 1, "bf16", "e4m3-b128"): (Fp8GemvConfig(hint="nc"), 6.0, 12.0),
    Shape(4096, 4096, 1, "bf16", "e4m3-b128"): (Fp8GemvConfig(), 12.0, 8.0),
}
FP8_DEQUANT = Shape(4096, 4096, 1, "bf16", "e4m3-b128")


def _fp8_table(path: Path, with_16bit: bool = True) -> Path:
    """The synthetic table's entries (with_16bit) and FP8_WINNERS, with their times and dequantize baselines."""
    data = json.loads((_synthetic_table(path) if with_16bit else TABLE).read_text())
    if not with_16bit:
        data["entries"] = {}
    for s, (c, us, dq) in FP8_WINNERS.items():
        data["entries"][entry_key(s)] = {"M": s.M, "d": s.d, "n": s.n, "dtype": s.dtype, "weights": s.weights,
                                         "winner": {"family": "fp8gemv", "config": c.to_dict(), "us": us},
                                         "baselines": {"dequant-torch": {"us": dq, "status": "ok"}}}
    path.write_text(json.dumps(data))
    return path


def _without_fp8(text: str) -> str:
    """The header less its FP8 part: the declarations in the opening comment, cuda_bf16.h where only FP8 entries
    need it (a table without BF16 16-bit entries), and all from "FP8 weights" on."""
    top = text.index("// and for FP8 weights")
    text = text[:top] + text[text.index('//\n// "Use your BLAS"', top):]
    if "gemvtune_gemv_bf16(" not in text:
        text = text.replace("#include <cuda_bf16.h>\n", "", 1)
    return text[:text.index("\n// ---- FP8 weights ----")]


# ---- CPU ---------------------------------------------------------------------------------------
def test_export_names_every_entry(tmp_path):
    out = tmp_path / "gemvtune_h200.cuh"
    r = run_cli("export", "--table", str(TABLE), "--format", "cuda", "--out", str(out))
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    table = load_table(TABLE)
    assert table.shapes and len(table.shapes) == len(table.data["entries"])
    for s in table.shapes:
        cfg, _ = table.lookup(s)
        assert f'"{cfg.family}:{cfg.label}"' in text
        if is_library(cfg):   # "use your BLAS": the algorithm's row and description, no kernel of ours
            assert f"namespace {namespace_of(s)} {{" not in text
            assert f"{{{s.M}, {s.d}, {s.n}, {cfg.algo_id}, " in text and cfg.describe() in text
            continue
        assert f"namespace {namespace_of(s)} {{" in text
        assert f'{{{s.M}, {s.d}, {s.n}, {cfg.vec_elems * 2}u, ' in text
    assert 'extern "C"' not in text and "gemv_any" in text
    assert "gemvtune_gemv(int M, int d, int n, const __half* W, const __half* X, float* Y," in text
    assert build_header(table) == text                                 # deterministic
    assert not [p for p in tmp_path.iterdir() if p.suffix == ".tmp"]   # the temporary file is gone


def test_export_fp8_entries(tmp_path):
    """FP8 entries get their own kernels and, per X dtype and scale layout, a dispatcher with W as E4M3 codes and
    the scales; the one whose route is dequantize + F.linear has a row without a kernel (the dispatcher returns
    gemvtune_not_handled); the 16-bit part is the text the table gives without them."""
    table = load_table(_fp8_table(tmp_path / "table.json"))
    text = build_header(table)
    assert text.isascii() and 'extern "C"' not in text
    for sfx, T in (("_e4m3_row", "__half"), ("_e4m3_b128", "__half"), ("_bf16_e4m3_row", "__nv_bfloat16"),
                   ("_bf16_e4m3_b128", "__nv_bfloat16")):
        decl = (f"static inline cudaError_t gemvtune_gemv{sfx}(int M, int d, int n, const unsigned char* W, "
                f"const float* scales,\n{' ' * (40 + len(sfx))}const {T}* X, float* Y, void* workspace, "
                "cudaStream_t stream) {")
        assert text.count(decl) == 1, sfx
        assert f"//   cudaError_t gemvtune_gemv{sfx}(int M, int d, int n, const unsigned char* W, const float* scales," in text
        for query in ("int gemvtune_is_tuned", "const char* gemvtune_kernel_label", "size_t gemvtune_workspace_bytes"):
            assert f"static inline {query}{sfx}(int M, int d, int n) {{" in text, (query, sfx)
    for s, (c, _, _) in FP8_WINNERS.items():
        if s == FP8_DEQUANT:
            assert fp8_kernel(table, s) is None and f"namespace {namespace_of(s)} {{" not in text
            assert f'{{{s.M}, {s.d}, {s.n}, 1u, 0u, 0u, "dequant-torch", nullptr}},' in text
            assert f"//   {entry_key(s)}: dequantize + F.linear 8.00 us, the tuned kernel 12.00 us" in text
            continue
        assert fp8_kernel(table, s) == c and namespace_of(s).endswith(suffix_of(s)) and suffix_of(s).count("e4m3")
        assert f"namespace {namespace_of(s)} {{" in text and f"// ---- {entry_key(s)}: fp8gemv {c.label} ----" in text
        assert (f'{{{s.M}, {s.d}, {s.n}, {c.vec}u, 0u, 0u, "fp8gemv:{c.label}", {namespace_of(s)}::run}},') in text
        grid = -(-s.M // (c.block // c.tpr))
        assert (f"launch_fp8(gemv_fp8, dim3({grid}, 1, 1), dim3({c.block}, 1, 1), false, 0, stream, W, X, Y, ws, "
                f"counters, {s.M}, scales);") in text
    assert "return gemvtune_not_handled;" in text and "static constexpr cudaError_t gemvtune_not_handled" in text
    assert "own dequantize + GEMM" in text and "scales[ceil(M/128)][ceil(d/128)] row-major" in text
    assert text.count("#include <cuda_bf16.h>") == 1
    # the 16-bit part is untouched: the synthetic table's header is this one less the FP8 part
    assert _without_fp8(text) == build_header(load_table(_synthetic_table(tmp_path / "plain.json")))
    # FP8 entries only, BF16 ones among them: cuda_bf16.h is included, the kernels need sm_89 (no pdl=on entry)
    alone = build_header(load_table(_fp8_table(tmp_path / "alone.json", with_16bit=False)))
    assert alone.count("#include <cuda_bf16.h>") == 1 and "the tuned kernels need sm_89 or newer" in alone
    assert "0 tuned shape(s)" in alone and "(4 tuned shape(s), 1 that runs your\n// dequantize + GEMM;" in alone
    assert build_header(table) == text   # deterministic


def test_export_without_fp8_entries_has_no_fp8_part(tmp_path):
    data = json.loads(TABLE.read_text())   # the committed table without its FP8 entries
    data["entries"] = {k: e for k, e in data["entries"].items() if not e.get("weights")}
    (tmp_path / "t.json").write_text(json.dumps(data))
    text = build_header(load_table(tmp_path / "t.json"))
    assert "e4m3" not in text and "gemvtune_not_handled" not in text and "unsigned char* W" not in text
    assert "e4m3" in build_header(load_table(TABLE))


def test_export_fp8_kernels_compile_with_nvrtc(tmp_path):
    """Each FP8 kernel as the header holds it (its namespace's text up to its run()) compiles with NVRTC for sm_90,
    both layouts, FP16 and BF16 x, without spills (its namespace named here: an anonymous one's kernel is dropped)."""
    from gemvtune.build.compile import compile_source

    table = load_table(_fp8_table(tmp_path / "table.json", with_16bit=False))
    text = build_header(table)
    done = set()
    for s in FP8_WINNERS:
        if s == FP8_DEQUANT:
            continue
        ns = namespace_of(s)
        start = text.index(f"namespace {ns} {{\n")
        body = text[start:text.index("\n\ninline cudaError_t run(", start)]
        src = "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n" + body + f"\n}}  // namespace {ns}\n"
        res = compile_source(src, ns, "sm_90", kernel="gemv_fp8", use_cache=False)
        # the kernel is in the cubin, in its namespace (mangled), and spills nothing (where ptxas reported)
        assert f"_ZN{len(ns)}{ns}8gemv_fp8".encode() in Path(res.cubin_path).read_bytes(), s
        assert res.resources.spill_stores == 0, (s, res.resources)
        done.add((s.dtype, s.weights))
    assert done == {(t, w) for t in ("fp16", "bf16") for w in ("e4m3-row", "e4m3-b128")}


@pytest.mark.parametrize("field,value", [("weights", "e4m3-row\n#include <x>"), ("weights", "e5m2-row"),
                                         ("hint", 'nc"); }'), ("block", "128 /*")])
def test_export_fp8_table_strings_are_refused(tmp_path, field, value):
    """A table's FP8 entry with a weight format or config value outside their domains never reaches the header."""
    path = _fp8_table(tmp_path / "table.json", with_16bit=False)
    data = json.loads(path.read_text())
    e = data["entries"][entry_key(Shape(4096, 4096, 1, "fp16", "e4m3-row"))]
    (e if field == "weights" else e["winner"]["config"])[field] = value
    path.write_text(json.dumps(data))
    r = run_cli("export", "--table", str(path), "--out", str(tmp_path / "o.cuh"))
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "is malformed" in lines[0], r.stderr
    assert not (tmp_path / "o.cuh").exists()


def workspace_layout(config, shape: Shape) -> tuple[int, int]:
    """(bytes, counters offset) the exported header gives a shape: its launch spec's, 0 when it needs none."""
    spec = launch_spec(config, shape)
    return (spec.workspace_bytes, spec.counters_offset) if spec.needs_workspace else (0, 0)


def test_workspace_layout():
    s = Shape(100, 4100, 2)
    size, off = workspace_layout(GemvConfig(block=128, vec="half4", tpr=32, split_k=4), s)
    assert off == 3328 and size == off + 25 * 4    # 4 x 2 x 100 floats (3200 B, to 256 B), then 100 / 4 counters
    assert workspace_layout(GemvConfig(), s) == (0, 0)
    # 4 x 5 x 300 floats (24000 B, to 256 B), then its one (unused) counter
    assert workspace_layout(SplitKConfig(split=4, combine="pass2"), Shape(300, 1000, 5)) == (24064 + 4, 24064)
    assert workspace_layout(SplitKConfig(split=4, combine="atomic"), Shape(300, 1000, 5)) == (0, 0)


@pytest.mark.parametrize("which", ["committed", "synthetic"])
@pytest.mark.slow  # nvcc builds the exported header into a library
def test_export_compiles_with_nvcc(tmp_path, which):
    """The header compiles for sm_90 without warnings, and two .cu files that both include it link into
    one library (nothing in it clashes: kernels, helpers and macros are per shape or internal)."""
    nvcc = _nvcc()
    if not nvcc:
        pytest.skip("nvcc is not on PATH")
    table = TABLE if which == "committed" else _synthetic_table(tmp_path / "table.json")
    header = tmp_path / "g.cuh"
    r = run_cli("export", "--table", str(table), "--out", str(header))
    assert r.returncode == 0, r.stderr
    if which == "synthetic":
        text = header.read_text()
        assert "true, 0, stream" in text and "sm_90 or newer" in text   # the pdl=on entry launches with PDL
    else:   # the committed table's ring entries launch with their dynamic shared memory (> 48 KiB: opted in)
        import re

        sizes = [int(m) for m in re.findall(r"launch\(ring_gemv, dim3\([^)]*\), dim3\([^)]*\), (?:true|false), (\d+), stream",
                                             header.read_text())]
        assert sizes and all(sz > 0 for sz in sizes) and max(sizes) > 48 * 1024, sizes
    srcs = []
    for tag in ("a", "b"):
        (tmp_path / f"{tag}.cu").write_text(_wrapper(header, tag, label=tag == "a"))
        srcs.append(tmp_path / f"{tag}.cu")
    _compile(nvcc, "sm_90", tmp_path, srcs, tmp_path / "libg.so")
    if which == "committed":
        _host_side(ctypes.CDLL(str(tmp_path / "libg.so")), load_table(table))


FP8_WRAPPER = r"""
#include "%s"
#define FP8_CALLS(sfx, T) \
extern "C" int gt_gemv##sfx(int M, int d, int n, const void* W, const void* s, const void* X, float* Y, void* ws, \
                            void* stream) { \
    return (int)gemvtune_gemv##sfx(M, d, n, (const unsigned char*)W, (const float*)s, (const T*)X, Y, ws, \
                                   (cudaStream_t)stream); \
} \
extern "C" unsigned long long gt_ws##sfx(int M, int d, int n) { return gemvtune_workspace_bytes##sfx(M, d, n); } \
extern "C" int gt_tuned##sfx(int M, int d, int n) { return gemvtune_is_tuned##sfx(M, d, n); } \
extern "C" const char* gt_label##sfx(int M, int d, int n) { return gemvtune_kernel_label##sfx(M, d, n); }
FP8_CALLS(_e4m3_row, __half)
FP8_CALLS(_e4m3_b128, __half)
FP8_CALLS(_bf16_e4m3_row, __nv_bfloat16)
FP8_CALLS(_bf16_e4m3_b128, __nv_bfloat16)
extern "C" int gt_not_handled() { return (int)gemvtune_not_handled; }
"""


def _fp8_lib(nvcc: str, arch: str, folder: Path, table: Path, strict: bool = True):
    """The FP8 table's header built into a library (two translation units: the second only includes it)."""
    header = export(load_table(table), "cuda", folder / "g8.cuh")   # (the CLI's path: test_export_names_every_entry)
    (folder / "f8a.cu").write_text(FP8_WRAPPER % header.name)
    (folder / "f8b.cu").write_text(f'#include "{header.name}"\nint f8b() {{ return gemvtune_is_tuned_e4m3_row(1, 1, 1); }}\n')
    _compile(nvcc, arch, folder, [folder / "f8a.cu", folder / "f8b.cu"], folder / "libg8.so", strict)
    so = ctypes.CDLL(str(folder / "libg8.so"))
    for sfx in ("_e4m3_row", "_e4m3_b128", "_bf16_e4m3_row", "_bf16_e4m3_b128"):
        getattr(so, f"gt_gemv{sfx}").argtypes = [ctypes.c_int] * 3 + [ctypes.c_void_p] * 6
        getattr(so, f"gt_ws{sfx}").restype = ctypes.c_ulonglong
        getattr(so, f"gt_label{sfx}").restype = ctypes.c_char_p
    return so


@pytest.mark.slow  # nvcc builds the exported header into a library
def test_export_fp8_compiles_with_nvcc(tmp_path):
    """The FP8 part compiles for sm_90 without warnings in two translation units linked together, and answers on
    the host: tuned or not, labels, no workspace; gemvtune_not_handled (cudaErrorNotSupported) for the dequantize
    entry, an untuned shape and a misaligned W or scales, cudaErrorInvalidValue for null pointers; nothing launched."""
    nvcc = _nvcc()
    if not nvcc:
        pytest.skip("nvcc is not on PATH")
    so = _fp8_lib(nvcc, "sm_90", tmp_path, _fp8_table(tmp_path / "table.json"))
    table = load_table(tmp_path / "table.json")
    nh = so.gt_not_handled()
    assert nh == 801   # cudaErrorNotSupported
    for s, (c, _, _) in FP8_WINNERS.items():
        sfx, dq = suffix_of(s), s == FP8_DEQUANT
        assert getattr(so, f"gt_tuned{sfx}")(s.M, s.d, s.n) == (0 if dq else 1)
        assert getattr(so, f"gt_label{sfx}")(s.M, s.d, s.n).decode() == ("dequant-torch" if dq else f"fp8gemv:{c.label}")
        assert getattr(so, f"gt_ws{sfx}")(s.M, s.d, s.n) == 0
        gemv = getattr(so, f"gt_gemv{sfx}")
        assert gemv(s.M, s.d, s.n, 4096, None, 4096, 4096, None, None) == 1    # no scales
        assert gemv(0, s.d, s.n, 4096, 4096, 4096, 4096, None, None) == 1      # M < 1
        assert gemv(s.M + 1, s.d, s.n, 4096, 4096, 4096, 4096, None, None) == nh   # not in the table
        assert gemv(s.M, s.d, s.n, 4096 + 2, 4096, 4096, 4096, None, None) == nh   # W misaligned
        assert gemv(s.M, s.d, s.n, 4096, 4096 + 2, 4096, 4096, None, None) == nh   # scales misaligned
        if dq:
            assert gemv(s.M, s.d, s.n, 4096, 4096, 4096, 4096, None, None) == nh   # dequantize + GEMM
        assert fp8_kernel(table, s) == (None if dq else c)
    assert so.gt_tuned_e4m3_row(4096, 4096, 2) == 0 and so.gt_label_e4m3_row(4096, 4096, 2) == b"fallback"


def _host_side(so, table) -> None:
    """What the header answers without touching a GPU: workspace sizes, tuned or not, labels, and the
    argument checks that return cudaErrorInvalidValue (1) before any launch."""
    so.gt_ws_a.restype = ctypes.c_ulonglong
    so.gt_label.restype = ctypes.c_char_p
    so.gt_gemv.argtypes = [ctypes.c_int] * 3 + [ctypes.c_void_p] * 5
    # (the BF16 queries: tests/test_dtype.py; the FP8 ones: the FP8 dispatchers, test_export_fp8_compiles_with_nvcc)
    for s in [s for s in table.shapes if s.dtype == "fp16" and not s.weights]:
        cfg, _ = table.lookup(s)
        lib = is_library(cfg)   # "use your BLAS": no kernel in the header (not tuned here, no workspace)
        assert so.gt_ws_a(s.M, s.d, s.n) == (0 if lib else workspace_layout(cfg, s)[0])
        assert so.gt_tuned_a(s.M, s.d, s.n) == (0 if lib else 1)
        assert so.gt_label(s.M, s.d, s.n).decode() == f"{cfg.family}:{cfg.label}"
    assert so.gt_tuned_a(7, 4101, 3) == 0 and so.gt_ws_a(7, 4101, 3) == 0 and so.gt_label(7, 4101, 3) == b"fallback"
    assert so.gt_gemv(0, 64, 1, 256, 256, 256, None, None) == 1      # M < 1
    assert so.gt_gemv(64, 64, 1, None, 256, 256, None, None) == 1    # W null
    needs = [s for s in table.shapes if s.dtype == "fp16" and not s.weights and not is_library(table.lookup(s)[0])
             and workspace_layout(table.lookup(s)[0], s)[0]]
    assert needs, "the committed table has a split-K entry that needs a workspace"
    s = needs[0]
    assert so.gt_gemv(s.M, s.d, s.n, 256, 256, 256, None, None) == 1  # workspace needed, none given


BAD = [
    ("table missing", ["--table", "{tmp}/none.json", "--out", "{tmp}/o.cuh"], "does not exist"),
    ("table truncated", ["--table", "{tmp}/trunc.json", "--out", "{tmp}/o.cuh"], "not valid JSON"),
    ("unknown format", ["--table", str(TABLE), "--format", "hip", "--out", "{tmp}/o.cuh"], "unknown export format"),
    ("out in a missing folder", ["--table", str(TABLE), "--out", "{tmp}/none/o.cuh"], "cannot write"),
    ("out under a file", ["--table", str(TABLE), "--out", "{tmp}/trunc.json/o.cuh"], "cannot write"),
    ("out is a folder", ["--table", str(TABLE), "--out", "{tmp}/dir"], "cannot write"),
]


@pytest.mark.parametrize("what,args,needle", BAD, ids=[b[0] for b in BAD])
def test_export_bad_input(tmp_path, what, args, needle):
    (tmp_path / "trunc.json").write_text(TABLE.read_text()[:500])
    (tmp_path / "dir").mkdir()
    before = sorted(p.name for p in tmp_path.rglob("*"))
    r = run_cli("export", *[a.replace("{tmp}", str(tmp_path)) for a in args])
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in r.stderr, r.stderr
    assert sorted(p.name for p in tmp_path.rglob("*")) == before   # nothing written, no temporary left


# ---- GPU ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    import cupy as cp

    nvcc = _nvcc()
    if not nvcc:
        pytest.skip("nvcc is not on PATH (the GPU export tests build the header into a shared library)")
    d = tmp_path_factory.mktemp("export-gpu")
    header = d / "g.cuh"
    r = run_cli("export", "--table", str(TABLE), "--out", str(header))
    assert r.returncode == 0, r.stderr
    (d / "w.cu").write_text(_wrapper(header, "w") + (WRAPPER_BF16 if BF16 else ""))
    _compile(nvcc, f"sm_{cp.cuda.Device().compute_capability}", d, [d / "w.cu"], d / "libg.so", strict=False)
    so = ctypes.CDLL(str(d / "libg.so"))
    for sfx in ("", "_bf16") if BF16 else ("",):
        getattr(so, f"gt_gemv{sfx}").restype = ctypes.c_int
        getattr(so, f"gt_gemv{sfx}").argtypes = [ctypes.c_int] * 3 + [ctypes.c_void_p] * 5
        getattr(so, f"gt_ws_w{sfx}").restype = ctypes.c_ulonglong
        getattr(so, f"gt_tuned_w{sfx}").restype = ctypes.c_int
        getattr(so, f"gt_label{sfx}").restype = ctypes.c_char_p
    return so


def _pick(table, pred, dtype: str = "fp16") -> Shape | None:
    return next((s for s in table.shapes if s.dtype == dtype and pred(table.lookup(s)[0])), None)


def _gpu_shapes(dtype: str = "fp16") -> list:
    table = load_table(TABLE)
    n1 = Shape(4096, 4096, 1, dtype)
    picks = [("tuned-n1", n1 if n1 in table.shapes else _pick(table, lambda c: not is_library(c), dtype)),
             ("splitk-atomic", _pick(table, lambda c: c.family == "splitk" and c.split > 1
                                     and c.combine == "atomic", dtype)),
             ("splitk-pass2-workspace", _pick(table, lambda c: c.family == "splitk" and c.split > 1
                                              and c.combine == "pass2", dtype)),
             ("gemv-splitk-counters", _pick(table, lambda c: c.family == "gemv" and c.split_k > 1, dtype)),
             ("ring", _pick(table, lambda c: c.family == "ring", dtype) if dtype != "fp16" else None)]
    return [pytest.param(s, id=f"{what}-{s.M}x{s.d}x{s.n}") for what, s in picks if s is not None]


def _run_and_check(lib, shape: Shape, acc: str, offset: int = 0, calls: int = 2) -> None:
    """Run through gemvtune_gemv (gemvtune_gemv_bf16 for a BF16 shape) ``calls`` times on fresh X (counters must
    be re-armed in between) and check each against the float64 reference like the runner's verification."""
    import cupy as cp

    from gemvtune.device.elems import from_float32, to_float64
    from gemvtune.runners.cuda.verify import Verifier
    from gemvtune.runners.timing import error_bound

    sfx = "_bf16" if shape.dtype == "bf16" else ""
    rng = cp.random.default_rng(7)
    Wbuf = from_float32(rng.random(shape.M * shape.d + offset, dtype=cp.float32) * 2 - 1, shape.dtype)
    W = Wbuf[offset:].reshape(shape.M, shape.d)          # offset 1: only 2-byte aligned
    W64 = to_float64(W, shape.dtype)
    nbytes = getattr(lib, f"gt_ws_w{sfx}")(shape.M, shape.d, shape.n)
    ws = cp.zeros(max(int(nbytes), 1), dtype=cp.uint8)
    stream = cp.cuda.Stream(non_blocking=True)
    for _ in range(calls):
        X = from_float32(rng.random((shape.n, shape.d), dtype=cp.float32) * 2 - 1, shape.dtype)
        Y = cp.full((shape.n, shape.M), cp.nan, dtype=cp.float32)
        cp.cuda.Device().synchronize()
        rc = getattr(lib, f"gt_gemv{sfx}")(shape.M, shape.d, shape.n, W.data.ptr, X.data.ptr, Y.data.ptr,
                                           ws.data.ptr if nbytes else None, stream.ptr)
        stream.synchronize()
        assert rc == 0, f"gemvtune_gemv{sfx} returned cudaError {rc}"
        x64 = to_float64(X, shape.dtype)
        ref, scale = x64 @ W64.T, cp.sqrt((x64 * x64) @ (W64 * W64).T)
        ok, relerr, rowerr, reason = Verifier.check(Y, ref, scale, error_bound(acc, shape.d, shape.dtype))
        assert ok, f"{shape}: {reason} (relerr {relerr:.3g}, rowerr {rowerr:.3g})"


@pytest.mark.gpu
@pytest.mark.parametrize("shape", _gpu_shapes())
def test_export_gpu_tuned(lib, shape):
    cfg, _ = load_table(TABLE).lookup(shape)
    assert lib.gt_tuned_w(shape.M, shape.d, shape.n) == 1
    assert lib.gt_label(shape.M, shape.d, shape.n).decode() == f"{cfg.family}:{cfg.label}"
    _run_and_check(lib, shape, cfg.acc)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [Shape(7, 4101, 3), Shape(1, 1, 1), Shape(513, 4096, 16), Shape(64, 333, 9)],
                         ids=str)
def test_export_gpu_fallback(lib, shape):
    """Untuned shapes (odd d, n > 8) run the generic runtime-shape kernel."""
    assert lib.gt_tuned_w(shape.M, shape.d, shape.n) == 0 and lib.gt_ws_w(shape.M, shape.d, shape.n) == 0
    assert lib.gt_label(shape.M, shape.d, shape.n) == b"fallback"
    _run_and_check(lib, shape, "fp32", calls=1)


@pytest.mark.gpu
def test_export_gpu_misaligned_tuned_shape_falls_back(lib):
    """A tuned shape whose W is only 2-byte aligned (an offset view) runs the fallback, correctly."""
    _run_and_check(lib, Shape(4096, 4096, 1), "fp32", offset=1, calls=1)


@pytest.mark.gpu
@pytest.mark.skipif(not BF16, reason="the committed table has no BF16 entries")
@pytest.mark.parametrize("shape", _gpu_shapes("bf16"))
def test_export_gpu_tuned_bf16(lib, shape):
    """gemvtune_gemv_bf16 runs the table's BF16 entries (GEMV at n = 1, the ring kernel, split-K with its
    workspace) on BF16 W and X, checked against float64 with the BF16 bound; the FP16 queries do not know them."""
    table = load_table(TABLE)
    cfg, _ = table.lookup(shape)
    assert lib.gt_tuned_w_bf16(shape.M, shape.d, shape.n) == 1
    assert lib.gt_label_bf16(shape.M, shape.d, shape.n).decode() == f"{cfg.family}:{cfg.label}"
    if Shape(shape.M, shape.d, shape.n) not in table.shapes:
        assert lib.gt_tuned_w(shape.M, shape.d, shape.n) == 0
    _run_and_check(lib, shape, getattr(cfg, "acc", "fp32"))


@pytest.mark.gpu
@pytest.mark.skipif(not BF16, reason="the committed table has no BF16 entries")
@pytest.mark.parametrize("shape", [Shape(7, 4101, 3, "bf16"), Shape(513, 4096, 16, "bf16")], ids=str)
def test_export_gpu_fallback_bf16(lib, shape):
    """Untuned BF16 shapes, and a tuned one whose W is only 2-byte aligned, run the BF16 fallback, correctly."""
    assert lib.gt_tuned_w_bf16(shape.M, shape.d, shape.n) == 0 and lib.gt_label_bf16(shape.M, shape.d, shape.n) == b"fallback"
    _run_and_check(lib, shape, "fp32", calls=1)
    _run_and_check(lib, Shape(4096, 4096, 1, "bf16"), "fp32", offset=1, calls=1)


@pytest.fixture(scope="module")
def lib_fp8(tmp_path_factory):
    import cupy as cp

    nvcc = _nvcc()
    if not nvcc:
        pytest.skip("nvcc is not on PATH (the GPU export tests build the header into a shared library)")
    d = tmp_path_factory.mktemp("export-gpu-fp8")
    return _fp8_lib(nvcc, f"sm_{cp.cuda.Device().compute_capability}", d, _fp8_table(d / "table.json"), strict=False)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [s for s in FP8_WINNERS if s != FP8_DEQUANT], ids=str)
def test_export_gpu_fp8(lib_fp8, shape):
    """gemvtune_gemv_<layout> runs the tuned FP8 kernel on E4M3 codes and their scales (``runners.fp8data``'s random
    weight: scales differ by block and row), twice, checked against the float64 product of the exactly dequantised W
    with the FP8 bound; a misaligned W launches nothing and returns gemvtune_not_handled."""
    import cupy as cp

    from gemvtune.device.elems import from_float32, to_float64
    from gemvtune.runners.cuda.verify import Verifier
    from gemvtune.runners.fp8data import dequantized64, fp8_error_bound, fp8_weight

    q = fp8_weight(shape, seed=11)
    codes, scales = cp.asarray(q.codes), cp.asarray(q.scales)
    W64 = dequantized64(codes, scales, shape.fp8_layout, cp)
    gemv = getattr(lib_fp8, f"gt_gemv{suffix_of(shape)}")
    rng = cp.random.default_rng(5)
    for _ in range(2):
        X = from_float32(rng.random((shape.n, shape.d), dtype=cp.float32) * 2 - 1, shape.dtype)
        Y = cp.full((shape.n, shape.M), cp.nan, dtype=cp.float32)
        cp.cuda.Device().synchronize()
        assert gemv(shape.M, shape.d, shape.n, codes.data.ptr, scales.data.ptr, X.data.ptr, Y.data.ptr, None, None) == 0
        cp.cuda.Device().synchronize()
        x64 = to_float64(X, shape.dtype)
        ref, scale = x64 @ W64.T, cp.sqrt((x64 * x64) @ (W64 * W64).T)
        ok, relerr, rowerr, reason = Verifier.check(Y, ref, scale, fp8_error_bound(shape.d))
        assert ok, f"{shape}: {reason} (relerr {relerr:.3g}, rowerr {rowerr:.3g})"
    buf = cp.zeros(shape.M * shape.d + 16, dtype=cp.uint8)
    Y = cp.full((shape.n, shape.M), cp.nan, dtype=cp.float32)
    assert gemv(shape.M, shape.d, shape.n, buf.data.ptr + 1, scales.data.ptr, X.data.ptr, Y.data.ptr, None,
                None) == lib_fp8.gt_not_handled()
    assert bool(cp.isnan(Y).all())   # nothing ran
