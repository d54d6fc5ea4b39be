"""The route with a re-confirmation (``Entry.reconfirmed``: the entry's kernels and cuBLAS measured again in a fresh
process) and for callers under torch.compile (framework ``torch-compile``: the tuned kernel must also beat the
Inductor time the table records). Synthetic tables (CPU): a re-confirmation that lost sends the call to cuBLAS with
both pairs of numbers in ``why``, one that confirmed keeps the tuned kernel, none keeps the search's rule and says
"not re-confirmed"; Inductor faster or inside the noise sends a compiled caller to F.linear while the eager caller
keeps the tuned kernel; GemvLinear traces the compiled route; explain shows it; the group route compares against
the members' compiled routes."""

import copy

import pytest

from gemvtune.kernels.gemv import GemvConfig
from gemvtune.kernels.group import GroupShape
from gemvtune.kernels.shapes import Shape
from gemvtune.runtime.grouproute import choose_group
from gemvtune.runtime.keys import entry_key
from gemvtune.runtime.route import judge
from gemvtune.runtime.table import Table

CFG = GemvConfig(block=128, vec="half8", tpr=32)
OTHER = GemvConfig(block=256, vec="half8", tpr=64)
DATE = "2026-12-04T10:00:00Z"


def _rec(us, spread=0.005, **kw):
    return {"us": us, "spread": spread, "status": "ok", **kw}


def entry(M=4096, d=4096, n=1, tuned=10.0, cublas=13.0, again=None, inductor=None, again_inductor=None,
          kernel=CFG, spread=0.005):
    """An entry whose winner (``CFG``) ran ``tuned`` µs against cuBLAS's ``cublas`` in the search; ``again``:
    (tuned, cuBLAS) of a re-confirmation of ``kernel`` (a tuned of None: the kernel failed there); ``inductor``:
    the search's Inductor record; ``again_inductor``: the re-confirmation's."""
    e = {"M": M, "d": d, "n": n, "dtype": "fp16", "updated": "2026-12-03T00:00:00Z",
         "winner": {"family": "gemv", "config": CFG.to_dict(), **_rec(tuned, spread)},
         "baselines": {"cublas-torch": _rec(cublas, spread), "cublas": _rec(cublas * 1.05, spread)}}
    if inductor is not None:
        e["baselines"]["inductor"] = _rec(inductor, spread)
    if again is not None:
        t, c = again
        k = {"family": "gemv", "config": kernel.to_dict(), "label": kernel.label}
        k.update(_rec(t, spread, rounds=5) if t is not None else {"status": "wrong", "error": "planted: rel error 1"})
        e["reconfirmed"] = {"kernels": [k], "baselines": {"cublas-torch": _rec(c, spread, rounds=5)}, "rounds": 5,
                            "date": DATE, "pid": 4242, "host": "h200-host",
                            "gpu": {"name": "X", "pci_bus_id": "0000:01:00.0"}}
        if again_inductor is not None:
            e["reconfirmed"]["baselines"]["inductor"] = _rec(again_inductor, spread, rounds=5)
    return e


def table(*entries):
    return Table({"schema": 1, "gpu": {"name": "X"},
                  "entries": {entry_key(Shape(e["M"], e["d"], e["n"], e.get("dtype", "fp16"))): e for e in entries}})


def route(e, framework="torch"):
    return table(e).route(e["M"], e["d"], e["n"], framework, "fp16", "fp16")


# ---- the re-confirmation -------------------------------------------------------------------------------

def test_a_reconfirmation_that_lost_routes_to_cublas_with_both_numbers():
    r = route(entry(tuned=10.0, cublas=13.0, again=(13.5, 13.0)))
    assert not r.tuned and r.kind == "cublas" and r.config is None
    assert "tuned 10.00 µs beats cuBLAS 13.00 µs by 23.1%, beyond" in r.why                  # the search's pair
    assert "re-confirmed in a fresh process on 2026-12-04: cuBLAS 13.00 µs is faster than tuned 13.50 µs" in r.why
    assert r.why.endswith(": cuBLAS runs") and (r.again_tuned_us, r.again_cublas_us) == (13.5, 13.0)
    assert (r.tuned_us, r.cublas_us) == (10.0, 13.0)                                          # the search's numbers
    # a win inside the re-confirmation's noise is no win either (the weaker measurement decides)
    r = route(entry(tuned=10.0, cublas=13.0, again=(12.9, 13.0)))
    assert not r.tuned and "tuned 12.90 µs beats cuBLAS 13.00 µs by 0.8%, inside the noise 1.0%" in r.why


def test_a_reconfirmation_that_confirmed_keeps_the_tuned_kernel():
    r = route(entry(tuned=10.0, cublas=13.0, again=(10.4, 13.1)))
    assert r.tuned and r.config == CFG and "not re-confirmed" not in r.why
    assert "; re-confirmed in a fresh process on 2026-12-04: tuned 10.40 µs beats cuBLAS 13.10 µs by 20.6%, beyond" in r.why
    # the search's own loss is not rescued by a re-confirmation that won
    assert not route(entry(tuned=13.5, cublas=13.0, again=(10.0, 13.0))).tuned


def test_without_a_reconfirmation_the_search_rule_holds_and_says_so():
    r = route(entry(tuned=10.0, cublas=13.0))
    assert r.tuned and r.why.endswith("; not re-confirmed") and r.again_tuned_us is None
    r = route(entry(tuned=12.95, cublas=13.0))                                                # the old rule: a tie
    assert not r.tuned and "not re-confirmed" not in r.why and r.why.endswith("inside the noise 1.0% (spreads 0.5% + "
                                                                              "0.5%): cuBLAS runs")


def test_a_kernel_that_failed_its_reconfirmation_routes_to_cublas():
    r = route(entry(again=(None, 13.0)))
    assert not r.tuned and "re-confirmed in a fresh process on 2026-12-04, the kernel failed (wrong: planted" in r.why


def test_a_reconfirmation_of_other_kernels_or_without_cublas_does_not_count():
    r = route(entry(again=(20.0, 13.0), kernel=OTHER))       # it re-measured another config: the search's rule
    assert r.tuned and "not re-confirmed (the re-confirmation of 2026-12-04 measured other kernels)" in r.why
    e = entry(again=(20.0, 13.0))
    e["reconfirmed"]["baselines"] = {"inductor": _rec(9.0)}
    r = route(e)
    assert r.tuned and "not re-confirmed (the re-confirmation of 2026-12-04 measured no cuBLAS)" in r.why


def test_the_cupy_caller_weighs_the_reconfirmation_s_own_cublas():
    e = entry(tuned=10.0, cublas=13.0, again=(12.9, 12.5))
    e["reconfirmed"]["baselines"]["cublas"] = _rec(14.0)     # cupy.matmul re-measured slower than torch's F.linear
    assert not route(e).tuned and route(e, "cupy").tuned


# ---- the compiled caller and Inductor ---------------------------------------------------------------------

def test_inductor_faster_sends_the_compiled_caller_to_f_linear_and_the_eager_one_stays_tuned():
    for e in (entry(inductor=9.0), entry(again=(10.1, 13.0), again_inductor=9.0)):
        eager, comp = route(e), route(e, "torch-compile")
        assert eager.tuned and not comp.tuned and comp.kind == "inductor" and comp.inductor_us == 9.0
        assert "Inductor 9.00 µs is faster than tuned 10." in comp.why
        assert comp.why.endswith(": F.linear runs (Inductor compiles it)")


def test_inductor_slower_beyond_the_noise_keeps_the_tuned_kernel_for_the_compiled_caller():
    comp = route(entry(inductor=11.0), "torch-compile")
    assert comp.tuned and comp.config == CFG and comp.inductor_us == 11.0
    assert "against Inductor: the search: tuned 10.00 µs beats Inductor 11.00 µs by 9.1%, beyond" in comp.why
    both = entry(inductor=11.0, again=(10.0, 13.0), again_inductor=11.2)
    assert route(both, "torch-compile").tuned


def test_inductor_inside_the_noise_sends_the_compiled_caller_to_f_linear():
    comp = route(entry(inductor=10.3, spread=0.02), "torch-compile")     # 2.9% against spreads 2% + 2%
    assert not comp.tuned and comp.kind == "inductor" and "by 2.9%, inside the noise 4.0%" in comp.why
    assert route(entry(inductor=10.3, spread=0.02)).tuned                 # eager: cuBLAS is 23% slower
    # either measurement inside the noise is enough: the search's record beaten, the re-confirmation's not
    e = entry(inductor=11.0, again=(10.0, 13.0), again_inductor=10.05)
    assert not route(e, "torch-compile").tuned


def test_the_compiled_caller_without_an_inductor_record_keeps_the_eager_rule_and_says_so():
    comp = route(entry(), "torch-compile")
    assert comp.tuned and comp.inductor_us is None
    assert comp.why.endswith("; Inductor not measured (gemvtune check --reconfirm --inductor records it)")
    lost = route(entry(tuned=14.0), "torch-compile")
    assert not lost.tuned and lost.kind == "cublas" and lost.why.endswith(": F.linear runs (Inductor compiles it)")


def test_judge_collects_every_contest():
    e = table(entry(inductor=11.0, again=(10.2, 13.0), again_inductor=11.5)).entry(Shape(4096, 4096))
    v = judge(e, "torch-compile", Shape(4096, 4096), "fp16")
    assert v.wins and v.again.tuned_us == 10.2 and [w for w, _ in v.rivals] == ["the search",
                                                                                 "the re-confirmation of 2026-12-04"]
    assert v.inductor_us == 11.0 and judge(e, "torch", Shape(4096, 4096), "fp16").rivals == ()


# ---- GemvLinear, explain and the group route ----------------------------------------------------------

torch = pytest.importorskip("torch", reason="torch is not installed (the PyTorch drop-in needs it)")


def test_gemv_linear_keeps_the_compiled_route_apart_and_explain_shows_it():
    from gemvtune.runtime.torch_linear import GemvLinear, explain, format_explain

    t = table(entry(M=64, d=128, n=1, inductor=9.0), entry(M=64, d=128, n=2))
    g = GemvLinear(torch.nn.Linear(128, 64).half(), t, max_batch=2)
    assert g._tuned[torch.float16] == (False, True, True)
    assert g._compiled[torch.float16] == (False, False, True)     # n=1: Inductor beat it; n=2: not measured
    row, = explain(torch.nn.Sequential(g), 1)
    assert row["route"] == "F.linear" and row["compiled_route"] is None   # (on the CPU: the weight is not on a GPU)
    g.static_reason = lambda: ""                                 # the route as a GPU weight would get it
    row, = explain(torch.nn.Sequential(g), 1)
    assert row["route"] == "tuned" and row["compiled_route"] == "inductor"
    assert "Inductor 9.00 µs is faster" in row["compiled_why"]
    assert "under torch.compile: inductor (" in format_explain([row])
    assert explain(torch.nn.Sequential(g), 2)[0]["compiled_route"] is None


def test_the_traced_path_reads_the_compiled_route(monkeypatch):
    """What torch.compile traces: the op where the compiled route is tuned (n=2), F.linear where Inductor beat the
    kernel (n=1). On the CPU: x taken for a CUDA tensor and the op stood in for (the GPU test traces it for real)."""
    from gemvtune.runtime import torch_op  # noqa: F401  (registers torch.ops.gemvtune.linear)
    from gemvtune.runtime.torch_linear import GemvLinear

    t = table(entry(M=64, d=128, n=1, inductor=9.0), entry(M=64, d=128, n=2))
    g = GemvLinear(torch.nn.Linear(128, 64).half(), t, max_batch=2)
    seen = []
    monkeypatch.setattr(torch.ops.gemvtune, "linear", lambda x, w, b, tid: seen.append(x.shape[0]) or
                        torch.zeros(x.shape[0], 64, dtype=x.dtype))
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    with torch.no_grad():
        for n in (1, 2):
            assert g._traced(torch.randn(n, 128, dtype=torch.float16)).shape == (n, 64)
    assert seen == [2]


def test_the_group_route_compares_against_the_members_compiled_routes():
    """Members 256x256 and 128x256 tuned at 4.0 and 3.0 µs (7.0 alone); the fused 384x256 at 6.5 groups for eager
    callers. Under torch.compile Inductor runs the 256x256 member in 3.0 µs (6.0 alone): the group is slower."""
    fused = entry(M=384, d=256, tuned=6.5, cublas=9.0)
    members = [entry(M=256, d=256, tuned=4.0, cublas=6.0, inductor=3.0), entry(M=128, d=256, tuned=3.0, cublas=5.0)]
    g = GroupShape((256, 128), 256)
    t = table(fused, *members)
    eager, comp = choose_group(t, g, "torch", "fp16"), choose_group(t, g, "torch-compile", "fp16")
    assert eager.grouped and eager.separate_us == 7.0
    assert not comp.grouped and comp.separate_us == 6.0 and "256x256 Inductor 3.00" in comp.why
    slow = copy.deepcopy(members)
    slow[0]["baselines"]["inductor"]["us"] = 4.5                  # Inductor slower: the members' tuned kernels
    assert choose_group(table(fused, *slow), g, "torch-compile", "fp16").grouped


def test_a_sibling_group_under_torch_compile_follows_the_compiled_group_route():
    from gemvtune.runtime.torch_linear import GemvLinear
    from gemvtune.runtime.torch_siblings import LinearGroup

    fused = entry(M=384, d=256, tuned=6.5, cublas=9.0)
    members = [entry(M=256, d=256, tuned=4.0, cublas=6.0, inductor=3.0), entry(M=128, d=256, tuned=3.0, cublas=5.0)]
    t = table(fused, *members)
    ms = [GemvLinear(torch.nn.Linear(256, M, bias=False).half(), t, max_batch=1) for M in (256, 128)]
    g = LinearGroup("", ["a", "b"], ms, t)
    assert g._grouped[torch.float16] == (False, True) and g._grouped_compiled[torch.float16] == (False, False)
    x = torch.randn(1, 256, dtype=torch.float16)
    with torch.no_grad():
        assert g._runs(x) is not None and g._runs(x, compiled=True) is None
    for m in ms:
        m.static_reason = lambda: ""
    row = g.explain_row(1)
    assert row["route"] == "grouped" and row["compiled_route"] == "separate" and "Inductor 3.00" in row["compiled_why"]
