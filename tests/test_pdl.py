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
