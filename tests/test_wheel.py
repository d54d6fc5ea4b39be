"""The wheel ships the H200 table and its cost models, and the H100 table (gemvtune/tables/<gpu>/, from
results/<gpu>/ through hatch's force-include), and ``load_table()`` with no path loads the table of the GPU it runs
on: the user's own results/<gpu>/table.json if present, else the shipped one, never another GPU's. The wheel is
built from this checkout and unpacked into a folder outside it (a wheel of pure Python is a zip), as ``pip install
--target`` would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile

import pytest
from conftest import ROOT

from gemvtune.errors import UsageError
from gemvtune.runtime import tables

RESULTS = ROOT / "results"


def test_every_results_table_is_force_included_into_the_wheel():
    tomllib = pytest.importorskip("tomllib", reason="Python 3.11 reads TOML")
    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]["targets"]["wheel"][
        "force-include"]
    for p in sorted(RESULTS.glob("*/table.json")):
        for name in ("table.json", "costmodel.json", "costmodel.json.gz", "costmodel-fp8.json", "costmodel-fp8.json.gz"):
            if (p.parent / name).exists():
                src = f"results/{p.parent.name}/{name}"
                assert include.get(src) == f"gemvtune/tables/{p.parent.name}/{name}", (src, include)


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory):
    """The wheel built from this checkout, unpacked into site/ outside the checkout."""
    pytest.importorskip("hatchling", reason="building the wheel needs hatchling (the test extra has it)")
    tmp = tmp_path_factory.mktemp("wheel")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                        "-q", "-w", str(tmp / "dist"), str(ROOT)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    (wheel,) = (tmp / "dist").glob("gemvtune-*.whl")
    with zipfile.ZipFile(wheel) as z:
        z.extractall(tmp / "site")
        names = set(z.namelist())
    return tmp, names


def _run(site, cwd, code, env=None):
    e = {k: v for k, v in os.environ.items() if k != "GEMVTUNE_RESULTS"}
    e.update({"PYTHONPATH": str(site), **(env or {})})
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=e, capture_output=True, text=True, timeout=300)


def test_the_wheel_holds_the_h200_table_and_cost_model_byte_for_byte(unpacked):
    tmp, names = unpacked
    for name in ("table.json", "costmodel.json.gz", "costmodel-fp8.json.gz"):
        assert f"gemvtune/tables/nvidia-h200/{name}" in names
        assert (tmp / "site" / "gemvtune" / "tables" / "nvidia-h200" / name).read_bytes() == \
            (RESULTS / "nvidia-h200" / name).read_bytes()
    h100 = "gemvtune/tables/nvidia-h100-80gb-hbm3/table.json"   # the H100's table (no cost model of its own)
    assert h100 in names and (tmp / "site" / h100).read_bytes() == \
        (RESULTS / "nvidia-h100-80gb-hbm3" / "table.json").read_bytes()
    assert any(n.startswith("gemvtune/build/templates/") for n in names)
    assert not any(n.startswith(("results/", "tests/", "scripts/")) for n in names), sorted(names)[:20]


CODE = """
import json, gemvtune
t = gemvtune.load_table(gpu="NVIDIA H200", costmodel=None)
print(json.dumps({"path": t.path, "origin": t.origin, "entries": len(t.data["entries"]), "file": gemvtune.__file__}))
"""


def test_load_table_with_no_path_loads_the_shipped_table_outside_the_checkout(unpacked, tmp_path):
    """Which table would load, on a machine with no GPU (the GPU named): the shipped one from an empty folder,
    the user's own once results/nvidia-h200/table.json exists there, and none for a GPU gemvtune ships none for."""
    tmp, _ = unpacked
    site = tmp / "site"
    r = _run(site, tmp_path, CODE)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout)
    assert got["file"].startswith(str(site)), got        # the unpacked wheel, not the checkout
    assert got["origin"] == "shipped" and got["path"] == str(site / "gemvtune" / "tables" / "nvidia-h200" / "table.json")
    assert got["entries"] == len(json.loads((RESULTS / "nvidia-h200" / "table.json").read_text())["entries"])

    own = tmp_path / "results" / "nvidia-h200"
    own.mkdir(parents=True)
    data = json.loads((RESULTS / "nvidia-h200" / "table.json").read_text())
    first = next(iter(data["entries"]))
    data["entries"] = {first: data["entries"][first]}
    (own / "table.json").write_text(json.dumps(data))
    got = json.loads(_run(site, tmp_path, CODE).stdout)
    assert got["origin"] == "your results" and got["entries"] == 1 and got["path"] == "results/nvidia-h200/table.json"

    r = _run(site, tmp_path, "import gemvtune; gemvtune.load_table(gpu='NVIDIA B200')")
    assert r.returncode != 0 and "no table for NVIDIA B200" in r.stderr
    assert "ships tables only for nvidia-h100-80gb-hbm3, nvidia-h200" in r.stderr
    assert "gemvtune tune --hf-config" in r.stderr
    got = json.loads(_run(site, tmp_path, CODE.replace("NVIDIA H200", "NVIDIA H100 80GB HBM3")).stdout)
    assert got["origin"] == "shipped" and got["path"].endswith("gemvtune/tables/nvidia-h100-80gb-hbm3/table.json")


def test_which_table_says_which_table_would_load(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMVTUNE_RESULTS", str(tmp_path / "mine"))
    found = tables.find_table("NVIDIA H200")
    assert found.origin == "shipped" and found.path.name == "table.json" and "shipped" in str(found)
    (tmp_path / "mine" / "nvidia-h200").mkdir(parents=True)
    (tmp_path / "mine" / "nvidia-h200" / "table.json").write_text("{}")
    assert tables.find_table("NVIDIA H200").origin == "your results"
    with pytest.raises(UsageError, match="no table for NVIDIA A100-SXM4-80GB"):
        tables.find_table("NVIDIA A100-SXM4-80GB")   # another GPU's table is never picked
    assert tables.gpu_slug("NVIDIA H200") == "nvidia-h200" and "nvidia-h200" in tables.shipped_gpus()


@pytest.mark.gpu
def test_load_table_on_the_gpu_loads_the_shipped_table_of_this_gpu(unpacked, tmp_path):
    """On a GPU gemvtune ships a table for, ``load_table()`` with no argument, from a folder outside the checkout,
    loads the shipped table and runs it."""
    tmp, _ = unpacked
    code = ("import json, torch, gemvtune\n"
            "t = gemvtune.load_table()\n"
            "W = torch.randn(4096, 4096, dtype=torch.float16, device='cuda'); x = torch.randn(4096, "
            "dtype=torch.float16, device='cuda')\n"
            "y = t.gemv(W, x); ref = (W.float() @ x.float())\n"
            "print(json.dumps({'gpu': torch.cuda.get_device_name(), 'path': t.path, 'origin': t.origin, "
            "'err': float((y.float() - ref).abs().max())}))\n")
    r = _run(tmp / "site", tmp_path, code)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    if tables.gpu_slug(got["gpu"]) not in tables.shipped_gpus():
        pytest.skip(f"gemvtune ships no table for {got['gpu']}")
    assert got["origin"] == "shipped" and got["path"].startswith(str(tmp / "site")), got
    assert got["err"] < 0.5, got


def test_predict_outside_the_checkout_uses_the_shipped_cost_model(unpacked, tmp_path):
    """With no results folder of one's own, `gemvtune predict` answers from the cost model shipped in the wheel."""
    pytest.importorskip("lightgbm", reason="the cost model needs LightGBM (gemvtune[model])")
    tmp, _ = unpacked
    e = {k: v for k, v in os.environ.items() if k != "GEMVTUNE_RESULTS"}
    e["PYTHONPATH"] = str(tmp / "site")
    r = subprocess.run([sys.executable, "-m", "gemvtune", "predict", "--shape", "5120x4096"], cwd=tmp_path, env=e,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-1500:]
    assert "gemv" in r.stdout and "%" in r.stdout, r.stdout[-1500:]
