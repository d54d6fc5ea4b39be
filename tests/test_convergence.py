"""How searches converged (gemvtune.tuning.convergence, ``gemvtune convergence``): the best found after t trials
over the fastest known per shape and family, from search files and tables, by weight size, beside the tune's curves."""

from __future__ import annotations

import gzip
import math
import subprocess
import sys

import pytest
from conftest import ROOT

from gemvtune import Shape
from gemvtune.runtime.table import load_table
from gemvtune.tuning.convergence import Run, best_known, read_runs, shape_of, summarize

H100 = ROOT / "results" / "nvidia-h100-80gb-hbm3" / "table.json"


def _search(folder, key, rows, gz=False):
    text = "family,trial,measured,status,us_median\n" + "".join(
        f"{fam},{i},{m},{st},{us}\n" for i, (fam, m, st, us) in enumerate(rows))
    name = folder / f"search-{key}-20261206-050037.csv"
    if gz:
        (folder / (name.name + ".gz")).write_bytes(gzip.compress(text.encode()))
    else:
        name.write_text(text)


def test_a_search_files_name_gives_its_shape_and_nothing_else_does():
    assert shape_of("search-1024x4096x2-20261206-050037.csv") == Shape(1024, 4096, 2)
    # (the names search_run writes: the dtype and the weight format joined by "-")
    assert shape_of("search-4096x4096x16-bf16-20261206-050037.csv.gz") == Shape(4096, 4096, 16, "bf16")
    assert shape_of("search-4096x4096x1-e4m3-row-20261206-050037.csv") == Shape(4096, 4096, 1, "fp16", "e4m3-row")
    assert shape_of("sweep-4096x4096x1.csv.gz") is None
    for bad in ("search-1024x4096x2-20261206-050037.json", "search-0x4096x2-20261206-050037.csv",
                "search-1024x4096x2;rm-20261206-050037.csv", "search-1024x4096x2-2026.csv", "table.json"):
        assert shape_of(bad) is None, bad


def test_gaps_summaries_and_the_fastest_known_by_hand(tmp_path):
    ok = "ok"
    _search(tmp_path, "1024x4096x2", [("gemv", True, ok, 6.0), ("gemv", True, "error", "nan"), ("gemv", True, ok, 5.0),
                                      ("gemv", False, ok, 1.0),          # not measured (a duplicate): left out
                                      ("cublaslt", True, ok, 4.0)])      # a library family: left out
    _search(tmp_path, "4096x4096x2", [("ring", True, ok, 12.0), ("ring", True, ok, 10.0)], gz=True)
    (tmp_path / "search-1024x4096x2-20261206-050037.json").write_text("{}")   # (the search's record: not read)
    runs = read_runs(tmp_path)
    assert {(r.shape.key, r.family, r.us) for r in runs} == {("1024x4096@n2", "gemv", (6.0, math.inf, 5.0)),
                                                             ("4096x4096@n2", "ring", (12.0, 10.0))}
    best = best_known(runs)
    assert best == {(Shape(1024, 4096, 2), "gemv"): 5.0, (Shape(4096, 4096, 2), "ring"): 10.0}
    small, large, every = summarize(runs, best, split_mb=16, trials=(1, 2, 5))
    assert (small.label, small.searches, large.searches, every.searches) == ("weights < 16 MB", 1, 1, 2)
    assert small.at == pytest.approx({1: 0.2, 2: 0.2, 5: 0.0}) and large.at == pytest.approx({1: 0.2, 2: 0.0, 5: 0.0})
    assert small.final_mean == 0.0 and every.at[1] == pytest.approx(0.2)

    # a table's faster kernel for the shape sets the fastest known: the 8 MB search ended above it
    h100 = load_table(H100, costmodel=None)
    gemv_best = h100.entry(Shape(1024, 4096, 2)).best["gemv"].us
    best = best_known(runs, [h100])
    assert best[(Shape(1024, 4096, 2), "gemv")] == pytest.approx(min(5.0, gemv_best))
    (small, *_) = summarize(runs, best)
    assert small.final_mean == pytest.approx(5.0 / min(5.0, gemv_best) - 1)
    assert Run("x", Shape(8, 8), "gemv", (3.0, 2.0, 4.0)).gaps(2.0) == [0.5, 0.0, 0.0]


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "gemvtune", "convergence", *map(str, args)], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)


def test_the_command_prints_the_classes_beside_the_plans_curves_and_bad_folders_are_one_line(tmp_path):
    _search(tmp_path, "1024x4096x2", [("gemv", True, "ok", 6.0), ("gemv", True, "ok", 5.0)])
    _search(tmp_path, "4096x4096x2", [("ring", True, "ok", 12.0), ("ring", True, "ok", 10.0)])
    r = _cli(tmp_path, "--table", H100)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("2 searches in 1 folder(s)")
    assert any(ln.startswith("weights < 16 MB") for ln in lines) and any(ln.startswith("plan: tpe (cold)") for ln in lines)
    for bad in (tmp_path / "none", ROOT / "docs"):
        r = _cli(bad)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
    (tmp_path / "search-4096x4096x4-20261206-050037.csv").write_text("not,a\nsearch")
    r = _cli(tmp_path)
    assert r.returncode == 2 and "not a search's CSV" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_a_results_folders_packed_searches_are_read_and_the_first_searches_csvs_are_gemv(tmp_path):
    runs = read_runs(ROOT / "results" / "nvidia-h100-80gb-hbm3" / "measurements")
    assert len(runs) >= 10 and all("searches.json.xz:search-" in r.source for r in runs)
    assert {r.family for r in runs} >= {"gemv", "ring"} and "cublaslt" not in {r.family for r in runs}
    assert all(f"search-{r.shape.M}x{r.shape.d}x{r.shape.n}" in r.source for r in runs)
    (tmp_path / "search-4096x4096x1-20261129-122836.csv").write_text(
        "trial,state,measured,status,us_median\n0,COMPLETE,True,ok,12.0\n1,COMPLETE,True,ok,11.0\n")
    (run,) = read_runs(tmp_path)
    assert (run.family, run.us) == ("gemv", (12.0, 11.0))


def test_what_only_a_models_chain_may_choose_is_not_the_fastest_known(tmp_path):
    """A PDL config's isolated timing overlaps launches and no per-shape search proposes it: neither a search's PDL
    trial nor a table's PDL record sets the fastest known."""
    (tmp_path / "search-1024x4096x1-20261206-050037.csv").write_text(
        "family,trial,measured,status,us_median,p_pdl\n"
        "gemv,0,True,ok,5.0,off\ngemv,1,True,ok,3.3,on\ngemv,2,True,ok,4.5,off\n")
    (run,) = read_runs(tmp_path)
    assert run.us == (5.0, 4.5)
    from gemvtune.runtime.entry import Measured

    class OneEntry:   # a table whose only record of the shape is a PDL kernel at 3.3 µs
        shapes = [Shape(1024, 4096)]

        def entry(self, s):
            from types import SimpleNamespace

            pdl = Measured.from_json({"config": {"block": 256, "vec": "half8", "acc": "fp32", "tpr": 128, "unroll": 1,
                                                 "split_k": 1, "hint": "nc", "x_load": "ldg", "pdl": "on",
                                                 "occ": "auto"}, "us": 3.3}, "gemv")
            assert pdl.config_object().chain_only()
            return SimpleNamespace(best={"gemv": pdl}, winner=pdl)

    assert best_known([run], [OneEntry()]) == {(Shape(1024, 4096), "gemv"): 4.5}
