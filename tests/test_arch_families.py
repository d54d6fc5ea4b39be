"""Every family declares the PTX features its kernels use, and nothing on an architecture that lacks one reaches
NVRTC, the runner, the search or the space (gemvtune.kernels.arch, ConfigBase.features / arch_reasons).

The declarations are checked against the rendered sources themselves: every value of every parameter of every
template family, both dtypes, every epilogue and a grouped variant, each source's features read from its text
(``arch.features_in``: the instructions, whatever the template calls them) must be exactly the config's declared
``features``. A family that forgets one, or a template that starts using a new one, fails here."""

import optuna
import pytest
from cover import cover, valid_of
from fakes import FakeRunner

from gemvtune.build.compile import InvalidForArch, compile_variant, compile_variants
from gemvtune.build.render import render
from gemvtune.errors import UsageError
from gemvtune.kernels.arch import ARCHS, features_in
from gemvtune.kernels.census import census, census_lines
from gemvtune.kernels.epilogue import Epilogue, epilogues_for
from gemvtune.kernels.families import FAMILIES
from gemvtune.kernels.gemv import CHAIN_VALUES, LLAMA_CPP, GemvConfig
from gemvtune.kernels.group import GroupShape
from gemvtune.kernels.mma import MmaConfig
from gemvtune.kernels.ring import RingConfig
from gemvtune.kernels.shapes import Shape
from gemvtune.kernels.splitk import SplitKConfig
from gemvtune.tuning.coordination.storage import make_storage
from gemvtune.tuning.search import SearchOptions, run_search
from gemvtune.tuning.searcher import family_domains

TEMPLATE = [f for f in FAMILIES.values() if not f.library]
SHAPES = {"gemv": (4096, 4104, 1), "splitk": (1000, 4096, 8), "mma": (1000, 4096, 3), "ring": (4096, 4096, 8),
          "fp8gemv": (1000, 4096, 3), "fp8mma": (1000, 4096, 3)}


def _sample(fam, dtype: str) -> tuple[Shape, list]:
    M, d, n = SHAPES[fam.name]
    s = Shape(M, d, n, dtype, fam.config_cls.WEIGHTS[0])   # (weights the family reads: FP8 ones for fp8gemv, fp8mma)
    return s, cover(list(valid_of(fam.name, s)), fam.seed, fam.domains, 6, 11)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("fam", TEMPLATE, ids=lambda f: f.name)
def test_declared_features_are_what_each_rendered_source_uses(fam, dtype):
    s, configs = _sample(fam, dtype)
    if fam.name == "gemv":   # the chain values of pdl (chosen in a model's chain, outside the searched space)
        configs += [GemvConfig(pdl=v) for v in CHAIN_VALUES if GemvConfig(pdl=v).is_valid(s)]
    for key, values in fam.domains.items():   # every value of every parameter is rendered (acc=fp16: FP16 only)
        assert {getattr(c, key) for c in configs} >= set(values) - ({"fp16"} if key == "acc" else set()), (fam.name, key)
    seen: set[str] = set()
    for c in configs:
        for e in epilogues_for(dtype):
            if e.invalid_reasons(c):
                continue
            used = features_in(render(c, s, e))
            assert used == set(c.features(dtype)), (c.label, e.label, dtype, used, c.features(dtype))
            seen |= used
    other_dtype = {"fp16": {"bf16", "mma.bf16"}, "bf16": {"mma.f16"}}[dtype]
    assert seen == set(fam.config_cls.all_needs()) - other_dtype, (fam.name, dtype, seen)   # each declaration is used


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_grouped_and_fused_variants_use_no_feature_beyond_their_config(dtype):
    group = GroupShape((512, 512), 4096, 1, dtype)
    for c in (GemvConfig(tpr=64), GemvConfig(pdl="on", hint="evict_first", block=128, tpr=64),
              GemvConfig(pdl="chain2", tpr=128)):   # (an even number of rows per block: SwiGLU pairs them)
        for e in (Epilogue(dtype), Epilogue(dtype, swiglu=True)):
            assert features_in(render(c, group.fused, e, group)) == set(c.features(dtype)), (c.label, e.label)
    res = Epilogue(dtype, residual=True)
    assert features_in(render(GemvConfig(pdl="on"), Shape(64, 4096, 1, dtype), res)) == \
        set(GemvConfig(pdl="on").features(dtype))


def test_each_option_that_needs_a_feature_says_so_on_an_arch_without_it():
    s = Shape(4096, 4096)
    sm80, sm86 = ARCHS["sm_80"], ARCHS["sm_86"]
    assert GemvConfig(pdl="on").invalid_reasons(s, sm80) == [
        "pdl=on needs griddepcontrol (programmatic dependent launch), sm_90 or newer; sm_80 lacks it"]
    assert GemvConfig(pdl="chain4").arch_reasons(s, "sm_86")[0].startswith("pdl=chain4 needs griddepcontrol")
    assert MmaConfig(pdl="on").arch_reasons(s, sm86) and not MmaConfig(hint="evict_first").arch_reasons(s, sm80)
    for c in (LLAMA_CPP, GemvConfig(hint="evict_first"), SplitKConfig(w_load="cpasync"), MmaConfig(), RingConfig()):
        for a in ARCHS.values():
            assert not c.arch_reasons(Shape(4096, 4096, 1, "bf16"), a), (c.label, a)   # every arch has them
    assert GemvConfig(pdl="on").features() == {"griddepcontrol": "pdl=on"}
    assert RingConfig().features("bf16") == {"cp.async": "the ring family", "mma.bf16": "the ring family with BF16 "
                                             "inputs", "bf16": "the ring family with BF16 inputs"}
    assert SplitKConfig(w_load="cpasync").features() == {"mma.f16": "the splitk family with FP16 inputs",
                                                         "cp.async": "w_load=cpasync"}


def test_shared_memory_above_what_a_block_may_opt_in_to_is_invalid_on_that_arch():
    s = Shape(4096, 4096, 8)
    c = RingConfig(stages=6, bk=256, rw=2, kw=2)   # 6 stages of (32 + 8 rows) x 512 B + the d-warp reduction
    assert 99 * 1024 < c.smem_bytes(s) <= 163 * 1024
    assert c.is_valid(s) and c.is_valid(s, "sm_80") and c.is_valid(s, "sm_87") and not c.arch_reasons(s, "sm_100")
    for a in ("sm_86", "sm_89", "sm_120", "sm_121"):
        why = c.invalid_reasons(s, a)
        assert why == [f"{c.smem_bytes(s)} B of shared memory (6 stages of 20480 B, d-warp reduction) exceed 99 KiB "
                       f"(the most a block may opt in to on {a})"], why


def test_occupancy_asks_for_what_the_arch_holds():
    c = GemvConfig(occ="full", block=256)
    assert [c.min_blocks_on(ARCHS[a]) for a in ("sm_80", "sm_86", "sm_89", "sm_90", "sm_120")] == [8, 6, 6, 8, 6]
    small = GemvConfig(occ="full", block=32, tpr=32)
    assert [small.min_blocks_on(ARCHS[a]) for a in ("sm_80", "sm_86", "sm_89", "sm_90")] == [32, 16, 24, 32]
    s = Shape(4096, 4096)
    assert "__launch_bounds__(BLOCK, 6)" in render(c, s, arch="sm_86")
    assert render(c, s) == render(c, s, arch="sm_90") and "__launch_bounds__(BLOCK, 8)" in render(c, s)


def test_render_refuses_a_config_the_arch_cannot_run():
    with pytest.raises(UsageError, match="is invalid for 4096x4096 on sm_89: pdl=on needs griddepcontrol"):
        render(GemvConfig(pdl="on"), Shape(4096, 4096), arch="sm_89")


@pytest.fixture
def no_nvrtc(monkeypatch):
    """NVRTC replaced by a recorder, and compile_source's own check of a source's features switched off: what is
    left to keep a config from NVRTC is the config's own check (compile_variant(s)). Sources reaching NVRTC are
    recorded with their options; one that uses a feature of an arch that lacks it fails the test."""
    import gemvtune.build.compile as gc

    seen: list[tuple[str, tuple]] = []

    class Recorder:
        build, include_dirs = "fake", []

        def compile(self, source, name, options):
            arch = ARCHS[next(o for o in options if o.startswith("-arch=")).split("=", 1)[1]]
            assert features_in(source) <= arch.features, (name, arch, features_in(source) - arch.features)
            seen.append((source, tuple(options)))
            return b"cubin", "ptxas info    : Used 32 registers"

    monkeypatch.setattr(gc, "features_in", lambda source: set())
    monkeypatch.setattr(gc, "nvrtc", lambda: Recorder())
    return seen


def test_a_config_the_arch_cannot_run_never_reaches_nvrtc(no_nvrtc, tmp_path, monkeypatch):
    monkeypatch.setenv("GEMVTUNE_CACHE_DIR", str(tmp_path))
    s = Shape(4096, 4096)
    items = [(LLAMA_CPP, s), (GemvConfig(pdl="on"), s), (MmaConfig(pdl="on", hint="evict_first"), s),
             (GemvConfig(pdl="chain2"), s)]
    out = compile_variants(items, arch="sm_80")
    assert [type(r).__name__ for r in out] == ["Compiled", "InvalidForArch", "InvalidForArch", "InvalidForArch"]
    assert str(out[1]) == ("invalid for sm_80: pdl=on needs griddepcontrol (programmatic dependent launch), sm_90 or "
                           "newer; sm_80 lacks it") and out[1].invalid and out[1].reasons and out[1].config == items[1][0]
    assert len(no_nvrtc) == 1 and "-arch=sm_80" in no_nvrtc[0][1]
    with pytest.raises(InvalidForArch, match="invalid for sm_86: pdl=on needs griddepcontrol"):
        compile_variant(MmaConfig(pdl="on"), s, "sm_86")
    assert len(no_nvrtc) == 1
    assert all(not isinstance(r, InvalidForArch) for r in compile_variants(items, arch="sm_90"))
    assert len(no_nvrtc) == 1 + len(items)   # on sm_90 every one of them compiles


def test_compile_source_refuses_a_raw_source_that_uses_what_the_arch_lacks():
    from gemvtune.build.compile import compile_source

    src = 'extern "C" __global__ void k(int* o) { asm volatile("griddepcontrol.wait;" ::: "memory"); o[0] = 1; }'
    with pytest.raises(InvalidForArch, match="the source standin needs griddepcontrol .*; sm_86 lacks it"):
        compile_source(src, "standin", "sm_86", "k")


def test_the_runner_records_a_config_its_arch_cannot_run_as_invalid_with_why():
    cuda = pytest.importorskip("gemvtune.runners.cuda.runner")
    r = cuda.CudaRunner.__new__(cuda.CudaRunner)   # (no device: an invalid config is answered before any GPU work)
    r.arch = "sm_89"
    m = r._measure(GemvConfig(pdl="on"), Shape(4096, 4096), "variant", True, True, None, None)
    assert m.status == "invalid" and "griddepcontrol" in m.error and "sm_89 lacks it" in m.error


def test_the_space_on_an_arch_counts_what_it_cannot_run_by_its_reason():
    s = Shape(64, 4096)
    fam = FAMILIES["mma"]
    total, valid90, _, per90 = census(fam.all_configs(), s, fam.domains)
    _, valid80, reasons, per80 = census(fam.all_configs(), s, fam.domains, "sm_80")
    assert valid80 == per90["pdl"]["off"] and per80["pdl"]["on"] == 0 and valid90 == valid80 + per90["pdl"]["on"]
    first = "pdl=on needs griddepcontrol (programmatic dependent launch), sm_N or newer; sm_N lacks it"
    assert reasons.most_common(1)[0] == (first, total // 2)
    lines = census_lines(fam, s, "sm_80")
    assert lines[0].startswith(f"shape 64x4096 (M=64, d=4096, n=1) on sm_80: {valid80} valid of {total} mma configs")
    assert census_lines(fam, s)[0] == f"shape 64x4096 (M=64, d=4096, n=1): {valid90} valid of {total} mma configs"
    assert FAMILIES["gemv"].config_cls.arch_domains(FAMILIES["gemv"].domains, "sm_90") is FAMILIES["gemv"].domains


class Sm80Runner(FakeRunner):
    """The fake runner on an sm_80: every config it is asked to measure must be valid there."""

    arch = "sm_80"

    def measure(self, config, shape, kind="variant", verify=True, timed=True, **kw):
        assert config.is_valid(shape, self.arch), f"a config sm_80 cannot run reached the runner: {config.label}"
        return super().measure(config, shape, kind=kind, verify=verify, timed=timed, **kw)


def test_a_search_on_an_arch_never_proposes_what_it_cannot_run(tmp_path):
    narrow = {"block": (128, 256), "vec": ("half2", "half8"), "acc": ("fp32",), "tpr": (32, 64), "unroll": (1,),
              "split_k": (1,), "hint": ("default", "evict_first"), "x_load": ("ldg",), "pdl": ("off", "on"),
              "occ": ("auto",)}
    opts = SearchOptions(trials=20, seed=0, progress=False, families=("gemv", "mma"), domains={"gemv": narrow},
                         rounds=1, top_k=2)
    cls = FAMILIES["gemv"].config_cls
    assert cls.arch_domains(narrow, "sm_80")["pdl"] == ("off",) and cls.arch_domains(narrow)["pdl"] == ("off", "on")
    assert family_domains(opts, "gemv")["pdl"] == ("off",)   # (and on sm_90: PDL is a model chain's choice)
    assert family_domains(opts, "mma", "sm_86")["pdl"] == ("off",)
    runner = Sm80Runner()
    storage = make_storage(f"journal:{tmp_path / 'j.log'}")
    res = run_search(runner, Shape(4096, 4096), opts, storage, "s", echo=lambda s: None)
    assert runner.calls and all(c.pdl == "off" for c in runner.calls)
    for fam in ("gemv", "mma"):
        study = optuna.load_study(study_name=FAMILIES[fam].study_name("s"), storage=storage)
        assert all(t.params.get("pdl", "off") == "off" for t in study.trials), fam
    assert res.entry["winner"]["config"].get("pdl", "off") == "off"
