"""Representative configs of every template family, FP16 and BF16, compiled with NVRTC for sm_80, sm_86, sm_89,
sm_90, sm_100 and sm_120 (CPU; CI runs it): each family's seed, one config for each option value that needs a
feature, ring configs whose shared memory lies between the architectures' limits, and a few drawn at random. Every
config the arch can run compiles; every one it cannot is an ``InvalidForArch`` whose reasons name what the source
would have used and the arch lacks (read from the source's text, not from the config's declarations), or the limit it
exceeds; and none of those reaches NVRTC (the NVRTC call is wrapped: a source using a feature the arch lacks fails the
test, with compile_source's own check of the source switched off so that the config's check is what is tested)."""

import random

import pytest
from cover import valid_of

from gemvtune.build.compile import CompileError, InvalidForArch, compile_variants
from gemvtune.build.render import render
from gemvtune.kernels.arch import ARCHS, DEFAULT, FEATURES, features_in
from gemvtune.kernels.epilogue import Epilogue
from gemvtune.kernels.families import FAMILIES
from gemvtune.kernels.ring import RingConfig
from gemvtune.kernels.shapes import Shape

ARCH_NAMES = ("sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120")
SHAPES = {"gemv": (4096, 4104, 1), "splitk": (1000, 4096, 8), "mma": (1000, 4096, 3), "ring": (4096, 4096, 8),
          "fp8gemv": (1000, 4096, 3, "e4m3-b128"), "fp8mma": (1000, 4112, 8, "e4m3-row")}   # (M, d, n[, weights])


def representative(dtype: str) -> list[tuple]:
    """(config, shape, epilogue) items: per family its seed, one valid config per (field, value) that needs a feature
    (``NEEDS_BY_VALUE``), three at random; ring configs of 99-163 and 163-227 KiB of shared memory. Each item's
    epilogue is the dtype's own output where the config can give it."""
    rng = random.Random(36)
    items = []
    for fam in FAMILIES.values():
        if fam.library:
            continue
        M, d, n, *weights = SHAPES[fam.name]
        s = Shape(M, d, n, dtype, *weights)
        valid = list(valid_of(fam.name, s))
        picks = [fam.seed] if fam.seed.is_valid(s) else []
        for (key, value) in fam.config_cls.NEEDS_BY_VALUE:
            pool = [c for c in valid if getattr(c, key) == value]
            if pool:
                picks.append(rng.choice(pool))
        picks += rng.sample(valid, 3)
        if fam.name == "ring":
            for lo, hi in ((99, 163), (163, 227)):
                picks.append(rng.choice([c for c in valid if lo * 1024 < c.smem_bytes(s) <= hi * 1024]))
        for c in dict.fromkeys(picks):
            e = Epilogue(dtype)
            items.append((c, s, e if not e.invalid_reasons(c) else Epilogue("fp32")))
    return items


@pytest.fixture
def guarded_nvrtc(monkeypatch):
    """NVRTC as it is, behind a wrapper that fails the test on a source using a feature the target arch lacks;
    compile_source's own check of sources switched off (the configs' check must keep them away alone)."""
    import gemvtune.build.compile as gc

    real = gc.nvrtc()
    reached = []

    class Guard:
        build, include_dirs = real.build, real.include_dirs

        def compile(self, source, name, options):
            arch = ARCHS[next(o for o in options if o.startswith("-arch=")).split("=", 1)[1]]
            lacks = features_in(source) - arch.features
            assert not lacks, f"{name} reached NVRTC for {arch} using {sorted(lacks)}"
            reached.append(name)
            return real.compile(source, name, options)

    monkeypatch.setattr(gc, "features_in", lambda source: set())
    monkeypatch.setattr(gc, "nvrtc", lambda: Guard())
    return reached


@pytest.mark.slow   # ~250 NVRTC compiles of tensor-core and GEMV kernels
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_representative_configs_compile_or_are_invalid_for_each_arch(dtype, guarded_nvrtc):
    items = representative(dtype)
    assert {c.family for c, _, _ in items} == {f.name for f in FAMILIES.values() if not f.library}
    needs = set().union(*(c.features(dtype) for c, _, _ in items))
    assert "griddepcontrol" in needs and "cp.async" in needs and "l2.cache_hint" in needs
    invalid_somewhere = set()
    for name in ARCH_NAMES:
        arch = ARCHS[name]
        results = compile_variants(items, arch=name, jobs=2)
        for (c, s, e), r in zip(items, results):
            used = features_in(render(c, s, e))   # on sm_90, which has every feature: what the source would use
            over = isinstance(c, RingConfig) and c.smem_bytes(s) > arch.smem_optin
            if used <= arch.features and not over:
                assert not isinstance(r, CompileError), (name, c.label, str(r))
                assert r.resources.registers > 0, (name, c.label)
                continue
            invalid_somewhere.add(c.label)
            assert isinstance(r, InvalidForArch), (name, c.label, r)
            text = str(r)
            assert text.startswith(f"invalid for {name}: ")
            for f in used - arch.features:
                assert FEATURES[f].what in text and f"{name} lacks it" in text, (name, c.label, text)
            if over:
                assert f"exceed {arch.smem_optin // 1024} KiB (the most a block may opt in to on {name})" in text
    pdl = [c.label for c, _, _ in items if getattr(c, "pdl", "off") != "off"]
    big = [c.label for c, s, _ in items if isinstance(c, RingConfig) and c.smem_bytes(s) > 99 * 1024]
    fp8 = [c.label for c, _, _ in items if c.family in ("fp8gemv", "fp8mma")]   # FP8 pairs: sm_89 and newer
    assert pdl and len(big) >= 2 and fp8 and set(pdl) | set(big) | set(fp8) <= invalid_somewhere
    assert all(c.is_valid(s, DEFAULT) for c, s, _ in items)   # every one runs on sm_90
