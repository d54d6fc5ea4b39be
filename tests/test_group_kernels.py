"""Grouped variants (``gemvtune.kernels.group``): sibling linears that read the same x in one launch. CPU: the group
shape's checks, which families and configs can run a group, the grouped sources compile for every value of every
gemv parameter with both dtypes and every epilogue (no spills), the by-value argument's C layout equals its ctypes
twin, and a plain render is untouched by the group code. GPU (marked gpu): grouped variants verified against float64
of every member on odd shapes, planted faults caught, and the group timed against its members one after another."""


from pathlib import Path

import pytest
from cover import cover, tiered, valid_of

from gemvtune import LLAMA_CPP, GemvConfig, Shape
from gemvtune.build.compile import CompileError, compile_source, compile_variants, options_for
from gemvtune.build.render import render
from gemvtune.errors import UsageError
from gemvtune.kernels import gemv
from gemvtune.kernels.epilogue import Epilogue, epilogues_for
from gemvtune.kernels.group import GroupShape, group_reasons
from gemvtune.kernels.launchspec import launch_spec
from gemvtune.kernels.mma import MMA_SEED
from gemvtune.kernels.splitk import SplitKConfig

QKV = GroupShape((4096, 1024, 1024), 4096)
ODD = [GroupShape((129, 33, 7), 4104), GroupShape((129, 33, 7), 4104, 3), GroupShape((7, 65), 72, 16, "bf16"),
       GroupShape((33, 129, 1), 4096, 8)]


def test_group_shape_checks_and_fused_shape():
    assert QKV.fused == Shape(6144, 4096) and QKV.ends == (4096, 5120, 6144) and str(QKV) == "4096+1024+1024x4096"
    assert str(GroupShape((8, 8), 72, 3, "bf16")) == "8+8x72@n3.bf16"
    for bad in [(4096,), (1, 2, 3, 4, 5), (4096, 0), (4096, True), [4096, 1024]]:
        with pytest.raises(UsageError):
            GroupShape(bad, 4096)
    with pytest.raises(UsageError):
        GroupShape((8, 8), 72, 17)
    with pytest.raises(UsageError):
        GroupShape((8, 8), 72, 1, "fp32")


def test_only_the_gemv_family_groups_and_only_configs_valid_for_the_fused_shape():
    assert group_reasons(LLAMA_CPP, QKV) == []
    assert "no grouped template" in group_reasons(SplitKConfig(), QKV)[0]
    assert "no grouped template" in group_reasons(MMA_SEED, QKV)[0]
    odd = GroupShape((8, 8), 4101)                      # d not a multiple of the half2 width
    assert group_reasons(LLAMA_CPP, odd) and group_reasons(LLAMA_CPP, odd) == LLAMA_CPP.invalid_reasons(odd.fused)
    with pytest.raises(UsageError, match="cannot run the group"):
        render(SplitKConfig(), QKV.fused, group=QKV)
    with pytest.raises(UsageError, match="not a GroupShape whose fused shape"):
        render(LLAMA_CPP, Shape(4096, 4096), group=QKV)
    spec = launch_spec(LLAMA_CPP, QKV.fused, group=QKV)
    assert spec.group == QKV and spec.shape.M == 6144
    with pytest.raises(UsageError):
        launch_spec(LLAMA_CPP, Shape(4096, 4096), group=QKV)


def test_a_plain_render_has_no_group_code():
    src = render(LLAMA_CPP, QKV.fused)
    assert "GroupArgs" not in src and "member_of" not in src
    g = render(LLAMA_CPP, QKV.fused, group=QKV)
    assert "const GroupArgs grp)" in g and g.count("member_of(grp,") == 1   # the row's member (its W, y, bias)
    # with PDL's prefetch and split-K's combine, each finds its rows' members too
    k = render(GemvConfig(vec="half8", tpr=32, block=128, split_k=4, pdl="on"), QKV.fused, group=QKV)
    assert k.count("member_of(grp,") == 3
    assert "return Member{g.W[2], g.y[2], g.bias[2], row - g.end[1], g.end[2] - g.end[1]};" in g


def _sample(group: GroupShape, k: int, seed: int) -> list:
    return [c for c in cover(valid_of("gemv", group.fused), LLAMA_CPP, gemv.DOMAINS, k, seed)]


def test_grouped_sources_compile_for_every_gemv_value_both_dtypes_every_epilogue():
    items = []
    for i, g in enumerate([GroupShape((129, 33, 7), 4104), GroupShape((64, 64), 72, 16, "bf16"),
                           GroupShape((7, 9, 11, 13), 4096, 3)]):
        cfgs = _sample(g, k=2, seed=i)
        for key, values in gemv.DOMAINS.items():   # every valid value of every parameter is in the sample
            assert {getattr(c, key) for c in cfgs} >= {v for v in values if any(getattr(c, key) == v for c in valid_of("gemv", g.fused))}, key
        epis = epilogues_for(g.dtype)
        items += [(c, g, epis[j % len(epis)]) for j, c in enumerate(cfgs) if not epis[j % len(epis)].invalid_reasons(c)]
    srcs = [((c.label + e.label + ".g").replace(".", "_"), render(c, g.fused, e, g)) for c, g, e in items]
    from gemvtune.build.compile import compile_many

    results = compile_many(srcs, arch="sm_90")
    bad = [(n, str(r)[:300]) for (n, _), r in zip(srcs, results) if isinstance(r, CompileError)]
    assert not bad, bad[:3]
    # No local memory where ptxas chooses the registers. An occupancy cap (occ=half/full: 64 or 32 registers at
    # some blocks) can spill the members' pointers: the search measures that like any spill.
    for (n, _), r, (c, _, _) in zip(srcs, results, items):
        if c.occ == "auto":
            assert r.resources.spill_stores == 0 and r.resources.stack_bytes == 0, (n, r.resources)


@pytest.mark.parametrize("members", [2, 3, 4])
def test_the_by_value_argument_has_the_layout_of_its_ctypes_twin(members):
    """The kernel's GroupArgs and its ctypes twin: the same fields in the same order (the rendered declaration), each
    of the same size and alignment and the whole of the same size (NVRTC checks those), hence the same offsets.
    (NVRTC 13.0.88 has no ``__builtin_offsetof``: "type name is not allowed".)"""
    import ctypes
    import re

    from gemvtune.device.plan import group_args_type

    T = group_args_type(members)
    g = GroupShape(tuple(range(8, 8 + members)), 72)
    src = render(LLAMA_CPP, g.fused, group=g)
    decl = re.search(r"struct GroupArgs \{([^}]*)\};", src)
    assert decl, "no GroupArgs declaration in the grouped source"
    names = [re.sub(r"\[.*", "", m.split()[-1]).lstrip("*") for m in decl.group(1).split(";") if m.strip()]
    assert names == [f[0] for f in T._fields_] == ["W", "y", "bias", "end"]
    checks = [f"static_assert(sizeof(GroupArgs) == {ctypes.sizeof(T)}, \"size\");",
              f"static_assert(alignof(GroupArgs) == {ctypes.alignment(T)}, \"align\");"]
    offset = 0
    for name, ctype in T._fields_:
        size, align = ctypes.sizeof(ctype), ctypes.alignment(ctype)
        offset = -(-offset // align) * align          # the C layout rule both follow
        assert getattr(T, name).offset == offset
        offset += size
        checks += [f"static_assert(sizeof(GroupArgs::{name}) == {size}, \"{name} size\");",
                   f"static_assert(alignof(decltype(GroupArgs::{name})) == {align}, \"{name} align\");"]
    compile_source(src + "\n" + "\n".join(checks) + "\n", f"layout{members}", "sm_90")   # CompileError on a mismatch
    bad = src + f"\nstatic_assert(sizeof(GroupArgs::end) == {ctypes.sizeof(ctypes.c_long * members)}, \"end\");\n"
    with pytest.raises(CompileError, match="end"):    # the check can fail: end as longs is not the kernel's layout
        compile_source(bad, f"layoutbad{members}", "sm_90")
    assert options_for("sm_90")


# ---- GPU ----------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("group", tiered(ODD + [QKV], lambda g: g.n == 8), ids=str)
def test_grouped_variants_verify_on_odd_members(runner, group):
    from gemvtune.runners.cuda.grouped import measure_group

    cfgs = _sample(group, k=4, seed=3)
    compile_variants([(c, group.fused, e) for c in cfgs for e in (Epilogue(), Epilogue(group.dtype, True))
                      if not e.invalid_reasons(c)], arch=runner.arch)   # (the plain sources: warms nothing else)
    failed = []
    for j, c in enumerate(cfgs):
        e = Epilogue(group.dtype, True) if j % 2 else Epilogue()
        if e.invalid_reasons(c):
            e = Epilogue()
        m = measure_group(runner, c, group, e, timed=False)
        if not m.ok:
            failed.append((c.label + e.label, m.status, m.error))
    runner.release()
    assert not failed, failed[:5]


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["wrong_member_weights", "wrong_member_bias", "wrong_member_output"])
def test_planted_group_faults_are_caught(runner, kind):
    """Each fault stays inside the members' allocations (member 2 has the fewest rows), so it is a wrong answer,
    never a stray access: the sanitizer runs these too."""
    from gemvtune.runners.cuda.grouped import measure_group

    g = GroupShape((33, 129, 7), 4104, 3)
    src, epi = render(LLAMA_CPP, g.fused, group=g), Epilogue()
    if kind == "wrong_member_weights":      # member 2's rows read member 0's W
        bad = src.replace("return Member{g.W[2], g.y[2]", "return Member{g.W[0], g.y[2]")
    elif kind == "wrong_member_bias":       # member 2 adds member 0's bias (a permutation of a member's rows
        epi = Epilogue("fp16", True)        # would not be a fault: W and y rows move together)
        src = render(LLAMA_CPP, g.fused, epi, group=g)
        bad = src.replace("g.bias[2], row - g.end[1]", "g.bias[0], row - g.end[1]")
    else:                                   # member 2 writes member 1's y (its own stays NaN)
        bad = src.replace("return Member{g.W[2], g.y[2]", "return Member{g.W[2], g.y[1]")
    assert bad != src
    m = measure_group(runner, LLAMA_CPP, g, epi, timed=False, source=bad, name=f"planted-group-{kind}")
    assert m.status == "wrong", (m.status, m.relerr, m.error)


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1, 8])
def test_a_group_is_timed_against_its_members_in_the_same_graphs(runner, n):
    from gemvtune.runners.cuda.grouped import measure_group, measure_separate

    g = GroupShape((4096, 1024, 1024), 4096, n)
    cfg = GemvConfig(block=256, vec="half8", tpr=32, hint="nc")
    grouped = measure_group(runner, cfg, g)
    separate = measure_separate(runner, [cfg] * 3, g)
    assert grouped.ok and separate.ok, (grouped.error, separate.error)
    assert grouped.us_median > 0 and separate.us_median > 0 and grouped.copies >= 2
    print(f"\n{g}: grouped {grouped.us_median:.2f} µs, separate {separate.us_median:.2f} µs")
    runner.release()


def test_a_model_presets_groups_and_the_configs_the_group_bench_runs():
    from gemvtune import load_table
    from gemvtune.bench.groupbench import group_config, member_configs, summary
    from gemvtune.kernels.hfconfig import read_preset

    qkv, gate_up = read_preset("llama-3-8b").groups(1)
    assert qkv == QKV and gate_up == GroupShape((14336, 14336), 4096)
    table = load_table(Path(__file__).resolve().parent.parent / "results" / "nvidia-h200" / "table.json")
    cfg, why = group_config(table, qkv)
    assert cfg.family == "gemv" and "best gemv config of 6144x4096" in why and not group_reasons(cfg, qkv)
    members = member_configs(table, qkv, cfg)
    assert [table.route(s.M, s.d, s.n).config for s in qkv.members] == members   # what each member's route runs
    cfg8, why8 = group_config(table, GroupShape((4096, 1024, 1024), 4096, 8))
    assert cfg8.family == "gemv"       # the winner at n = 8 is a ring kernel: the best GEMV record instead
    odd = GroupShape((5, 7), 4104, 3)
    assert group_config(table, odd)[0] == LLAMA_CPP and member_configs(table, odd, LLAMA_CPP) == [LLAMA_CPP] * 2
    row = {"group": "4096+1024+1024x4096", "n": 1, "grouped_us": 13.0, "grouped_spread": 0.01, "grouped_pct_ceiling": 90.0,
           "separate_us": 16.0, "fused_plain_us": 13.1, "separate_over_grouped": 16.0 / 13.0}
    md = summary([row], {"date": "2026-12-03", "command": "gemvtune bench group", "device": {"name": "H200", "driver": "580"}},
                 "llama-3-8b")
    assert "| 4096+1024+1024x4096 | 1 | 13.00 (±0.5%) | 90.0 | 16.00 | 13.10 | 1.231 |" in md and "H200, driver 580" in md
