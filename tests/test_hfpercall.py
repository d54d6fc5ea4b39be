"""``gemvtune percall hf``: eager forwards of a Hugging Face model, stock against swap_linears. The paired
summary and the interleaving on fakes, the whole measurement on a tiny random Llama on the CPU (GemvLinear falls
back to F.linear there), the CLI's errors before any GPU work; on a GPU, the command end to end (marked gpu)."""

import json

import pytest
from conftest import ROOT, on_committed_gpu, run_cli
from test_hfbench import TINY

from gemvtune.hf.percall import forward_markdown, forward_summary, time_forwards

TABLE = ROOT / "results" / "nvidia-h200" / "table.json"


def test_forward_summary_pairs_the_repeats():
    ms = {"stock": [10.0, 20.0, 12.0], "gemvtune": [8.0, 25.0, 12.0]}
    s = forward_summary(ms)
    assert s["stock_ms"] == 12.0 and s["gemvtune_ms"] == 12.0 and s["ratio"] == 1.0
    assert s["pair_ratio"] == 1.0 and s["pair_ratio_min"] == 0.8 and s["pair_ratio_max"] == 1.25
    assert s["stock_ms_min"] == 10.0 and s["gemvtune_ms_max"] == 25.0 and s["repeats"] == 3
    for bad in ({"stock": [1.0], "gemvtune": []}, {"stock": [1.0]}, {"stock": [], "gemvtune": []}):
        with pytest.raises(ValueError, match="paired samples"):
            forward_summary(bad)


def test_time_forwards_alternates_the_order_and_times_blocks():
    """Each repeat times one block of each implementation, back to back, the order alternating; a block is
    synchronized before and after; the warm-up is 3 forwards of each before any timing."""
    log, now = [], [0.0]
    cost = {"stock": 2.0, "gemvtune": 1.5}       # seconds per forward on the fake clock
    cur = ["stock"]

    def use(impl):
        cur[0] = impl
        log.append(("use", impl))

    def forward():
        now[0] += cost[cur[0]]
        log.append(("fwd", cur[0]))

    out = time_forwards(forward, use, lambda: log.append(("sync",)), calls=4, repeats=3, clock=lambda: now[0])
    assert out == {"stock": [2000.0] * 3, "gemvtune": [1500.0] * 3}
    uses = [e[1] for e in log if e[0] == "use"]
    assert uses == ["stock", "gemvtune", "stock", "gemvtune", "gemvtune", "stock", "stock", "gemvtune"]
    first_sync = log.index(("sync",))
    assert [e for e in log[:first_sync] if e[0] == "fwd"] == [("fwd", "stock")] * 3 + [("fwd", "gemvtune")] * 3


def test_forward_markdown_states_the_ratio():
    row = {"model": "tiny-llama", "layers": 2, "dtype": "bfloat16", "swapped": 15, "tuned": 0, "calls": 10,
           **forward_summary({"stock": [2.0, 2.2], "gemvtune": [2.1, 2.0]})}
    md = forward_markdown(row, {"name": "NVIDIA H200", "driver": "580", "torch": "2.11"}, "gemvtune percall ...")
    assert "tiny-llama, 2 layers, bfloat16, NVIDIA H200" in md and "15 linear layers swapped" in md
    assert f"**stock / gemvtune: {row['ratio']:.3f}**" in md and "| gemvtune | 2.050 |" in md


@pytest.mark.slow  # builds and runs a transformers model on the CPU
def test_measure_hf_forward_on_cpu(tmp_path):
    pytest.importorskip("transformers")
    pytest.importorskip("torch")
    from gemvtune.hf.percall import measure_hf_forward
    from gemvtune.runtime.table import load_table

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY))
    row = measure_hf_forward(str(cfg), load_table(TABLE), layers=2, dtype="float32", calls=2, repeats=3,
                             device="cpu")
    assert row["model"] == "tiny-llama" and row["layers"] == 2 and row["swapped"] == 2 * 7 + 1
    assert row["tuned"] == 0 and row["repeats"] == 3 and row["calls"] == 2     # CPU: every layer on F.linear
    assert row["stock_ms"] > 0 and row["gemvtune_ms"] > 0 and row["ratio"] > 0


@pytest.mark.parametrize("args,needle", [
    (["hf", "{tmp}/none.json"], "none.json does not exist"),
    (["hf", "{cfg}", "--layers", "0"], "--layers must be an integer >= 1"),
    (["ops", "--layers", "2"], "No such option '--layers'"),
    (["hf", "{cfg}", "--shape", "4096x4096"], "No such option '--shape'"),
    (["hf", "{cfg}", "--batch", "4"], "No such option '--batch'"),
    (["hf", "{cfg}", "--table", "{tmp}/notable.json"], "notable.json does not exist"),
    (["hf"], "Missing argument 'CONFIG'"),
], ids=["missing config", "layers 0", "layers on ops", "with a shape", "with a batch", "missing table", "no config"])
def test_percall_hf_bad_input_is_one_line(tmp_path, args, needle):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY))
    r = run_cli("percall", *[a.format(tmp=tmp_path, cfg=cfg) for a in args])
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert needle in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


@pytest.mark.parametrize("args,needle", [
    (["--hf-config", "{tmp}/none.json"], "none.json does not exist"),
    (["--hf-config", "{cfg}", "--layers", "0"], "--layers must be an integer >= 1"),
    (["--layers", "2"], "--layers needs --hf-config"),
    (["--hf-config", "{cfg}", "--shape", "4096x4096"], "drop --shape"),
    (["--hf-config", "{cfg}", "--batch", "4"], "drop --batch"),
    (["--hf-config", "{cfg}", "--table", "{tmp}/notable.json"], "notable.json does not exist"),
], ids=["missing config", "layers 0", "layers alone", "with a shape", "with a batch", "missing table"])
def test_percall_old_spelling_is_deprecated_and_refuses_as_before(tmp_path, args, needle):
    """percall --hf-config PATH (the old spelling): one deprecation line, then the same one-line refusal."""
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY))
    r = run_cli("percall", *[a.format(tmp=tmp_path, cfg=cfg) for a in args])
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert len(lines) == 2 and "is deprecated; use 'gemvtune percall " in lines[0] and needle in lines[1], r.stderr
    assert "Traceback" not in r.stderr


def test_percall_ops_refuses_another_gpus_table_in_one_line(tmp_path, monkeypatch):
    """On a GPU of another model than the table's, percall ops (which times the table's kernels) says why in one
    line instead of failing on the kernel plan that is never made there (an H100 with the H200 table, 2026-12-05)."""
    pytest.importorskip("torch")
    import warnings

    from gemvtune.cli import percall_cmd
    from gemvtune.errors import UsageError
    from gemvtune.runtime.table import load_table

    table = load_table(TABLE, costmodel=None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table.check_device("NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(percall_cmd, "_gpu_check", lambda: None)
    monkeypatch.setattr(percall_cmd, "_table_and_out", lambda path, out: (table, tmp_path))
    with pytest.raises(UsageError, match="tuned on NVIDIA H200, this is NVIDIA H100 80GB HBM3: its kernels never run"):
        percall_cmd.run_ops(("1024x4096",), 1, str(TABLE), 10, 2, str(tmp_path), "fp16")
    assert not list(tmp_path.iterdir())


@pytest.mark.slow   # the GPU suite's second tier: -m "gpu and slow" (docs/testing.md)
@pytest.mark.gpu
def test_percall_hf_on_gpu(tmp_path):
    """The command end to end on a tiny Llama in BF16 (no tuned shape: every layer routes to F.linear): the
    files and a ratio."""
    pytest.importorskip("transformers")
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY))
    r = run_cli("percall", "hf", str(cfg), "--layers", "2", "--dtype", "bf16", "--calls", "2",
                "--repeats", "4", "--table", str(TABLE), "--out", str(tmp_path / "out"))
    assert r.returncode == 0, r.stderr
    csvs = list((tmp_path / "out").glob("percall-hf-tiny-llama-L2-bfloat16-*.csv"))
    assert len(csvs) == 1 and csvs[0].with_suffix(".md").exists() and csvs[0].with_suffix(".json").exists()
    assert "stock / gemvtune" in r.stdout and "15 linear layers swapped" in r.stdout


@pytest.mark.slow   # the GPU suite's second tier: -m "gpu and slow" (docs/testing.md)
@pytest.mark.gpu
def test_percall_shapes_on_gpu(tmp_path):
    """The command's other mode (single layers), which shares the table lookup and the file writing: the files
    and the ratio rows."""
    r = run_cli("percall", "ops", "--shape", "1024x4096", "--calls", "10", "--repeats", "2", "--table", str(TABLE),
                "--out", str(tmp_path / "out"))
    if not on_committed_gpu():   # another GPU model: the table's kernels never run here, one line and exit 2
        assert r.returncode == 2 and "its kernels never run here" in r.stderr and "Traceback" not in r.stderr, r.stderr
        return
    assert r.returncode == 0, r.stderr
    csvs = list((tmp_path / "out").glob("percall-2*.csv"))
    assert len(csvs) == 1 and csvs[0].with_suffix(".md").exists() and csvs[0].with_suffix(".json").exists()
    assert "GemvLinear / F.linear" in r.stdout and json.loads(csvs[0].with_suffix(".json").read_text())["calls"] == 10
