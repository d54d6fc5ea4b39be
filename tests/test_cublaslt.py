"""The cuBLASLt family (CPU): its config, its place in the registry (nothing rendered, compiled, counted or
swept), and its plan's calls into cuBLASLt, made against a fake of nvmath's bindings (tests/fake_cublaslt.py):
the layouts, transposes and types of (M, d, n) for FP16 and BF16 inputs and FP32 and 16-bit outputs, the bias epilogue, the heuristic's
answer read back, one cublasLtMatmul per launch, and a refused algorithm recorded as data."""

import sys
import warnings

import pytest
from fake_cublaslt import FakeLt, install

from gemvtune.device import ltplan
from gemvtune.errors import UsageError
from gemvtune.kernels.cublaslt import DOMAINS, CublasLtConfig, candidates, runner_problem
from gemvtune.kernels.epilogue import Epilogue
from gemvtune.kernels.families import FAMILIES, config_from_dict, config_to_dict, is_library
from gemvtune.kernels.shapes import Shape
from gemvtune.runners.base import Measurement, RunnerBase, Status

SPLITK = CublasLtConfig(algo_id=21, tile=12, stages=8, split_k=4, reduction=2)
PLAIN = CublasLtConfig(algo_id=66, tile=20, stages=35, split_k=1, swizzle=1, cluster_shape=2)
ODD = Shape(37, 4104, 3)


# ---- the config ------------------------------------------------------------------------------------------
def test_config_round_trips_through_json():
    for c in (SPLITK, PLAIN, CublasLtConfig()):
        d = config_to_dict(c)
        assert d["family"] == "cublaslt" and config_from_dict(d) == c
        assert CublasLtConfig.from_dict(c.to_dict()) == c and is_library(c)


@pytest.mark.parametrize("bad", [{"algo_id": -1}, {"tile": 2**16}, {"split_k": True}, {"stages": "8"},
                                 {"reduction": 3}, {"swizzle": 1.0}, {"inner_shape": None}, {"tiles": 1}])
def test_bad_values_are_one_usage_error(bad):
    with pytest.raises(UsageError) as e:
        config_from_dict({"family": "cublaslt", **bad})
    assert "\n" not in str(e.value) and ("cublaslt" in str(e.value))


def test_label_and_describe():
    assert SPLITK.label == "lt.a21.tile12.st8.k4.red2"
    assert PLAIN.label == "lt.a66.tile20.st35.k1.red0.sw1.cl2"
    assert len({c.label for c in (SPLITK, PLAIN, CublasLtConfig(custom=1), CublasLtConfig(inner_shape=1))}) == 4
    words = SPLITK.describe()
    assert words.isascii() and "\n" not in words and '"' not in words
    for part in ("algo id 21", "TILE_ID 12", "STAGES_ID 8", "SPLITK_NUM 4", "REDUCTION_SCHEME 2",
                 "reduction in the compute type", "op T, lda = d", "ldd = M", "CUBLAS_COMPUTE_32F"):
        assert part in words, part
    assert SPLITK.attributes()[:3] == [("TILE_ID", 12), ("STAGES_ID", 8), ("SPLITK_NUM", 4)]


def test_rules_of_the_family():
    s = Shape(4096, 4096, 8)
    assert not SPLITK.invalid_reasons(s) and not SPLITK.needs_workspace(s) and SPLITK.acc == "fp32"
    assert not Epilogue("fp32").invalid_reasons(SPLITK) and not Epilogue("fp16", True).invalid_reasons(SPLITK)
    assert "16-bit output" in Epilogue("fp32", True).invalid_reasons(SPLITK)[0]
    assert all(lo == 0 and hi > 0 for lo, hi in DOMAINS.values())


# ---- the registry: a library, not a template -----------------------------------------------------------
def test_nothing_is_rendered_or_compiled(monkeypatch):
    from gemvtune.build.compile import NothingToCompile, compile_variant, compile_variants, precompile_variant
    from gemvtune.build.render import render
    from gemvtune.kernels.gemv import LLAMA_CPP

    with pytest.raises(UsageError, match="no CUDA source to render"):
        render(SPLITK, ODD)
    with pytest.raises(NothingToCompile, match="nothing to compile"):
        compile_variant(SPLITK, ODD)
    precompile_variant(SPLITK, ODD)   # a no-op, never an error
    import gemvtune.build.compile as comp

    monkeypatch.setattr(comp, "compile_many", lambda items, **kw: [f"compiled {it[0]}" for it in items])
    got = compile_variants([(LLAMA_CPP, ODD), (SPLITK, ODD), (LLAMA_CPP, Shape(64, 128))])
    assert got[0].startswith("compiled b256") and isinstance(got[1], NothingToCompile) and got[2].startswith("compiled")


def test_census_and_sweep_say_it_needs_the_gpu():
    from gemvtune.kernels.census import census_lines
    from gemvtune.tuning.sweep import grid_configs

    fam = FAMILIES["cublaslt"]
    (line,) = census_lines(fam, ODD)
    assert "cuBLASLt's heuristic on the GPU" in line and "no census without a device" in line
    with pytest.raises(UsageError, match="has no sweep"):
        grid_configs(family="cublaslt")


def test_compile_check_of_a_cublaslt_config_refuses_it(tmp_path):
    import json

    from click.testing import CliRunner

    from gemvtune.cli.main import cli

    f = tmp_path / "c.json"
    f.write_text(json.dumps([config_to_dict(SPLITK)]))
    r = CliRunner().invoke(cli, ["compile-check", "--shape", "64x128", "--configs", str(f)])
    assert r.exit_code == 1 and "lt.a21.tile12.st8.k4.red2" in r.output and "nothing to compile" in r.output


def test_which_runners_can_give_candidates():
    from fakes import FakeRunner

    class LtRunner(RunnerBase):
        def lt_problem(self):
            return None

        def lt_heuristics(self, shape, top=16):
            return [(SPLITK, 4096), (PLAIN, 0), (SPLITK, 4096)][:top]

    class Replayed(LtRunner):
        replayed = True

    assert "without --watchdog" in runner_problem(FakeRunner())
    assert "replayed sweep has no cuBLASLt" in runner_problem(Replayed())
    assert runner_problem(LtRunner()) is None
    assert candidates(LtRunner(), ODD) == [SPLITK, PLAIN]   # in the heuristic's order, without repeats


# ---- the plan, against the fake bindings ---------------------------------------------------------------
@pytest.mark.parametrize("inp,out,dtype", [("fp16", "fp32", 0), ("fp16", "fp16", 2), ("bf16", "fp32", 0),
                                           ("bf16", "bf16", 14)])
def test_descriptors_of_a_shape(monkeypatch, inp, out, dtype):
    lt = install(monkeypatch)
    shape = Shape(ODD.M, ODD.d, ODD.n, inp)
    t = {"fp16": 2, "bf16": 14}[inp]                 # cudaDataType: CUDA_R_16F, CUDA_R_16BF
    p = ltplan.LtProblem(shape, Epilogue(out), device=0)
    M, d, n = ODD.M, ODD.d, ODD.n
    assert lt.layouts[p.a] == (t, d, M, d)          # W: column-major [d, M], lda = d (op T gives [M, d])
    assert lt.layouts[p.b] == (t, d, n, d)          # X: column-major [d, n], ldb = d
    assert lt.layouts[p.d] == (dtype, M, n, M)      # Y: column-major [M, n], ldd = M
    assert p.c == p.d and p.types == (t, t, dtype, dtype)
    assert lt.descs[p.desc] == {"COMPUTE_TYPE": 68, "SCALE_TYPE": 0, "TRANSA": 1, "TRANSB": 0}   # no epilogue set
    p.close()
    assert ("desc_destroy", p.desc) not in lt.calls and sum(c[0] == "layout_destroy" for c in lt.calls) == 3


def test_bias_epilogue_descriptor(monkeypatch):
    lt = install(monkeypatch)
    p = ltplan.LtProblem(ODD, Epilogue("fp16", True))
    assert lt.descs[p.desc]["EPILOGUE"] == 4 and lt.descs[p.desc]["BIAS_DATA_TYPE"] == 2
    p = ltplan.LtProblem(Shape(ODD.M, ODD.d, ODD.n, "bf16"), Epilogue("bf16", True))
    assert lt.descs[p.desc]["EPILOGUE"] == 4 and lt.descs[p.desc]["BIAS_DATA_TYPE"] == 14
    assert PLAIN.epilogue_reasons(Epilogue("bf16", True)) == [] and PLAIN.epilogue_reasons(Epilogue("fp32", True))


def test_heuristics_read_back_in_order(monkeypatch):
    lt = install(monkeypatch)
    lt.algos = [({"ID": 21, "TILE_ID": 12, "STAGES_ID": 8, "SPLITK_NUM": 4, "REDUCTION_SCHEME": 2}, 65536, 0),
                ({"ID": 5, "TILE_ID": 3}, 0, 15),   # a result whose state is not success: not an algorithm
                ({"ID": 66, "TILE_ID": 20, "STAGES_ID": 35, "SPLITK_NUM": 1, "CTA_SWIZZLING": 1,
                  "CLUSTER_SHAPE_ID": 2}, 0, 0)]
    p = ltplan.LtProblem(Shape(4096, 4096, 8))
    found, why = p.heuristics(16)
    assert found == [(SPLITK, 65536), (PLAIN, 0)] and why == ""
    (call,) = [c for c in lt.calls if c[0] == "heuristic"]
    assert call[1:8] == (7, p.desc, p.a, p.b, p.c, p.d, call[7]) and call[8] == 16
    assert lt.prefs[call[7]] == {"MAX_WORKSPACE_BYTES": 32 << 20, "MIN_ALIGNMENT_A_BYTES": 16,
                                 "MIN_ALIGNMENT_B_BYTES": 16, "MIN_ALIGNMENT_C_BYTES": 16, "MIN_ALIGNMENT_D_BYTES": 16}
    assert ("pref_destroy", call[7]) in lt.calls


def test_heuristic_refusal_is_an_answer(monkeypatch):
    lt = install(monkeypatch)
    lt.refuse_heuristic = True
    found, why = ltplan.LtProblem(ODD).heuristics(16)
    assert found == [] and "CUBLAS_STATUS_NOT_SUPPORTED" in why and str(ODD) in why
    lt.refuse_heuristic = False
    assert ltplan.LtProblem(ODD).heuristics(4) == ([], f"cuBLASLt's heuristic returned no algorithm for {ODD}")


def test_plan_rebuilds_checks_and_launches_one_matmul(monkeypatch):
    lt = install(monkeypatch)
    lt.check_ws = 1 << 20
    plan = ltplan.LtPlan(SPLITK, ODD, Epilogue("fp32"), device=0)
    assert ("algo_init", 68, 0, 2, 2, 0, 0, 21) in lt.calls
    (chk,) = [c for c in lt.calls if c[0] == "algo_check"]
    assert chk[-1] == (21, 12, 4, 2, 0, 0, 8, 0, 0)   # ID, TILE, SPLITK, REDUCTION, SWIZZLE, CUSTOM, STAGES, INNER, CLUSTER
    assert lt.allocs == [(0, 1 << 20)] and plan.workspace_bytes == 1 << 20 and plan.align == 16
    lt.calls.clear()
    W, x, y, stream = 0x1000, 0x2000, 0x3000, 0x55
    plan.launch(W, x, y, 0, stream)
    (m,) = lt.calls
    p = plan.problem
    assert m == ("matmul", 7, p.desc, 1.0, W, p.a, x, p.b, 0.0, y, p.d, y, p.d, chk[-1], plan.workspace, 1 << 20, stream)
    with pytest.raises(UsageError, match="16-byte aligned"):
        plan.launch(W + 8, x, y, 0, stream)
    plan.close()
    assert ("free", 0x7100000) in lt.calls


def test_plan_sets_the_bias_pointer_only_when_it_changes(monkeypatch):
    lt = install(monkeypatch)
    plan = ltplan.LtPlan(PLAIN, ODD, Epilogue("fp16", True))
    assert lt.allocs == []   # no workspace asked: none allocated, null passed
    lt.calls.clear()
    for b in (0x9000, 0x9000, 0xA000):
        plan.launch(0x1000, 0x2000, 0x3000, b, 0)
    sets = [c for c in lt.calls if c[0] == "desc_set"]
    assert sets == [("desc_set", "BIAS_POINTER", 0x9000), ("desc_set", "BIAS_POINTER", 0xA000)]
    assert all(c[14:16] == (0, 0) for c in lt.calls if c[0] == "matmul")
    with pytest.raises(UsageError, match="give one"):
        plan.launch(0x1000, 0x2000, 0x3000, 0, 0)


def test_refused_algorithm_is_recorded_as_data(monkeypatch):
    from gemvtune.runners.cuda.ltrunner import LtPart

    lt = install(monkeypatch)
    lt.refuse = {21}
    with pytest.raises(ltplan.LtRefused, match="CUBLAS_STATUS_NOT_SUPPORTED"):
        ltplan.LtPlan(SPLITK, ODD)
    part = LtPart(0)
    m = Measurement(SPLITK.label, "variant", ODD.M, ODD.d, ODD.n, Status.OK)
    assert part.plan(m, SPLITK, ODD) is None
    assert m.status == Status.LAUNCH_ERROR and "cuBLASLt refused lt.a21" in m.error and "NOT_SUPPORTED" in m.error
    m2 = Measurement(PLAIN.label, "variant", ODD.M, ODD.d, ODD.n, Status.OK)
    assert part.plan(m2, PLAIN, ODD) is part.get(PLAIN, ODD) and m2.ok   # built once, kept
    m3 = Measurement(PLAIN.label, "variant", ODD.M, ODD.d, ODD.n, Status.OK)
    assert part.plan(m3, PLAIN, ODD, Epilogue("fp32", True)) is None and "16-bit output" in m3.error
    lt.algos = []
    with pytest.raises(ltplan.LtRefused, match="returned no algorithm"):
        part.heuristics(ODD)
    part.release()


def test_dispatch_cache_warns_once_and_answers_cublas(monkeypatch):
    lt = install(monkeypatch)
    lt.refuse = {21}
    monkeypatch.setattr("gemvtune.device.plan.capturing", lambda stream: False)
    cache = ltplan.LtPlanCache()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert cache.get(SPLITK, ODD, Epilogue("fp16"), 0, 1) is None
        assert cache.get(SPLITK, ODD, Epilogue("fp16"), 0, 1) is None
    assert len(w) == 1 and f"cuBLAS runs {ODD}.o16 instead" in str(w[0].message)
    plan = cache.get(PLAIN, ODD, Epilogue("fp16"), 0, 1)
    assert isinstance(plan, ltplan.LtPlan) and cache.get(PLAIN, ODD, Epilogue("fp16"), 0, 1) is plan
    monkeypatch.setattr(ltplan, "LT_PLANS", cache)
    assert ltplan.route_plan(PLAIN, ODD, Epilogue("fp16"), 0, 1) is plan
    from gemvtune.kernels.gemv import LLAMA_CPP

    monkeypatch.setattr("gemvtune.device.plan.PLANS.get", lambda *a: ("kernel plan", a))
    assert ltplan.route_plan(LLAMA_CPP, ODD, Epilogue("fp16"), 0, 1) == ("kernel plan", (LLAMA_CPP, ODD, Epilogue("fp16"), 0, 1))


def test_capture_before_the_plan_exists_is_one_clear_error(monkeypatch):
    install(monkeypatch)
    monkeypatch.setattr("gemvtune.device.plan.capturing", lambda stream: True)
    with pytest.raises(ltplan.GemvtuneError, match="run the layer once outside capture"):
        ltplan.LtPlanCache().get(PLAIN, ODD, Epilogue("fp16"), 0, 1)


def test_without_nvmath_one_line_names_the_extra(monkeypatch):
    monkeypatch.setattr(ltplan, "_lt", None)
    monkeypatch.setitem(sys.modules, "nvmath.bindings", None)   # (as where nvmath-python is not installed)
    with pytest.raises(ltplan.LibraryUnavailable) as e:
        ltplan.bindings()
    assert "gemvtune[blas]" in str(e.value) and "\n" not in str(e.value)
    from gemvtune.runners.cuda.ltrunner import LtPart

    assert "gemvtune[blas]" in LtPart(0).problem()
    monkeypatch.setattr("gemvtune.device.plan.capturing", lambda stream: False)
    with warnings.catch_warnings(record=True) as w:   # a table with an algorithm entry, read without nvmath:
        warnings.simplefilter("always")                # cuBLAS runs the shape, after one warning
        assert ltplan.LtPlanCache().get(PLAIN, ODD, Epilogue("fp16"), 0, 1) is None
    assert len(w) == 1 and "gemvtune[blas]" in str(w[0].message) and "cuBLAS runs" in str(w[0].message)


def test_fake_matches_the_real_bindings():
    """Where nvmath-python imports, the fake's enums and attribute types are the real ones."""
    try:
        from nvmath.bindings import cublasLt as real
    except Exception as e:
        pytest.skip(f"nvmath-python's bindings do not import here: {str(e)[:120]}")
    fake = FakeLt()
    for E in ("MatmulDescAttribute", "MatmulPreferenceAttribute", "MatmulAlgoConfigAttribute", "Epilogue"):
        for m in getattr(fake, E):
            assert int(getattr(real, E)[m.name]) == int(m), (E, m.name)
    for m in fake.MatmulAlgoConfigAttribute:
        assert real.get_matmul_algo_config_attribute_dtype(real.MatmulAlgoConfigAttribute[m.name]) == \
            fake.get_matmul_algo_config_attribute_dtype(m)
    for m in fake.MatmulDescAttribute:
        assert real.get_matmul_desc_attribute_dtype(real.MatmulDescAttribute[m.name]) == fake.get_matmul_desc_attribute_dtype(m)
    assert real.matmul_heuristic_result_dtype == fake.matmul_heuristic_result_dtype
    assert real.matmul_algo_dtype == fake.matmul_algo_dtype
