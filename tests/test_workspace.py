"""results/<gpu>/ has one owner (gemvtune.workspace): every default path is built there, and a benchmark written
into the workspace's benchmarks/ replaces that benchmark's previous run (the folder keeps the latest summary of each
benchmark) while other benchmarks, unstamped files and a folder the user named are left alone."""

from __future__ import annotations

import ast

from conftest import ROOT

from gemvtune.workspace import Workspace, gpu_slug, replace_previous


def test_paths_of_a_gpus_workspace(monkeypatch, tmp_path):
    monkeypatch.delenv("GEMVTUNE_RESULTS", raising=False)
    ws = Workspace.for_gpu("NVIDIA H200")
    assert str(ws.root) == "results/nvidia-h200" and gpu_slug("NVIDIA H200") == "nvidia-h200"
    assert ws.table.name == "table.json" and ws.costmodel.name in ("costmodel.json", "costmodel.json.gz")
    assert Workspace(tmp_path).costmodel == tmp_path / "costmodel.json"   # (neither there: the .json it would be)
    (tmp_path / "costmodel.json.gz").write_bytes(b"")
    assert Workspace(tmp_path).costmodel == tmp_path / "costmodel.json.gz"
    assert ws.benchmarks == ws.root / "benchmarks" and ws.transition == ws.benchmarks / "transition"
    assert ws.measurements.name == "measurements" and ws.searches.name == "searches" and ws.sweeps.name == "sweeps"
    monkeypatch.setenv("GEMVTUNE_RESULTS", str(tmp_path))
    assert Workspace.for_gpu("NVIDIA H200").root == tmp_path / "nvidia-h200"


def test_a_new_run_replaces_the_previous_run_of_the_same_benchmark_only(tmp_path):
    old = ["bench-tuned-20261201-000000.csv", "bench-tuned-20261201-000000-summary.md",
           "bench-tuned-20261201-000000.png"]
    new = ["bench-tuned-20261203-010203.csv", "bench-tuned-20261203-010203-summary.md"]
    keep = ["bench-tuned-bf16-20261201-000000.csv",       # another benchmark (the BF16 run)
            "hf-llama-3-8b-L32-20261201-000000.csv",      # another benchmark
            "bench-tuned-notes.md", "table.csv"]          # not a stamped run
    for n in old + new + keep:
        (tmp_path / n).write_text(n)
    (tmp_path / "bench-tuned-20261130-000000.csv.lnk").symlink_to(tmp_path / "table.csv")
    removed = replace_previous(tmp_path, "bench-tuned", "20261203-010203")
    assert sorted(p.name for p in removed) == sorted(old)
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted(new + keep + ["bench-tuned-20261130-000000.csv.lnk"])


def test_no_module_builds_a_results_path_itself():
    """Path("results") / ... appears only in gemvtune/workspace.py (and the shipped-table lookup of a checkout)."""
    offenders = []
    for p in (ROOT / "gemvtune").rglob("*.py"):
        if p.name in ("workspace.py", "tables.py"):
            continue
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Path" and node.args and \
                    isinstance(node.args[0], ast.Constant) and node.args[0].value == "results":
                offenders.append(f"{p.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders
