"""Issue 20, item 3: zero-trial dispatch. For a shape the table lacks, the route runs the cost model's pick
where it is predicted faster than cuBLAS's predicted time by the margin, says so, and otherwise (or without a
model) runs cuBLAS; the table's lookup prefers the model's pick to the nearest tuned shape. CPU tests with a
model whose predictions are set by hand; the GPU test verifies a zero-trial pick on an unseen shape."""

import json
import warnings

import pytest
from conftest import ROOT, on_committed_gpu

from gemvtune import Shape, UsageError
from gemvtune.kernels.gemv import GemvConfig
from gemvtune.model import zerotrial
from gemvtune.runtime.route import predicted_cublas_us
from gemvtune.runtime.table import Table, load_table

TABLE = ROOT / "results" / "nvidia-h200" / "table.json"
UNSEEN = Shape(11008, 4096)   # Llama-2-7B's MLP: in no table entry and no sweep


class HandModel:
    """The CostModel interface with predictions set by hand: µs = floor x ``rel`` for the config ``best``, 2x
    that for every other one."""

    def __init__(self, best, rel):
        self.best, self.rel, self.read_gbps = best, rel, 4500.0
        self.calls = 0

    def floor_us(self, shape):
        return shape.weight_bytes / self.read_gbps * 1e-3

    def rank(self, configs, shape, k=None):
        self.calls += 1
        scored = sorted(((self.floor_us(shape) * self.rel * (1 if c == self.best else 2), i, c)
                         for i, c in enumerate(configs)))
        return [(c, us) for us, _, c in scored[:k]]


def _table(model):
    return Table(json.loads(TABLE.read_text()), str(TABLE), costmodel=model)


def _cublas_rel(table, shape):
    return predicted_cublas_us(table, shape, HandModel(None, 1).floor_us) / HandModel(None, 1).floor_us(shape)


def test_candidates_are_valid_and_include_the_tables_own():
    t = _table(None)
    cands = zerotrial.candidates(t, UNSEEN)
    assert cands and all(c.is_valid(UNSEEN) for c in cands)
    assert {c.family for c in cands} >= {"gemv"} and not any(c.family == "cublaslt" for c in cands)
    assert t.lookup(Shape(4096, 4096))[0] in cands   # a tabled winner is a candidate


def test_route_runs_the_pick_only_where_predicted_faster_than_cublas_by_the_margin():
    best = GemvConfig(block=128, vec="half8", tpr=64)
    c = _cublas_rel(_table(None), UNSEEN)
    fast = _table(HandModel(best, c * (1 - zerotrial.MARGIN) * 0.98))
    r = fast.route(UNSEEN.M, UNSEEN.d, 1, "torch", "fp16")
    assert r.tuned and r.config == best and "cost model" in r.why and r.cublas_us and r.tuned_us < r.cublas_us
    slow = _table(HandModel(best, c * (1 - zerotrial.MARGIN) * 1.02))
    r = slow.route(UNSEEN.M, UNSEEN.d, 1, "torch", "fp16")
    assert not r.tuned and "not 10% faster" in r.why
    none = _table(None)
    r = none.route(UNSEEN.M, UNSEEN.d, 1, "torch", "fp16")
    assert not r.tuned and "not in the table" in r.why


def test_tabled_shapes_never_ask_the_model_and_picks_are_cached():
    model = HandModel(GemvConfig(), 0.5)
    t = _table(model)
    for n in (1, 2, 16):
        assert "cost model" not in t.route(4096, 4096, n, "torch", "fp16").why
    assert model.calls == 0
    t.route(UNSEEN.M, UNSEEN.d, 1, "torch", "fp16")
    t.route(UNSEEN.M, UNSEEN.d, 1, "cupy", "fp16")
    assert model.calls == 1


def test_lookup_prefers_the_models_pick_to_the_nearest_shape():
    best = GemvConfig(block=64, vec="half8", tpr=32)
    cfg, how = _table(HandModel(best, 1.1)).lookup(UNSEEN)
    assert cfg == best and how.startswith("cost model's pick")
    cfg, how = _table(None).lookup(UNSEEN)
    assert how.startswith("nearest tuned shape")


def test_pick_honours_the_output_the_caller_wants():
    from gemvtune.kernels.splitk import SplitKConfig

    atomic = SplitKConfig(mt=2, warps=4, split=4, combine="atomic")
    t = _table(HandModel(atomic, 0.5))
    assert t.predicted(UNSEEN, "fp32")[0] == atomic
    assert t.predicted(UNSEEN, "fp16")[0] != atomic   # atomic split-K cannot give an FP16 output


def test_load_table_finds_the_model_beside_it_and_a_bad_one_is_a_warning(tmp_path):
    pytest.importorskip("lightgbm", reason="the cost model needs LightGBM (gemvtune[model])")
    (tmp_path / "table.json").write_text(TABLE.read_text())
    assert load_table(tmp_path / "table.json").costmodel is None   # no model beside it
    (tmp_path / "costmodel.json").write_text("not a model")
    t = load_table(tmp_path / "table.json")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert t.costmodel is None
    assert any("costmodel.json" in str(m.message) and "run cuBLAS" in str(m.message) for m in w)
    with pytest.raises(UsageError, match="not valid JSON"):
        load_table(tmp_path / "table.json", costmodel=tmp_path / "costmodel.json")   # named: an error
    assert load_table(tmp_path / "table.json", costmodel=None).costmodel is None


@pytest.mark.gpu
def test_zero_trial_dispatch_on_an_unseen_shape_is_verified():
    """The committed table and model: an unseen shape runs the model's pick (or cuBLAS, as its route says),
    and the answer matches float64."""
    pytest.importorskip("lightgbm", reason="the cost model needs LightGBM (gemvtune[model])")
    import cupy as cp

    from gemvtune.runners.cuda import CudaRunner
    from gemvtune.runners.timing import error_bound

    t = load_table(TABLE)
    if t.costmodel is None:
        pytest.skip("no committed cost model beside the table")
    runner = CudaRunner(replays=3)
    for n in (1, 4):
        s = Shape(UNSEEN.M, UNSEEN.d, n)
        W = (cp.random.random((s.M, s.d), dtype=cp.float32) * 2 - 1).astype(cp.float16)
        x = (cp.random.random((n, s.d) if n > 1 else (s.d,), dtype=cp.float32) * 2 - 1).astype(cp.float16)
        y = t.gemv(W, x)
        # the route as the call took it: its first call on this device decided whether the table's kernels run here
        # (another GPU model than the table's: cuBLAS, gemvtune.runtime.tablegpu)
        r = t.route(s.M, s.d, n, "cupy")
        print(s, r.kind, r.why)
        if not on_committed_gpu():
            assert not r.tuned and "its kernels never run here" in r.why, r.why
        ref, scale = runner.reference(W, x)
        acc = r.config.acc if r.tuned else "fp32"
        ok, rel, row, why = runner.check(y, ref, scale, error_bound(acc, s.d, out="fp32" if r.tuned else "fp16"))
        assert ok, (str(s), r.why, why)
        if r.tuned:
            m = runner.measure(r.config, s)
            assert m.ok, (m.status, m.error)
    runner.release()


def test_no_pick_below_the_smallest_weight_the_model_was_fitted_on():
    """A model fitted on weights of 8 MB and more (the H100's, 2026-12-06): held out, 1024x4096's picks ran up to 2.7x
    the fastest measured; below its smallest weight the route runs cuBLAS, saying why."""
    best = GemvConfig(block=128, vec="half8", tpr=64)
    model = HandModel(best, 0.3)
    model.min_weight_bytes = UNSEEN.weight_bytes + 1
    r = _table(model).route(UNSEEN.M, UNSEEN.d, 1, "torch", "fp16")
    assert not r.tuned and "fewer than the smallest the cost model was fitted on" in r.why
    model.min_weight_bytes = UNSEEN.weight_bytes
    assert _table(model).route(UNSEEN.M, UNSEEN.d, 1, "torch", "fp16").tuned


def test_a_pick_is_weighed_only_against_cublas_measured_on_near_shapes_at_its_n():
    """cuBLAS predicted from far shapes (an 8 MB and a 1 GB weight for a 21 MB one, on the H100's 8B-only table) ran
    4-12% faster than the picks it let through; with no tabled shape within 2x in M and d at the same n, cuBLAS."""
    from gemvtune.runtime import route

    best = GemvConfig(block=128, vec="half8", tpr=64)
    t = _table(HandModel(best, 0.3))
    far = Shape(1536, 1536)   # no tabled shape within 2x in both M and d
    r = t.route(far.M, far.d, 1, "torch", "fp16")
    assert not r.tuned and "near enough in M and d" in r.why and "at n=1" in r.why
    near = Shape(12288, 4096)   # 14336x4096 is tabled at n = 1
    assert t.route(near.M, near.d, 1, "torch", "fp16").tuned
    # the prediction the tune plans with (no ``within``) still reaches for any neighbour
    assert route.predicted_cublas_us(t, far, HandModel(None, 1).floor_us) is not None


def test_the_near_rule_only_ever_takes_zero_trial_routes_away(monkeypatch):
    """On the H200 table, over shapes of unseen models at n = 1..16: the routes with the rule are a subset of those
    weighed against every tabled shape at the same n (each pick predicted at 1.2x the read floor, so that both have
    routes to give)."""
    from gemvtune.runtime import route

    best = GemvConfig(block=128, vec="half8", tpr=64)
    shapes = [Shape(M, d, n) for M, d in ((2048, 5120), (5120, 7168), (7168, 5120), (8192, 2048), (65536, 5120),
                                          (1536, 1536), (7392, 8192)) for n in (1, 2, 8, 16)]

    def tuned():
        t = _table(HandModel(best, 1.2))
        return {s for s in shapes if t.route(s.M, s.d, s.n, "torch", "fp16").tuned}

    near = tuned()
    monkeypatch.setattr(route, "NEAR", 1e9)   # every tabled shape at the same n counts as near
    wide = tuned()
    assert near < wide, (near, wide)
