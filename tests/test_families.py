"""The family registry is what render, search and the study names read (CPU only)."""

import dataclasses

import jinja2
import pytest

from gemvtune.build.render import render
from gemvtune.kernels import families
from gemvtune.kernels.families import DEFAULT_FAMILY, FAMILIES, FAMILY_NAMES
from gemvtune.kernels.shapes import Shape
from gemvtune.tuning.search import study_name

TEMPLATED = {n: f for n, f in FAMILIES.items() if not f.library}   # the families rendered from a template
LIBRARY = {n: f for n, f in FAMILIES.items() if f.library}       # a library's algorithms (cuBLASLt)


def test_render_reads_the_family_template(monkeypatch):
    for name, fam in TEMPLATED.items():
        s = Shape(64, 4096, weights=fam.config_cls.WEIGHTS[0])   # (weights the family reads: FP8 ones for fp8gemv)
        assert render(fam.seed, s)   # each family's seed renders from its own template
        monkeypatch.setitem(families.FAMILIES, name, dataclasses.replace(fam, template="no-such.cu.j2"))
        with pytest.raises(jinja2.TemplateNotFound):
            render(fam.seed, s)
        monkeypatch.setitem(families.FAMILIES, name, fam)


def test_study_names_come_from_the_registry(monkeypatch):
    s = Shape(14336, 4096, 2)
    assert study_name(s, "nvidia-h200") == "gemvtune-nvidia-h200-14336x4096x2"
    assert study_name(s, "nvidia-h200", "splitk") == "gemvtune-nvidia-h200-14336x4096x2-splitk"
    monkeypatch.setitem(families.FAMILIES, "splitk", dataclasses.replace(FAMILIES["splitk"], study_suffix="-sk"))
    assert study_name(s, "g", "splitk").endswith("-sk")


def test_registry_order_and_default():
    assert FAMILY_NAMES[0] == DEFAULT_FAMILY == "gemv"
    assert all(f.seed.family == n and isinstance(f.seed, f.config_cls) for n, f in TEMPLATED.items())
    assert LIBRARY and all(f.seed is None and f.candidates and f.runner_problem for f in LIBRARY.values())
    assert all(f.kind == "template" and f.candidates is None for f in TEMPLATED.values())
    assert FAMILY_NAMES[-len(LIBRARY):] == tuple(LIBRARY)   # after every kernel family: ties go to our kernels
    assert len({f.study_suffix for f in FAMILIES.values()}) == len(FAMILIES)   # study names never collide


def test_a_family_is_its_module_and_one_line_in_the_registry():
    """Each entry is built from the names its module declares (keyword fields only); the module's config class
    answers complexity and render values; a module missing a name, or whose config is another family's, fails at
    registration with one line naming the module."""
    import types

    assert tuple(FAMILIES) == tuple(m.NAME for m in families.MODULES)
    for m in families.MODULES:
        fam = families.Family.from_module(m)
        assert fam == FAMILIES[m.NAME] and fam.config_cls is m.CONFIG and fam.seed is m.SEED
        assert (fam.template, fam.main_kernel) == ((m.TEMPLATE, m.MAIN_KERNEL) if not fam.library else ("", ""))
        for c in [fam.seed, *(c for c, _ in fam.fallbacks)] if fam.seed is not None else [fam.config_cls()]:
            assert isinstance(c.complexity(), tuple) and isinstance(c.render_values(Shape(64, 4096)), dict)
    with pytest.raises(TypeError):
        families.Family(*(getattr(FAMILIES["gemv"], f.name) for f in dataclasses.fields(families.Family)))   # keywords only
    fake = types.ModuleType("fake_family")
    fake.__dict__.update({k: v for k, v in vars(families.gemv).items() if not k.startswith("__") and k != "SWEEP_NOTE"})
    with pytest.raises(TypeError, match="fake_family does not declare SWEEP_NOTE"):
        families.Family.from_module(fake)
    fake.SWEEP_NOTE, fake.NAME = "", "gemv2"   # gemv's config under another name
    with pytest.raises(TypeError, match="GemvConfig is not the config of family 'gemv2'"):
        families.Family.from_module(fake)
    with pytest.raises(TypeError, match="is another family's"):
        families._registry([families.gemv, families.gemv])


def test_split_is_one_name_on_every_config():
    """``config.split`` (slices of d across blocks: grid.y) on every family; gemv and cuBLASLt keep their persisted
    field ``split_k`` (tables, CSVs, Optuna params, the cost model's columns and users' --config name it so)."""
    from gemvtune.kernels.cublaslt import CublasLtConfig
    from gemvtune.kernels.gemv import GemvConfig

    s = Shape(4096, 4096, 2)
    assert GemvConfig(split_k=4).split == 4 and CublasLtConfig(split_k=8).split == 8
    assert GemvConfig(split_k=4).to_dict()["split_k"] == 4 and "split" not in GemvConfig().to_dict()
    for fam in TEMPLATED.values():
        for c in list(fam.all_configs())[::211]:
            if c.is_valid(s):
                assert c.grid(s)[1] == c.split


def test_space_does_not_load_the_registry():
    """families imports the config modules; they never import families back (no import loop)."""
    import subprocess
    import sys

    code = "import sys, gemvtune.kernels.gemv, gemvtune.kernels.splitk; print('gemvtune.kernels.families' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.strip() == "False", r.stderr


# ---- what each family brings: census, fallbacks, workspace rule, sweep grid, epilogue rule ----------
def test_census_counts_every_config_of_each_family():
    from gemvtune.kernels.census import census

    s = Shape(4096, 4096, 2)
    sk = FAMILIES["splitk"]
    total, valid, reasons, per_param = census(sk.all_configs(), s, sk.domains)
    sizes = [len(v) for v in sk.domains.values()]
    assert total == __import__("math").prod(sizes) and total == valid + sum(reasons.values())
    assert valid == sum(c.is_valid(s) for c in sk.all_configs()) and set(per_param) == set(sk.domains)
    assert all(sum(cnt.values()) == valid for cnt in per_param.values())
    for fam in TEMPLATED.values():   # the first config of each space is a config of that family
        assert isinstance(next(iter(fam.all_configs())), fam.config_cls)
    for fam in LIBRARY.values():     # a library's space is its answer on the GPU: no census pretends to list it
        assert not list(fam.all_configs()) and fam.census_note


def test_space_command_prints_one_census_per_registered_family(monkeypatch):
    """`gemvtune space` loops over the registry: a family's census, its seed line and reasons."""
    from click.testing import CliRunner

    from gemvtune.cli.main import cli

    for name, fam in TEMPLATED.items():   # two configs per family: its seed and one invalid one
        bad = fam.config_cls(**{**fam.seed.to_dict(), next(iter(fam.domains)): 10**6})
        monkeypatch.setitem(families.FAMILIES, name, dataclasses.replace(fam, all_configs=lambda f=fam, b=bad: [f.seed, b]))
    r = CliRunner().invoke(cli, ["space", "--shape", "4096x4096"])
    assert r.exit_code == 0, r.output
    fp16_weights = {n: f for n, f in TEMPLATED.items() if f.config_cls.reads(Shape(4096, 4096))}
    fp8_weights = {"fp8gemv", "fp8mma"}     # (FP8 weights only: their census is for FP8 shapes)
    assert set(TEMPLATED) - set(fp16_weights) == fp8_weights
    assert not any(f"{name} configs" in r.output for name in fp8_weights)
    for fam in fp16_weights.values():
        assert f": 1 valid of 2 {fam.name} configs" in r.output
        assert f"  {fam.seed_name} config {fam.seed.label}: valid" in r.output
    assert r.output.startswith("shape 4096x4096 (M=4096, d=4096, n=1): 1 valid of 2 gemv configs\n"
                               "  llama.cpp config b256.half2.fp32.t256.u1.k1.default.ldg: valid\n")
    assert r.output.count("invalid, by first reason:") == len(fp16_weights)
    r8 = CliRunner().invoke(cli, ["space", "--shape", "4096x4096", "--weights", "e4m3-b128"])
    assert r8.exit_code == 0 and r8.output.startswith(
        "shape 4096x4096.e4m3-b128 (M=4096, d=4096, n=1): 1 valid of 2 fp8gemv configs\n"), r8.output
    assert "1 valid of 2 fp8mma configs" in r8.output and r8.output.count("valid of") == 2, r8.output
    for fam in LIBRARY.values():   # one line: where its configs come from, and that it needs the GPU
        assert f"(M=4096, d=4096, n=1): {fam.name}: {fam.census_note}\n" in r.output
        assert "no census without a device" in fam.census_note


def test_fallbacks_are_the_families_in_registry_order(monkeypatch):
    from gemvtune.kernels.gemv import LLAMA_CPP, GemvConfig
    from gemvtune.kernels.splitk import SPLITK_SEED
    from gemvtune.runtime.table import Table

    gemv = FAMILIES["gemv"]
    assert gemv.fallbacks == ((LLAMA_CPP, "llama.cpp fallback"),
                              (GemvConfig(vec="half", tpr=32, block=256), "generic fallback"),
                              (GemvConfig(vec="half", tpr=2, block=32), "generic fallback"))
    assert FAMILIES["splitk"].fallbacks == ()
    assert all(isinstance(c, f.config_cls) and why for f in FAMILIES.values() for c, why in f.fallbacks)
    t = Table({"schema": 1, "gpu": {}, "entries": {}})
    for s in (Shape(7, 3), Shape(1, 1), Shape(5, 3, 16)):   # the last gemv fallback runs any d and n
        assert t.lookup(s)[1] == "generic fallback"
    assert t.lookup(Shape(4096, 4096)) == (LLAMA_CPP, "llama.cpp fallback")
    monkeypatch.setitem(families.FAMILIES, "gemv", dataclasses.replace(gemv, fallbacks=()))
    monkeypatch.setitem(families.FAMILIES, "splitk", dataclasses.replace(FAMILIES["splitk"],
                                                                         fallbacks=((SPLITK_SEED, "splitk fallback"),)))
    assert t.lookup(Shape(4096, 4096)) == (SPLITK_SEED, "splitk fallback")
    with pytest.raises(families.UsageError, match="no fallback config"):
        t.lookup(Shape(7, 3))


def test_needs_workspace_is_the_family_rule():
    from gemvtune.kernels.gemv import GemvConfig
    from gemvtune.kernels.launchspec import launch_spec
    from gemvtune.kernels.splitk import SplitKConfig

    s = Shape(4096, 4096, 2)
    assert GemvConfig(split_k=2).needs_workspace(s) and not GemvConfig().needs_workspace(s)
    assert SplitKConfig(split=4, combine="pass2").needs_workspace(s)
    assert not SplitKConfig(split=4, combine="atomic").needs_workspace(s)
    assert not SplitKConfig(split=1).needs_workspace(s)
    configs = [c for f in FAMILIES.values() for c in f.all_configs() if c.family != "gemv" or c.unroll == 1]
    checked = 0
    for c in configs[::97]:
        if c.is_valid(s):
            assert launch_spec(c, s).needs_workspace == c.needs_workspace(s)
            checked += 1
    assert checked > 100


def test_sweep_grid_of_each_family():
    from gemvtune.kernels.gemv import SWEEP_GRID
    from gemvtune.tuning.sweep import grid_configs, sweep_path

    for name in LIBRARY:   # no grid to sweep: one line, before any GPU work
        with pytest.raises(families.UsageError, match="no sweep"):
            grid_configs(family=name)
    for name, fam in TEMPLATED.items():
        assert list(fam.sweep_grid) == list(fam.domains) and fam.sweep_note
        assert all(set(v) <= set(fam.domains[k]) for k, v in fam.sweep_grid.items())
        configs = grid_configs(family=name)
        assert configs and all(isinstance(c, fam.config_cls) and not c.domain_errors() for c in configs)
        assert sweep_path("d", Shape(64, 128), name).name == f"sweep-64x128x1{fam.study_suffix}.csv.gz"
    assert FAMILIES[DEFAULT_FAMILY].sweep_grid is SWEEP_GRID and len(grid_configs()) == 5184   # unchanged
    assert len(grid_configs(family="splitk")) == 1728   # the whole split-K space


def test_epilogue_rule_is_the_config_s():
    from gemvtune.kernels.epilogue import Epilogue
    from gemvtune.kernels.gemv import GemvConfig
    from gemvtune.kernels.splitk import SplitKConfig

    fp16 = Epilogue("fp16")
    assert fp16.invalid_reasons(SplitKConfig(split=4, combine="atomic"))
    assert not fp16.invalid_reasons(SplitKConfig(split=4, combine="pass2"))
    assert not fp16.invalid_reasons(SplitKConfig(split=1)) and not fp16.invalid_reasons(GemvConfig(split_k=4))
    assert not Epilogue().invalid_reasons(SplitKConfig(split=4, combine="atomic"))
    bf16 = Epilogue("bf16")   # the rule is about any 16-bit output
    assert bf16.invalid_reasons(SplitKConfig(split=4, combine="atomic")) == [
        "combine=atomic adds FP32 partial sums into y; a BF16 output needs combine=pass2"]
    assert not bf16.invalid_reasons(SplitKConfig(split=4, combine="pass2")) and not bf16.invalid_reasons(GemvConfig())


# Modules that may still name a family in a string literal, and why. A new family must not need edits
# outside its config module, its template and its registry entry, so this list only shrinks.
_MAY_NAME = {
    ("build/compile.py", "gemv"): "the default kernel name of compile_source (the gemv template's kernel)",
    ("hf/profile.py", "gemv"): "a kernel name profiled in traces",
    ("reports/ktexport.py", "gemv"): "Kernel Tuner's kernel name for the gemv sweeps",
    ("transition/crossover.py", "gemv"): "the GEMV -> GEMM crossover report compares these two families by name",
    ("transition/crossover.py", "splitk"): "the GEMV -> GEMM crossover report compares these two families by name",
}


def test_family_names_live_in_the_registry_and_the_config_modules():
    import ast
    import sys
    from pathlib import Path

    import gemvtune

    root = Path(gemvtune.__file__).parent
    names = set(FAMILIES) | {f.study_suffix for f in FAMILIES.values() if f.study_suffix}
    own = {Path(sys.modules[f.config_cls.__module__].__file__).relative_to(root).as_posix()
           for f in FAMILIES.values()}   # each family's own module (the registry lists modules, never names)
    found = []
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root).as_posix()
        if rel in own:
            continue
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and node.value in names and (rel, node.value) not in _MAY_NAME:
                found.append(f"{rel}:{node.lineno} {node.value!r}")
    assert not found, "family names outside the registry (use gemvtune.kernels.families): " + ", ".join(found)
