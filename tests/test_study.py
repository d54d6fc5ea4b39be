import math

import pandas as pd
from conftest import ROOT, run_cli

from gemvtune.tuning.study import summarize_runs, trials_to_within

SWEEP = ROOT / "results" / "nvidia-h200" / "measurements" / "sweep-4096x4096x1.csv.gz"


def test_trials_to_within():
    best = [12.0, 11.0, 10.3, 10.15, 10.0]
    assert trials_to_within(best, 10.0, 0.05) == 3
    assert trials_to_within(best, 10.0, 0.02) == 4
    assert trials_to_within(best, 10.0, 0.01) == 5
    assert math.isinf(trials_to_within(best[:3], 10.0, 0.01))


def test_summarize_runs_pools_shapes():
    runs = pd.DataFrame([{"shape": s, "sampler": "tpe", "to_1pct": v, "to_2pct": v, "to_5pct": v}
                         for s, v in [("a", 1.0), ("a", 3.0), ("b", 5.0), ("b", math.inf)]])
    s = summarize_runs(runs)
    a = s[(s["shape"] == "a")].iloc[0]
    assert a.within2_median == 2.0 and a.within2_reached == 1.0
    pooled = s[s["shape"] == "all"].iloc[0]
    assert pooled.runs == 4 and pooled.within2_reached == 0.75 and math.isinf(pooled.within2_p90)


def test_study_cli_end_to_end(tmp_path):
    r = run_cli("study", "--sweeps", str(SWEEP), "--samplers", "tpe,random", "--seeds", "2", "--budget", "25",
                "--jobs", "2", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    for f in ("study-runs.csv", "study-summary.csv", "study-curves.csv.gz", "llama-vs-optimum.csv",
              "convergence.png", "summary.md"):
        assert (tmp_path / f).stat().st_size > 0, f
    runs = pd.read_csv(tmp_path / "study-runs.csv")
    assert len(runs) == 4 and (runs.measured == 25).all()
    md = (tmp_path / "summary.md").read_text()
    assert "| tpe |" in md and "llama.cpp config against" in md
    r = run_cli("study", "--sweeps", str(SWEEP), "--samplers", "annealing", "--out", str(tmp_path))
    assert r.returncode == 2 and "unknown sampler" in r.stderr


def test_study_resumes_from_its_journal(tmp_path):
    args = ("study", "--sweeps", str(SWEEP), "--samplers", "random", "--seeds", "3", "--budget", "10",
            "--jobs", "1", "--out", str(tmp_path))
    assert run_cli(*args).returncode == 0
    lines = (tmp_path / "study-journal.jsonl").read_text().splitlines()
    assert len(lines) == 3
    (tmp_path / "study-journal.jsonl").write_text("\n".join(lines[:2]) + "\n{\"cut")  # as if killed mid-way
    r = run_cli(*args)
    assert r.returncode == 0 and "2 searches already in" in r.stdout and "running 1" in r.stdout
    assert len(pd.read_csv(tmp_path / "study-runs.csv")) == 3
    r = run_cli(*args)  # the resumed search was journaled on a line of its own
    assert "3 searches already in" in r.stdout and "running 0" in r.stdout
