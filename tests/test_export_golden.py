"""Issue 18, item 5: the exported header, now rendered from templates/export_header.h.j2, is byte for
byte what the C++ strings that were in gemvtune/runtime/export.py gave (tests/data/export_*.h.golden, captured
from the header before the move). A golden file holds the header with each tuned kernel's source, which
gemvtune.build.render gives and which changes with the kernel templates, replaced by ``@KERNEL <key>@``: what
export itself writes around the kernels is pinned, and the kernels must appear in it as rendered (CPU only).

After an intended change to the header, or to the committed table:
    GEMVTUNE_UPDATE_GOLDEN=1 python -m pytest tests/test_export_golden.py
and review the golden files' diff."""

import difflib
import os

import pytest
from conftest import ROOT
from test_export import TABLE, _synthetic_table

from gemvtune.build.render import render
from gemvtune.kernels.families import is_library
from gemvtune.runtime.export import _namespaced, build_header
from gemvtune.runtime.table import entry_key, load_table

DATA = ROOT / "tests" / "data"


def skeleton(table) -> str:
    """The header with each entry's rendered kernel source, in order, replaced by its marker; a kernel
    that is not in the header as rendered fails here."""
    text, pos = build_header(table), 0
    for s in table.shapes:
        cfg, _ = table.lookup(s)
        if is_library(cfg):   # "use your BLAS": described in the header, no source of ours
            continue
        body = _namespaced(render(cfg, s))[0].strip()
        i = text.find(body, pos)
        assert i >= 0, f"{entry_key(s)}: the rendered kernel is not in the header as rendered"
        marker = f"@KERNEL {entry_key(s)}@"
        text, pos = text[:i] + marker + text[i + len(body):], i + len(marker)
    return text


@pytest.mark.parametrize("which", ["committed", "synthetic"])
def test_header_is_the_golden_one(tmp_path, which):
    table = load_table(TABLE if which == "committed" else _synthetic_table(tmp_path / "table.json"))
    golden = DATA / f"export_{which}.h.golden"
    got = skeleton(table)
    if os.environ.get("GEMVTUNE_UPDATE_GOLDEN") == "1":
        golden.write_text(got)
    want = golden.read_text()
    if got != want:
        diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True), str(golden), "now", n=2))
        pytest.fail(f"the exported header differs from {golden.name} (see this file's docstring):\n{diff[:6000]}")
