"""BF16 kernels compile with NVRTC for sm_90 (CPU; these run on CI): every value of every parameter of every template
family on edge shapes (M and d not multiples of the tiles; n = 1, 3, 8, 16), sampled as the FP16 compile tests sample
them (tests/test_compile.py's subsets, tests/cover.py), and every BF16 epilogue (BF16 out, bias) of every family
without spills. What the sources contain and what is refused: test_bf16_render.py."""

import itertools
import random

import pytest
from cover import cover

from gemvtune.build.compile import CompileError, Resources, compile_variants
from gemvtune.kernels import gemv, mma, ring, splitk
from gemvtune.kernels.epilogue import Epilogue, epilogues_for
from gemvtune.kernels.families import FAMILIES
from gemvtune.kernels.launchspec import launch_spec
from gemvtune.kernels.shapes import Shape

BF16 = "bf16"
EPIS = epilogues_for(BF16)   # FP32 / BF16 out, without and with a bias


def _bf16(M: int, d: int, n: int = 1) -> Shape:
    return Shape(M, d, n, BF16)


def _epilogue(c, j: int) -> Epilogue:
    """The j-th BF16 epilogue in turn, or its FP32-out twin where the config has no 16-bit output."""
    e = EPIS[j % len(EPIS)]
    return e if not e.invalid_reasons(c) else Epilogue("fp32", e.bias)


def _compile(items: list[tuple]) -> list:
    """Compile (config, shape, epilogue) items; none may fail."""
    assert all(s.dtype == BF16 for _, s, _ in items)
    results = compile_variants(items, arch="sm_90")
    bad = [(c.label + e.label, str(s), str(r)) for (c, s, e), r in zip(items, results) if isinstance(r, CompileError)]
    assert not bad, bad[:3]
    return results


def _covers(items: list[tuple], domains: dict, skip: tuple = ()) -> None:
    for key, values in domains.items():
        if key not in skip:
            assert {getattr(c, key) for c, _, _ in items} == set(values), key


def gemv_subset() -> list[tuple]:
    """tests/test_compile.py's representative subset for BF16 inputs: every (vec, hint, x_load) combination (acc is
    fp32: acc=fp16 is invalid for BF16) on tail shapes at n = 1, 3, 8, 16; every value of split_k, block, tpr, unroll,
    pdl and occ; every vec at n = 3, 8, 16."""
    rng = random.Random(21)
    shapes = [_bf16(7, 4104, 1), _bf16(129, 72, 3), _bf16(4096, 14336, 8), _bf16(33, 4104, 16)]
    valid = {s: gemv.valid_configs(s) for s in shapes}
    out = [(gemv.LLAMA_CPP, _bf16(4096, 4096), EPIS[0])]
    for i, (vec, hint, xl) in enumerate(itertools.product(gemv.DOMAINS["vec"], gemv.DOMAINS["hint"], gemv.DOMAINS["x_load"])):
        s = shapes[i % len(shapes)]
        pool = [c for c in valid[s] if (c.vec, c.hint, c.x_load) == (vec, hint, xl)]
        c = rng.choice(pool)
        out.append((c, s, _epilogue(c, i)))
    s = _bf16(1024, 16384)
    v = gemv.valid_configs(s)
    for key in ("split_k", "block", "tpr", "unroll", "pdl", "occ"):
        for j, val in enumerate(gemv.DOMAINS[key]):
            c = rng.choice([c for c in v if getattr(c, key) == val])
            out.append((c, s, _epilogue(c, j)))
    for n in (3, 8, 16):
        s = _bf16(129, 4104, n)
        vs = gemv.valid_configs(s)
        for j, vec in enumerate(gemv.DOMAINS["vec"]):
            c = rng.choice([c for c in vs if c.vec == vec])
            out.append((c, s, _epilogue(c, j + n)))
    return list(dict.fromkeys(out))


@pytest.mark.slow   # ~70 NVRTC compiles
def test_gemv_every_value_compiles_for_bf16():
    items = gemv_subset()
    _covers(items, gemv.DOMAINS, skip=("acc",))
    assert {c.acc for c, _, _ in items} == {"fp32"} and {s.n for _, s, _ in items} == {1, 3, 8, 16}
    assert {e for _, _, e in items} == set(EPIS)
    for (c, s, e), r in zip(items, _compile(items)):
        assert 0 < r.resources.registers <= min(255, 65536 // (c.block * c.min_blocks)), (c.label, r.resources)
        # as for FP16: capping registers for occupancy may spill, and so may many columns in big blocks
        if c.occ == "auto" and s.n == 1:
            assert r.resources.spill_stores == 0 and r.resources.stack_bytes == 0, (c.label + e.label, str(s), r.resources)


def splitk_subset() -> list[tuple]:
    """tests/test_compile.py's split-K subset for BF16 inputs: every (w_load, x_load, combine) combination at n = 1, 3,
    8, 16 on tail shapes (M not a multiple of 16, d not a multiple of 32, one d not a multiple of 8) and every value
    of every other parameter."""
    rng = random.Random(22)
    shapes = [_bf16(129, 4104, 3), _bf16(7, 72, 16), _bf16(33, 4101, 8), _bf16(4096, 4096, 1)]
    out = []
    for i, (wl, xl, comb) in enumerate(itertools.product(splitk.DOMAINS["w_load"], splitk.DOMAINS["x_load"],
                                                        splitk.DOMAINS["combine"])):
        for j, s in enumerate(shapes):
            pool = [c for c in splitk.valid_configs(s) if (c.w_load, c.x_load, c.combine) == (wl, xl, comb)]
            if pool:
                c = rng.choice(pool)
                out.append((c, s, _epilogue(c, i + j)))
    s = _bf16(1000, 9176, 5)
    v = splitk.valid_configs(s)
    for key in ("mt", "warps", "split", "depth"):
        for j, val in enumerate(splitk.DOMAINS[key]):
            c = rng.choice([c for c in v if getattr(c, key) == val])
            out.append((c, s, _epilogue(c, j)))
    return list(dict.fromkeys(out))


@pytest.mark.slow   # ~45 NVRTC compiles
def test_splitk_every_value_compiles_for_bf16():
    items = splitk_subset()
    _covers(items, splitk.DOMAINS)
    assert {s.n for _, s, _ in items} >= {1, 3, 8, 16} and {e for _, _, e in items} == set(EPIS)
    # ptxas (CUDA 13.0) spills 4 bytes (8 of stack) for sk.m32.w8.s1.cpasync1.xldg with a bias at 1000x9176 n=5,
    # exactly as it does for the FP16 kernel with an FP16 bias (40 registers; 42 and no spill without the bias).
    # It is tolerated; nothing larger is.
    for (c, s, e), r in zip(items, _compile(items)):
        assert 0 < r.resources.registers <= 255, c.label
        assert r.resources.spill_stores <= 4 and r.resources.stack_bytes <= 8, (c.label + e.label, str(s), r.resources)


# tests/test_mma.py's and tests/test_ring.py's EDGE shapes (M not a multiple of any row tile, d not a multiple of the
# 32-wide chunk or of a ring stage (4104) or of 8 (4101: the ring refuses it), tiny d (72), and a d where a 16-way
# split keeps every split busy), each at one of n = 1, 3, 8, 16: every parameter value on each shape (the FP16 tests
# compile every shape at every n; the BF16 sources differ from those only in their types and conversions).
MMA_EDGE = [_bf16(M, d, n) for n, (M, d) in zip((1, 3, 8, 16), ((129, 4104), (33, 4101), (7, 72), (65, 4360)))]
RING_EDGE = [_bf16(M, d, n) for n, (M, d) in zip((1, 3, 8, 16, 3), ((129, 4104), (65, 4024), (7, 72), (129, 4104),
                                                                      (7, 72)))]


def _edge_items(name: str, edge: list[Shape]) -> list[tuple]:
    fam, mod = FAMILIES[name], {"mma": mma, "ring": ring}[name]
    items = []
    for i, s in enumerate(edge):
        cfgs = cover(mod.valid_configs(s), fam.seed, fam.domains, 2, i)
        items += [(c, s, _epilogue(c, i + j)) for j, c in enumerate(cfgs)]
    return items


@pytest.mark.slow   # ~110 NVRTC compiles
def test_mma_every_value_compiles_for_bf16_on_edge_shapes():
    items = _edge_items("mma", MMA_EDGE)
    _covers(items, mma.DOMAINS)
    assert {s.n for _, s, _ in items} == {1, 3, 8, 16} and {e for _, _, e in items} == set(EPIS)
    # the FP16 tolerance (tests/test_mma.py): ptxas may spill one 8-byte value; nothing larger
    for (c, s, e), r in zip(items, _compile(items)):
        assert r.resources.spill_stores <= 8 and r.resources.stack_bytes <= 8, (c.label + e.label, str(s), r.resources)


@pytest.mark.slow   # ~120 NVRTC compiles
def test_ring_every_value_compiles_for_bf16_on_edge_shapes():
    items = _edge_items("ring", RING_EDGE)
    assert not [s for _, s, _ in items if s.d % 8]   # rows not 16-byte aligned: the family refuses the shape
    _covers(items, ring.DOMAINS)
    assert {s.n for _, s, _ in items} == {1, 3, 8, 16} and {e for _, _, e in items} == set(EPIS)
    # the FP16 tolerance (tests/test_ring.py): up to 32 bytes of spill; nothing larger
    for (c, s, e), r in zip(items, _compile(items)):
        assert r.resources.spill_stores <= 32 and r.resources.stack_bytes <= 32, (c.label + e.label, str(s), r.resources)


def _epilogue_configs(s: Shape) -> list:
    """Per shape, as tests/test_epilogue.py picks them (seeded): a GEMV with split_k 1 and one with split_k > 1 (at the
    compiler's occupancy: a register cap may spill, FP16 or BF16 alike); a split-K GEMM with split 1, one combining
    with pass2 and one with atomics; an mma and a ring GEMV without and with a split (their in-kernel combine)."""
    rng = random.Random(16)
    g, k = [c for c in gemv.valid_configs(s) if c.occ == "auto"], splitk.valid_configs(s)
    m, r = mma.valid_configs(s), ring.valid_configs(s)
    picks = [[c for c in g if c.split_k == 1], [c for c in g if c.split_k > 1],
             [c for c in k if c.split == 1], [c for c in k if c.split > 1 and c.combine == "pass2"],
             [c for c in k if c.split > 1 and c.combine == "atomic"],
             [c for c in m if c.split == 1], [c for c in m if c.split > 1],
             [c for c in r if c.split == 1], [c for c in r if c.split > 1]]
    assert all(picks), s
    return [rng.choice(p) for p in picks]


@pytest.mark.slow   # ~100 NVRTC compiles
def test_every_bf16_epilogue_compiles_for_every_family_without_spills():
    shapes = [_bf16(7, 72, 3), _bf16(7, 4104, 1), _bf16(129, 4104, 16)]
    items = [(c, s, e) for s in shapes for c in _epilogue_configs(s) for e in EPIS if not e.invalid_reasons(c)]
    assert {(c.family, e) for c, _, e in items} == {(f, e) for f in ("gemv", "splitk", "mma", "ring") for e in EPIS}
    for (c, s, e), r in zip(items, _compile(items)):
        for name, _, _ in launch_spec(c, s, e).kernels:   # every kernel of the call, helpers included
            res = Resources.parse(r.log, name)
            assert f"'{name}'" in r.log and res.registers > 0, (c.label + e.label, name)
            assert res.spill_stores == 0 and res.stack_bytes == 0, (c.label + e.label, str(s), name, res)
