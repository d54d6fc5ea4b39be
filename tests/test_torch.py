"""The PyTorch drop-in (gemvtune.runtime.torch_linear): swap/restore and the fallback on the CPU; on a GPU
(marked gpu) a transformer block at Llama-3-8B widths through the committed H200 table, eager and in
a CUDA graph."""

import subprocess
import sys

import pytest
from conftest import ROOT

torch = pytest.importorskip("torch", reason="torch is not installed (the PyTorch drop-in needs it)")
nn = torch.nn
F = torch.nn.functional

from gemvtune.kernels.gemv import GemvConfig  # noqa: E402
from gemvtune.runtime import torch_op  # noqa: E402
from gemvtune.runtime.route import Route  # noqa: E402
from gemvtune.runtime.table import load_table  # noqa: E402
from gemvtune.runtime.torch_linear import GemvLinear, explain, format_explain, restore_linears, swap_linears  # noqa: E402

TABLE = ROOT / "results" / "nvidia-h200" / "table.json"


class Block(nn.Module):
    """Attention (q/k/v/o, bias on q as in Qwen) and a gated MLP (gate/up/down) with RMS norms. The
    output is attention + MLP without the input residual, so every part of it comes from linears."""

    def __init__(self, hidden: int = 4096, ffn: int = 14336, heads: int = 32):
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(hidden, hidden, bias=True)
        self.k = nn.Linear(hidden, hidden, bias=False)
        self.v = nn.Linear(hidden, hidden, bias=False)
        self.o = nn.Linear(hidden, hidden, bias=False)
        self.gate = nn.Linear(hidden, ffn, bias=False)
        self.up = nn.Linear(hidden, ffn, bias=False)
        self.down = nn.Linear(ffn, hidden, bias=False)
        with torch.no_grad():
            self.q.bias.uniform_(-0.5, 0.5)

    @staticmethod
    def _norm(x):
        return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype)

    def forward(self, x):  # x [b, t, hidden]
        b, t, h = x.shape
        xn = self._norm(x)
        q, k, v = (f(xn).view(b, t, self.heads, h // self.heads).transpose(1, 2) for f in (self.q, self.k, self.v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, h)
        a = self.o(a)
        an = self._norm(a)
        return a + self.down(F.silu(self.gate(an)) * self.up(an))


def _small():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(),
                         nn.ModuleDict({"a": nn.Linear(16, 16, bias=False), "b": nn.Linear(16, 4)}))


def _forward(m, x):
    x = m[1](m[0](x))
    return m[2]["b"](m[2]["a"](x))


@pytest.fixture(scope="module")
def table():
    return load_table(TABLE)


def test_import_gemvtune_does_not_import_torch():
    code = ("import sys, gemvtune; assert 'torch' not in sys.modules; "
            "gemvtune.swap_linears; assert 'torch' in sys.modules; print('ok')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


def test_swap_restore_identity_and_cpu_fallback(table):
    m = _small()
    originals = {n: mod for n, mod in m.named_modules() if isinstance(mod, nn.Linear)}
    weights = {n: (mod.weight, mod.weight.data_ptr(), mod.bias) for n, mod in originals.items()}
    keys = list(m.state_dict())
    x = torch.randn(3, 5, 8)
    ref = _forward(m, x)

    names = swap_linears(m, table)
    assert sorted(names) == sorted(originals) == ["0", "2.a", "2.b"]
    for n in names:
        g = m.get_submodule(n)
        assert isinstance(g, GemvLinear) and g.original is originals[n]
        assert g.weight is weights[n][0] and g.weight.data_ptr() == weights[n][1]  # no copy
        assert g.bias is weights[n][2]
    assert list(m.state_dict()) == keys                       # same keys: checkpoints still load
    assert sum(1 for _ in m.parameters()) == sum(1 for mod in originals.values() for _ in mod.parameters())
    assert torch.equal(_forward(m, x), ref)                   # CPU: F.linear, bit for bit
    assert table._dispatch is None and not torch_op._FAST     # the GPU path was never touched

    assert sorted(restore_linears(m)) == sorted(originals)
    for n, mod in originals.items():
        assert m.get_submodule(n) is mod                      # the very same objects are back
    assert torch.equal(_forward(m, x), ref)
    assert restore_linears(m) == []


def test_fallback_matches_f_linear_for_dtypes_and_shapes(table):
    torch.manual_seed(1)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        lin = nn.Linear(32, 24).to(dtype)
        g = GemvLinear(lin, table)
        for shape in ((32,), (1, 32), (4, 32), (2, 3, 32), (20, 32)):
            x = torch.randn(shape).to(dtype)
            with torch.no_grad():
                assert torch.equal(g(x), F.linear(x, lin.weight, lin.bias)), (dtype, shape)
    # autograd keeps working (F.linear) and reaches the shared Parameters
    lin = nn.Linear(8, 4)
    g = GemvLinear(lin, table)
    g(torch.randn(2, 8)).sum().backward()
    assert lin.weight.grad is not None and lin.weight.grad.shape == (4, 8)


def test_filter_and_shared_modules(table):
    m = _small()
    seen = []
    names = swap_linears(m, table, filter=lambda name, mod: seen.append((name, type(mod))) or mod.bias is not None)
    assert names == ["0", "2.b"]
    assert isinstance(m[2]["a"], nn.Linear) and not isinstance(m[2]["a"], GemvLinear)
    assert ("2.a", nn.Linear) in seen
    assert swap_linears(m, table) == ["2.a"]                 # the rest are already swapped
    restore_linears(m)

    shared = nn.Linear(8, 8)
    outer = nn.ModuleDict({"x": shared, "y": nn.Sequential(shared)})
    assert sorted(swap_linears(outer, table)) == ["x", "y.0"]
    assert outer["x"] is outer["y"][0] and outer["x"].original is shared
    restore_linears(outer)
    assert outer["x"] is shared and outer["y"][0] is shared


def test_subclasses_and_root_are_left_alone(table):
    class MyLinear(nn.Linear):
        pass

    m = nn.Sequential(MyLinear(4, 4), nn.MultiheadAttention(8, 2))
    assert swap_linears(m, table) == []                      # out_proj is a Linear subclass
    root = nn.Linear(4, 4)
    assert swap_linears(root, table) == []
    with pytest.raises(TypeError):
        GemvLinear(nn.Conv1d(2, 2, 1), table)


class _FakeTable:
    """Routes every n in ``tuned`` to a tuned kernel, the rest to cuBLAS (like a table's measurements)."""

    def __init__(self, tuned=range(1, 17)):
        self.tuned = set(tuned)

    def route(self, M, d, n, framework="torch", out="fp32", dtype="fp16"):
        if n in self.tuned:
            return Route("tuned", GemvConfig(), f"tuned at n={n}", 1.0, 2.0)
        return Route("cublas", None, f"cuBLAS at n={n}", 3.0, 2.0)


class _HostPlan:
    """A plan whose launch computes on host memory through the raw pointers it is given (CPU tensors
    have real host addresses), so the pointer, shape and epilogue plumbing of run_linear is checked."""

    def __init__(self, M, d, n, bias, dtype="fp16"):
        self.M, self.d, self.n, self.bias, self.dtype, self.calls = M, d, n, bias, dtype, []

    def launch(self, W, x, y, bias, stream):
        import ctypes

        import numpy as np

        from gemvtune.device.elems import from_float32, to_float64

        def view(ptr, count):
            a = np.ctypeslib.as_array((ctypes.c_uint16 * count).from_address(ptr))
            return a.view(np.float16) if self.dtype == "fp16" else a   # BF16: the bits

        def vals(ptr, count):
            return to_float64(view(ptr, count), self.dtype)

        w = vals(W, self.M * self.d).reshape(self.M, self.d)
        xv = vals(x, self.n * self.d).reshape(self.n, self.d)
        acc = xv @ w.T + (vals(bias, self.M) if bias else 0.0)
        view(y, self.n * self.M)[:] = from_float32(acc.reshape(-1).astype(np.float32), self.dtype)
        self.calls.append((W, x, y, bias))


def test_run_linear_plumbing_shapes_bias_and_strides(monkeypatch):
    """run_linear on host tensors with a host 'plan': flattening, fresh output, bias, strided x."""
    plans = {}

    def fake_plan(tid, table, config, M, d, n, bias, out, dev, stream, dtype):
        assert out == dtype and isinstance(config, GemvConfig)
        return plans.setdefault((M, d, n, bias, dtype), _HostPlan(M, d, n, bias, dtype))

    monkeypatch.setattr(torch_op, "_plan", fake_plan)
    monkeypatch.setattr(torch_op, "_raw_stream", lambda dev: 0)
    table = _FakeTable(tuned={1, 3, 4})
    torch.manual_seed(2)
    for bias, tdt in ((True, torch.float16), (False, torch.float16), (True, torch.bfloat16)):
        lin = nn.Linear(16, 8, bias=bias).to(tdt)
        b = lin.bias.detach() if bias else None
        w = lin.weight.detach()
        for shape in ((16,), (1, 16), (1, 1, 16), (3, 16), (2, 2, 16)):
            x = torch.randn(shape).to(tdt)
            y = torch_op.run_linear(x, w, b, table)
            ref = F.linear(x.float(), w.float(), b.float() if bias else None)
            assert y.shape == shape[:-1] + (8,) and y.dtype == tdt
            assert torch.allclose(y.float(), ref, atol=2e-2 if tdt == torch.float16 else 6e-2), shape
        x = torch.randn(16, 2).to(tdt)[:, 0]                      # strided: copied to a contiguous x first
        assert torch.allclose(torch_op.run_linear(x, w, b, table).float(),
                              F.linear(x.float(), w.float(), b.float() if bias else None), atol=6e-2)
    assert {k[4] for k in plans} == {"fp16", "bf16"}
    calls = sum(len(p.calls) for p in plans.values())
    y = torch_op.run_linear(torch.randn(2, 16).to(w.dtype), w, None, table)  # n = 2: cuBLAS route, F.linear
    assert y.shape == (2, 8) and sum(len(p.calls) for p in plans.values()) == calls
    torch_op.run_linear(torch.randn(17, 16).to(w.dtype), w, None, table)    # n = 17 > 16: F.linear
    assert sum(len(p.calls) for p in plans.values()) == calls


def test_layer_routes_per_batch_size_come_from_the_table():
    g = GemvLinear(nn.Linear(16, 8).half(), _FakeTable(tuned={1, 2, 8}), max_batch=8)
    for dt in (torch.float16, torch.bfloat16):
        assert [n for n in range(1, 9) if g._tuned[dt][n]] == [1, 2, 8] and len(g._tuned[dt]) == 9
    assert set(g._tuned) == {torch.float16, torch.bfloat16}


def test_op_fake_implementation_and_shape_rules():
    """The fake (meta) implementation gives torch.compile the output's shape and dtype."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    op = torch.ops.gemvtune.linear
    w = torch.empty(24, 32, device="meta", dtype=torch.float16)
    for xs in ((32,), (1, 32), (4, 32), (2, 3, 32)):
        y = op(torch.empty(xs, device="meta", dtype=torch.float16), w, None, 0)
        assert y.shape == xs[:-1] + (24,) and y.dtype == torch.float16 and y.device.type == "meta"
    with FakeTensorMode():
        x = torch.empty(2, 32, device="cuda", dtype=torch.float16)
        y = op(x, torch.empty(24, 32, device="cuda", dtype=torch.float16),
               torch.empty(24, device="cuda", dtype=torch.float16), 0)
        assert y.shape == (2, 24) and y.device.type == "cuda" and y.dtype == torch.float16
    with pytest.raises(Exception, match="does not match"):
        op(torch.empty(2, 31, device="meta", dtype=torch.float16), w, None, 0)
    with pytest.raises(Exception, match="bias"):
        op(torch.empty(2, 32, device="meta", dtype=torch.float16), w,
           torch.empty(23, device="meta", dtype=torch.float16), 0)
    assert torch_op.register_table(w) == torch_op.register_table(w)      # one id per table object


def test_explain_says_what_runs_and_why(monkeypatch):
    monkeypatch.setattr(GemvLinear, "static_reason", lambda self: "" if self.weight.dtype == torch.float16
                        else "weight is float32; the tuned kernels are FP16")
    m = nn.Sequential(nn.Linear(16, 8).half(), nn.Linear(8, 8).half(), nn.Linear(8, 4))
    swap_linears(m, _FakeTable(tuned={1}), filter=lambda name, mod: name != "1")
    rows = {r["name"]: r for r in explain(m, n=1)}
    assert rows["0"]["route"] == "tuned" and rows["0"]["tuned_us"] == 1.0
    assert rows["1"]["route"] == "F.linear" and "not swapped" in rows["1"]["why"]
    assert rows["2"]["route"] == "F.linear" and "float32" in rows["2"]["why"]
    assert {r["name"]: r["route"] for r in explain(m, n=2)}["0"] == "cublas"
    text = format_explain(explain(m))
    assert text.startswith("3 linear layers: 1 tuned, 2 F.linear") and "8x16" in text
    with pytest.raises(ValueError):
        explain(m, n=17)


# ---------------------------------------------------------------------------------------------- GPU

def _close(y, ref, tol=2e-2):
    err = (y.float() - ref.float()).abs().max().item()
    scale = ref.float().abs().max().item()
    assert scale > 0 and err <= tol * scale, (err, scale)
    return err / scale


def _h200_table():
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    table = load_table(TABLE)
    if torch.cuda.get_device_name() != table.gpu.get("name"):
        pytest.skip(f"the committed table is for {table.gpu.get('name')}, this is {torch.cuda.get_device_name()}")
    return table


@pytest.fixture(scope="module")
def block():
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    torch.manual_seed(0)
    with torch.device("cuda"):
        return Block().half().eval()


def _spy(monkeypatch):
    """Records every launch of a tuned kernel (any LaunchPlan) by (M, d, n)."""
    from gemvtune.device.plan import LaunchPlan

    calls = []
    real = LaunchPlan.launch

    def launch(self, *args, **kw):
        calls.append((self.spec.shape.M, self.spec.shape.d, self.spec.shape.n))
        return real(self, *args, **kw)

    monkeypatch.setattr(LaunchPlan, "launch", launch)
    return calls


def _expected_tuned(block, n):
    return sorted((m.out_features, m.in_features, n) for m in block.modules()
                  if isinstance(m, GemvLinear) and m._tuned[m.weight.dtype][n])


@pytest.mark.gpu
@pytest.mark.parametrize("bt", [(1, 1), (2, 2)], ids=["n1", "n4"])
def test_block_matches_and_captures_in_a_cuda_graph(block, bt, monkeypatch):
    table = _h200_table()
    calls = _spy(monkeypatch)
    x = torch.randn(*bt, 4096, device="cuda", dtype=torch.float16)
    n = bt[0] * bt[1]
    with torch.no_grad():
        ref = block(x)
        names = swap_linears(block, table)
        try:
            assert sorted(names) == ["down", "gate", "k", "o", "q", "up", "v"]
            y = block(x)
            want = _expected_tuned(block, n)
            assert sorted(calls) == want and want, (calls, format_explain(explain(block, n)))
            assert y.shape == ref.shape and y.dtype == torch.float16
            _close(y, ref)
            one = block.q(x)                                   # a single layer with bias, tighter
            _close(one, F.linear(x, block.q.weight, block.q.bias), 1e-2)

            # CUDA graph: warm-up on a side stream (as PyTorch documents), capture, replay new input
            static_x = x.clone()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    block(static_x)
            torch.cuda.current_stream().wait_stream(side)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                static_y = block(static_x)
            for _ in range(2):
                x2 = torch.randn_like(x)
                static_x.copy_(x2)
                g.replay()
                torch.cuda.synchronize()
                restore_linears(block)
                ref2 = block(x2)
                swap_linears(block, table)
                _close(static_y, ref2)
                assert not torch.equal(ref2, ref)
        finally:
            restore_linears(block)


@pytest.mark.gpu
def test_gpu_fallbacks(block, monkeypatch):
    table = _h200_table()
    calls = _spy(monkeypatch)
    with torch.no_grad():
        swap_linears(block, table)
        try:
            big = torch.randn(3, 6, 4096, device="cuda", dtype=torch.float16)   # n = 18 > 16
            y = block.o(big)
            assert torch.equal(y, F.linear(big, block.o.weight, block.o.bias)) and not calls
            lin = nn.Linear(4096, 4096).cuda()                                  # FP32 on the GPU
            g = GemvLinear(lin, table)
            x32 = torch.randn(4096, device="cuda")
            assert torch.equal(g(x32), F.linear(x32, lin.weight, lin.bias)) and not calls
            assert [r["route"] for r in explain(nn.Sequential(g))] == ["F.linear"]
            x = torch.randn(1, 4096, device="cuda", dtype=torch.float16)
            with torch.enable_grad():                                          # autograd: F.linear
                block.o.weight.requires_grad_(True)
                assert block.o(x).requires_grad and not calls
                block.o.weight.requires_grad_(False)
            strided = torch.randn(4096, 2, device="cuda", dtype=torch.float16)[:, 0]
            _close(block.o(strided), F.linear(strided, block.o.weight), 1e-2)  # copied, then tuned
            assert calls == [(4096, 4096, 1)]
            # a shape the table lacks, without a cost model: cuBLAS, and explain says so
            lin1000 = nn.Linear(4096, 1000, bias=False).half().cuda()
            odd = GemvLinear(lin1000, load_table(TABLE, costmodel=None))
            assert torch.equal(odd(x), F.linear(x, odd.weight)) and calls == [(4096, 4096, 1)]
            assert "not in the table" in explain(nn.Sequential(odd))[0]["why"]
            # with the committed cost model: its zero-trial pick where predicted faster than cuBLAS, else cuBLAS
            if table.costmodel is not None:
                odd = GemvLinear(lin1000, table)
                route = table.route(1000, 4096, 1)
                _close(odd(x), F.linear(x, odd.weight), 1e-2)
                assert calls[1:] == ([(1000, 4096, 1)] if route.tuned else [])
                assert "cost model" in explain(nn.Sequential(odd))[0]["why"]
        finally:
            restore_linears(block)


@pytest.mark.gpu
def test_opcheck():
    table = _h200_table()
    tid = torch_op.register_table(table)
    torch.manual_seed(5)
    for (M, d), n, bias in (((4096, 4096), 1, False), ((4096, 4096), 2, True), ((1024, 4096), 1, True),
                            ((4096, 14336), 8, False), ((14336, 4096), 16, False)):
        w = torch.randn(M, d, device="cuda", dtype=torch.float16) / d ** 0.5
        b = torch.randn(M, device="cuda", dtype=torch.float16) if bias else None
        x = torch.randn(n, d, device="cuda", dtype=torch.float16)
        torch.library.opcheck(torch.ops.gemvtune.linear.default, (x, w, b, tid))
        _close(torch.ops.gemvtune.linear(x, w, b, tid), F.linear(x, w, b), 1e-2)


class _Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(4096, 14336, bias=False)
        self.down = nn.Linear(14336, 4096, bias=True)
        self.q = nn.Linear(4096, 4096, bias=True)

    def forward(self, x):
        return self.q(x) + self.down(F.silu(self.up(x)))


@pytest.mark.gpu
def test_torch_compile_fullgraph_and_reduce_overhead_capture_the_tuned_kernels(monkeypatch):
    table = _h200_table()
    torch.manual_seed(6)
    with torch.device("cuda"):
        m = _Mlp().half().eval()
    x = torch.randn(1, 4096, device="cuda", dtype=torch.float16)
    with torch.no_grad():
        ref = m(x)
        swap_linears(m, table)
        assert all(m_._tuned[torch.float16][1] for m_ in m.modules() if isinstance(m_, GemvLinear))
        graphs = []

        def backend(gm, example_inputs):
            graphs.append(gm)
            return gm.forward

        torch._dynamo.reset()
        y = torch.compile(m, backend=backend, fullgraph=True)(x)         # fullgraph: no graph break
        ops = [n.target for g in graphs for n in g.graph.nodes if n.op == "call_function"]
        ours = [t for t in ops if t in (torch.ops.gemvtune.linear, torch.ops.gemvtune.linear.default)]
        assert len(graphs) == 1 and len(ours) == 3, ops                  # one graph, the op in it
        _close(y, ref)

        torch._dynamo.reset()
        calls = _spy(monkeypatch)
        cm = torch.compile(m, mode="reduce-overhead", fullgraph=True)
        for _ in range(3):                                                 # warm-up, record, replay
            y = cm(x)
        warm = len(calls)
        for _ in range(3):
            x2 = torch.randn_like(x)
            y = cm(x2)
            torch.cuda.synchronize()
            _close(y, F.linear(x2, m.q.weight, m.q.bias)
                   + F.linear(F.silu(F.linear(x2, m.up.weight)), m.down.weight, m.down.bias))
        assert warm > 0 and len(calls) == warm, "replays must not come back to Python: the graph holds the kernels"
        torch._dynamo.reset()
        restore_linears(m)
