"""Issue 18, item 5: the exported header, now rendered from templates/export_header.h.j2, is byte for
byte what the C++ strings that were in gemvtune/runtime/export.py gave (tests/data/export_*.h.golden, captured
from the header before the move). A golden file holds the header with each tuned kernel's source, which
gemvtune.build.render gives and which changes with the kernel templates, replaced by ``@KERNEL <key>@``: what
export itself writes around the kernels is pinned, and the kernels must appear in it as rendered (CPU only). The
"fp8" case is the synthetic table with FP8 entries (tests/test_export.py's FP8_WINNERS: both scale layouts, FP16 and
BF16 x, one whose route is dequantize + F.linear), pinning the FP8 part and where it goes.

After an intended change to the header, or to the committed table:
    GEMVTUNE_UPDATE_GOLDEN=1 python -m pytest tests/test_export_golden.py
and review the golden files' diff."""

import difflib
import os

import pytest
from conftest import ROOT
from test_export import TABLE, _fp8_table, _synthetic_table

from gemvtune.build.render import render
from gemvtune.kernels.families import is_library
from gemvtune.runtime.export import _namespaced, build_header, fp8_kernel
from gemvtune.runtime.table import entry_key, load_table

DATA = ROOT / "tests" / "data"


def skeleton(table) -> str:
    """The header with each entry's rendered kernel source, in order, replaced by its marker; a kernel
    that is not in the header as rendered fails here."""
    text, pos = build_header(table), 0
    for s in sorted(table.shapes, key=lambda s: bool(s.weights)):   # (the FP8 part follows the 16-bit one)
        cfg = fp8_kernel(table, s) if s.weights else table.lookup(s)[0]
        if cfg is None or is_library(cfg):   # "use your BLAS" or dequantize + GEMM: described, no source of ours
            continue
        body = _namespaced(render(cfg, s))[0].strip()
        i = text.find(body, pos)
        assert i >= 0, f"{entry_key(s)}: the rendered kernel is not in the header as rendered"
        marker = f"@KERNEL {entry_key(s)}@"
        text, pos = text[:i] + marker + text[i + len(body):], i + len(marker)
    return text


@pytest.mark.parametrize("which", ["committed", "synthetic", "fp8"])
def test_header_is_the_golden_one(tmp_path, which):
    make = {"synthetic": _synthetic_table, "fp8": _fp8_table}
    table = load_table(make[which](tmp_path / "table.json") if which in make else TABLE)
    golden = DATA / f"export_{which}.h.golden"
    got = skeleton(table)
    if os.environ.get("GEMVTUNE_UPDATE_GOLDEN") == "1":
        golden.write_text(got)
    want = golden.read_text()
    if got != want:
        diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True), str(golden), "now", n=2))
        pytest.fail(f"the exported header differs from {golden.name} (see this file's docstring):\n{diff[:6000]}")
