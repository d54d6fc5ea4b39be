"""Config samples for the per-family compile and GPU tests: one valid config for every value of every parameter
(where one is valid), the family's seed first, plus k random valid ones."""

import random


def sample(valid: list, seed_config, domains: dict, k: int, rng: random.Random) -> list:
    """The seed config if valid, one config for every valid value of every parameter, k random (from ``rng``:
    several families can share one stream)."""
    out = [seed_config] if seed_config in valid else []
    for key, values in domains.items():
        for v in values:
            pool = [c for c in valid if getattr(c, key) == v]
            if pool:
                out.append(rng.choice(pool))
    return out + rng.sample(valid, min(k, len(valid)))


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
