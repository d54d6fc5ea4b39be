"""One registry of baselines (gemvtune.baselines): every kind the harness measures is in it, and the cuBLAS
fallback chain (the framework's own, else torch's, else CuPy's) is written once and used by the route, check,
the table report, the crossover and the search's summary line."""

from __future__ import annotations

import re

from conftest import ROOT

from gemvtune.baselines import BASELINES, CUBLAS_FOR, cublas_of
from gemvtune.runtime.entry import Entry
from gemvtune.runtime.route import measured


def test_every_measured_baseline_kind_is_registered():
    src = (ROOT / "gemvtune" / "runners" / "cuda" / "libtimers.py").read_text()
    kinds = set(re.findall(r'Measurement\.of\("[^"]*", "([^"]+)"', src))
    from gemvtune.runners.cuda.inductor import INDUCTOR_KIND
    from gemvtune.runners.cuda.seed import SEED_KIND

    kinds |= {SEED_KIND, INDUCTOR_KIND, "llama.cpp"}
    assert kinds >= {"cublas", "cublas-torch"} and kinds <= set(BASELINES), kinds - set(BASELINES)
    assert set(CUBLAS_FOR.values()) <= set(BASELINES)
    assert all(b.label and b.how and b.framework in ("torch", "cupy", "gemvtune") for b in BASELINES.values())


def test_the_cublas_chain():
    torch_rec, cupy_rec = {"us": 2.0}, {"us": 3.0}
    both = {"cublas-torch": torch_rec, "cublas": cupy_rec}
    assert cublas_of(both) is torch_rec and cublas_of(both, "torch") is torch_rec
    assert cublas_of(both, "cupy") is cupy_rec
    assert cublas_of({"cublas": cupy_rec}, "torch") is cupy_rec and cublas_of({"cublas-torch": torch_rec}, "cupy") is torch_rec
    assert cublas_of({"cublas-torch": {}, "cublas": cupy_rec}) is cupy_rec      # an empty record is none
    assert cublas_of({}) is None and cublas_of(None) is None and cublas_of({"llama.cpp": torch_rec}) is None
    assert cublas_of(both, "cupy", ok=lambda r: r["us"] < 2.5) is torch_rec    # a record that fails ok: the next


def test_the_route_measures_against_the_frameworks_own_cublas_then_the_other():
    entry = {"M": 64, "d": 64, "n": 1, "winner": {"us": 1.0, "config": {"family": "gemv"}},
             "baselines": {"cublas-torch": {"us": 2.0}, "cublas": {"us": 3.0, "status": "failed"}}}
    assert measured(Entry.from_json(entry), "torch")[1] == 2.0
    assert measured(Entry.from_json(entry), "cupy")[1] == 2.0     # CuPy's failed: torch's stands in
    entry["baselines"]["cublas"] = {"us": 3.0}
    assert measured(Entry.from_json(entry), "cupy")[1] == 3.0


def test_transition_and_decode_step_name_their_contenders_from_the_registry():
    """One vocabulary: every contender of the transition and of the decode step that is not gemvtune's own table is
    a registered baseline (the step's cuBLAS is the registry's chain: torch's F.linear, else cupy.matmul)."""
    from gemvtune.baselines import BASELINES, CUBLAS_FOR
    from gemvtune.bench.stepreport import IMPLS, LABELS, OURS
    from gemvtune.transition import measure as tr

    ours = OURS   # the table's kernels: tuned, the fused step, the fused step with chain PDL
    assert ours == ("tuned", "fused", "fused-pdl")
    assert [i for i in IMPLS if i not in ours] and all(i in BASELINES for i in IMPLS if i not in ours)
    assert all(LABELS[i] == BASELINES[i].label for i in IMPLS if i not in ours)
    ctx = tr.SeriesContext(None, None, 64, 128, 1000.0, 100.0)
    assert tr.cublas_series(ctx).name == CUBLAS_FOR["torch"] in BASELINES
