"""The decode step's fusions in the GEMV template: the residual epilogue (y = W·x + r), SwiGLU on a gate/up group
(silu(g)·u into one output), and programmatic dependent launch as a chain runs it (pdl=chainK: the first K W vectors
loaded before the wait, the next kernel released after the last W load). CPU: which configs and families can fuse
them, with reasons; the FP16 accumulation chain with a prefetch; their sources compile for sm_90 in both dtypes
without spills; the fused step's kernels and gaps. GPU (marked gpu): every fusion verified against float64 on odd
shapes, and planted faults caught."""

import dataclasses

import pytest
from cover import cover, valid_of

from gemvtune import LLAMA_CPP, GemvConfig, Shape
from gemvtune.build.compile import CompileError, compile_many
from gemvtune.build.render import render
from gemvtune.errors import UsageError
from gemvtune.kernels import gemv
from gemvtune.kernels.epilogue import Epilogue
from gemvtune.kernels.group import GroupShape, group_reasons
from gemvtune.kernels.launchspec import launch_spec
from gemvtune.kernels.mma import MMA_SEED
from gemvtune.kernels.ring import RingConfig
from gemvtune.kernels.splitk import SplitKConfig

GATE_UP = GroupShape((14336, 14336), 4096)
TWO_ROWS = GemvConfig(block=256, vec="half8", tpr=128)            # 2 rows per block: SwiGLU can pair them


def test_epilogue_fusions_labels_and_exclusions():
    assert Epilogue("fp16", residual=True).label == ".o16.res" and Epilogue("bf16", swiglu=True).label == ".obf16.swiglu"
    assert Epilogue("fp16", True, swiglu=True).label == ".o16.bias.swiglu" and Epilogue().fusions == ()
    for bad in ({"residual": True, "bias": True}, {"residual": True, "swiglu": True}, {"swiglu": 1}):
        with pytest.raises(UsageError):
            Epilogue("fp16", **bad)
    res, sw = Epilogue("fp16", residual=True), Epilogue("fp16", swiglu=True)
    for other in (SplitKConfig(), MMA_SEED, RingConfig()):            # only the gemv template renders them
        assert "does not fuse residual" in res.invalid_reasons(other)[0]
        assert "does not fuse swiglu" in sw.invalid_reasons(other)[0]
    assert not res.invalid_reasons(LLAMA_CPP) and not sw.invalid_reasons(TWO_ROWS)
    assert "1 row(s) per block" in sw.invalid_reasons(LLAMA_CPP)[0]   # 256 threads on one row: no pair in a block


def test_swiglu_needs_its_group_and_a_residual_never_has_one():
    sw = Epilogue("fp16", swiglu=True)
    assert group_reasons(TWO_ROWS, GATE_UP, sw) == []
    assert "two members of equal rows" in group_reasons(TWO_ROWS, GroupShape((4096, 1024, 1024), 4096), sw)[0]
    assert "two members of equal rows" in group_reasons(TWO_ROWS, GroupShape((64, 32), 4096), sw)[0]
    assert "not to a group" in group_reasons(TWO_ROWS, GATE_UP, Epilogue("fp16", residual=True))[0]
    with pytest.raises(UsageError, match="give the group"):
        render(TWO_ROWS, GATE_UP.fused, sw)
    with pytest.raises(UsageError, match="give the group"):
        launch_spec(TWO_ROWS, GATE_UP.fused, sw)
    spec = launch_spec(TWO_ROWS, GATE_UP.fused, sw, GATE_UP)
    assert spec.group == GATE_UP and spec.shape.M == 2 * 14336 and not spec.pdl


def test_chain_configs_live_outside_the_searched_space():
    c = GemvConfig.from_dict({**LLAMA_CPP.to_dict(), "pdl": "chain4", "vec": "half8", "tpr": 64})
    assert c.chain_depth == 4 and c.label.endswith(".chain4") and LLAMA_CPP.chain_depth == 0
    assert launch_spec(c, Shape(4096, 4096)).pdl                       # launched with programmatic serialization
    assert not any(x.pdl in gemv.CHAIN_VALUES for x in gemv.all_configs())
    early = dataclasses.replace(c, pdl="early4")
    assert early.chain_depth == 4 and early.chain_trigger == "start" and c.chain_trigger == "end"
    assert sum(1 for _ in gemv.all_configs()) == 345_600               # the searched space is unchanged
    with pytest.raises(UsageError, match="pdl='chain3' is not one of"):
        GemvConfig.from_dict({"pdl": "chain3"})
    deep = dataclasses.replace(LLAMA_CPP, vec="half8", pdl="chain4")   # 256 threads x 4 vectors > the 512 of a row
    assert any("before the wait" in r for r in deep.invalid_reasons(Shape(4096, 4096)))
    assert not dataclasses.replace(LLAMA_CPP, pdl="chain4").invalid_reasons(Shape(4096, 4096))


def _slot0_terms(cfg: GemvConfig, d: int) -> int:
    """The additions into lane 0's first accumulator slot, as the template's loops make them (n = 1): the chain's
    prefetched vectors go to slots j % UNROLL, then the unrolled loop, then the remainder into slot 0."""
    vps, tpr, u, pf = cfg.vectors_per_split(d), cfg.tpr, cfg.unroll, cfg.chain_depth
    count = 0
    for j in range(pf):
        if j * tpr < vps and j % u == 0:
            count += 1
    v = pf * tpr
    if u > 1:
        while v + (u - 1) * tpr < vps:
            count += 1
            v += u * tpr
    while v < vps:
        count += 1
        v += tpr
    lanes = 1 if cfg.vec == "half" else 2
    return max(1, count * cfg.vec_elems // lanes)


@pytest.mark.parametrize("d", [4096, 14336, 4104, 72])
def test_fp16_chain_matches_the_templates_loops_with_a_prefetch(d):
    import random

    rng = random.Random(d)
    shape = Shape(64, d)
    pool = [c for c in valid_of("gemv", shape) if c.acc == "fp16" or c.unroll > 1][:4000]
    checked = 0
    for c in rng.sample(pool, min(300, len(pool))):
        for pdl in ("off", *gemv.CHAIN_VALUES):
            cc = dataclasses.replace(c, pdl=pdl, acc="fp32")
            if cc.chain_depth * cc.tpr > cc.vectors_per_split(d):
                continue
            assert cc.fp16_chain(d) == _slot0_terms(cc, d), (cc.label, d)
            checked += 1
    assert checked > 100


def test_rendered_fusions_read_where_they_should():
    chain = dataclasses.replace(TWO_ROWS, pdl="chain2", unroll=2)
    src = render(chain, Shape(4096, 4096))
    wait, first_x, trigger = src.index("griddepcontrol.wait"), src.index("X_AT(c, vj)"), src.index("launch_dependents")
    assert src.index("pre[j] = load_w") < wait < first_x < trigger       # W before the wait, x after, trigger last
    assert "prefetch.global.L2" not in src                               # (pdl=on's L2 prefetch is another variant)
    early = render(dataclasses.replace(chain, pdl="early2"), Shape(4096, 4096))
    assert early.count("launch_dependents") == 1 and early.index("launch_dependents") < early.index("griddepcontrol.wait")
    res = render(LLAMA_CPP, Shape(4096, 4096, 3), Epilogue("fp16", residual=True))
    assert "epilogue_res(sum[c], bias, (size_t)c * M + row)" in res
    k = render(dataclasses.replace(TWO_ROWS, split_k=4), GATE_UP.fused, Epilogue("fp16", True, swiglu=True), GATE_UP)
    assert "? Member{g.W[1], g.y[0], g.bias[1], row >> 1, g.end[0]}" in k
    assert "swiglu_out(plus_bias(tg, grp.bias[0], m.row), plus_bias(tu, grp.bias[1], m.row))" in k


@pytest.mark.slow
def test_fusion_sources_compile_without_spills_both_dtypes():
    items = []
    for i, g in enumerate([GATE_UP, GroupShape((72, 72), 4104, 3, "bf16"), GroupShape((40, 40), 4096, 16)]):
        sw = Epilogue(g.dtype, i == 1, swiglu=True)
        cfgs = cover([c for c in valid_of("gemv", g.fused) if not sw.invalid_reasons(c)], TWO_ROWS, gemv.DOMAINS, 3, i)
        for j, c in enumerate(cfgs):
            c = dataclasses.replace(c, pdl=gemv.CHAIN_VALUES[j % 8]) if j % 3 == 0 else c
            if c.is_valid(g.fused) and not group_reasons(c, g, sw) and not sw.invalid_reasons(c):
                items.append((c, g.fused, sw, g))
    for i, s in enumerate([Shape(4096, 14336), Shape(129, 4104, 3, "bf16"), Shape(7, 72, 16)]):
        cfgs = cover(valid_of("gemv", s), LLAMA_CPP, gemv.DOMAINS, 3, 10 + i)
        for j, c in enumerate(cfgs):
            e = Epilogue(s.dtype if j % 2 else "fp32", residual=True)
            c = dataclasses.replace(c, pdl=gemv.CHAIN_VALUES[j % 8]) if j % 3 == 1 else c
            if c.is_valid(s):
                items.append((c, s, e, None))
    assert {it[0].split_k > 1 for it in items} == {True, False} and len(items) > 100
    srcs = [((c.label + e.label + (".g" if g else "")).replace(".", "_"), render(c, s, e, g)) for c, s, e, g in items]
    results = compile_many(srcs, arch="sm_90")
    bad = [(n, str(r)[:300]) for (n, _), r in zip(srcs, results) if isinstance(r, CompileError)]
    assert not bad, bad[:3]
    # No local memory where ptxas has 128 registers or more a thread (occ=auto, blocks up to 512 threads); a block of
    # 1024 caps them at 64, where n = 16 columns with a prefetch can spill: the search measures that like any spill.
    spills = [(n, r.resources) for (n, _), r, it in zip(srcs, results, items)
              if it[0].occ == "auto" and it[0].block <= 512 and (r.resources.spill_stores or r.resources.stack_bytes)]
    assert not spills, spills[:3]


def test_gaps_of_a_llama_layer():
    from gemvtune.bench.gaps import layer_gaps
    from gemvtune.kernels.hfconfig import read_preset

    m = read_preset("llama-3-8b")
    un, fu = layer_gaps(m, 1, False, 128), layer_gaps(m, 1, True, 128)
    assert set(un) == {"qkv", "o", "gate_up", "down"} and set(fu) == {"qkv", "o", "down"}
    assert un["qkv"] == fu["qkv"] and un["qkv"].read_bytes == 2 * (4096 + 2048) + 2 * 2 * 128 * 1024
    assert un["gate_up"].read_bytes == 2 * 2 * 14336 and un["gate_up"].write_bytes == 2 * 14336
    assert un["o"].bytes_moved == fu["o"].bytes_moved + 2 * 2 * 4096    # the residual add's r in and sum out
    with pytest.raises(ValueError):
        layer_gaps(m, 1, False, 0)


def test_the_fused_steps_kernels_from_the_committed_table():
    from pathlib import Path

    from gemvtune import load_table
    from gemvtune.bench.chain import SLOTS, at_depth, depths_of, step_kernels
    from gemvtune.kernels.hfconfig import read_preset

    table = load_table(Path(__file__).resolve().parent.parent / "results" / "nvidia-h200" / "table.json")
    ks = step_kernels(table, read_preset("llama-3-8b"))
    assert tuple(ks) == SLOTS
    assert ks["qkv"].group == GroupShape((4096, 1024, 1024), 4096) and ks["gate_up"].epilogue.swiglu
    assert ks["o"].epilogue.residual and ks["down"].epilogue.residual and ks["lm_head"].group is None
    for k in ks.values():
        assert k.config.family == "gemv" and not k.epilogue.invalid_reasons(k.config)
        assert not (k.group and group_reasons(k.config, k.group, k.epilogue)) and not k.config.invalid_reasons(k.shape)
        assert depths_of(k)[0] == ("", 0) and len(depths_of(k)) >= 5
        deep = at_depth(k, depths_of(k)[-1])
        assert deep.config.pdl.startswith("early") and deep.label != k.label and deep.variant == depths_of(k)[-1]
    o = table.entry(Shape(4096, 4096)).winner_config()
    assert ks["o"].config == o and "the winner of" in ks["o"].why


# ---- GPU ----------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("shape", [Shape(129, 4104), Shape(7, 72, 3, "bf16"), Shape(64, 4096, 16)], ids=str)
def test_residual_and_chain_variants_verify(runner, shape):
    from cover import verify_failures

    cfgs = cover(valid_of("gemv", shape), LLAMA_CPP, gemv.DOMAINS, 4, 7)
    chains = [dataclasses.replace(c, pdl=gemv.CHAIN_VALUES[i % 8]) for i, c in enumerate(cfgs)]
    failed = verify_failures(runner, [c for c in chains if c.is_valid(shape)], shape)
    failed += verify_failures(runner, cfgs[:24], shape, Epilogue(shape.dtype, residual=True))
    failed += verify_failures(runner, cfgs[24:48], shape, Epilogue("fp32", residual=True))
    assert not failed, failed[:5]


@pytest.mark.gpu
@pytest.mark.parametrize("group", [GroupShape((72, 72), 4104), GroupShape((33, 33), 4096, 3, "bf16"),
                                   GroupShape((1024, 1024), 4096, 16)], ids=str)
def test_swiglu_groups_verify(runner, group):
    from gemvtune.build.compile import compile_variants
    from gemvtune.runners.cuda.grouped import measure_group

    cfgs = []
    for j, c in enumerate(cover(valid_of("gemv", group.fused), TWO_ROWS, gemv.DOMAINS, 4, 5)):
        e = Epilogue(group.dtype if j % 2 else "fp32", j % 3 == 0, swiglu=True)
        c = dataclasses.replace(c, pdl=gemv.CHAIN_VALUES[j % 8]) if j % 4 == 1 else c
        if c.is_valid(group.fused) and not group_reasons(c, group, e) and not e.invalid_reasons(c):
            cfgs.append((c, e))
    assert len(cfgs) > 20
    compile_variants([(c, group.fused, e, group) for c, e in cfgs], arch=runner.arch)
    failed = [(c.label + e.label, m.status, m.error) for c, e in cfgs
              for m in [measure_group(runner, c, group, e, timed=False)] if not m.ok]
    runner.release()
    assert not failed, failed[:5]


PLANTS = {   # fault: (config, epilogue, group or None, the text replaced, its replacement)
    "residual_dropped": (LLAMA_CPP, Epilogue("fp16", residual=True), None,
                         "return to_out(v + __half2float(ri));", "return to_out(v);"),
    "residual_of_column_0": (LLAMA_CPP, Epilogue("fp16", residual=True), None,
                             "epilogue_res(sum[c], bias, (size_t)c * M + row)", "epilogue_res(sum[c], bias, (size_t)row)"),
    "swiglu_gate_up_swapped": (TWO_ROWS, Epilogue("fp16", swiglu=True), GroupShape((72, 72), 4104, 3),
                               "swiglu_out(plus_bias(sum[c], grp.bias[0], mem.row),\n",
                               "swiglu_out(plus_bias(up_sum[r_in_block >> 1][c], grp.bias[0], mem.row),\n"),
    "swiglu_up_bias_from_gate": (TWO_ROWS, Epilogue("fp16", True, swiglu=True), GroupShape((72, 72), 4104, 3),
                                 "plus_bias(up_sum[r_in_block >> 1][c], grp.bias[1]",
                                 "plus_bias(up_sum[r_in_block >> 1][c], grp.bias[0]"),
    "swiglu_wrong_pair": (TWO_ROWS, Epilogue("fp16", swiglu=True), GroupShape((72, 72), 4104),   # up row i + 1
                          "? Member{g.W[1], g.y[0], g.bias[1], row >> 1, g.end[0]}",
                          "? Member{g.W[1], g.y[0], g.bias[1], (row >> 1) ^ 1, g.end[0]}"),
}


@pytest.mark.gpu
@pytest.mark.parametrize("kind", list(PLANTS))
def test_planted_fusion_faults_are_caught(runner, kind):
    """Each fault stays inside its buffers (in bounds: the sanitizer runs these too), so it is a wrong answer."""
    from gemvtune.runners.cuda.grouped import measure_group

    cfg, epi, group, old, new = PLANTS[kind]
    shape = group.fused if group else Shape(129, 4104, 3)
    src = render(cfg, shape, epi, group)
    bad = src.replace(old, new)
    assert bad != src, kind
    if group is not None:
        m = measure_group(runner, cfg, group, epi, timed=False, source=bad, name=f"planted-{kind}")
    else:
        m = runner.measure(cfg, shape, timed=False, source=bad, name=f"planted-{kind}", epilogue=epi)
    assert m.status == "wrong", (kind, m.status, m.relerr, m.error)
