"""The family registry is what render, search and the study names read (CPU only)."""

import dataclasses

import jinja2
import pytest

from gemvtune import families
from gemvtune.families import DEFAULT_FAMILY, FAMILIES, FAMILY_NAMES
from gemvtune.render import render
from gemvtune.search import study_name
from gemvtune.shapes import Shape


def test_render_reads_the_family_template(monkeypatch):
    s = Shape(64, 4096)
    for name, fam in FAMILIES.items():
        assert render(fam.seed, s)   # each family's seed renders from its own template
        monkeypatch.setitem(families.FAMILIES, name, dataclasses.replace(fam, template="no-such.cu.j2"))
        with pytest.raises(jinja2.TemplateNotFound):
            render(fam.seed, s)
        monkeypatch.setitem(families.FAMILIES, name, fam)


def test_study_names_come_from_the_registry(monkeypatch):
    s = Shape(14336, 4096, 2)
    assert study_name(s, "nvidia-h200") == "gemvtune-nvidia-h200-14336x4096x2"
    assert study_name(s, "nvidia-h200", "splitk") == "gemvtune-nvidia-h200-14336x4096x2-splitk"
    monkeypatch.setitem(families.FAMILIES, "splitk", dataclasses.replace(FAMILIES["splitk"], study_suffix="-sk"))
    assert study_name(s, "g", "splitk").endswith("-sk")


def test_registry_order_and_default():
    assert FAMILY_NAMES[0] == DEFAULT_FAMILY == "gemv"
    assert all(f.seed.family == n and isinstance(f.seed, f.config_cls) for n, f in FAMILIES.items())
    assert len({f.study_suffix for f in FAMILIES.values()}) == len(FAMILIES)   # study names never collide


def test_space_does_not_load_the_registry():
    """families imports the config modules; they never import families back (no import loop)."""
    import subprocess
    import sys

    code = "import sys, gemvtune.space, gemvtune.space_splitk; print('gemvtune.families' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.strip() == "False", r.stderr
