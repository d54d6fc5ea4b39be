"""Programmatic dependent launch without a GPU: a pdl=on variant renders and compiles with
griddepcontrol (its launch, cuLaunchKernelEx with programmatic stream serialization through
cuda-bindings, is checked with a fake driver in tests/test_plan.py)."""

from gemvtune import GemvConfig, Shape
from gemvtune.build.compile import compile_variant
from gemvtune.build.render import render
from gemvtune.kernels.launchspec import launch_spec


def test_pdl_variant_renders_and_compiles():
    s = Shape(129, 4104, 3)
    on, off = GemvConfig(vec="half8", tpr=32, block=128, pdl="on"), GemvConfig(vec="half8", tpr=32, block=128)
    src = render(on, s)
    assert "griddepcontrol.wait" in src and "prefetch.global.L2" in src and "griddepcontrol" not in render(off, s)
    assert on.label == off.label + ".pdl"
    assert launch_spec(on, s).pdl and not launch_spec(off, s).pdl
    r = compile_variant(on, s).resources
    assert r.registers > 0 and r.spill_stores == 0


def test_a_per_shape_search_never_proposes_pdl(tmp_path):
    """Only a model's chain chooses programmatic dependent launch: the search's space (``family_domains``) and the
    tune's planning sample leave pdl=on out of every family that has it, keep the rest of the space, and a config
    holding it (or a chain variant) says why; zero-trial candidates never hold one."""
    from gemvtune.kernels.families import FAMILIES
    from gemvtune.model.zerotrial import candidates
    from gemvtune.runtime.table import load_table, record
    from gemvtune.tuning.search_options import SearchOptions
    from gemvtune.tuning.searcher import family_domains
    from gemvtune.tuning.tuneplan import sample_valid

    with_pdl = [f for f, fam in FAMILIES.items() if "pdl" in fam.domains]
    assert set(with_pdl) >= {"gemv", "mma", "fp8mma"}
    for f in with_pdl:
        fam = FAMILIES[f]
        space = family_domains(SearchOptions(), f)
        assert space["pdl"] == ("off",), f
        assert {k: v for k, v in space.items() if k != "pdl"} == {k: v for k, v in fam.domains.items() if k != "pdl"}
        assert fam.config_cls(pdl="on").chain_only().startswith("pdl=on is chosen in a model's chain")
        assert not fam.config_cls().chain_only()
    assert GemvConfig(pdl="chain4").chain_only() and GemvConfig(pdl="early8").chain_only()
    assert not any(c.chain_only() for c in sample_valid("gemv", Shape(4096, 4096), 300))
    pdl = GemvConfig(vec="half8", pdl="on")
    win = {"family": "gemv", "config": pdl.to_dict(), "label": pdl.label, "us": 5.0, "spread": 0.01}
    record(tmp_path / "t.json", Shape(1024, 4096), {"winner": win, "baselines": {"cublas-torch": {"us": 8.0}}},
           {"name": "NVIDIA H200", "compute_capability": "9.0"})
    table = load_table(tmp_path / "t.json", costmodel=None)   # a table with a PDL winner of an isolated search
    cands = candidates(table, Shape(2048, 4096))
    assert cands and GemvConfig(vec="half8") in cands and not any(c.chain_only() for c in cands)


def test_a_pdl_winner_is_no_incumbent_of_a_new_search(tmp_path):
    """A re-search weighs its finds against what the table holds (``search_run.incumbents``), but never against a PDL
    winner of an earlier search: that one would win the confirmation again on the same isolated timing."""
    from gemvtune.runtime.table import record
    from gemvtune.tuning.search_run import incumbents

    pdl, plain = GemvConfig(vec="half8", pdl="on"), GemvConfig(vec="half8")
    rec = {"family": "gemv", "config": pdl.to_dict(), "label": pdl.label, "us": 5.0, "spread": 0.01}
    best = {"family": "gemv", "config": plain.to_dict(), "label": plain.label, "us": 6.0, "spread": 0.01}
    record(tmp_path / "t.json", Shape(1024, 4096), {"winner": rec, "gemv": best}, {"name": "NVIDIA H200"})
    assert incumbents(tmp_path / "t.json", Shape(1024, 4096)) == (plain,)
