"""Pictures of a search (issue 11): convergence and parameter importance from a real study (a replay
search on a committed H200 sweep), through the CLI."""

import pandas as pd
from conftest import ROOT, run_cli

from gemvtune.runners.replay import STUDY_SUFFIX

SWEEPS = str(ROOT / "results" / "nvidia-h200" / "measurements")
NAME = "gemvtune-nvidia-h200-4096x4096x1" + STUDY_SUFFIX   # a replay search's study


def test_plot_study_from_a_search(tmp_path):
    res = tmp_path / "res"
    r = run_cli("search", "--shape", "4096x4096", "--replay", SWEEPS, "--trials", "30", "--results", str(res))
    assert r.returncode == 0, r.stderr
    out = tmp_path / "plots"
    r = run_cli("plot-study", "--storage", f"journal:{res / 'optuna-journal.log'}", "--study", NAME, "--out", str(out))
    assert r.returncode == 0, r.stderr
    for suffix in ("convergence.png", "importance.png", "convergence.csv", "importance.csv"):
        assert (out / f"{NAME}-{suffix}").stat().st_size > 0, suffix
    conv = pd.read_csv(out / f"{NAME}-convergence.csv")
    assert len(conv) == 30 and conv.measured.tolist() == list(range(1, 31))
    best = conv.best_us.dropna()
    assert (best.diff().dropna() <= 0).all() and best.iloc[-1] == conv.us.min()   # best so far never rises
    assert conv.seed.iloc[0] and conv.label.iloc[0] == "b256.half2.fp32.t256.u1.k1.default.ldg"  # llama.cpp first
    imp = pd.read_csv(out / f"{NAME}-importance.csv")
    assert set(imp.param) <= {"block", "vec", "acc", "tpr", "unroll", "split_k", "hint", "x_load", "pdl"}
    assert abs(imp.importance.sum() - 1.0) < 1e-3   # (written with 4 significant digits)


def test_plot_study_unknown_study(tmp_path):
    r = run_cli("plot-study", "--storage", f"journal:{tmp_path / 'j.log'}", "--study", "nope", "--out", str(tmp_path))
    assert r.returncode == 2 and "no study 'nope'" in r.stderr and "Traceback" not in r.stderr


def test_optuna_dashboard_opens_the_journal(tmp_path):
    """The search's storage opens as is in optuna-dashboard, and its trials carry the measurements."""
    import json
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    import pytest

    pytest.importorskip("optuna_dashboard")
    res = tmp_path / "res"
    r = run_cli("search", "--shape", "4096x4096", "--replay", SWEEPS, "--trials", "12", "--results", str(res))
    assert r.returncode == 0, r.stderr
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = ("import optuna_dashboard, sys; optuna_dashboard.run_server(sys.argv[1], host='127.0.0.1', "
            "port=int(sys.argv[2]))")
    p = subprocess.Popen([sys.executable, "-c", code, str(res / "optuna-journal.log"), str(port)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        data = None
        for _ in range(100):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies", timeout=2) as f:
                    data = json.load(f)
                break
            except OSError:
                time.sleep(0.2)
        assert data is not None, "the dashboard did not answer"
        sid = next(s["study_id"] for s in data["study_summaries"] if s["study_name"] == NAME)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies/{sid}?after=0", timeout=10) as f:
            study = json.load(f)
        measured = [t for t in study["trials"] if any(a["key"] == "measured" and a["value"] == "True"
                                                      for a in t["user_attrs"])]
        assert len(measured) == 12
        keys = {a["key"] for a in measured[0]["user_attrs"]}
        assert {"label", "status", "us_median", "gbps", "pct_ceiling", "registers", "worker", "device"} <= keys
    finally:
        p.kill()
        p.wait()


def test_importance_falls_back_without_fanova(tmp_path, monkeypatch):
    """fANOVA needs scikit-learn; without it the importances come from PED-ANOVA."""
    import optuna

    from gemvtune.reports.studyplots import importances

    def no_sklearn(*a, **k):
        raise ImportError("No module named 'sklearn'")

    monkeypatch.setattr(optuna.importance, "FanovaImportanceEvaluator", no_sklearn)
    study = optuna.create_study()
    for i in range(12):
        study.add_trial(optuna.trial.create_trial(
            params={"a": i % 3, "b": i % 2}, value=float(i % 3) + 0.01 * i,
            distributions={"a": optuna.distributions.CategoricalDistribution([0, 1, 2]),
                           "b": optuna.distributions.CategoricalDistribution([0, 1])},
            user_attrs={"status": "ok", "measured": True}))
    imp, how = importances(study)
    assert how == "PedAnova" and set(imp) <= {"a", "b"} and imp
