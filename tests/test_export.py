"""``gemvtune export --format cuda``: the header names every tuned shape, compiles with nvcc (two
translation units linked together), bad input is one line and exit 2; on a GPU, the header's
dispatch (tuned, split-K with workspace, fallback) matches a float64 reference."""

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
from gemvtune.kernels.gemv import GemvConfig
from gemvtune.kernels.launchspec import launch_spec
from gemvtune.kernels.shapes import Shape
from gemvtune.kernels.splitk import SplitKConfig
from gemvtune.runtime.export import build_header, namespace_of
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


def _host_side(so, table) -> None:
    """What the header answers without touching a GPU: workspace sizes, tuned or not, labels, and the
    argument checks that return cudaErrorInvalidValue (1) before any launch."""
    so.gt_ws_a.restype = ctypes.c_ulonglong
    so.gt_label.restype = ctypes.c_char_p
    so.gt_gemv.argtypes = [ctypes.c_int] * 3 + [ctypes.c_void_p] * 5
    for s in [s for s in table.shapes if s.dtype == "fp16"]:   # (the BF16 queries: tests/test_dtype.py)
        cfg, _ = table.lookup(s)
        lib = is_library(cfg)   # "use your BLAS": no kernel in the header (not tuned here, no workspace)
        assert so.gt_ws_a(s.M, s.d, s.n) == (0 if lib else workspace_layout(cfg, s)[0])
        assert so.gt_tuned_a(s.M, s.d, s.n) == (0 if lib else 1)
        assert so.gt_label(s.M, s.d, s.n).decode() == f"{cfg.family}:{cfg.label}"
    assert so.gt_tuned_a(7, 4101, 3) == 0 and so.gt_ws_a(7, 4101, 3) == 0 and so.gt_label(7, 4101, 3) == b"fallback"
    assert so.gt_gemv(0, 64, 1, 256, 256, 256, None, None) == 1      # M < 1
    assert so.gt_gemv(64, 64, 1, None, 256, 256, None, None) == 1    # W null
    needs = [s for s in table.shapes if s.dtype == "fp16" and not is_library(table.lookup(s)[0])
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
