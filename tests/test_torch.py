"""The PyTorch drop-in (gemvtune.torch_linear): swap/restore and the fallback on the CPU; on a GPU
(marked gpu) a transformer block at Llama-3-8B widths through the committed H200 table, eager and in
a CUDA graph."""

import subprocess
import sys
import warnings

import pytest

from conftest import ROOT

torch = pytest.importorskip("torch", reason="torch is not installed (the PyTorch drop-in needs it)")
nn = torch.nn
F = torch.nn.functional

from gemvtune.table import load_table  # noqa: E402
from gemvtune.torch_linear import GemvLinear, restore_linears, swap_linears  # noqa: E402

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
    assert table._dispatch is None                            # the GPU path was never touched

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
    """Stands in for Table.gemv on the CPU: FP32 [M] for x [d], [n, M] for X [n, d], like the dispatcher."""

    def __init__(self):
        self.calls = []

    def gemv(self, W, x, out=None):
        assert x.is_contiguous() and x.dim() in (1, 2) and x.dtype == W.dtype
        self.calls.append(tuple(x.shape))
        return W.float() @ x.float() if x.dim() == 1 else x.float() @ W.float().T


def test_fast_path_shapes_bias_and_cast(monkeypatch):
    """The fast path's plumbing (flatten, FP32 bias, cast, reshape) with the device check bypassed."""
    monkeypatch.setattr(GemvLinear, "_fast", lambda self, x: x.shape[-1] == self.in_features
                        and 1 <= x.numel() // self.in_features <= self.max_batch)
    torch.manual_seed(2)
    fake = _FakeTable()
    for bias in (True, False):
        lin = nn.Linear(16, 8, bias=bias)
        g = GemvLinear(lin.half(), fake)
        for shape, seen in (((16,), (16,)), ((1, 16), (16,)), ((1, 1, 16), (16,)), ((3, 16), (3, 16)),
                            ((2, 2, 16), (4, 16)), ((16, 16), (16, 16))):
            x = torch.randn(shape).half()
            y = g(x)
            ref = (F.linear(x.float(), lin.weight.float(), lin.bias.float() if bias else None)).half()
            assert y.shape == shape[:-1] + (8,) and y.dtype == torch.float16
            assert torch.allclose(y.float(), ref.float(), atol=1e-3), shape
            assert fake.calls[-1] == seen
        x = torch.randn(16, 2).half()[:, 0]                  # strided: copied to a contiguous x first
        assert torch.allclose(g(x).float(), F.linear(x.float(), lin.weight.float(),
                                                     lin.bias.float() if bias else None), atol=1e-2)
    n = len(fake.calls)
    g(torch.randn(17, 16).half())                             # n = 17 > 16: F.linear
    assert len(fake.calls) == n


# ---------------------------------------------------------------------------------------------- GPU

def _close(y, ref, tol=2e-2):
    err = (y.float() - ref.float()).abs().max().item()
    scale = ref.float().abs().max().item()
    assert scale > 0 and err <= tol * scale, (err, scale)
    return err / scale


@pytest.fixture(scope="module")
def block():
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    torch.manual_seed(0)
    with torch.device("cuda"):
        return Block().half().eval()


def _spy(table):
    calls = []
    real = table.gemv

    def gemv(*a, **k):
        calls.append(tuple(a[0].shape) + tuple(a[1].shape))
        return real(*a, **k)

    table.gemv = gemv
    return calls


@pytest.mark.gpu
@pytest.mark.parametrize("bt", [(1, 1), (2, 2)], ids=["n1", "n4"])
def test_block_matches_and_captures_in_a_cuda_graph(block, bt):
    table = load_table(TABLE)
    if torch.cuda.get_device_name() != table.gpu.get("name"):
        pytest.skip(f"the committed table is for {table.gpu.get('name')}, this is {torch.cuda.get_device_name()}")
    calls = _spy(table)
    x = torch.randn(*bt, 4096, device="cuda", dtype=torch.float16)
    with torch.no_grad():
        ref = block(x)
        names = swap_linears(block, table)
        try:
            assert sorted(names) == ["down", "gate", "k", "o", "q", "up", "v"]
            with warnings.catch_warnings():
                warnings.filterwarnings("error", message="gemvtune")  # every shape is tuned: no fallback
                y = block(x)
            assert len(calls) == 7, calls                      # every linear ran the tuned kernel
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
def test_gpu_fallbacks(block):
    table = load_table(TABLE)
    calls = _spy(table)
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
            x = torch.randn(1, 4096, device="cuda", dtype=torch.float16)
            with torch.enable_grad():                                          # autograd: F.linear
                block.o.weight.requires_grad_(True)
                assert block.o(x).requires_grad and not calls
            strided = torch.randn(4096, 2, device="cuda", dtype=torch.float16)[:, 0]
            _close(block.o(strided), F.linear(strided, block.o.weight), 1e-2)  # copied, then tuned
            assert len(calls) == 1
        finally:
            restore_linears(block)
