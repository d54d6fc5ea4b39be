"""Config samples for the per-family compile and GPU tests: one valid config for every value of every parameter
(where one is valid), the family's seed first, plus k random valid ones."""

import functools
import random

import numpy as np
import pytest


def sample(valid, seed_config, domains: dict, k: int, rng: random.Random) -> list:
    """The seed config if valid, one config for every valid value of every parameter, k random (from ``rng``:
    several families can share one stream). Each value's pick is ``rng.choice`` of the valid configs with that
    value, in the order of ``valid`` (the pool found with NumPy: a space has up to 345,600 points)."""
    out = [seed_config] if seed_config in valid else []
    for key, values in domains.items():
        column = np.array([getattr(c, key) for c in valid], dtype=object)
        for v in values:
            pool = np.flatnonzero(column == v)
            if len(pool):
                out.append(valid[pool[rng.randrange(len(pool))]])   # = rng.choice(that pool): one draw, same stream
    return out + rng.sample(valid, min(k, len(valid)))


@functools.lru_cache(maxsize=2)
def valid_of(family: str, shape) -> tuple:
    """Every valid config of a template family on ``shape``, kept for the next test that samples the same shape
    (a family's space is up to 345,600 points; two lists of up to ~80 MB are kept)."""
    from gemvtune.kernels.families import FAMILIES

    if not FAMILIES[family].config_cls.reads(shape):   # (FP8 weights or not: none of the family's configs)
        return ()
    return tuple(c for c in FAMILIES[family].all_configs() if not c.shape_reasons(shape))   # in the domains by construction


def tiered(shapes, slow) -> list:
    """``shapes`` as parameters, those where ``slow(shape)`` holds marked slow: the second GPU tier
    (``-m "gpu and slow"``) runs them, the first keeps the edges within its time."""
    return [pytest.param(s, marks=pytest.mark.slow) if slow(s) else s for s in shapes]


def cover(valid: list, seed_config, domains: dict, k: int, rng_seed: int) -> list:
    """``sample`` from its own seeded stream, without repeats."""
    return list(dict.fromkeys(sample(valid, seed_config, domains, k, random.Random(rng_seed))))


def verify_failures(runner, cfgs: list, shape, epilogue=None) -> list:
    """(label, status, error) of each config that does not verify on ``shape`` (with ``epilogue``, when given),
    compiled in parallel first; the runner's buffers released after."""
    from gemvtune.build.compile import compile_variants
    from gemvtune.kernels.epilogue import DEFAULT

    ep = epilogue or DEFAULT
    compile_variants([(c, shape, ep) for c in cfgs if c.is_valid(shape) and not ep.invalid_reasons(c)],
                     arch=runner.arch)   # in parallel: measure() then hits the cache
    failed = [(c.label + ep.label, m.status, m.error) for c in cfgs
              for m in [runner.measure(c, shape, timed=False, epilogue=ep)] if not m.ok]
    runner.release()
    return failed


def fp8_configs() -> tuple:
    """A handful of fp8gemv configs with every value of every parameter at least once (the seed: block 128, tpr 32,
    vec 16, unroll 2, default hint): the FP8 tests' compiles (tests/test_fp8_kernels.py) and verifications (GPU)."""
    from gemvtune.kernels.fp8gemv import SEED, Fp8GemvConfig

    return (SEED,
            Fp8GemvConfig(block=64, tpr=8, vec=4, unroll=1, hint="nc"),
            Fp8GemvConfig(block=256, tpr=16, vec=8, unroll=4, hint="evict_first"),
            Fp8GemvConfig(block=512, tpr=64, vec=16, unroll=8, hint="default"),
            Fp8GemvConfig(block=128, tpr=128, vec=8, unroll=2, hint="nc"),
            Fp8GemvConfig(block=256, tpr=256, vec=4, unroll=1, hint="evict_first"))


def fp8mma_configs(shape=None) -> tuple:
    """fp8mma configs valid on ``shape`` (default 1000x4096, n = 8, FP16, row scales) with every value of every
    parameter at least once, the seed first, and 3 random ones (seeded): the FP8 tensor-core family's compiles and
    verifications."""
    from gemvtune.kernels.fp8mma import DOMAINS, SEED
    from gemvtune.kernels.shapes import Shape

    s = shape or Shape(1000, 4096, 8, "fp16", "e4m3-row")
    return tuple(cover(list(valid_of("fp8mma", s)), SEED, DOMAINS, 3, 37))


def fp8_compile_items(configs, edge: tuple[int, int]):
    """(config, shape, epilogue) of each config at the FP8 edge ``edge`` (M, d) in both dtypes and both scale
    layouts, n cycling through 1, 3, 8, 16 and every other item with a bias and an output of the input dtype: the
    FP8 families' compiles on each architecture."""
    from gemvtune.kernels.epilogue import Epilogue
    from gemvtune.kernels.shapes import Shape

    i = 0
    for dtype in ("fp16", "bf16"):
        for weights in ("e4m3-row", "e4m3-b128"):
            for c in configs:
                yield c, Shape(*edge, (1, 3, 8, 16)[i % 4], dtype, weights), (Epilogue(dtype, bias=True) if i % 2
                                                                               else Epilogue())
                i += 1
