"""GPU tests (marked gpu): skipped, with the reason, where no CUDA device answers."""

import random

import pytest

from gemvtune import LLAMA_CPP, GemvConfig, Shape
from gemvtune.render import render
from gemvtune.space import DOMAINS, valid_configs

pytestmark = pytest.mark.gpu

M_VALUES = (1, 7, 4096, 128256)
D_VALUES = (8, 4104, 14336)
SHAPES = [Shape(M, d) for M in (1, 7, 4096) for d in D_VALUES] + [Shape(128256, 4104), Shape(128256, 8)]


@pytest.fixture(scope="module")
def runner():
    from gemvtune.runners.cuda import CudaRunner

    return CudaRunner(replays=3)


def broad_sample(shape: Shape, k: int = 48, seed: int = 1) -> list[GemvConfig]:
    """Every value of every parameter that is valid for the shape, plus a seeded random rest."""
    rng = random.Random(seed)
    valid = valid_configs(shape)
    out = [LLAMA_CPP] if LLAMA_CPP in valid else []
    for key, values in DOMAINS.items():
        for v in values:
            pool = [c for c in valid if getattr(c, key) == v]
            if pool:
                out.append(rng.choice(pool))
    out += rng.sample(valid, min(k, len(valid)))
    return list(dict.fromkeys(out))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_broad_sample_verifies(runner, shape):
    failed = []
    for c in broad_sample(shape):
        m = runner.measure(c, shape, timed=False)
        if not m.ok:
            failed.append((c.label, m.status, m.error))
    runner.release()
    assert not failed, failed[:5]


def _planted(shape: Shape, kind: str) -> str:
    src = render(LLAMA_CPP, shape)
    if kind == "drop_tail":
        new = src.replace("const int v_end = min(NVEC, v_begin + VPS);",
                          "const int v_end = min(NVEC, v_begin + VPS) - 1;")
    elif kind == "skip_row":
        new = src.replace("if (active && lane == 0) y[row] = sum;",
                          "if (active && lane == 0 && row != M / 2) y[row] = sum;")
    else:
        new = src.replace("if (active && lane == 0) y[row] = sum;",
                          "if (active && lane == 0) y[row] = row == M - 1 ? __int_as_float(0x7fc00000) : sum;")
    assert new != src
    return new


@pytest.mark.parametrize("kind", ["drop_tail", "skip_row", "nan"])
@pytest.mark.parametrize("shape", [Shape(4096, 4104), Shape(128256, 4096), Shape(7, 14336)], ids=str)
def test_planted_wrong_kernels_are_caught(runner, shape, kind):
    m = runner.measure(LLAMA_CPP, shape, timed=False, source=_planted(shape, kind), name=f"planted-{kind}")
    assert m.status == "wrong", (m.status, m.relerr, m.error)


def test_llama_measures(runner):
    s = Shape(4096, 4096)
    m = runner.measure(LLAMA_CPP, s)
    assert m.ok and m.us_min <= m.us_median <= m.us_max and m.copies >= 2
    assert m.copies * s.weight_bytes >= 3 * runner.l2_bytes
    assert 0 < m.pct_ceiling < 110


def test_cublas_baseline_verified(runner):
    m = runner.measure_cublas(Shape(4096, 4096))
    assert m.ok and m.relerr < m.bound


def test_launch_failure_is_recorded(runner):
    # Compiled for at most 256 threads, launched with 1024: the launch fails; recorded, not raised.
    s = Shape(64, 4096)
    cfg = GemvConfig(block=1024, tpr=1024)
    src = render(cfg, s).replace("__launch_bounds__(BLOCK, 1)", "__launch_bounds__(256, 1)")
    m = runner.measure(cfg, s, timed=False, source=src, name="planted-launch")
    assert m.status == "launch_error" and m.error
    assert runner.measure(LLAMA_CPP, s, timed=False).ok  # the runner still works afterwards
