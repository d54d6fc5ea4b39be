"""Programmatic dependent launch without a GPU: the ctypes structs match cuda.h, arguments pack
into the kernel's parameter array, and a pdl=on variant renders and compiles with griddepcontrol."""

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

from gemvtune import GemvConfig, Shape
from gemvtune.compile import compile_variant
from gemvtune.render import render
from gemvtune.runners.cuda.pdl import CUlaunchAttribute, CUlaunchConfig, make_config, pack_args

CUDA_H = next((p for p in (Path("/usr/local/cuda/include/cuda.h"),) if p.is_file()), None)

PROBE = r"""
#include <cuda.h>
#include <stddef.h>
#include <stdio.h>
int main(void) {
  printf("%zu %zu %zu %zu %zu %zu %d\n", sizeof(CUlaunchConfig), offsetof(CUlaunchConfig, hStream),
         offsetof(CUlaunchConfig, attrs), offsetof(CUlaunchConfig, numAttrs), sizeof(CUlaunchAttribute),
         offsetof(CUlaunchAttribute, value), (int)CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION);
  return 0;
}
"""


@pytest.mark.skipif(CUDA_H is None or shutil.which("gcc") is None, reason="needs cuda.h and gcc (the CUDA toolkit)")
def test_ctypes_layout_matches_cuda_h(tmp_path):
    from gemvtune.runners.cuda.pdl import CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION as ID

    (tmp_path / "p.c").write_text(PROBE)
    subprocess.run(["gcc", "-I", str(CUDA_H.parent), str(tmp_path / "p.c"), "-o", str(tmp_path / "p")], check=True)
    got = [int(v) for v in subprocess.run([str(tmp_path / "p")], capture_output=True, text=True).stdout.split()]
    want = [ctypes.sizeof(CUlaunchConfig), CUlaunchConfig.hStream.offset, CUlaunchConfig.attrs.offset,
            CUlaunchConfig.numAttrs.offset, ctypes.sizeof(CUlaunchAttribute), CUlaunchAttribute.value.offset, ID]
    assert got == want


def test_pack_args_and_config():
    import numpy as np

    class Buf:
        def __init__(self, ptr):
            self.data = type("P", (), {"ptr": ptr})()

    params, keep = pack_args((Buf(0x1000), Buf(0x2000), np.int32(77)))
    assert [ctypes.cast(params[i], ctypes.POINTER(ctypes.c_void_p)).contents.value for i in range(2)] == [0x1000, 0x2000]
    assert ctypes.cast(params[2], ctypes.POINTER(ctypes.c_int)).contents.value == 77
    with pytest.raises(TypeError):
        pack_args(("not an array",))
    attr = CUlaunchAttribute(6)
    cfg = make_config((10, 2), (256,), 0, attr)
    assert (cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ, cfg.blockDimX, cfg.blockDimY, cfg.numAttrs) == (10, 2, 1, 256, 1, 1)


def test_pdl_variant_renders_and_compiles():
    s = Shape(129, 4104, 3)
    on, off = GemvConfig(vec="half8", tpr=32, block=128, pdl="on"), GemvConfig(vec="half8", tpr=32, block=128)
    src = render(on, s)
    assert "griddepcontrol.wait" in src and "prefetch.global.L2" in src and "griddepcontrol" not in render(off, s)
    assert on.label == off.label + ".pdl"
    r = compile_variant(on, s).resources
    assert r.registers > 0 and r.spill_stores == 0


def test_function_handle_reads_the_loaded_function():
    """CuPy's RawModule.get_function gives a RawKernel: its CUfunction is on .kernel.ptr (the first
    H200 run failed every pdl=on variant with "'RawKernel' object has no attribute 'ptr'")."""
    from types import SimpleNamespace

    from gemvtune.runners.cuda.pdl import function_handle

    raw = SimpleNamespace(kernel=SimpleNamespace(ptr=0x7F00))   # RawKernel-like
    assert function_handle(raw) == 0x7F00
    assert function_handle(SimpleNamespace(ptr=0x10)) == 0x10   # a bare cupy.cuda.function.Function
    with pytest.raises(RuntimeError, match="no CUfunction"):
        function_handle(SimpleNamespace(kernel=SimpleNamespace(ptr=0)))
    cupy = pytest.importorskip("cupy")

    assert "kernel" in dir(cupy.RawKernel)   # the attribute relied on exists in this CuPy
