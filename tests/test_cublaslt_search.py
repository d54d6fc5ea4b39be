"""The cuBLASLt family through search, table, route and export (CPU, a fake runner that answers for cuBLASLt):
the heuristic's candidates are each measured once in its order, a refused one is a trial with its reason, the
winner can be an algorithm and the table keeps it, the route runs it only for its own shape, and the exported
header marks the shape "use your BLAS" with the algorithm's description and no source."""

from pathlib import Path

import pytest
from fakes import FakeRunner
from test_search import FLAT

from gemvtune.errors import UsageError
from gemvtune.kernels.cublaslt import CublasLtConfig
from gemvtune.kernels.families import FAMILY_NAMES
from gemvtune.kernels.gemv import LLAMA_CPP
from gemvtune.kernels.shapes import Shape
from gemvtune.runners.base import Measurement, Status
from gemvtune.runtime.export import build_header
from gemvtune.runtime.table import load_table
from gemvtune.tuning.search import SearchOptions, searchable
from gemvtune.tuning.search_run import run_searches

SHAPE = Shape(4096, 4096, 8)
FAST = CublasLtConfig(algo_id=21, tile=12, stages=8, split_k=4, reduction=2)   # split-K: the fastest
REFUSED = CublasLtConfig(algo_id=31, tile=17, stages=20)
SLOW = CublasLtConfig(algo_id=66, tile=20, stages=35, swizzle=1)
TIMES = {FAST: 9.0, SLOW: 12.5}


class LtFakeRunner(FakeRunner):
    """FakeRunner (gemv at best 10.0 µs, cuBLAS 15.0 µs) that also asks a fake cuBLASLt: three algorithms,
    one of which the library refuses when it is built."""

    def lt_problem(self):
        return None

    def lt_heuristics(self, shape, top=16):
        return [(FAST, 1 << 20), (REFUSED, 0), (SLOW, 0), (FAST, 1 << 20)][:top]

    def measure(self, config, shape, kind="variant", verify=True, timed=True, **kw):
        if config.family != "cublaslt":
            return super().measure(config, shape, kind=kind, verify=verify, timed=timed, **kw)
        self.calls.append(config)
        m = Measurement(config.label, kind, shape.M, shape.d, shape.n, Status.OK, params=config.to_dict())
        if config == REFUSED:
            m.status, m.error = Status.LAUNCH_ERROR, f"cuBLASLt refused {config.label}: CUBLAS_STATUS_NOT_SUPPORTED"
            return m
        m.us_median = m.us_min = m.us_max = TIMES[config]
        m.gbps, m.pct_ceiling = 1.0, 60.0
        return m


def _search(tmp_path, runner, families, trials=12, shape=SHAPE):
    lines = []
    opts = SearchOptions(trials=trials, rounds=2, top_k=2, progress=False, families=families, domains={"gemv": FLAT},
                         storage=f"journal:{tmp_path / 'journal.log'}")

    def writable(p):
        Path(p).mkdir(parents=True, exist_ok=True)
        return Path(p)

    table = run_searches(runner, [shape], opts, str(tmp_path / "res"), str(tmp_path / "table.json"), echo=lines.append,
                         writable=writable)
    return load_table(table), lines


def test_search_measures_the_candidates_and_an_algorithm_wins(tmp_path):
    import pandas as pd

    runner = LtFakeRunner()
    table, lines = _search(tmp_path, runner, ("gemv", "cublaslt"))
    searched = [c for c in runner.calls if c.family == "cublaslt"]
    assert searched[:3] == [FAST, REFUSED, SLOW]   # each candidate once, in the heuristic's order, then confirmation
    assert any("cublaslt: stopped at 3 of 12 measured trials: all 3 valid configs" in ln for ln in lines), lines
    e = table.entry(SHAPE)
    assert e.winner.family == "cublaslt" and e.winner.label == FAST.label and e.winner.us == 9.0
    assert e.best["cublaslt"].label == FAST.label and e.best["gemv"].us >= 10.0
    assert table.lookup(SHAPE) == (FAST, "tuned")
    (csv,) = (tmp_path / "res").glob("search-4096x4096x8-*.csv")
    rows = pd.read_csv(csv)
    lt = rows[rows.family == "cublaslt"]
    assert len(lt) == 3 and set(lt.label) == {FAST.label, REFUSED.label, SLOW.label}
    refused = lt[lt.label == REFUSED.label].iloc[0]
    assert refused.status == "launch_error" and "CUBLAS_STATUS_NOT_SUPPORTED" in refused.error   # data, not a crash
    assert all(rows[rows.family == "cublaslt"].p_algo_id.isin([21, 31, 66]))


def test_the_route_runs_the_algorithm_only_for_its_own_shape(tmp_path):
    table, _ = _search(tmp_path, LtFakeRunner(), ("gemv", "cublaslt"))
    r = table.route(SHAPE.M, SHAPE.d, SHAPE.n, "torch", "fp16")
    assert r.tuned and r.config == FAST and r.tuned_us == 9.0 and r.cublas_us == 15.0
    other = Shape(SHAPE.M, SHAPE.d, 4)
    assert table.lookup(other) == (LLAMA_CPP, "llama.cpp fallback")   # never carried to another n
    assert not table.route(other.M, other.d, other.n).tuned             # ("not in the table": cuBLAS)


def test_between_two_n_nothing_is_carried(tmp_path):
    """n = 8 (an algorithm won) and n = 16 (a kernel won): n = 12 runs cuBLAS (only a measured n runs a tuned
    kernel), neither the n = 8 algorithm nor a kernel measured at n = 8 or 16."""
    class KernelWinsAt16(LtFakeRunner):
        def lt_heuristics(self, shape, top=16):
            return [] if shape.n == 16 else super().lt_heuristics(shape, top)

    runner = KernelWinsAt16()
    _search(tmp_path, runner, ("gemv", "cublaslt"))
    table, lines = _search(tmp_path, runner, ("gemv", "cublaslt"), shape=Shape(4096, 4096, 16))
    assert any("4096x4096@n16 cublaslt: no candidates" in ln for ln in lines), lines
    assert table.entry(Shape(4096, 4096, 16)).winner.family == "gemv"
    r = table.route(4096, 4096, 12, "torch", "fp16")
    assert not r.tuned and "tuned at n=8,16 only" in r.why


def test_export_marks_the_shape_use_your_blas(tmp_path):
    table, _ = _search(tmp_path, LtFakeRunner(), ("gemv", "cublaslt"))
    text = build_header(table)
    assert "1 marked \"use your BLAS\"" in text and "// 0 tuned shape(s)" in text
    assert f"//   4096x4096x8: {FAST.describe()}" in text
    assert '{4096, 4096, 8, 21, 12, 8, 4, 2, 0, 0, 0, 0, "cublaslt:lt.a21.tile12.st8.k4.red2", "cuBLASLt algo id 21' in text
    assert "namespace gemvtune_4096_4096_8" not in text and "static inline const gemvtune_blas_algo* gemvtune_blas_algorithm" in text


def test_which_families_a_runner_searches():
    lines = []
    opts = SearchOptions(progress=False)
    assert opts.families == FAMILY_NAMES and "cublaslt" in FAMILY_NAMES
    kept = searchable(FakeRunner(), opts, lines.append)   # the default: a family the runner cannot ask is left out
    assert "cublaslt" not in kept.families and len(kept.families) == len(FAMILY_NAMES) - 1
    assert lines == ["the cublaslt family is not searched: the FakeRunner runner cannot ask cuBLASLt for algorithms "
                     "(search this family with the CUDA runner, without --watchdog)"]
    with pytest.raises(UsageError, match="cublaslt family cannot be searched here: a replayed sweep has no cuBLASLt"):
        class Replayed(LtFakeRunner):
            replayed = True

        searchable(Replayed(), SearchOptions(families=("gemv", "cublaslt")))
    assert searchable(LtFakeRunner(), opts) is opts


def test_replay_search_of_the_family_is_refused_before_any_work(tmp_path):
    """`gemvtune search --replay ... --family cublaslt`: one line, exit 2, nothing written."""
    from conftest import ROOT, run_cli

    sweeps = sorted((ROOT / "results").glob("*/measurements/sweep-*.csv.gz"))
    if not sweeps:
        pytest.skip("no recorded sweep in results/")
    s = sweeps[0]
    shape = s.name[len("sweep-"):].split(".")[0].split("-")[0].rsplit("x", 1)[0]
    r = run_cli("search", "--replay", str(s), "--shape", shape, "--family", "cublaslt", "--results", str(tmp_path / "r"))
    assert r.returncode == 2, r.stderr
    assert "a replayed sweep has no cuBLASLt" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "r" / "table.json").exists()


@pytest.mark.slow  # nvcc builds the exported header into a library
def test_header_with_a_blas_shape_compiles_and_answers(tmp_path):
    """A table with a kernel entry and a "use your BLAS" entry: the header compiles for sm_90 without warnings
    in two translation units, and its host side answers the algorithm (values, label, description) for the
    BLAS shape, nullptr elsewhere; the BLAS shape is not 'tuned' (gemvtune_gemv runs the fallback for it)."""
    import ctypes
    import json

    from test_export import _compile, _nvcc, _wrapper

    nvcc = _nvcc()
    if not nvcc:
        pytest.skip("nvcc is not on PATH")
    table, _ = _search(tmp_path, LtFakeRunner(), ("gemv", "cublaslt"))
    data = json.loads((tmp_path / "table.json").read_text())
    k = Shape(4096, 4096, 1)
    data["entries"]["4096x4096x1"] = {"M": 4096, "d": 4096, "n": 1,
                                      "winner": {"family": LLAMA_CPP.family, "config": LLAMA_CPP.to_dict()}}
    (tmp_path / "table.json").write_text(json.dumps(data))
    header = tmp_path / "g.cuh"
    header.write_text(build_header(load_table(tmp_path / "table.json")))
    srcs = []
    for tag in ("a", "b"):
        extra = ('extern "C" const void* gt_blas(int M, int d, int n) { return gemvtune_blas_algorithm(M, d, n); }\n'
                 if tag == "a" else "")
        (tmp_path / f"{tag}.cu").write_text(_wrapper(header, tag, label=tag == "a") + extra)
        srcs.append(tmp_path / f"{tag}.cu")
    _compile(nvcc, "sm_90", tmp_path, srcs, tmp_path / "libg.so")
    so = ctypes.CDLL(str(tmp_path / "libg.so"))
    so.gt_blas.restype = ctypes.c_void_p
    so.gt_label.restype = ctypes.c_char_p

    class Algo(ctypes.Structure):
        _fields_ = [(f, ctypes.c_int) for f in ("M", "d", "n", "algo_id", "tile", "stages", "split_k", "reduction",
                                                "swizzle", "custom", "inner", "cluster")] + \
                   [("label", ctypes.c_char_p), ("description", ctypes.c_char_p)]

    a = Algo.from_address(so.gt_blas(4096, 4096, 8))
    assert (a.M, a.d, a.n, a.algo_id, a.tile, a.stages, a.split_k, a.reduction) == (4096, 4096, 8, 21, 12, 8, 4, 2)
    assert a.label.decode() == f"cublaslt:{FAST.label}" and a.description.decode() == FAST.describe()
    assert not so.gt_blas(4096, 4096, 1) and not so.gt_blas(4096, 4096, 4)
    assert so.gt_tuned_a(4096, 4096, 8) == 0 and so.gt_tuned_a(k.M, k.d, k.n) == 1
    assert so.gt_label(4096, 4096, 8).decode() == f"cublaslt:{FAST.label}"
    assert so.gt_label(4096, 4096, 3).decode() == "fallback"


def test_a_budget_below_the_candidates_measures_the_heuristic_s_first(tmp_path):
    runner = LtFakeRunner()
    table, lines = _search(tmp_path, runner, ("cublaslt",), trials=2)
    assert [c for c in runner.calls if c.family == "cublaslt"][:2] == [FAST, REFUSED]
    import pandas as pd

    (csv,) = (tmp_path / "res").glob("search-*.csv")
    assert list(pd.read_csv(csv).label) == [FAST.label, REFUSED.label]   # nothing left queued beyond the budget
    assert table.entry(SHAPE).best["cublaslt"].label == FAST.label
