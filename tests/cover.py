"""Config samples for the per-family compile and GPU tests: one valid config for every value of every parameter
(where one is valid), the family's seed first, plus k random valid ones."""

import random


def cover(valid: list, seed_config, domains: dict, k: int, rng_seed: int) -> list:
    rng = random.Random(rng_seed)
    out = [seed_config] if seed_config in valid else []
    for key, values in domains.items():
        for v in values:
            pool = [c for c in valid if getattr(c, key) == v]
            if pool:
                out.append(rng.choice(pool))
    return list(dict.fromkeys(out + rng.sample(valid, min(k, len(valid)))))
