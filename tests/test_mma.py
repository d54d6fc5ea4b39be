"""The mma GEMV family (tensor cores, flat in n): validity, workspace, NVRTC compiles of every parameter value
on edge shapes (CPU), and verification against float64 on odd shapes at n = 1, 3, 8, 16 (GPU)."""

import pytest
from cover import cover, tiered, valid_of, verify_failures

from gemvtune.build.compile import CompileError, compile_variants
from gemvtune.build.render import render
from gemvtune.kernels import mma
from gemvtune.kernels.epilogue import Epilogue
from gemvtune.kernels.families import FAMILIES, config_from_dict, config_to_dict
from gemvtune.kernels.launchspec import launch_spec
from gemvtune.kernels.mma import MmaConfig
from gemvtune.kernels.shapes import Shape

# M not a multiple of any row tile, d not a multiple of the 32-wide chunk (4104) or of 8 (4101), tiny d (72), and d = 4360 where a 16-way split keeps every split busy
EDGE = [Shape(M, d, n) for n in (1, 3, 8, 16) for M, d in ((129, 4104), (33, 4101), (7, 72), (65, 4360))]


def _cover(shape: Shape, k: int, seed: int) -> list[MmaConfig]:
    """One valid config for every value of every parameter (where one is valid), plus k random."""
    return cover(valid_of("mma", shape), mma.MMA_SEED, mma.DOMAINS, k, seed)


def test_registered_and_round_trips():
    fam = FAMILIES["mma"]
    assert fam.config_cls is MmaConfig and fam.seed == mma.MMA_SEED and fam.template == "mma_gemv.cu.j2"
    c = MmaConfig(mt=2, rw=2, kw=1, split=4, depth=4, hint="evict_first", pdl="on")
    assert config_from_dict(config_to_dict(c)) == c
    assert c.label == "mma.m32.r2.k1.s4.d4.evict_first.pdl"


def test_validity_reasons():
    s = Shape(4096, 4096, 8)
    assert MmaConfig().is_valid(s)
    assert any("warps exceed" in r for r in MmaConfig(rw=8, kw=4).invalid_reasons(s))
    assert any("ring slots" in r for r in MmaConfig(mt=4, depth=4).invalid_reasons(s))
    assert any("ring slots" in r for r in MmaConfig(mt=2, depth=4, kv=2).invalid_reasons(s))
    assert any("staged X" in r for r in MmaConfig(x_load="smem", kw=1).invalid_reasons(Shape(4096, 4096, 16)))
    assert any("would idle" in r for r in MmaConfig(kw=8, split=16).invalid_reasons(Shape(64, 2048)))
    assert any("no row" in r for r in MmaConfig(rw=8).invalid_reasons(Shape(100, 4096)))
    assert any("exceeds the" in r for r in MmaConfig(kw=1, split=16).invalid_reasons(Shape(64, 256)))
    assert any("shared memory" in r for r in MmaConfig(mt=4, rw=2, kw=8, depth=2).invalid_reasons(Shape(4096, 4096, 16)))
    assert MmaConfig(split=3).invalid_reasons(s)   # off the domain


def test_staged_x_rows_avoid_bank_conflicts():
    """The 8 lanes of one shared-memory phase read rows g and g+1 (4 lanes each, pieces 16 * kv bytes apart):
    with the padding, their 16-byte reads fall on 8 distinct 16-byte bank groups for every split and d."""
    for kv in (1, 2):
        for d in (72, 4096, 4104, 14336):
            for split in (1, 2, 4):
                c = MmaConfig(kv=kv, x_load="smem", split=split, kw=1)
                row = c.x_row_halves(d) * 2
                assert row % 16 == 0 and row >= c.chunks_per_split(d) * c.kchunk * 2
                groups = {((r * row + q * 16 * kv) % 128) // 16 for r in (0, 1) for q in range(4)}
                assert len(groups) == 8, (kv, d, split, row)


def test_workspace_and_single_launch():
    s = Shape(1000, 4096, 3)
    c = MmaConfig(mt=1, rw=4, kw=1, split=4)
    assert c.kernels(s) == [("mma_gemv", (16, 4, 1), (128, 1, 1))]
    assert c.needs_workspace(s) and c.workspace(s) == (4 * 3 * 1000, 16)
    spec = launch_spec(c, s, Epilogue(out="fp16", bias=True))   # the in-kernel combine applies any epilogue
    assert spec.needs_workspace and spec.align == 16 and not spec.pdl
    assert not MmaConfig(split=1).needs_workspace(s) and MmaConfig(split=1).workspace(s) == (1, 1)
    assert launch_spec(MmaConfig(pdl="on"), s).pdl


def test_render_names_its_levers():
    s = Shape(129, 4104, 3)
    src = render(MmaConfig(mt=2, rw=2, kw=2, split=2, depth=2, hint="evict_first", pdl="on"), s,
                 Epilogue(out="fp16", bias=True))
    assert "griddepcontrol.wait" in src and "L2::evict_first" in src and "atomicAdd(&counters" in src
    assert "constexpr int N = 3;" in src and "__shared__ float red[KW][BM][NT * 8];" in src
    staged = render(MmaConfig(kv=2, x_load="smem", split=4), Shape(4096, 4096, 16))
    assert "constexpr int KV = 2;" in staged and "__shared__ __align__(16) half xs[N * XROW];" in staged
    plain = render(MmaConfig(kw=1, split=1, pdl="off", hint="nc"), Shape(129, 4104, 3))
    assert "griddepcontrol" not in plain and "counters[" not in plain and "evict_first" not in plain
    bf16 = render(MmaConfig(kv=2, x_load="smem", split=4), Shape(4096, 4096, 16, "bf16"))   # BF16 W and x (issue 21)
    assert "__shared__ __align__(16) __nv_bfloat16 xs[N * XROW];" in bf16 and "const __nv_bfloat16* wrow[MT][2];" in bf16
    assert "m16n8k16.row.col.f32.bf16.bf16.f32" in bf16 and ".f16.f16." not in bf16


@pytest.mark.slow   # ~60 NVRTC compiles
def test_every_parameter_value_compiles_on_edge_shapes():
    pairs = []
    for i, s in enumerate(EDGE):
        cfgs = _cover(s, k=2, seed=i)
        for key, values in mma.DOMAINS.items():   # every value of every parameter appears across the edge shapes
            assert {getattr(c, key) for c in cfgs} <= set(values)
        pairs += [(c, s, Epilogue(out="fp16", bias=True) if j % 2 else Epilogue()) for j, c in enumerate(cfgs)]
    for key, values in mma.DOMAINS.items():
        assert {getattr(c, key) for c, _, _ in pairs} == set(values), key
    results = compile_variants(pairs, arch="sm_90")
    bad = [(c.label, str(s), str(r)) for (c, s, _), r in zip(pairs, results) if isinstance(r, CompileError)]
    assert not bad, bad[:3]
    # No W ring or accumulator in local memory (that would spill >= 64 B). ptxas (CUDA 13.0) spills one 8-byte value
    # at mt=4, depth=1, kw=2 with 72 registers in use; it is tolerated and nothing larger is.
    for (c, s, _), r in zip(pairs, results):
        assert r.resources.spill_stores <= 8 and r.resources.stack_bytes <= 8, (c.label, str(s), r.resources)


# ---- GPU ----------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("shape", tiered(EDGE, lambda s: s.n == 8), ids=str)   # n = 8: tier 2
def test_mma_verifies_on_odd_shapes(runner, shape):
    cfgs = _cover(shape, k=6, seed=7)
    failed = verify_failures(runner, cfgs, shape) + verify_failures(runner, cfgs[:4], shape, Epilogue(out="fp16", bias=True))
    assert not failed, failed[:5]


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [Shape(129, 4104, 3), Shape(4096, 4096, 16)], ids=str)
def test_mma_planted_faults_caught_and_timed_ok(runner, shape):
    """A split that drops its last chunk, and a last block that skips one split, are both caught."""
    cfg = MmaConfig(mt=1, rw=2, kw=2, split=4, depth=2)
    src = render(cfg, shape)
    for old, new in (("const int c_end = min(NCH, c_begin + CPS);", "const int c_end = min(NCH, c_begin + CPS) - 1;"),
                     ("for (int s = 0; s < SPLIT; ++s) v +=", "for (int s = 1; s < SPLIT; ++s) v +=")):
        bad = src.replace(old, new)
        assert bad != src
        assert runner.measure(cfg, shape, timed=False, source=bad, name="planted-mma").status == "wrong"
    m = runner.measure(cfg, shape)
    assert m.ok and m.us_median > 0 and m.launches > 0
    m = runner.measure(MmaConfig(pdl="on", split=2, kw=1), shape)   # PDL inside the timing graph
    assert m.ok and m.method == "graph", (m.status, m.error)
