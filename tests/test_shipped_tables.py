"""Every table gemvtune ships (results/<gpu>/table.json: the H200's and the H100's) is what ``load_table()`` with
no path loads on its GPU: it loads under the schema, is named after the GPU it records, routes a torch caller to a
tuned 16-bit kernel only where its win was measured beyond the noise (and, where a re-confirmation in a fresh
process measured that kernel, won there too), runs cuBLAS for a shape it lacks where no cost model lies beside it
(the H100's), and never runs a kernel on another GPU model. The H100's table was re-confirmed whole by the tune that
made it."""

from __future__ import annotations

import warnings

import pytest
from conftest import ROOT

from gemvtune.runtime.table import load_table
from gemvtune.runtime.tables import find_table, gpu_slug

SHIPPED = sorted((ROOT / "results").glob("*/table.json"))


def test_gemvtune_ships_the_h200_and_the_h100_tables():
    assert {p.parent.name for p in SHIPPED} >= {"nvidia-h200", "nvidia-h100-80gb-hbm3"}


@pytest.mark.parametrize("path", SHIPPED, ids=[p.parent.name for p in SHIPPED])
def test_a_shipped_table_is_its_gpus_and_routes_only_re_confirmed_wins(path):
    t = load_table(path, costmodel=None)
    gpu = t.data["gpu"]["name"]
    assert gpu_slug(gpu) == path.parent.name and find_table(gpu).path.resolve() == path.resolve()
    routed = 0
    for shape in t.shapes:
        if shape.weights:   # FP8 entries: weighed against dequantize + F.linear (the FP8 route's rule), not cuBLAS
            continue
        r = t.route(shape.M, shape.d, shape.n, dtype=shape.dtype)
        if r.tuned:
            routed += 1
            assert r.tuned_us < r.cublas_us * (1 - r.noise), (shape, r.why)
            assert r.again_tuned_us is None or r.again_tuned_us < r.again_cublas_us, (shape, r.why)   # its own noise
    assert routed >= 10
    lacks = max(s.M for s in t.shapes) + 8
    assert not t.route(lacks, 4096, 1).tuned               # a shape it lacks: cuBLAS (no cost model given)
    if not list(path.parent.glob("costmodel.json*")):      # as load_table() loads it: no model beside it, no picks
        auto = load_table(path)
        assert auto.costmodel is None and not any(auto.route(m, 4096, n).tuned for m in (777, 5000) for n in (1, 8))
    other = "NVIDIA H200" if gpu != "NVIDIA H200" else "NVIDIA H100 80GB HBM3"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert t.check_device(other, (9, 0)) is False
    assert not any(t.route(s.M, s.d, s.n, dtype=s.dtype).tuned for s in t.shapes if not s.weights)


def test_the_h100_table_holds_llama_3_8b_at_every_n_it_bought():
    t = load_table(ROOT / "results" / "nvidia-h100-80gb-hbm3" / "table.json", costmodel=None)
    fp16 = {(s.M, s.d, s.n) for s in t.shapes if not s.weights}
    fp8 = {(s.M, s.d, s.n) for s in t.shapes if s.weights == "e4m3-row"}
    assert {(m, d) for m, d, _ in fp16} == {(4096, 4096), (1024, 4096), (14336, 4096), (4096, 14336), (128256, 4096)}
    assert {n for *_, n in fp16} == {1, 2, 4, 8, 16} and len(fp16) == 15
    # FP8: the same five shapes at every n (1024x4096 n = 16 since the retune of 2026-12-06 13:56), each routed to its
    # kernel (measured faster than dequantize + F.linear); on the tensor-core family where the FP8_SIGMA re-tune of
    # 2026-12-06 16:21 bought both families and fp8mma won (4096x4096 n = 4, 1024x4096 n = 16)
    every = {(m, d, n) for m, d, _ in fp16 for n in (1, 2, 4, 8, 16)}
    assert fp8 == every
    mma = [(4096, 4096, 4), (4096, 4096, 8), (4096, 4096, 16), (1024, 4096, 16), (128256, 4096, 16)]
    assert all(t.route(m, d, n, weights="e4m3-row").config.family == "fp8mma" for m, d, n in mma)
    assert t.route(4096, 4096, 16, weights="e4m3-row").config.depth == 4   # the entry an FP8 re-tune once replaced
    assert all(t.route(m, d, n, weights="e4m3-row").tuned for m, d, n in fp8)
    assert t.route(1024, 4096, 16).tuned and not t.route(14336, 4096, 8).tuned   # the latter not bought: cuBLAS
    routes = [t.route(m, d, n) for m, d, n in sorted(fp16)]
    assert all(r.tuned and r.again_tuned_us is not None for r in routes), [r.why for r in routes if not r.tuned]
