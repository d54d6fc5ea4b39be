"""scripts/gpu-check.sh's fp8 and unseen parts on the CPU. The unseen part weighs the zero-trial picks of models the
table never saw (a GPU then measures them), from the table with its cost models beside it. The fp8 part: where its
FP8 tune writes. On a GPU with a committed table (the H200, the H100), a copy of that GPU's (OUT/fp8/table.json), so
the new FP8 entries sit beside the committed ones; on any other GPU, or with FP8_FRESH=1, a new table (another GPU's
is not that GPU's to write: the H100 run of 2026-12-05). A
stand-in nvidia-smi names the GPU; the tune then stops for want of a CUDA device, which the part reports."""

import os
import subprocess
import sys

import pytest
from conftest import ROOT

COMMITTED = ROOT / "results" / "nvidia-h200" / "table.json"


def _part(tmp_path, gpu, part="fp8", tune_says=None, **env):
    bin_ = tmp_path / "bin"
    bin_.mkdir(parents=True)
    smi = bin_ / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\necho '{gpu}, 580.159.04'\n")
    smi.chmod(0o755)
    py = bin_ / "python3"   # (the part runs python3 -m gemvtune: this interpreter, its environment kept)
    fake = "" if tune_says is None else f'[ "$3" = tune ] && {{ printf "%s\\n" "{tune_says}"; exit 0; }}\n'
    py.write_text(f'#!/bin/sh\n{fake}exec "{sys.executable}" "$@"\n')
    py.chmod(0o755)
    out = tmp_path / "out"
    run_env = {**os.environ, "PATH": f"{bin_}{os.pathsep}{os.environ['PATH']}", "OUT": str(out),
               "FP8_SHAPES": "1024x4096", "FP8_BUDGET": "5", "T_FP8": "120", "GPU_CHECK_COMMIT": "test",
               "CUDA_VISIBLE_DEVICES": "", **env}   # (no GPU even on a machine that has one)
    r = subprocess.run(["bash", str(ROOT / "scripts" / "gpu-check.sh"), part], env=run_env, capture_output=True,
                       text=True, timeout=300)
    log = out / f"{part}.log"
    return r, out / part / "table.json", log.read_text() if log.exists() else ""


@pytest.mark.skipif(sys.platform == "win32", reason="bash script")
def test_the_fp8_part_tunes_into_a_copy_of_the_committed_table_only_on_its_gpu(tmp_path):
    r, table, log = _part(tmp_path / "h200", "NVIDIA H200")
    assert table.read_bytes() == COMMITTED.read_bytes(), log[-2000:]
    assert r.returncode != 0 and "rc=3 (tune fp8)" in log and "Traceback" not in log   # (no CUDA device here)
    r, table, log = _part(tmp_path / "h100", "NVIDIA H100 80GB HBM3")   # its own committed table since 2026-12-05
    h100 = ROOT / "results" / "nvidia-h100-80gb-hbm3" / "table.json"
    assert table.read_bytes() == h100.read_bytes() and "tune fp8" in log, log[-2000:]
    r, table, log = _part(tmp_path / "a100", "NVIDIA A100-SXM4-80GB")   # none of its own: never another GPU's
    assert not table.exists() and "tune fp8" in log, log[-2000:]
    r, table, log = _part(tmp_path / "fresh", "NVIDIA H200", FP8_FRESH="1")
    assert not table.exists() and "tune fp8" in log, log[-2000:]


@pytest.mark.skipif(sys.platform == "win32", reason="bash script")
def test_the_unseen_part_weighs_zero_trial_picks_from_the_table_with_its_cost_model(tmp_path):
    pytest.importorskip("lightgbm", reason="the zero-trial picks need the cost model (gemvtune[model])")
    models = "--model mistral-nemo-12b --tp 2;--hf-config tests/data/hf/qwen3-30b-a3b.json"
    r, copy, log = _part(tmp_path / "with", "NVIDIA H200", "unseen", UNSEEN_MODELS=models)
    assert r.returncode == 0 and log.count("rc=0 (unseen") == 2, log[-2000:]
    summary = [x for x in log.splitlines() if x.startswith("summary: ")][-1]
    assert summary.count("to a zero-trial pick") == 2 and "predicted x1." in summary, summary
    assert copy.read_bytes() == COMMITTED.read_bytes() and (copy.parent / "costmodel.json.gz").is_file()
    # a table without its cost models: no picks, nothing tested: the part fails, saying why (2026-12-05 on the H200:
    # such a copy routed three unseen models wholly to cuBLAS, and every row "passed")
    (tmp_path / "bare").mkdir()
    bare = tmp_path / "bare" / "table.json"
    bare.write_bytes(COMMITTED.read_bytes())
    r, _, log = _part(tmp_path / "without", "NVIDIA H200", "unseen", UNSEEN_MODELS=models, UNSEEN_TABLE=str(bare))
    assert r.returncode != 0 and log.count("no cost model loaded") == 2 and "zero-trial picks=1" in log, log[-2000:]
    # another GPU than the table's: its kernels never run there; not run, one line
    r, _, log = _part(tmp_path / "h100", "NVIDIA H100 80GB HBM3", "unseen", UNSEEN_MODELS=models)
    assert r.returncode != 0 and "not run: results/nvidia-h200/table.json was made on NVIDIA H200" in log, log[-2000:]


@pytest.mark.skipif(sys.platform == "win32", reason="bash script")
def test_the_unseen_part_fails_where_a_routed_row_is_slower_than_stock(tmp_path):
    """bench guard's FAIL row in a model's measurement fails the part (on the H100, 2026-12-06, four zero-trial routes
    ran 4-12% slower than cuBLAS, and the part still said rc=0)."""
    models = "--model mistral-nemo-12b --tp 2"
    row = "  n=8  tuned   stock     9.88 µs  gemvtune    11.01 µs  ×1.114  FAIL"
    r, _, log = _part(tmp_path / "fail", "NVIDIA H200", "unseen", tune_says=row, UNSEEN_MODELS=models)
    assert r.returncode != 0 and "slower than stock=1" in log, log[-2000:]
    row = "  n=8  tuned   stock     9.88 µs  gemvtune     9.01 µs  ×0.912  PASS"
    r, _, log = _part(tmp_path / "pass", "NVIDIA H200", "unseen", tune_says=row, UNSEEN_MODELS=models)
    assert r.returncode == 0 and "slower than stock" not in log, log[-2000:]


@pytest.mark.skipif(sys.platform == "win32", reason="bash script")
@pytest.mark.parametrize("gpu,against", [("NVIDIA H200", "nvidia-h200"),
                                         ("NVIDIA H100 80GB HBM3", "nvidia-h100-80gb-hbm3"),
                                         ("NVIDIA A100-SXM4-80GB", "nvidia-h200")])   # none of its own: the H200's
def test_the_tune_part_compares_against_this_gpus_committed_table(tmp_path, gpu, against):
    r, _, log = _part(tmp_path, gpu, "tune", TUNE_ARGS="--shape 1024x4096 --budget 5")
    assert f"--against results/{against}/table.json" in log and "rc=" in log, log[-2000:]


@pytest.mark.skipif(sys.platform == "win32", reason="bash script")
def test_the_suite_part_runs_the_timing_tests_alone_after_its_shards(tmp_path):
    """The shards run every GPU test but those marked timing (they assert on speed: beside five other shards on an H100,
    2026-12-05, two failed that passed alone); one process then runs those alone, and the summary counts both."""
    files = "tests/test_gpu_tiny.py tests/test_gpu_table.py"
    r, _, log = _part(tmp_path, "NVIDIA H200", "suite", SUITE_SHARDS="2", TESTS=files, T_SUITE="280")
    assert r.returncode == 0, log[-3000:]
    shards = [x for x in log.splitlines() if "--shard" in x and "pytest" in x]
    assert len(shards) == 2 and all("'gpu and not timing'" in x for x in shards), shards
    timing = (tmp_path / "out" / "suite" / "timing.log").read_text()
    assert "'gpu and timing'" in timing and "--shard" not in timing and "rc=0 (timing, alone)" in timing, timing
    assert "2 skipped" in timing, timing[-2000:]   # (no CUDA device here: the two timing tests, skipped with the reason)
    assert log.index("(shard 1/2)") < log.index("(timing, alone)")
    summary = [x for x in log.splitlines() if x.startswith("summary: ")][-1]
    assert "2 shards, then the timing tests alone: 0 passed, 0 failed, 0 error" in summary, summary
    assert "timing=0" not in summary and "3 of 3 commands rc=0" in summary, summary


@pytest.mark.skipif(sys.platform == "win32", reason="bash script")
def test_pack_leaves_the_summary_and_one_archive(tmp_path):
    """The device tool brings back at most 8 files from OUT (on 2026-12-06 a tune's table.json stayed behind):
    GPU_CHECK_PACK=1 packs every part's log and folder into OUT/gpu-check.tgz beside summary.txt."""
    import tarfile

    r, _, _ = _part(tmp_path, "NVIDIA A100-SXM4-80GB", GPU_CHECK_PACK="1")   # (the fp8 part: no committed table)
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["gpu-check.tgz", "summary.txt"], r.stderr[-2000:]
    with tarfile.open(out / "gpu-check.tgz") as t:
        names = t.getnames()
    assert "fp8.log" in names and "fp8" in names, names   # (the part's folder, whatever it holds)
