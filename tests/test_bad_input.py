"""The bad-input catalogue (listed in docs/troubleshooting.md): every case gets one
clear line on stderr naming the problem, exit code 2 for usage errors (3: no CUDA device), no
traceback, and nothing half-written."""

import json
import os
import re

import pytest
from conftest import ROOT, run_cli

from gemvtune import GemvConfig, Shape, UsageError, model_shapes, parse_config, parse_shape
from gemvtune.kernels.hfconfig import HFModel, read_hf_config
from gemvtune.runtime.table import load_table

SWEEPS = str(ROOT / "results" / "nvidia-h200" / "measurements")
TABLE = ROOT / "results" / "nvidia-h200" / "table.json"


def _files(tmp):
    """The bad files the catalogue points at."""
    (tmp / "unknown.json").write_text(json.dumps([{"vec": "half8", "colour": "red"}]))
    (tmp / "range.json").write_text(json.dumps([{"block": 48}]))
    (tmp / "notjson.json").write_text("{vec: half8")
    (tmp / "empty.json").write_text("")
    (tmp / "trunc.json").write_text(TABLE.read_text()[:500])
    data = json.loads(TABLE.read_text())
    (tmp / "newer.json").write_text(json.dumps({**data, "schema": 99}))
    (tmp / "list.json").write_text("[1, 2]")
    other = {**data, "gpu": {**data["gpu"], "name": "NVIDIA A100-SXM4-80GB"}}
    (tmp / "other-gpu").mkdir()
    (tmp / "other-gpu" / "table.json").write_text(json.dumps(other))
    hf = json.loads((ROOT / "gemvtune" / "kernels" / "hf_configs" / "llama-3-8b.json").read_text())
    (tmp / "hf-float.json").write_text(json.dumps({**hf, "hidden_size": 4096.0}))
    (tmp / "hf-missing.json").write_text(json.dumps({k: v for k, v in hf.items() if k != "intermediate_size"}))
    (tmp / "hf-bool.json").write_text(json.dumps({**hf, "vocab_size": True}))
    (tmp / "hf-heads.json").write_text(json.dumps({**hf, "num_attention_heads": 30}))
    (tmp / "hf-huge.json").write_text(json.dumps({**hf, "vocab_size": 10**10}))
    (tmp / "moe-missing.json").write_text(json.dumps({**hf, "model_type": "mixtral", "num_local_experts": 8}))
    (tmp / "moe-unknown.json").write_text(json.dumps({**hf, "model_type": "olmoe", "num_experts": 64}))
    text = {k: v for k, v in hf.items() if k != "hidden_size"}
    (tmp / "mm-missing.json").write_text(json.dumps({"model_type": "llava", "text_config": text, "vision_config": {}}))
    (tmp / "hf-folder").mkdir()
    ro = tmp / "ro"
    ro.mkdir()
    os.chmod(ro, 0o500)


# (what, args, needle in stderr, exit code); {tmp} is the test's folder
CLI_CASES = [
    ("shape without d", ["space", "--shape", "14336"], "malformed shape", 2),
    ("shape with a unit", ["render", "--shape", "14336x4096x", "--config", "llama"], "malformed shape", 2),
    ("zero M", ["space", "--shape", "0x4096"], ">= 1", 2),
    ("negative d", ["space", "--shape", "64x-8"], "malformed shape", 2),
    ("fractional M", ["space", "--shape", "1.5x4096"], "malformed shape", 2),
    ("huge shape", ["space", "--shape", "9999999x9999999"], "more than any GPU holds", 2),
    ("batch zero", ["space", "--shape", "64x64", "--batch", "0"], "outside 1..16", 2),
    ("batch too large", ["search", "--shape", "64x64", "--batch", "17", "--replay", SWEEPS], "outside 1..16", 2),
    ("malformed batch list", ["space", "--shape", "64x64", "--batch", "1,two"], "malformed batch list", 2),
    ("d not divisible by the vector", ["render", "--shape", "64x4100", "--config", "vec=half8"], "not divisible", 2),
    ("unknown sampler", ["search", "--shape", "64x64", "--sampler", "annealing"], "'annealing' is not one of 'tpe'", 2),
    ("unknown model preset", ["search", "--model", "gpt-9"], "unknown model", 2),
    ("unknown config preset", ["render", "--shape", "64x64", "--config", "llama9"], "malformed config item", 2),
    ("unknown family", ["search", "--shape", "64x64", "--family", "gemm", "--replay", SWEEPS], "unknown family", 2),
    ("unknown parameter", ["render", "--shape", "64x64", "--config", "colour=red"], "unknown gemv parameter", 2),
    ("trials zero", ["search", "--shape", "64x64", "--trials", "0"], "not in the range 1<=x<=10000", 2),
    ("trials negative", ["search", "--shape", "64x64", "--trials", "-5"], "not in the range 1<=x<=10000", 2),
    ("trials without end", ["search", "--shape", "64x64", "--trials", "100000000"], "1<=x<=10000", 2),
    ("trials not a number", ["search", "--shape", "64x64", "--trials", "many"], "is not a valid integer", 2),
    ("timeout zero", ["search", "--shape", "64x64", "--timeout", "0"], "--timeout", 2),
    ("top-k zero", ["search", "--shape", "64x64", "--top-k", "0"], "--top-k", 2),
    ("search seed negative", ["search", "--shape", "64x64", "--seed", "-1"], "--seed", 2),
    ("config file, unknown key", ["compile-check", "--shape", "64x64", "--configs", "{tmp}/unknown.json"],
     "unknown gemv parameter", 2),
    ("config file, value out of range", ["compile-check", "--shape", "64x64", "--configs", "{tmp}/range.json"],
     "block=48 is not one of", 2),
    ("config file not JSON", ["compile-check", "--shape", "64x64", "--configs", "{tmp}/notjson.json"], "not valid JSON", 2),
    ("config file missing", ["compile-check", "--shape", "64x64", "--configs", "{tmp}/none.json"], "does not exist", 2),
    ("table missing", ["report", "--table", "{tmp}/none.json"], "does not exist", 2),
    ("table empty", ["report", "--table", "{tmp}/empty.json"], "is empty", 2),
    ("table truncated", ["report", "--table", "{tmp}/trunc.json"], "not valid JSON", 2),
    ("table of a newer schema", ["report", "--table", "{tmp}/newer.json"], "newer gemvtune", 2),
    ("not a table", ["report", "--table", "{tmp}/list.json"], "not a gemvtune table", 2),
    ("table made on another GPU model", ["search", "--shape", "4096x4096", "--replay", SWEEPS, "--trials", "3",
                                         "--results", "{tmp}/other-gpu"], "use a table per GPU", 2),
    ("malformed storage URL", ["search", "--shape", "4096x4096", "--replay", SWEEPS, "--storage", "nonsense",
                               "--results", "{tmp}/s1"], "malformed --storage", 2),
    ("unreachable storage", ["search", "--shape", "4096x4096", "--replay", SWEEPS, "--storage",
                             "postgresql://nobody@127.0.0.1:1/none", "--results", "{tmp}/s2"], "cannot open storage", 2),
    ("unwritable results folder", ["search", "--shape", "4096x4096", "--replay", SWEEPS, "--results", "{tmp}/ro/x"],
     "not writable", 2),
    ("results folder under a file", ["search", "--shape", "4096x4096", "--replay", SWEEPS, "--results",
                                     "{tmp}/empty.json/x"], "not writable", 2),
    ("no recorded sweep for the shape", ["search", "--shape", "1000x1000", "--replay", SWEEPS], "sweep", 2),
    ("HF config, float size", ["search", "--hf-config", "{tmp}/hf-float.json", "--results", "{tmp}/h1"],
     "'hidden_size' must be a positive integer, got 4096.0", 2),
    ("HF config, missing field", ["search", "--hf-config", "{tmp}/hf-missing.json", "--results", "{tmp}/h2"],
     "'intermediate_size' is missing", 2),
    ("HF config, bool size", ["search", "--hf-config", "{tmp}/hf-bool.json", "--fused"], "'vocab_size' must be", 2),
    ("HF config, heads do not divide hidden", ["search", "--hf-config", "{tmp}/hf-heads.json"],
     "'num_attention_heads' (30) does not divide", 2),
    ("HF config, absurd size", ["search", "--hf-config", "{tmp}/hf-huge.json"], "lm_head (vocab_size x hidden_size)", 2),
    ("HF config not JSON", ["search", "--hf-config", "{tmp}/notjson.json"], "not valid JSON", 2),
    ("HF config not an object", ["search", "--hf-config", "{tmp}/list.json"], "not a JSON object", 2),
    ("HF config missing", ["search", "--hf-config", "{tmp}/none.json"], "does not exist", 2),
    ("HF config folder without one", ["search", "--hf-config", "{tmp}/hf-folder"], "holds no config.json", 2),
    ("--fused without a model", ["search", "--shape", "64x64", "--fused"], "--fused", 2),
    ("--tp without a model", ["search", "--shape", "64x64", "--tp", "2"], "--tp picks one GPU's shards", 2),
    ("shapes without a model", ["shapes", "--tp", "2"], "shapes needs one model", 2),
    ("TP that does not divide the heads", ["shapes", "--model", "llama-3-70b", "--tp", "3"],
     "does not divide num_attention_heads (64)", 2),
    ("HF config, mixture of experts short of a field", ["shapes", "--hf-config", "{tmp}/moe-missing.json"],
     "'num_experts_per_tok' is missing", 2),
    ("HF config, mixture of experts of an unknown kind", ["search", "--hf-config", "{tmp}/moe-unknown.json"],
     "of a kind gemvtune does not read", 2),
    ("HF config, multimodal text model short of a field", ["shapes", "--hf-config", "{tmp}/mm-missing.json"],
     "text_config: required field 'hidden_size' is missing", 2),
    ("no CUDA device", ["search", "--shape", "4096x4096", "--trials", "3", "--results", "{tmp}/g"], "CUDA", 3),
    ("unknown or unsupported architecture", ["compile-check", "--shape", "64x64", "--arch", "sm_75"],
     "bad architecture 'sm_75' (sm_75 is older than sm_80", 2),
]


@pytest.fixture(scope="module")
def tmp(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    _files(d)
    yield d
    os.chmod(d / "ro", 0o700)


@pytest.mark.parametrize("what,args,needle,code", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_cli_catalogue(tmp, what, args, needle, code):
    if code == 3:
        from gemvtune.device._cupy import cuda_available

        if not cuda_available():
            pytest.skip("a CUDA device answers here")
    if what == "unwritable results folder" and os.geteuid() == 0:
        pytest.skip("root writes through read-only permissions")
    before = {p: p.read_bytes() for p in tmp.rglob("*") if p.is_file()}
    r = run_cli(*[a.replace("{tmp}", str(tmp)) for a in args])
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == code, (r.returncode, r.stderr)
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in r.stderr, r.stderr
    after = {p: p.read_bytes() for p in tmp.rglob("*") if p.is_file() and p in before}
    assert after == before                                    # nothing that was there is changed
    assert not [p for p in tmp.rglob("*") if p.is_file() and p not in before and p.suffix in (".json", ".csv")]


API_CASES = [
    ("shape zero", lambda: Shape(0, 4096), ">= 1"),
    ("shape batch 17", lambda: Shape(64, 64, 17), "above the supported 16"),
    ("shape not an int", lambda: Shape(64.0, 64), "must be an integer"),
    ("parse a malformed shape", lambda: parse_shape("64 by 64"), "malformed shape"),
    ("config out of range", lambda: GemvConfig.from_dict({"vec": "half16"}), "not one of"),
    ("config of another family", lambda: GemvConfig.from_dict({"family": "splitk"}), "is not 'gemv'"),
    ("config JSON broken", lambda: parse_config("{vec"), "not valid JSON"),
    ("table missing", lambda: load_table("/nonexistent/table.json"), "does not exist"),
    ("HF config missing", lambda: read_hf_config("/nonexistent/config.json"), "does not exist"),
    ("HF config, float size", lambda: HFModel.from_dict({"model_type": "llama", "hidden_size": 64.0}),
     "'hidden_size' must be a positive integer, got 64.0"),
    ("HF config, not an object", lambda: HFModel.from_dict([1]), "not a JSON object"),
    ("model preset unknown", lambda: model_shapes("gpt-9", fused=True), "unknown model preset"),
]


@pytest.mark.parametrize("what,f,needle", API_CASES, ids=[c[0] for c in API_CASES])
def test_api_catalogue(what, f, needle):
    with pytest.raises(UsageError, match=re.escape(needle)) as e:
        f()
    assert "\n" not in str(e.value)


def test_gemv_without_a_device_is_one_clear_error():
    import numpy as np

    from gemvtune.device._cupy import cuda_available
    from gemvtune.errors import NoDeviceError

    if not cuda_available():
        pytest.skip("a CUDA device answers here")
    with pytest.raises(NoDeviceError, match="CUDA"):
        load_table(TABLE).gemv(np.zeros((64, 64), np.float16), np.zeros(64, np.float16))


def test_nothing_from_a_user_is_executed():
    """No eval/exec, no pickle of user files, in the package; tables and configs are JSON."""
    src = "\n".join(p.read_text() for p in (ROOT / "gemvtune").rglob("*.py"))
    assert not re.search(r"(?<![.\w])(eval|exec)\(", src)   # the builtins; a module's .eval() is not one
    assert "pickle" not in src and "yaml.load(" not in src


# ---- Issue 17: command-line conventions and packaging (appended; the same rules as above) ----------

BENCH_CSV = str(ROOT / "tests" / "data" / "bench-20261129-121850.csv")

CLI_CASES_17 = [
    ("negative seed", ["compile-check", "--shape", "64x64", "--seed", "-1"], "-1 is not in the range x>=0", 2),
    ("negative seed, verify", ["verify", "--shape", "64x64", "--seed", "-1"], "-1 is not in the range x>=0", 2),
    ("negative seed, bench", ["bench", "kernels", "--shape", "64x64", "--configs", "sample:2", "--seed", "-3"],
     "-3 is not in the range x>=0", 2),
    ("unknown model preset, bench", ["bench", "kernels", "--model", "gpt-9"], "unknown model preset 'gpt-9'; known: llama-3-8b", 2),
    ("option value out of range", ["compile-check", "--shape", "64x64", "--jobs", "0"], "not in the range", 2),
    ("unknown option", ["space", "--shape", "64x64", "--colour", "red"], "No such option '--colour'", 2),
    ("missing option", ["render"], "Missing option '--shape'", 2),
    ("CSV into a missing folder", ["report", "--table", str(TABLE), "--csv", "{tmp}/missing/dir/x.csv"],
     "folder {tmp}/missing/dir does not exist", 2),
    ("CSV onto a folder", ["report", "--table", str(TABLE), "--csv", "{tmp}/hf-folder"], "is a directory", 2),
    ("markdown into a missing folder", ["summarize", BENCH_CSV, "--md", "{tmp}/missing/x.md"], "does not exist", 2),
    ("summarize a file that is not a bench CSV", ["summarize", "{tmp}/list.json"], "cannot summarize", 2),
]


@pytest.mark.parametrize("what,args,needle,code", CLI_CASES_17, ids=[c[0] for c in CLI_CASES_17])
def test_cli_catalogue_17(tmp, what, args, needle, code):
    test_cli_catalogue(tmp, what, args, needle.replace("{tmp}", str(tmp)), code)


@pytest.mark.parametrize("driver,runtime,needles", [
    (None, 13020, ["no NVIDIA driver is installed"]),
    (12080, 13020, ["supports CUDA 12.8, too old for this install's CUDA 13.2", "pip uninstall -y cupy-cuda13x",
                    "gemvtune[cu12]", "a driver >= 580"]),
    (11080, 12090, ["supports CUDA 11.8", "install a driver >= 525"]),
    (13000, 12090, ["cudaErrorNoDevice", "driver supports CUDA 13.0"]),
], ids=["no driver", "driver too old for CUDA 13", "driver too old for CUDA 12", "no device"])
def test_no_device_line_says_which_case(driver, runtime, needles):
    from gemvtune.device._cupy import diagnose

    line = diagnose("cudaErrorNoDevice: no CUDA-capable device is detected", driver, runtime)
    assert "\n" not in line and line.startswith("no CUDA device answers")
    assert all(n in line for n in needles), line


def test_gp_sampler_without_its_packages(monkeypatch):
    """GP needs torch and scipy, which are optional: a study leaves it out saying so, refuses it alone."""
    import gemvtune.tuning.samplers as samplers
    from gemvtune.tuning.study import usable_samplers

    monkeypatch.setattr(samplers, "gp_missing", lambda load=True: "the gp sampler needs torch and scipy "
                        "(scipy is missing: pip install 'gemvtune[gp]')")
    said = []
    assert usable_samplers(["tpe", "gp", "random"], said.append) == ["tpe", "random"]
    assert len(said) == 1 and "left out gp" in said[0] and "gemvtune[gp]" in said[0]
    with pytest.raises(UsageError, match=re.escape("gemvtune[gp]")):
        usable_samplers(["gp"])
    with pytest.raises(UsageError, match=re.escape("gemvtune[gp]")):
        samplers.make_sampler("gp", 0)


def test_gp_study_alone_without_its_packages_is_one_line(tmp_path):
    from gemvtune.tuning.samplers import gp_missing

    if not gp_missing(load=False):
        pytest.skip("torch and scipy are installed here")
    r = run_cli("study", "--sweeps", SWEEPS, "--samplers", "gp", "--out", str(tmp_path))
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "gemvtune[gp]" in lines[0], r.stderr


def test_torch_api_without_torch_is_one_clear_error():
    import subprocess
    import sys

    code = ("import sys; sys.modules['torch'] = None\nimport gemvtune\ntry:\n    gemvtune.GemvLinear\n"
            "except ImportError as e:\n    print(e); sys.exit(0)\nsys.exit(1)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0 and "needs PyTorch" in r.stdout and "Traceback" not in r.stderr, r.stdout + r.stderr


# ---- issue 17, items 5 and 6: tables and sweeps that load_table / the replay runner refuse ------------
def _bad_tables_and_sweeps(tmp):
    """Tables that break the schema in one field each, and sweep folders broken in one way each."""
    import gzip
    import shutil

    data = json.loads(TABLE.read_text())
    key = "4096x4096x1"

    def table(name, change):
        d = json.loads(json.dumps(data))
        d["entries"] = {key: d["entries"][key]}
        change(d["entries"][key])
        (tmp / name).write_text(json.dumps(d))

    table("nan-us.json", lambda e: e["winner"].update(us=float("nan")))
    table("tpr-over-block.json", lambda e: e["winner"]["config"].update(tpr=512, block=256))
    table("string-number.json", lambda e: e.update(M="4096"))
    table("baseline-list.json", lambda e: e["baselines"].update({"cublas-torch": [47.2]}))
    d = json.loads(json.dumps(data))
    d["entries"] = {key: [1, 2]}
    (tmp / "entry-list.json").write_text(json.dumps(d))
    sweep = ROOT / "results" / "nvidia-h200" / "measurements" / "sweep-14336x4096x1.csv.gz"
    meta = json.loads(sweep.with_name("sweep-14336x4096x1.json").read_text())
    for name, meta_change, csv in (
            ("sw-name", lambda m: m["device"].update(name="NVIDIA H200\n#include <cstdlib>"), None),
            ("sw-grid", lambda m: m["grid"].update(block=[256, "256; system()"]), None),
            ("sw-column", None, "non-numeric"),
            ("sw-trunc", None, "truncate")):
        folder = tmp / name
        folder.mkdir()
        m = json.loads(json.dumps(meta))
        if meta_change:
            meta_change(m)
        (folder / "sweep-14336x4096x1.json").write_text(json.dumps(m))
        if csv is None:
            shutil.copy(sweep, folder / sweep.name)
        elif csv == "truncate":
            raw = sweep.read_bytes()
            (folder / sweep.name).write_bytes(raw[: len(raw) // 2])
        else:   # the first row's us_median a word
            with gzip.open(sweep, "rt") as f:
                head, rest = f.read().split("\n", 1)
            cols = head.split(",")
            i = cols.index("us_median")
            first, rest = rest.split("\n", 1)
            row = first.split(",")
            row[i] = "fast"
            with gzip.open(folder / sweep.name, "wt") as f:
                f.write("\n".join([head, ",".join(row), rest]))


TABLE_SWEEP_CASES = [
    ("table with a NaN winner time", ["report", "--table", "{tmp}/nan-us.json"], "winner.us is nan", 2),
    ("table with tpr above the block", ["export", "--table", "{tmp}/tpr-over-block.json", "--out", "{tmp}/o.cuh"],
     "tpr=512 threads per row exceed the block of 256", 2),
    ("table with a string for a number", ["report", "--table", "{tmp}/string-number.json"],
     "M must be an integer, got str", 2),
    ("table with a baseline of the wrong type", ["report", "--table", "{tmp}/baseline-list.json"],
     "baselines.cublas-torch must be a JSON object", 2),
    ("table entry not an object", ["export", "--table", "{tmp}/entry-list.json", "--out", "{tmp}/o.cuh"],
     "entry must be a JSON object", 2),
    ("sweep sidecar with code in the GPU name", ["search", "--shape", "14336x4096", "--replay", "{tmp}/sw-name",
                                                 "--results", "{tmp}/r1"], "device.name", 2),
    ("sweep sidecar grid value outside the domain", ["search", "--shape", "14336x4096", "--replay", "{tmp}/sw-grid",
                                                     "--results", "{tmp}/r2"], "grid.block", 2),
    ("sweep CSV with a non-numeric time", ["search", "--shape", "14336x4096", "--replay", "{tmp}/sw-column",
                                           "--results", "{tmp}/r3"], "column us_median is not numeric", 2),
    ("truncated sweep .csv.gz", ["search", "--shape", "14336x4096", "--replay", "{tmp}/sw-trunc",
                                 "--results", "{tmp}/r4"], "cannot be read", 2),
]


@pytest.fixture(scope="module")
def tmp_tables(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad-tables")
    _bad_tables_and_sweeps(d)
    return d


@pytest.mark.parametrize("what,args,needle,code", TABLE_SWEEP_CASES, ids=[c[0] for c in TABLE_SWEEP_CASES])
def test_cli_catalogue_tables_and_sweeps(tmp_tables, what, args, needle, code):
    before = {p: p.read_bytes() for p in tmp_tables.rglob("*") if p.is_file()}
    r = run_cli(*[a.replace("{tmp}", str(tmp_tables)) for a in args])
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == code, (r.returncode, r.stderr)
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in r.stderr, r.stderr
    assert {p: p.read_bytes() for p in tmp_tables.rglob("*") if p.is_file() and p in before} == before
    assert not [p for p in tmp_tables.rglob("*") if p.is_file() and p not in before and p.suffix in (".json", ".csv", ".cuh")]


# Issue 17, item 3: a search checks every output and every existing table before it measures anything.
def _preflight_files(tmp):
    data = json.loads(TABLE.read_text())
    (tmp / "nogpu.json").write_text(json.dumps({k: v for k, v in data.items() if k != "gpu"}))
    (tmp / "noentries.json").write_text(json.dumps({k: v for k, v in data.items() if k != "entries"}))
    (tmp / "afile").write_text("")
    (tmp / "jdir").mkdir()
    (tmp / "loop.json").symlink_to(tmp / "loop.json")
    (tmp / "ro").mkdir()
    os.chmod(tmp / "ro", 0o500)


PREFLIGHT_CASES = [
    ("table in a folder under a file", ["--table", "{tmp}/afile/table.json"], "is not a folder", 2),
    ("table in a read-only folder", ["--table", "{tmp}/ro/table.json"], "not writable", 2),
    ("table missing its gpu", ["--table", "{tmp}/nogpu.json"], "gpu", 2),
    ("table missing its entries", ["--table", "{tmp}/noentries.json"], "not a gemvtune table", 2),
    ("table a symlink loop", ["--table", "{tmp}/loop.json"], "leads nowhere", 2),
    ("journal a folder", ["--storage", "journal:{tmp}/jdir"], "is not a file", 2),
    ("journal in a folder under a file", ["--storage", "journal:{tmp}/afile/j.log"], "is not a folder", 2),
    ("sqlite in a folder under a file", ["--storage", "sqlite:///{tmp}/afile/s.db"], "is not a folder", 2),
    ("workers, table in a folder under a file", ["--workers", "2", "--table", "{tmp}/afile/table.json"],
     "is not a folder", 2),
    ("workers, results under a file", ["--workers", "2", "--results", "{tmp}/afile/res"], "not writable", 2),
]


@pytest.fixture(scope="module")
def tmp_preflight(tmp_path_factory):
    d = tmp_path_factory.mktemp("preflight")
    _preflight_files(d)
    yield d
    os.chmod(d / "ro", 0o700)


@pytest.mark.parametrize("what,args,needle,code", PREFLIGHT_CASES, ids=[c[0] for c in PREFLIGHT_CASES])
def test_search_preflight(tmp_preflight, what, args, needle, code):
    """Fails at once: one line, exit 2, nothing measured (no journal, no trial CSV), nothing changed."""
    if "read-only" in what and os.geteuid() == 0:
        pytest.skip("root writes through read-only permissions")
    tmp = tmp_preflight
    res = tmp / f"res-{abs(hash(what))}"
    before = {p: p.read_bytes() for p in tmp.rglob("*") if p.is_file() and not p.is_symlink()}
    args = ["search", "--shape", "4096x4096", "--replay", SWEEPS, "--trials", "3", "--results", str(res), *args]
    r = run_cli(*[a.replace("{tmp}", str(tmp)) for a in args])
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == code, (r.returncode, r.stderr)
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in r.stderr, r.stderr
    assert "started" not in r.stdout and "ceiling" not in r.stdout, r.stdout   # no worker, no measurement
    after = {p: p.read_bytes() for p in tmp.rglob("*") if p.is_file() and not p.is_symlink() and p in before}
    assert after == before
    assert not [p for p in tmp.rglob("*") if p.is_file() and p not in before and p.suffix in (".json", ".csv", ".log", ".db")]


def test_troubleshooting_lists_every_case():
    """The troubleshooting table (docs/troubleshooting.md) shows each case of the catalogue as it is tested."""
    text = (ROOT / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
    sweeps = os.path.relpath(SWEEPS, ROOT).replace(os.sep, "/")
    missing = []
    for what, args, needle, code in CLI_CASES:
        cmd = " ".join(a.replace("{tmp}", "…").replace(SWEEPS, sweeps) for a in args)
        row = f"| {what}: `gemvtune {cmd}` | one line containing “{needle}” | {code} |"
        if row not in text:
            missing.append(row)
    assert not missing, "docs/troubleshooting.md's table lacks:\n" + "\n".join(missing)
