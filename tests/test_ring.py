"""The ring GEMV family (tensor cores, W through a cp.async shared-memory ring): validity, the swizzle, the
dynamic shared memory every launch path carries, NVRTC compiles of every parameter value on edge shapes (CPU),
and verification against float64 on odd shapes at n = 1, 3, 8, 16 (GPU)."""

import pytest
from cover import cover, tiered, valid_of, verify_failures

from gemvtune.build.compile import CompileError, compile_variants
from gemvtune.build.render import render
from gemvtune.kernels import ring
from gemvtune.kernels.epilogue import Epilogue
from gemvtune.kernels.families import FAMILIES, config_from_dict, config_to_dict
from gemvtune.kernels.launchspec import launch_spec
from gemvtune.kernels.ring import RingConfig
from gemvtune.kernels.shapes import Shape

# M not a multiple of any row tile, d not a multiple of any stage (4104) or of 8 (4101: invalid, with its
# reason), tiny d (72), and d = 4024 where a 16-way split of 64-half stages keeps every split busy
EDGE = [Shape(M, d, n) for n in (1, 3, 8, 16) for M, d in ((129, 4104), (33, 4101), (7, 72), (65, 4024))]


def _cover(shape: Shape, k: int, seed: int) -> list[RingConfig]:
    """One valid config for every value of every parameter (where one is valid), plus k random."""
    return cover(valid_of("ring", shape), ring.RING_SEED, ring.DOMAINS, k, seed)


def test_registered_and_round_trips():
    fam = FAMILIES["ring"]
    assert fam.config_cls is RingConfig and fam.seed == ring.RING_SEED and fam.template == "ring_gemv.cu.j2"
    c = RingConfig(mt=2, rw=4, kw=2, bk=128, stages=6, ipb=4, split=2, x_load="ldg", prefetch="256B")
    assert config_from_dict(config_to_dict(c)) == c
    assert c.label == "ring.m32.r4.k2.b128.st6.i4.s2.xldg.pf256B"


def test_validity_reasons():
    s = Shape(4096, 4096, 8)
    assert RingConfig().is_valid(s) and RingConfig().is_valid(Shape(4096, 4096, 16))
    assert any("16-byte aligned" in r for r in RingConfig().invalid_reasons(Shape(4096, 4101)))
    assert any("warps exceed" in r for r in RingConfig(rw=4, kw=8).invalid_reasons(s))
    assert any("whole 32-half steps" in r for r in RingConfig(bk=64, kw=4).invalid_reasons(s))
    assert any("exceed 227 KiB" in r for r in RingConfig(mt=4, rw=4, bk=512, stages=3).invalid_reasons(s))
    assert any("no row" in r for r in RingConfig(rw=8).invalid_reasons(Shape(100, 4096)))
    assert any("smaller ipb" in r for r in RingConfig(ipb=8).invalid_reasons(Shape(64, 4096)))
    assert any("exceeds the" in r for r in RingConfig(bk=512, split=16).invalid_reasons(Shape(64, 4096)))
    assert any("last split empty" in r for r in RingConfig(bk=64, split=16).invalid_reasons(Shape(4096, 1032)))
    assert RingConfig(stages=5).invalid_reasons(s)   # off the domain


def test_swizzle_is_conflict_free():
    """The 8 lanes of a 16-byte shared-memory phase (rows g, g + 1 of a tile, pieces 4 s + q) hit 8 distinct
    16-byte bank groups for every step s, and so do 8 consecutive copying threads (one row, 8 pieces)."""
    def sw(r: int, c: int, bk: int) -> int:   # the template's sw(), in bytes
        return 2 * (r * bk + ((c ^ ((r & 1) << 2)) << 3))

    for bk in ring.DOMAINS["bk"]:
        for r0 in range(0, 16, 2):
            for s in range(bk // 32):
                groups = {(sw(r, 4 * s + q, bk) % 128) // 16 for r in (r0, r0 + 1) for q in range(4)}
                assert len(groups) == 8, (bk, r0, s)
        for r in range(4):
            for c0 in range(0, bk // 8, 8):
                assert len({(sw(r, c, bk) % 128) // 16 for c in range(c0, c0 + 8)}) == 8


def test_workspace_grid_and_dynamic_shared_memory():
    s = Shape(1000, 4096, 3)
    c = RingConfig(mt=1, rw=2, kw=1, bk=256, stages=4, ipb=4, split=4)
    assert c.tiles(1000) == 32 and c.kernels(s) == [("ring_gemv", (8, 4, 1), (64, 1, 1))]
    assert c.needs_workspace(s) and c.workspace(s) == (4 * 3 * 1000, 32)
    assert c.dynamic_smem(s) == 4 * (32 + 3) * 256 * 2
    spec = launch_spec(c, s, Epilogue(out="fp16", bias=True))   # the in-kernel combine applies any epilogue
    assert spec.needs_workspace and spec.align == 16 and spec.smem == c.dynamic_smem(s)
    assert launch_spec(RingConfig(x_load="ldg"), s).smem == 4 * 32 * 256 * 2
    assert not RingConfig(split=1).needs_workspace(s) and RingConfig(split=1).workspace(s) == (1, 1)
    from gemvtune.kernels.mma import MmaConfig

    assert launch_spec(MmaConfig(), s).smem == 0   # the other families' shared memory is static


def test_render_names_its_levers():
    s = Shape(129, 4104, 3)
    src = render(RingConfig(kw=2, split=2, ipb=2, stages=2, prefetch="256B"), s,
                 Epilogue(out="fp16", bias=True))
    assert "cp.async.cg.shared.global.L2::256B" in src and "cache_hint" not in src and "atomicAdd(&counters[tile]" in src and "constexpr int N = 3;" in src
    assert "__shared__ float red[KW][BM][NT * 8];" in src and "constexpr int XR = 3;" in src
    assert "extern __shared__" in src and "cp.async.wait_group" in src
    plain = render(RingConfig(x_load="ldg"), Shape(129, 4104, 3))
    assert "counters[" not in plain and "L2::" not in plain and "constexpr int XR = 0;" in plain
    assert "load_x8(x + (size_t)(8 * j + g) * D" in plain
    bf16 = render(RingConfig(), Shape(129, 4104, 3, "bf16"), Epilogue(out="bf16", bias=True))   # BF16 W and x (issue 21)
    assert "__nv_bfloat16* ring = reinterpret_cast<__nv_bfloat16*>(ring_bytes);" in bf16
    assert "cp16(__nv_bfloat16* dst, const __nv_bfloat16* src, bool in)" in bf16 and "typedef __nv_bfloat16 out_t;" in bf16
    assert "m16n8k16.row.col.f32.bf16.bf16.f32" in bf16 and ".f16.f16." not in bf16


def test_export_header_carries_dynamic_shared_memory():
    from gemvtune.runtime.export import _entry

    s = Shape(4096, 4096, 8)
    c = RingConfig()
    e = _entry(c, s, launch_spec(c, s))
    assert e["smem"] == c.dynamic_smem(s) > 48 * 1024


@pytest.mark.slow   # ~70 NVRTC compiles
def test_every_parameter_value_compiles_on_edge_shapes():
    pairs = []
    for i, s in enumerate(EDGE):
        cfgs = _cover(s, k=2, seed=i)
        if s.d % 8:
            assert not cfgs   # rows not 16-byte aligned: the family refuses the shape
        pairs += [(c, s, Epilogue(out="fp16", bias=True) if j % 2 else Epilogue()) for j, c in enumerate(cfgs)]
    for key, values in ring.DOMAINS.items():
        assert {getattr(c, key) for c, _, _ in pairs} == set(values), key
    results = compile_variants(pairs, arch="sm_90")
    bad = [(c.label, str(s), str(r)) for (c, s, _), r in zip(pairs, results) if isinstance(r, CompileError)]
    assert not bad, bad[:3]
    # Nothing large in local memory. ptxas (CUDA 13.0) spills 24 bytes for ring.m64.r1.k1.b256.st6.i1.s4.xldg with the
    # FP16 + bias epilogue at 65x4024 n=8 (128 registers; 138 and no spill without the epilogue): X hoisted
    # through L1 for a 64-row warp. It is tolerated (the search measures it); nothing larger is.
    for (c, s, _), r in zip(pairs, results):
        assert r.resources.spill_stores <= 32 and r.resources.stack_bytes <= 32, (c.label, str(s), r.resources)


# ---- GPU ----------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("shape", tiered([s for s in EDGE if s.d % 8 == 0], lambda s: s.n == 8), ids=str)   # n = 8: tier 2
def test_ring_verifies_on_odd_shapes(runner, shape):
    cfgs = _cover(shape, k=6, seed=7)
    failed = verify_failures(runner, cfgs, shape) + verify_failures(runner, cfgs[:4], shape, Epilogue(out="fp16", bias=True))
    assert not failed, failed[:5]


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [Shape(129, 4104, 3), Shape(4096, 4096, 16)], ids=str)
def test_ring_planted_faults_caught_and_timed_ok(runner, shape):
    """A split that drops its last chunk, a last block that skips one split, and a ring read one stage
    late are all caught; the ring runs with more than 48 KiB of dynamic shared memory."""
    cfg = RingConfig(mt=1, rw=2, kw=2, bk=256, stages=3, ipb=2, split=2)
    src = render(cfg, shape)
    for old, new in (("const int per = min(NCH, c_begin + CPS) - c_begin;",
                      "const int per = min(NCH, c_begin + CPS) - c_begin - (split == SPLIT - 1);"),
                     ("for (int sp = 0; sp < SPLIT; ++sp) v +=", "for (int sp = 1; sp < SPLIT; ++sp) v +="),
                     ("const half* st = ring + (s % STAGES) * STAGE;", "const half* st = ring + ((s + 1) % STAGES) * STAGE;")):
        bad = src.replace(old, new)
        assert bad != src
        assert runner.measure(cfg, shape, timed=False, source=bad, name="planted-ring").status == "wrong"
    m = runner.measure(cfg, shape)
    assert m.ok and m.us_median > 0 and m.launches > 0
    big = RingConfig(mt=2, rw=2, kw=1, bk=512, stages=2)
    assert launch_spec(big, shape).smem > 48 * 1024
    # 48 KiB of dynamic ring plus the static d-warp reduction: past 48 KiB only together (the launch opts in anyway)
    edge = RingConfig(mt=1, rw=1, kw=4, bk=256, stages=6, x_load="ldg")
    assert launch_spec(edge, shape).smem == 48 * 1024 and edge.smem_bytes(shape) > 48 * 1024
    m = runner.measure(edge, shape)
    assert m.ok, (m.status, m.error)
    m = runner.measure(big, shape)
    assert m.ok and m.method == "graph", (m.status, m.error)
