"""NVRTC compiles on the CPU (explicit sm_90): these run on CI, never skipped."""

import itertools
import random
import sys
import types

import pytest

from gemvtune import LLAMA_CPP, GemvConfig, Shape
from gemvtune.build.compile import CompileError, NvrtcUnavailable, Resources, _Nvrtc, compile_many, compile_source
from gemvtune.build.render import render
from gemvtune.kernels.gemv import DOMAINS, valid_configs


def representative_subset() -> list[tuple[GemvConfig, Shape]]:
    """Every (vec, acc, hint, x_load) combination (48) with seeded random block/tpr/unroll/split_k,
    on tail shapes; every split_k value; every block and tpr value; and the llama.cpp point."""
    rng = random.Random(7)
    out = [(LLAMA_CPP, Shape(4096, 4096))]
    shapes = [Shape(7, 4104), Shape(129, 72), Shape(4096, 14336)]
    valid = {s: valid_configs(s) for s in shapes}   # once per shape (each is seconds; 48 pools below)
    for i, (vec, acc, hint, xl) in enumerate(itertools.product(DOMAINS["vec"], DOMAINS["acc"], DOMAINS["hint"],
                                                               DOMAINS["x_load"])):
        s = shapes[i % len(shapes)]
        pool = [c for c in valid[s] if (c.vec, c.acc, c.hint, c.x_load) == (vec, acc, hint, xl)]
        out.append((rng.choice(pool), s))
    s = Shape(1024, 16384)
    v = valid_configs(s)
    for key in ("split_k", "block", "tpr", "unroll", "pdl", "occ"):
        for val in DOMAINS[key]:
            pool = [c for c in v if getattr(c, key) == val]
            out.append((rng.choice(pool), s))
    return list(dict.fromkeys(out))


SUBSET = representative_subset()


def test_subset_covers_the_space():
    cfgs = [c for c, _ in SUBSET]
    for k, values in DOMAINS.items():
        assert {getattr(c, k) for c in cfgs} == set(values), k
    assert LLAMA_CPP in cfgs


@pytest.mark.slow  # NVRTC compiles the whole GEMV subset
def test_subset_compiles_for_sm90():
    results = compile_many([(c.label.replace(".", "_"), render(c, s)) for c, s in SUBSET], arch="sm_90")
    failures = [(c.label, str(r)) for (c, _), r in zip(SUBSET, results) if isinstance(r, CompileError)]
    assert not failures
    for (c, _s), r in zip(SUBSET, results):
        assert r.resources.registers > 0, c.label
        assert r.resources.registers <= min(255, 65536 // (c.block * c.min_blocks)), (c.label, r.resources)
        if c.occ == "auto":   # (capping registers for occupancy may spill: measured like anything else)
            assert r.resources.spill_stores == 0 and r.resources.stack_bytes == 0, (c.label, r.resources)


def test_cache_hits(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMVTUNE_CACHE_DIR", str(tmp_path))
    src = render(LLAMA_CPP, Shape(64, 4096))
    a = compile_source(src)
    b = compile_source(src)
    assert not a.cached and b.cached and a.key == b.key and a.resources == b.resources
    assert open(b.cubin_path, "rb").read(4) == b"\x7fELF"


def test_the_cache_key_names_the_nvrtc_and_header_wheels(tmp_path, monkeypatch):
    """NVRTC reports major.minor only; a cubin of another patch release (13.0.88 rejects what an earlier 13.0
    compiled) must not be a cache hit: the key carries the installed wheels' versions."""
    from importlib import metadata

    import gemvtune.build.compile as gc

    monkeypatch.setenv("GEMVTUNE_CACHE_DIR", str(tmp_path))
    nv = gc.nvrtc()
    wheels = [w for w in ("nvidia-cuda-nvrtc", "nvidia-cuda-nvrtc-cu12") if _installed(metadata, w)]
    assert wheels and f"{wheels[0]}=={metadata.version(wheels[0])}" in nv.build.split("+")
    monkeypatch.setattr(gc, "nvrtc", lambda: nv)
    src = render(LLAMA_CPP, Shape(64, 4096))
    a = compile_source(src)
    monkeypatch.setattr(nv, "build", nv.build + "+nvidia-cuda-nvrtc==13.0.0")   # another patch release
    b = compile_source(src)
    assert not b.cached and a.key != b.key


def _installed(metadata, name):
    try:
        return bool(metadata.version(name))
    except metadata.PackageNotFoundError:
        return False


def test_compile_error_carries_source_and_options():
    src = render(LLAMA_CPP, Shape(64, 4096)).replace("acc_init(s[u][c]);", "acc_init(s[u][c]) this is not C++;")
    with pytest.raises(CompileError) as e:
        compile_source(src, "broken")
    assert "error" in str(e.value) and "\n" not in str(e.value)
    d = e.value.details()
    assert "-arch=sm_90" in d and "acc_init(s[u][c]) this is not C++" in d
    assert any(line.lstrip().split("  ")[0].isdigit() for line in d.splitlines()[-20:])


def test_resources_parse():
    log = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'gemv' for 'sm_90'
ptxas info    : Function properties for gemv
ptxas         .     8 bytes stack frame, 12 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 8 bytes cumulative stack size, 4105 bytes smem
"""
    r = Resources.parse(log, "gemv")
    assert r == Resources(registers=40, spill_stores=12, spill_loads=4, stack_bytes=8, smem_bytes=4105)


def batch_and_splitk_subset() -> list[tuple]:
    """The split-K GEMM family's space: every (w_load, x_load, combine) combination and every value of
    every other parameter, at n = 1, 3, 8, 16 on tail shapes (M not a multiple of 16, d not a multiple
    of 32, one d not a multiple of 8); and the GEMV family at n > 1 (every vec x acc)."""
    from gemvtune.kernels import splitk as sk

    rng = random.Random(11)
    shapes = [Shape(129, 4104, 3), Shape(7, 72, 16), Shape(33, 4101, 8), Shape(4096, 4096, 1)]
    out = []
    for _i, (wl, xl, comb) in enumerate(itertools.product(sk.DOMAINS["w_load"], sk.DOMAINS["x_load"],
                                                         sk.DOMAINS["combine"])):
        for s in shapes:
            pool = [c for c in sk.valid_configs(s) if (c.w_load, c.x_load, c.combine) == (wl, xl, comb)]
            if pool:
                out.append((rng.choice(pool), s))
    v = sk.valid_configs(Shape(1000, 9176, 5))
    for key in ("mt", "warps", "split", "depth"):
        for val in sk.DOMAINS[key]:
            out.append((rng.choice([c for c in v if getattr(c, key) == val]), Shape(1000, 9176, 5)))
    for n in (2, 8, 16):
        s = Shape(129, 4104, n)
        for vec, acc in itertools.product(DOMAINS["vec"], DOMAINS["acc"]):
            pool = [c for c in valid_configs(s) if (c.vec, c.acc) == (vec, acc)]
            if pool:
                out.append((rng.choice(pool), s))
    return list(dict.fromkeys(out))


@pytest.mark.slow  # NVRTC compiles the split-K and batch subset (~90 s)
def test_splitk_and_batch_subset_compiles_for_sm90():
    from gemvtune.build.compile import compile_variants
    from gemvtune.kernels import splitk as sk

    subset = batch_and_splitk_subset()
    cfgs = [c for c, _ in subset if c.family == "splitk"]
    for k, values in sk.DOMAINS.items():
        assert {getattr(c, k) for c in cfgs} == set(values), k
    assert {s.n for c, s in subset if c.family == "gemv"} == {2, 8, 16}
    results = compile_variants(subset, arch="sm_90")
    failures = [(c.label, str(s), str(r)) for (c, s), r in zip(subset, results) if isinstance(r, CompileError)]
    assert not failures, failures[:3]
    for (c, s), r in zip(subset, results):
        assert 0 < r.resources.registers <= 255, c.label
        if c.family == "splitk":  # (GEMV variants with many columns in 512-1024-thread blocks may spill: recorded, slow)
            assert r.resources.spill_stores == 0 and r.resources.stack_bytes == 0, (c.label, str(s), r.resources)


def test_static_shared_memory_overflow_is_a_clear_compile_error():
    hog = ("__shared__ float hog[40000]; hog[tid * 150] = 1.f; __syncthreads(); "
           "if (hog[(tid * 151) % 40000] == 2.f) return;")
    src = render(LLAMA_CPP, Shape(64, 4096)).replace("const int tid = threadIdx.x;", "const int tid = threadIdx.x;\n" + hog)
    with pytest.raises(CompileError) as e:
        compile_source(src, "hog")
    assert "NVRTC_ERROR_COMPILATION" in str(e.value) and "bytes smem" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.slow  # NVRTC compiles every sanitizer config
def test_sanitizer_config_set_covers_both_families_and_compiles():
    """tests/data/sanitize_configs.json is what compute-sanitizer runs on the GPU (scripts/gpu-check.sh sanitizer):
    at every edge shape it must hold every vector width, pdl on, and split-K GEMMs, and all compile."""
    from pathlib import Path

    from gemvtune.build.compile import compile_variants
    from gemvtune.kernels.families import load_configs

    cfgs = load_configs(str(Path(__file__).parent / "data" / "sanitize_configs.json"))
    pairs = []
    for M in (1, 7, 129):
        for d in (8, 72, 4104):
            s = Shape(M, d, 3 if M == 7 else 1)
            valid = [c for c in cfgs if c.is_valid(s)]
            assert {c.vec for c in valid if c.family == "gemv"} == set(DOMAINS["vec"]), s
            assert any(c.family == "splitk" for c in valid) and any(getattr(c, "pdl", "") == "on" for c in valid), s
            pairs += [(c, s) for c in valid]
    bad = [r for r in compile_variants(pairs) if isinstance(r, CompileError)]
    assert not bad, bad[:2]


def _fake_bindings(monkeypatch, module) -> None:
    import cuda.bindings

    if module is None:  # no attribute and a None entry in sys.modules: the import raises ImportError
        monkeypatch.delattr(cuda.bindings, "nvrtc", raising=False)
    else:
        monkeypatch.setattr(cuda.bindings, "nvrtc", module, raising=False)
    monkeypatch.setitem(sys.modules, "cuda.bindings.nvrtc", module)


def test_nvrtc_unavailable_when_the_library_does_not_load(monkeypatch):
    def missing():  # what cuda.pathfinder raises (a RuntimeError) on the first call when libnvrtc is absent
        raise RuntimeError('Failure finding "libnvrtc.so":\n  no such file\n  searched: site-packages')

    _fake_bindings(monkeypatch, types.SimpleNamespace(nvrtcVersion=missing))
    with pytest.raises(NvrtcUnavailable) as e:
        _Nvrtc()
    msg = str(e.value)
    assert "\n" not in msg and "NVRTC not found" in msg and "libnvrtc.so" in msg and "no such file" in msg


def test_nvrtc_unavailable_without_cuda_bindings(monkeypatch):
    _fake_bindings(monkeypatch, None)
    with pytest.raises(NvrtcUnavailable) as e:
        _Nvrtc()
    assert "\n" not in str(e.value) and "cuda-bindings" in str(e.value) and "import" in str(e.value)
