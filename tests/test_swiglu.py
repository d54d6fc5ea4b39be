"""SwiGLU MLPs in one launch, the PyTorch side: the group route with SwiGLU (gemvtune.runtime.grouproute
choose_swiglu: only configs with an even number of rows per block, never slower than the plain grouped launch or
the members alone), the MLP form read from a forward's source (gemvtune.runtime.gatedmlp), swap_linears(group=True)
replacing each SwiGLU MLP by a GemvSwiGLUMLP holding the same children (state_dict unchanged) and restore_linears
putting the very module objects back (reswap too), the wrapper's fallback equal to stock, the op gemvtune::swiglu
(CPU, fake, opcheck, torch.compile(fullgraph=True)), candidates not fused and why, explain's rows and its note on
the residual adds. GPU (marked gpu): the op against float64 for n = 1 and 3."""

import ctypes

import pytest
from conftest import ROOT

torch = pytest.importorskip("torch", reason="torch is not installed (the PyTorch drop-in needs it)")
transformers = pytest.importorskip("transformers", reason="transformers is not installed (pip install 'gemvtune[hf]')")
nn = torch.nn
F = torch.nn.functional

from test_groups import CFG, MODELS, _entry, _swapped, hand_table, tiny  # noqa: E402

from gemvtune.kernels.gemv import GemvConfig  # noqa: E402
from gemvtune.kernels.group import GroupShape  # noqa: E402
from gemvtune.runtime import grouproute, torch_group, torch_op, torch_swiglu  # noqa: E402
from gemvtune.runtime.gatedmlp import find_swiglu, is_silu, mlp_form  # noqa: E402
from gemvtune.runtime.grouproute import GroupRoute, choose_group, choose_swiglu  # noqa: E402
from gemvtune.runtime.route import MARGIN  # noqa: E402
from gemvtune.runtime.table import load_table  # noqa: E402
from gemvtune.runtime.torch_linear import GemvLinear, explain, format_explain, restore_linears, swap_linears  # noqa: E402
from gemvtune.runtime.torch_mlp import GemvSwiGLUMLP  # noqa: E402

TABLE = ROOT / "results" / "nvidia-h200" / "table.json"
ODD = GemvConfig(block=128, vec="half8", tpr=128)     # 1 row per block: cannot pair a gate row with its up row
GU = GroupShape((256, 256), 128)                       # gate/up, fused 512x128


# ------------------------------------------------------------------------------------------------- the route

def _fused(us, cfg=CFG, spread=0.001, best=None):
    e = _entry(512, 128, tuned=us, cublas=100.0, spread=spread)
    e["winner"]["config"] = cfg.to_dict()
    if best is not None:   # the gemv family's best, beside the winner
        e["gemv"] = {"family": "gemv", "config": best[1].to_dict(), "us": best[0], "spread": 0.001, "status": "ok"}
    return e


MEMBER = _entry(256, 128, tuned=6.0, cublas=7.0)


def test_swiglu_needs_a_config_that_pairs_rows_and_beats_the_members():
    r = choose_swiglu(hand_table(_fused(10.0), MEMBER), GU)
    assert r.grouped and r.config == CFG and (r.grouped_us, r.separate_us) == (10.0, 12.0)
    assert "SwiGLU grouped 10.00" in r.why and "no slower than the plain grouped launch 10.00" in r.why
    assert choose_swiglu(hand_table(_fused(10.0), MEMBER), GU).grouped
    r = choose_swiglu(hand_table(_fused(10.0, ODD), MEMBER), GU)           # the only record: odd rows per block
    assert r.kind == "separate" and "even number of rows per block" in r.why
    assert choose_group(hand_table(_fused(10.0, ODD), MEMBER), GU).grouped   # (the plain group can run it)
    near = 12.0 * (1 - MARGIN / 2)
    assert not choose_swiglu(hand_table(_fused(near), MEMBER), GU).grouped  # within the margin of the members
    r = choose_swiglu(hand_table(_entry(1024, 128, tuned=1.0)), GroupShape((512, 512), 128))
    assert r.kind == "separate" and "member 512x128" in r.why              # a member not measured


def test_swiglu_is_never_slower_than_the_plain_grouped_launch():
    t = hand_table(_fused(9.0, ODD, best=(10.0, CFG)), MEMBER)              # plain: the odd config at 9.0
    plain, sw = choose_group(t, GU), choose_swiglu(t, GU)
    assert plain.grouped and plain.config == ODD and plain.grouped_us == 9.0
    assert sw.kind == "separate" and sw.grouped_us == 10.0 and "plain grouped launch 9.00" in sw.why
    t = hand_table(_fused(9.0, CFG, best=(9.0, ODD)), MEMBER)               # the same time: SwiGLU (a tie)
    assert choose_swiglu(t, GU).grouped and choose_swiglu(t, GU).config == CFG


def test_swiglu_routes_are_cached_apart_and_checked():
    t = hand_table(_fused(10.0, ODD), MEMBER)
    assert choose_group(t, GU).grouped and not choose_swiglu(t, GU).grouped
    assert choose_group(t, GU, swiglu=True) is choose_swiglu(t, GU)
    r = choose_swiglu(t, GroupShape((256, 128, 128), 128))
    assert r.kind == "separate" and "two members of equal rows" in r.why
    with pytest.raises(TypeError):
        choose_group(t, GU, swiglu=1)
    with pytest.raises(TypeError):
        choose_swiglu(t, (256, 256))


def test_the_committed_h200_table_fuses_llama_3_8b_gate_up_at_n1_fp16():
    """Its fused GEMV record of 28672x4096 has 2 rows per block: SwiGLU runs it (the same record as the plain
    group). BF16 stays separate (the record's spread, 9.5%), and at n=8 no GEMV record pairs rows."""
    t = load_table(TABLE, costmodel=None)
    r = {(n, dt): choose_swiglu(t, GroupShape((14336, 14336), 4096, n, dt)) for n in (1, 8) for dt in ("fp16", "bf16")}
    assert [k for k, v in r.items() if v.grouped] == [(1, "fp16")]
    assert r[(1, "fp16")].config.rows_per_block % 2 == 0
    assert r[(1, "fp16")].grouped_us == choose_group(t, GroupShape((14336, 14336), 4096)).grouped_us
    assert "even number of rows" in r[(8, "fp16")].why and "not faster" in r[(1, "bf16")].why


# -------------------------------------------------------------------------------------- the form, by source

def _src(body, params="self, x"):
    return f"def forward({params}):\n" + "".join(f"    {line}\n" for line in body.splitlines())


KIDS = ("gate", "up", "down", "act", "drop")


@pytest.mark.parametrize("body, form", [
    ("return self.down(self.act(self.gate(x)) * self.up(x))", ("gate", "up", "down", "act", "", False)),
    ("return self.down(self.up(x) * self.act(self.gate(x)))", ("gate", "up", "down", "act", "", True)),
    ("d = self.down(self.act(self.gate(x)) * self.up(x))\nreturn d", ("gate", "up", "down", "act", "", False)),
    ("g = self.act(self.gate(x))\nu = self.up(x)\nreturn self.down(g * u)", ("gate", "up", "down", "act", "", False)),
    ("u = self.up(x)\ng = self.act(self.gate(x))\nh: int = g * u\nreturn self.down(h)",
     ("gate", "up", "down", "act", "", True)),
    ('"""doc"""\nreturn self.down(F.silu(self.gate(x)) * self.up(x))', ("gate", "up", "down", "", "F.silu", False)),
    ("return self.gate(self.act(self.down(x)) * self.up(x))", ("down", "up", "gate", "act", "", False)),  # by role
])
def test_the_swiglu_form(body, form):
    f = mlp_form(_src(body), KIDS)
    assert f.found, f.why
    assert (f.gate, f.up, f.down, f.act, f.act_path, f.up_first) == form


@pytest.mark.parametrize("body, params, why", [
    ("return self.down(self.act(self.gate(x) * self.up(x)))", "self, x", "not a product"),
    ("return self.down(self.act(self.gate(x)) * self.up(x) + 1)", "self, x", "not a product"),
    ("return self.down(self.drop(self.act(self.gate(x)) * self.up(x)))", "self, x", "not a product"),
    ("return self.down(self.act(self.gate(x)) * self.up(x)) + x", "self, x", "does not return a call"),
    ("return self.down(self.act(self.gate(x)) * self.up(y))", "self, x, y", "exactly (self, x)"),
    ("return self.down(self.act(self.gate(x)) * self.up(x))", "self, x, **kw", "exactly (self, x)"),
    ("return self.down(self.act(self.gate(x)) + self.up(x))", "self, x", "not a product"),
    ("return self.down(self.act(self.gate(x)) * self.gate(x))", "self, x", "the same child is used twice"),
    ("return self.down(self.act(self.gate(x), True) * self.up(x))", "self, x", "not act(self.<gate>(x))"),
    ("return self.down(self.act(self.gate(x.float())) * self.up(x))", "self, x", "not act(self.<gate>(x))"),
    ("return self.down(self.act(self.gate(x)) * self.up(x), scale=2)", "self, x", "does not return a call"),
    ("x = x * 2\nreturn self.down(self.act(self.gate(x)) * self.up(x))", "self, x", "assigns x"),
    ("g = self.act(self.gate(x))\nreturn self.down(g * g)", "self, x", "g is used 2 times"),
    ("g = self.act(self.gate(x))\nu = self.up(x)\nreturn self.down(g * self.up(x))", "self, x", "u is used 0 times"),
    ("print(x)\nreturn self.down(self.act(self.gate(x)) * self.up(x))", "self, x", "not an assignment"),
    ("if x is None:\n    return x\nreturn self.down(self.act(self.gate(x)) * self.up(x))", "self, x",
     "not an assignment"),
    ("self.down(self.act(self.gate(x)) * self.up(x))", "self, x", "does not end with returning"),
    ("return self.down(self.act(self.gate(x)) * self.up(x))", "self, x=None", "exactly (self, x)"),
])
def test_what_is_not_the_form_says_why(body, params, why):
    f = mlp_form(_src(body, params), KIDS)
    assert not f.found and why in f.why and "is not self.<down>" in f.why, f.why


def test_an_unreadable_forward_says_why():
    assert "does not parse" in mlp_form("def forward(self, x):\n  return (\n", KIDS).why
    assert "decorated" in mlp_form("@dec\ndef forward(self, x):\n    return x\n", KIDS).why


# ------------------------------------------------------------------------------------ the modules themselves

class _MLP(nn.Module):
    """A SwiGLU MLP (or not: another activation, other widths, biases) of float32 linears."""

    def __init__(self, act=None, inter=(32, 32), bias=(False, False), d=16):
        super().__init__()
        self.gate = nn.Linear(d, inter[0], bias=bias[0])
        self.up = nn.Linear(d, inter[1], bias=bias[1])
        self.down = nn.Linear(inter[0], d, bias=False)
        self.act = act if act is not None else nn.SiLU()

    def forward(self, x):
        return self.down(self.act(self.gate(x)) * self.up(x))


class _Functional(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1, self.w3, self.w2 = nn.Linear(16, 32, bias=False), nn.Linear(16, 32, bias=False), nn.Linear(32, 16)

    def forward(self, x):
        u = self.w3(x)
        g = F.silu(self.w1(x))
        return self.w2(g * u)


class _LoudSiLU(nn.SiLU):
    def forward(self, input):
        return super().forward(input) * 2


class _WithScale(_MLP):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))


def _with_hook():
    m = _MLP()
    m.gate.register_forward_hook(lambda *a: None)
    return m


def _patched_up():
    m = _MLP()
    m.up.forward = lambda x: F.linear(x, m.up.weight)
    return m


def test_silu_by_type_or_identity_never_by_name():
    from transformers.activations import ACT2FN

    assert is_silu(nn.SiLU()) and is_silu(ACT2FN["silu"]) and is_silu(ACT2FN["swish"]) and is_silu(F.silu)
    assert not is_silu(nn.GELU()) and not is_silu(ACT2FN["gelu"]) and not is_silu(_LoudSiLU())
    assert not is_silu(torch.sigmoid) and not is_silu(nn.Identity())
    s = nn.SiLU()
    s.forward = lambda x: x
    assert not is_silu(s)


@pytest.mark.parametrize("make, why", [
    (_MLP, None),
    (_Functional, None),
    (lambda: _MLP(nn.GELU()), "self.act is GELU, not a SiLU"),
    (lambda: _MLP(transformers.activations.ACT2FN["gelu_pytorch_tanh"]), "not a SiLU"),
    (lambda: _MLP(_LoudSiLU()), "self.act is _LoudSiLU, not a SiLU"),
    (lambda: _MLP(inter=(32, 48)), "out_features differ: gate 32, up 48"),
    (lambda: _MLP(bias=(True, False)), "biases differ"),
    (_with_hook, "hooks that fusing would skip: gate (forward hooks)"),
    (_patched_up, "up's forward is replaced on the instance"),
    (_WithScale, "parameters or buffers of its own (scale)"),
])
def test_find_swiglu_checks_the_modules(make, why):
    f = find_swiglu(make())
    assert (f.why == "") if why is None else (why in f.why), f.why


def test_a_forward_patched_on_the_mlp_or_without_source():
    m = _MLP()
    m.forward = lambda x: x
    assert "replaced on the instance" in find_swiglu(m).why
    ns = {"nn": nn}
    exec("class Made(nn.Module):\n"
         "    def __init__(self):\n        super().__init__(); self.a = nn.Linear(8, 8); self.b = nn.Linear(8, 8)\n"
         "    def forward(self, x):\n        return x\n", ns)
    assert "cannot be read" in find_swiglu(ns["Made"]()).why


# --------------------------------------------------------------- swap_linears(group=True), restore, reswap

def _state(m):
    return {k: (v, v.data_ptr()) for k, v in m.state_dict(keep_vars=True).items()}


def _same_state(a, b):
    return list(a) == list(b) and all(a[k][0] is b[k][0] and a[k][1] == b[k][1] for k in a)


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_swap_fuses_each_mlp_and_restore_gives_back_the_same_objects(kind):
    m = tiny(kind)
    mods = dict(m.named_modules())
    state = _state(m)
    ids = torch.randint(0, 128, (1, 5), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        ref = m(ids).logits
    table = load_table(TABLE, costmodel=None)
    swap_linears(m, table, group=True)
    mlps = [m.model.layers[i].mlp for i in range(2)]
    assert all(type(x) is GemvSwiGLUMLP and x.original is mods[f"model.layers.{i}.mlp"] for i, x in enumerate(mlps))
    assert [n for n, _ in m.named_modules()] == list(mods)                 # the same names, nothing added
    assert _same_state(_state(m), state)                                   # same keys, same tensors, same data
    assert mlps[0].gate_proj is mods["model.layers.0.mlp"].gate_proj and isinstance(mlps[0].gate_proj, GemvLinear)
    assert mlps[0].config is mods["model.layers.0.mlp"].config            # plain attributes carried over
    with torch.no_grad():
        assert torch.equal(m(ids).logits, ref)                             # CPU: the modules, as stock
    assert swap_linears(m, table, group=True) == []                       # again: rebuilt from the originals
    assert type(m.model.layers[0].mlp) is GemvSwiGLUMLP and m.model.layers[0].mlp is not mlps[0]
    m.train()
    restored = restore_linears(m)
    assert len(restored) == 15 and restored.mlps == 2 and restored.groups == 4
    assert all(mod is mods[n] for n, mod in m.named_modules()) and len(dict(m.named_modules())) == len(mods)
    assert mods["model.layers.0.mlp"].training                             # the flag followed the wrapper
    assert _same_state(_state(m), state)
    m.eval()
    back = restored.reswap()
    assert sorted(back) == sorted(restored) and type(m.model.layers[1].mlp) is GemvSwiGLUMLP
    assert m.model.layers[1].mlp.gate_proj._sibling.members == (m.model.layers[1].mlp.gate_proj,
                                                                 m.model.layers[1].mlp.up_proj)
    assert not m.model.layers[1].mlp.training
    with torch.no_grad():
        assert torch.equal(m(ids).logits, ref)
    again = restore_linears(m)
    assert all(mod is mods[n] for n, mod in m.named_modules()) and again.mlps == 2
    assert _same_state(_state(m), state) and not explain(m).groups and not explain(m).notes


def test_reswap_leaves_a_slot_the_caller_changed_alone():
    m = tiny("llama")
    swap_linears(m, load_table(TABLE, costmodel=None), group=True)
    restored = restore_linears(m)
    mine = nn.Linear(64, 64, bias=False)
    m.model.layers[0].self_attn.o_proj = mine
    other = nn.Identity()
    m.model.layers[1].mlp = other
    names = restored.reswap()
    assert "model.layers.0.self_attn.o_proj" not in names and m.model.layers[0].self_attn.o_proj is mine
    assert m.model.layers[1].mlp is other and type(m.model.layers[0].mlp) is GemvSwiGLUMLP


class _Recorder:
    """torch_swiglu.run_swiglu on the CPU: the fallback, each call recorded by (M, d)."""

    def __init__(self):
        self.calls = []

    def __call__(self, x, wg, wu, bg, bu, table, tid=None):
        self.calls.append((int(wg.shape[0]), int(wg.shape[1])))
        return torch_swiglu.swiglu_alone(x, wg, wu, bg, bu)


@pytest.fixture
def forced(monkeypatch):
    """Every SwiGLU route "grouped" (plain groups as the table says) and run_swiglu recording its calls."""
    monkeypatch.setattr(grouproute, "choose_swiglu", lambda table, group, framework="torch", out=None:
                        GroupRoute("grouped", CFG, "forced grouped", 1.0, 2.0))
    rec = _Recorder()
    monkeypatch.setattr(torch_swiglu, "run_swiglu", rec)
    return rec


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_one_swiglu_call_per_mlp_per_forward_matching_stock(forced, kind):
    m, ids, ref = _swapped(kind, mlp_bias=True) if kind == "llama" else _swapped(kind)
    with torch.no_grad():
        assert torch.equal(m(ids).logits, ref)
    assert forced.calls == [(128, 64)] * 2
    forced.calls.clear()
    with torch.enable_grad():                                              # a gradient is needed: the modules
        assert torch.allclose(m(ids).logits, ref) and forced.calls == []
    h = m.model.layers[0].mlp.act_fn.register_forward_pre_hook(lambda *a: None)
    with torch.no_grad():                                                  # a hook on act: layer 0 calls it
        assert torch.equal(m(ids).logits, ref) and forced.calls == [(128, 64)]
    h.remove()
    h = torch.nn.modules.module.register_module_forward_hook(lambda *a: None)
    try:
        forced.calls.clear()
        with torch.no_grad():                                              # a global hook: no MLP fused
            assert torch.equal(m(ids).logits, ref) and forced.calls == []
    finally:
        h.remove()


def test_torch_compile_fullgraph_on_cpu_has_the_swiglu_op(forced):
    m, ids, ref = _swapped()
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    try:
        with torch.no_grad():
            y = torch.compile(m, backend=backend, fullgraph=True)(ids).logits
            ops = [n.target for g in graphs for n in g.graph.nodes if n.op == "call_function"]
            ours = [t for t in ops if t in (torch.ops.gemvtune.swiglu, torch.ops.gemvtune.swiglu.default)]
            assert len(graphs) == 1 and len(ours) == 2, ops
            assert torch.equal(y, ref) and forced.calls == [(128, 64)] * 2
            torch._dynamo.reset()
            assert torch.equal(torch.compile(m, backend="aot_eager", fullgraph=True)(ids).logits, ref)
    finally:
        torch._dynamo.reset()


def test_the_op_on_the_cpu_and_its_fake_implementation():
    op = torch.ops.gemvtune.swiglu
    tid = torch_op.register_table(load_table(TABLE, costmodel=None))
    torch.manual_seed(4)
    x = torch.randn(2, 3, 32, dtype=torch.float16)
    wg, wu = torch.randn(24, 32, dtype=torch.float16), torch.randn(24, 32, dtype=torch.float16)
    bg, bu = torch.randn(24, dtype=torch.float16), torch.randn(24, dtype=torch.float16)
    assert torch.equal(op(x, wg, wu, bg, bu, tid), F.silu(F.linear(x, wg, bg)) * F.linear(x, wu, bu))
    torch.library.opcheck(op.default, (x, wg, wu, bg, bu, tid))
    torch.library.opcheck(op.default, (x, wg, wu, None, None, tid))
    y = op(x.to("meta"), wg.to("meta"), wu.to("meta"), None, None, tid)
    assert tuple(y.shape) == (2, 3, 24) and y.device.type == "meta"
    with pytest.raises(Exception, match="one shape"):
        op(x, wg, wu[:8], None, None, tid)
    with pytest.raises(Exception, match="does not match"):
        op(x[..., :31], wg, wu, None, None, tid)
    with pytest.raises(Exception, match="bias"):
        op(x, wg, wu, bg[:3], None, tid)
    with pytest.raises(Exception, match="no table"):
        op(x, wg, wu, None, None, 10 ** 6)
    assert "CUDA" in torch_swiglu.swiglu_unsupported(x, wg, wu, None, None)


class _HostSwiGLUPlan:
    """A grouped SwiGLU plan whose launch computes silu(g)·u on host memory through the raw pointers it is given."""

    def __init__(self, group, bias):
        self.group, self.bias, self.calls = group, bias, []

    def launch_group(self, Ws, x, ys, biases, stream):
        import numpy as np

        def view(ptr, count):
            return np.ctypeslib.as_array((ctypes.c_uint16 * count).from_address(ptr)).view(np.float16)

        g = self.group
        assert len(Ws) == len(ys) == 2 and ys[0] == ys[1] and (biases is None) == (not self.bias)
        xv = view(x, g.n * g.d).astype(np.float64).reshape(g.n, g.d)
        M = g.Ms[0]
        gu = [xv @ view(Ws[i], M * g.d).astype(np.float64).reshape(M, g.d).T
              + (view(biases[i], M).astype(np.float64) if biases else 0.0) for i in range(2)]
        view(ys[0], g.n * M)[:] = (gu[0] / (1 + np.exp(-gu[0])) * gu[1]).reshape(-1).astype(np.float16)
        self.calls.append((tuple(Ws), x, tuple(ys), biases))


def test_run_swiglu_plumbing_with_a_host_plan(monkeypatch):
    plans = []

    def build(key, config, group, epilogue, dev):
        assert key[0] == "swiglu" and config == CFG and epilogue.swiglu and epilogue.out == "fp16"
        assert group.Ms == (24, 24)
        plans.append(_HostSwiGLUPlan(group, epilogue.bias))
        return plans[-1]

    monkeypatch.setattr(torch_swiglu, "swiglu_unsupported", lambda *a: "")
    monkeypatch.setattr(torch_swiglu, "_group_plan", build)
    monkeypatch.setattr(torch_swiglu, "_raw_stream", lambda dev: 0)
    monkeypatch.setattr(grouproute, "choose_swiglu", lambda table, group, framework="torch", out=None:
                        GroupRoute("grouped" if group.n <= 4 else "separate", CFG, "forced"))
    monkeypatch.setattr(torch_group, "_GROUP_FAST", {})
    monkeypatch.setattr(torch_swiglu, "_GROUP_FAST", torch_group._GROUP_FAST)
    table = hand_table()
    torch.manual_seed(5)
    wg, wu = torch.randn(24, 32, dtype=torch.float16) / 6, torch.randn(24, 32, dtype=torch.float16) / 6
    for bias in (True, False):
        bg, bu = (torch.randn(24, dtype=torch.float16), torch.randn(24, dtype=torch.float16)) if bias else (None, None)
        for shape in ((32,), (1, 32), (3, 32), (2, 2, 32)):
            x = torch.randn(shape, dtype=torch.float16)
            h = torch_swiglu.run_swiglu(x, wg, wu, bg, bu, table)
            ref = torch_swiglu.swiglu_alone(x.double(), wg.double(), wu.double(),
                                            None if bg is None else bg.double(), None if bu is None else bu.double())
            assert h.shape == shape[:-1] + (24,) and h.dtype == torch.float16 and h.is_contiguous()
            assert torch.allclose(h.double(), ref, atol=1e-2, rtol=1e-2), shape
    launched = sum(len(p.calls) for p in plans)
    assert launched == 8
    x = torch.randn(5, 32, dtype=torch.float16)                           # route: separate
    assert torch.equal(torch_swiglu.run_swiglu(x, wg, wu, None, None, table), torch_swiglu.swiglu_alone(x, wg, wu, None, None))
    buf = torch.zeros(24 * 32 + 1, dtype=torch.float16)
    odd = buf[1:].view(24, 32)                                            # not 16-byte aligned
    x = torch.randn(1, 32, dtype=torch.float16)
    assert torch.equal(torch_swiglu.run_swiglu(x, wg, odd, None, None, table),
                       torch_swiglu.swiglu_alone(x, wg, odd, None, None))
    assert sum(len(p.calls) for p in plans) == launched                   # neither launched


# ------------------------------------------------------------------------------------- explain and notes

def test_explain_lists_fused_mlps_and_says_why_others_are_not(forced):
    m, _, _ = _swapped()
    rows = explain(m)
    sw = [g for g in rows.groups if g["kind"] == "swiglu"]
    assert [(g["parent"], g["members"], g["down"], g["act"]) for g in sw] == [
        (f"model.layers.{i}.mlp", ["gate_proj", "up_proj"], "down_proj", "act_fn") for i in range(2)]
    assert sw[0]["shape"] == "128+128x64.bf16" and sw[0]["route"] == "separate" and "weight on cpu" in sw[0]["why"]
    assert len(rows.notes) == 1 and "LlamaDecoderLayer" in rows.notes[0] and "residual" in rows.notes[0]
    text = format_explain(rows)
    assert "2 SwiGLU MLPs" in text and "gate_proj+up_proj -> down_proj 128+128x64.bf16 separate" in text
    assert "note: the residual adds are not fused" in text

    gelu = tiny("llama", hidden_act="gelu")                               # a GELU MLP: not fused, and why
    swap_linears(gelu, load_table(TABLE, costmodel=None), group=True)
    assert not any(isinstance(x, GemvSwiGLUMLP) for x in gelu.modules())
    sw = [g for g in explain(gelu).groups if g["kind"] == "swiglu"]
    assert [g["route"] for g in sw] == ["ungrouped"] * 2 and "self.act_fn is GELUActivation, not a SiLU" in sw[0]["why"]
    assert sw[0]["members"] == ["gate_proj", "up_proj"]
    assert [g["kind"] for g in explain(gelu).groups].count("siblings") == 4   # gate/up still a sibling group

    partial = tiny("llama")                                               # up_proj left out by the filter
    swap_linears(partial, load_table(TABLE, costmodel=None), group=True, filter=lambda n, mod: "up_proj" not in n)
    sw = [g for g in explain(partial).groups if g["kind"] == "swiglu"]
    assert [g["route"] for g in sw] == ["ungrouped"] * 2 and "up_proj not swapped" in sw[0]["why"]


class _Odd(nn.Module):
    """Looks like a gated MLP (three linears of those widths) but computes something else."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(16, 32), nn.Linear(16, 32), nn.Linear(32, 16)

    def forward(self, x):
        return self.c(torch.tanh(self.a(x)) + self.b(x))


def test_a_look_alike_is_reported_and_an_unrelated_module_is_not():
    m = nn.Sequential(_Odd(), _MLP(nn.GELU(), d=16), nn.Linear(16, 16))
    swap_linears(m, load_table(TABLE, costmodel=None), group=True)
    sw = {g["parent"]: g for g in explain(m).groups if g["kind"] == "swiglu"}
    assert sorted(sw) == ["0", "1"] and all(g["route"] == "ungrouped" for g in sw.values())
    assert "not a product" in sw["0"]["why"] and "GELU, not a SiLU" in sw["1"]["why"]
    assert not explain(m).notes                                           # nothing fused: no residual note
    x = torch.randn(2, 16)
    with torch.no_grad():
        y = m(x)
    restore_linears(m)
    with torch.no_grad():
        assert torch.equal(m(x), y)


def test_the_root_module_is_never_replaced_and_explain_says_so():
    m = _MLP()
    swap_linears(m, load_table(TABLE, costmodel=None), group=True)
    sw = [g for g in explain(m).groups if g["kind"] == "swiglu"]
    assert [(g["members"], g["route"]) for g in sw] == [(["gate", "up"], "ungrouped")] and "root" in sw[0]["why"]


def test_swap_without_group_fuses_nothing():
    m = tiny("llama")
    swap_linears(m, load_table(TABLE, costmodel=None))
    assert not any(isinstance(x, GemvSwiGLUMLP) for x in m.modules()) and not explain(m).groups


# ------------------------------------------------------------------------------------------------------ GPU

def _ref64(x, wg, wu, bg, bu):
    """float64 silu(g)·u and each output's scale (``runners.cuda.grouped.swiglu_reference``'s first-order bound)."""
    x64, g64, u64 = x.double(), wg.double(), wu.double()
    g, u = x64 @ g64.T, x64 @ u64.T
    sg, su = (x64 * x64) @ (g64 * g64).T, (x64 * x64) @ (u64 * u64).T
    if bg is not None:
        g, u, sg, su = g + bg.double(), u + bu.double(), sg + bg.double() ** 2, su + bu.double() ** 2
    sig = torch.sigmoid(g)
    silu, dsilu = g * sig, sig * (1 + g * (1 - sig))
    return silu * u, dsilu.abs() * u.abs() * sg.sqrt() + silu.abs() * su.sqrt()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_gpu_the_op_against_float64(dtype, monkeypatch):
    """One launch per call (n = 1 and 3, with and without biases) against float64, within the runner's bound for
    the config's accumulation and output dtype (``error_bound``, with ``swiglu_reference``'s scales). The op allocates
    its output: a NaN tensor of its size is freed just before, so the caching allocator hands that block back."""
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    from gemvtune.device.plan import LaunchPlan
    from gemvtune.runners.timing import error_bound

    tdt = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    gpu = torch.cuda.get_device_name()
    M, d = 512, 256
    entries = [_entry(2 * M, d, n, dtype, tuned=5.0, cublas=9.0) for n in (1, 3)]
    entries += [_entry(M, d, n, dtype, tuned=4.0, cublas=6.0) for n in (1, 3)]
    table = hand_table(*entries, gpu=gpu)
    launches = []
    real = LaunchPlan.launch_group
    monkeypatch.setattr(LaunchPlan, "launch_group",
                        lambda self, *a: launches.append(self.spec.epilogue.swiglu) or real(self, *a))
    tid = torch_op.register_table(table)
    gen = torch.Generator("cuda").manual_seed(7)
    wg = torch.randn(M, d, device="cuda", generator=gen).to(tdt) / 8
    wu = torch.randn(M, d, device="cuda", generator=gen).to(tdt) / 8
    for n in (1, 3):
        assert choose_swiglu(table, GroupShape((M, M), d, n, dtype)).grouped
        for bias in (False, True):
            bg, bu = ((torch.randn(M, device="cuda", generator=gen).to(tdt), torch.randn(M, device="cuda",
                                                                                         generator=gen).to(tdt))
                      if bias else (None, None))
            x = torch.randn(n, d, device="cuda", generator=gen).to(tdt)
            poison = torch.full((n, M), float("nan"), dtype=tdt, device="cuda")
            del poison                                                    # (its block is the next one of the size)
            h = torch.ops.gemvtune.swiglu(x, wg, wu, bg, bu, tid)
            torch.cuda.synchronize()
            ref, scale = _ref64(x, wg, wu, bg, bu)
            err = ((h.double() - ref).norm() / scale.norm()).item()
            assert torch.isfinite(h).all() and err < error_bound(CFG.acc, d, dtype), (n, bias, err)
    assert launches == [True] * 4                                         # one SwiGLU launch per call
