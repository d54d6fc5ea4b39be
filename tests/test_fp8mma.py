"""The FP8 tensor-core family (``gemvtune.kernels.fp8mma``) on the CPU: its space and validity (FP8 weights only, d a
multiple of 16, the 16-bit mma family's tiling rules), its launch (one kernel, the scales argument, the split's
workspace), its rendered text (codes widened exactly, BF16 by re-biasing; row scales on each output's sum, block scales
on each chunk's), and NVRTC compiles of configs covering every value on each architecture with FP8 conversions;
below sm_89 every config is invalid before NVRTC. Its answers are checked on the GPU (tests/test_fp8_gpu.py)."""

import numpy as np
import pytest
from cover import fp8_compile_items, fp8mma_configs

from gemvtune.build.compile import InvalidForArch, _Nvrtc, compile_variant
from gemvtune.build.render import render
from gemvtune.kernels.epilogue import Epilogue
from gemvtune.kernels.fp8 import decode_e4m3
from gemvtune.kernels.fp8mma import DOMAINS, SEED, Fp8MmaConfig, all_configs, valid_configs
from gemvtune.kernels.launchspec import launch_spec
from gemvtune.kernels.shapes import Shape

ROW, B128 = "e4m3-row", "e4m3-b128"
EDGE = (300, 8720)    # M off the 128-row blocks, d a multiple of 16 but not of 128 (a ragged column block)
CONFIGS = fp8mma_configs(Shape(*EDGE, 16, "fp16", ROW))   # (valid at n = 16: the largest reduction and X slice)


def test_the_configs_cover_every_value_of_every_parameter():
    assert CONFIGS[0] == SEED
    for key, values in DOMAINS.items():
        assert {getattr(c, key) for c in CONFIGS} == set(values), key


def test_the_space_reads_fp8_weights_only_with_d_a_multiple_of_16():
    assert len(list(all_configs())) == 3 * 4 * 4 * 5 * 4 * 2 * 2 * 2 * 2
    assert not valid_configs(Shape(4096, 4096)) and len(valid_configs(Shape(4096, 4096, 1, "fp16", ROW))) > 1000
    assert SEED.invalid_reasons(Shape(64, 4104, weights=ROW)) == [
        "d=4104 is not a multiple of 16: rows of codes must start 16-byte aligned"]
    assert Fp8MmaConfig(split=16, kv=2).invalid_reasons(Shape(64, 1024, weights=ROW))[0].startswith(
        "split=16 exceeds the 8 chunks of 128 along d=1024")
    why = Fp8MmaConfig(mt=4, depth=4, kv=1).invalid_reasons(Shape(4096, 4096, weights=B128))
    assert len(why) == 1 and why[0].startswith("mt=4 x depth=4 x kv=1 ring slots exceed 8"), why


def test_a_launch_passes_the_scales_and_a_split_has_its_workspace():
    s = Shape(4096, 4096, 4, "bf16", B128)
    spec = launch_spec(SEED, s)
    assert spec.scales and spec.kernels == (("mma_fp8", (64, 1, 1), (256, 1, 1)),) and spec.align == 16
    assert not spec.needs_workspace
    split = launch_spec(Fp8MmaConfig(split=4), s)
    assert split.needs_workspace and split.ws_floats == 4 * 4 * 4096 and split.counters == 64


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_the_source_widens_codes_and_applies_each_layout_s_scale(dtype):
    row = render(SEED, Shape(4096, 4096, 2, dtype, ROW))
    blk = render(Fp8MmaConfig(split=2, kv=2), Shape(*EDGE, 9, dtype, B128), Epilogue(dtype, bias=True))
    for src in (row, blk):
        assert "cvt.rn.f16x2.e4m3x2" in src and "const unsigned char* __restrict__ W" in src
        assert "int M,\n        const float* __restrict__ scales)" in src
        assert ("0x38003800u" in src) == (dtype == "bf16")           # BF16: FP16 bits re-biased
        assert f"mma.sync.aligned.m16n8k16.row.col.f32.{'f16' if dtype == 'fp16' else 'bf16'}" in src
    assert "#define SCALED(r, v) ((v) * __ldg(scales + (r)))" in row and "float part[MT][NT][4]" not in row
    assert "mma_chunk(acc, wlo, xlo);" in row and "mma_chunk(part, wlo, xlo);" in blk
    assert "const float sc = __ldg(srow[t] + chunk * KCHUNK / SB);" in blk
    assert "acc[t][j][e] = fmaf(part[t][j][e], sc, acc[t][j][e]);" in blk and "#define SCALED(r, v) (v)" in blk
    assert "constexpr int KCHUNK = 64 * KV;" in blk and "constexpr int KV = 2;" in blk


def test_the_bf16_rebias_is_exact_for_every_code():
    """The template's bit trick, applied to the FP16 bits of every E4M3 value (pairs, both halves), gives the BF16
    bits of the same value (zero and negative zero included)."""
    import torch

    v = decode_e4m3(np.arange(256, dtype=np.uint8))
    v = v[~np.isnan(v)]
    h = v.astype(np.float16).view(np.uint16).astype(np.uint64)
    w = h | (h[::-1] << np.uint64(16))
    sign, em = w & np.uint64(0x80008000), w & np.uint64(0x7FFF7FFF)
    u = np.uint64
    nz = np.where(em & u(0xFFFF), u(0xFFFF), u(0)) | np.where(em >> u(16), u(0xFFFF0000), u(0))
    b = sign | ((((em >> u(3)) & u(0x0FFF0FFF)) + u(0x38003800)) & nz)
    want = torch.tensor(v).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16).astype(np.uint64)
    assert np.array_equal(b & u(0xFFFF), want) and np.array_equal(b >> u(16), want[::-1])


@pytest.mark.parametrize("arch", ["sm_89", "sm_90", "sm_100", "sm_120"])
def test_fp8mma_variants_compile_on_each_arch_with_fp8(arch):
    for c, s, epi in fp8_compile_items(CONFIGS, EDGE):
        why = c.invalid_reasons(s, arch)
        if why:   # (pdl or the evict-first hint on an arch without them: invalid, with the reason)
            assert arch in why[0] and "needs" in why[0], why
            continue
        r = compile_variant(c, s, arch, epilogue=epi)
        assert r.resources.registers > 0, (c.label, s, arch)


@pytest.mark.parametrize("arch", ["sm_80", "sm_86"])
def test_fp8mma_is_invalid_before_nvrtc_below_sm_89(arch, monkeypatch):
    def no_nvrtc(*a, **k):
        raise AssertionError("NVRTC reached")

    monkeypatch.setattr(_Nvrtc, "compile", no_nvrtc)
    for c in CONFIGS:
        s = Shape(*EDGE, 2, "bf16", ROW)
        why = c.invalid_reasons(s, arch)
        assert why and why[0].startswith("the fp8mma family needs cvt.rn.f16x2.e4m3x2"), why
        with pytest.raises(InvalidForArch):
            compile_variant(c, s, arch)
