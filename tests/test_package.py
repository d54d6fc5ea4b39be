import subprocess
import sys
import zipfile

from conftest import ROOT


def test_import_is_light():
    code = ("import sys, gemvtune; heavy = [m for m in ('cupy', 'optuna', 'pandas', 'numpy', 'jinja2') "
            "if m in sys.modules]; print(heavy); sys.exit(1 if heavy else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr


def test_wheel_carries_templates(tmp_path):
    import pytest

    pytest.importorskip("hatchling", reason="hatchling (the build backend, in the test extra) is needed to build the wheel")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                        "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    (whl,) = tmp_path.glob("gemvtune-*.whl")
    with zipfile.ZipFile(whl) as z:
        names = set(z.namelist())
        z.extractall(tmp_path / "site")
    assert {"gemvtune/build/templates/gemv.cu.j2", "gemvtune/build/templates/_common.cuh.j2"} <= names
    # Rendered from the unpacked wheel, away from the checkout: the packaged templates are found.
    code = ("import gemvtune.build.render as r, gemvtune; print(r.templates_dir()); "
            "print(len(r.render(gemvtune.LLAMA_CPP, gemvtune.Shape(8, 8))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=tmp_path, env={"PYTHONPATH": str(tmp_path / "site")})
    assert out.returncode == 0, out.stderr
    assert str(tmp_path / "site") in out.stdout.splitlines()[0]


def test_version_is_pyprojects():
    import tomllib

    import gemvtune

    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert gemvtune.__version__ == meta["project"]["version"]
