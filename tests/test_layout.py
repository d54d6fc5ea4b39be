"""The package's layout holds (issue 18): no module imports itself back through others (import loops,
lazy imports inside functions included), no module is over 400 lines, and every subpackage says what
it holds and is drawn in docs/ARCHITECTURE.md."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT

PKG = ROOT / "gemvtune"
MAX_LINES = 400


def _modname(p: Path) -> str:
    parts = list(p.with_suffix("").relative_to(ROOT).parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_modname(p): p for p in PKG.rglob("*.py")}


def imports_of(name: str, path: Path) -> set[str]:
    """The gemvtune modules ``name`` imports anywhere in its file (lazy imports too)."""
    pkg = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = pkg.split(".")
            if node.level:
                base = base[: len(base) - (node.level - 1)]
                absm = ".".join(base + ([node.module] if node.module else []))
            else:
                absm = node.module or ""
            for a in node.names:
                sub = f"{absm}.{a.name}"
                out.add(sub if sub in MODULES else absm)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return {m for m in out if m in MODULES and m != name}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import loop of ``graph`` (a path that comes back to its start), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(v: str) -> list[str] | None:
        state[v] = 1
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if state.get(w) == 1:
                return stack[stack.index(w):] + [w]
            if w not in state and (c := visit(w)):
                return c
        stack.pop()
        state[v] = 2
        return None

    for v in sorted(graph):
        if v not in state and (c := visit(v)):
            return c
    return None


def test_find_cycle_finds_a_loop_and_only_a_loop():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_import_loop_between_modules():
    graph = {m: imports_of(m, p) for m, p in MODULES.items()}
    # a package's __init__ importing its own modules is how packages work, not a loop
    for m, p in MODULES.items():
        if p.name == "__init__.py":
            graph[m] = {t for t in graph[m] if not t.startswith(m + ".")}
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_no_module_over_400_lines():
    long = {m: n for m, p in MODULES.items() if (n := p.read_text(encoding="utf-8").count("\n")) > MAX_LINES}
    assert not long, long


def test_every_subpackage_says_what_it_holds_and_is_drawn():
    arch = (ROOT / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    subs = sorted(p.parent for p in PKG.rglob("__init__.py") if p.parent != PKG)
    assert {s.name for s in subs} >= {"kernels", "build", "device", "runners", "tuning", "runtime", "reports", "bench", "hf", "transition", "cli"}
    for s in subs:
        doc = ast.get_docstring(ast.parse((s / "__init__.py").read_text(encoding="utf-8")))
        assert doc and len(doc) > 40, f"{s} has no docstring saying what it holds"
        assert f"{s.relative_to(PKG).as_posix()}/" in arch, f"docs/ARCHITECTURE.md does not draw {s.name}/"


def test_scripts_holds_only_what_the_product_or_ci_runs():
    """scripts/: at most 8 files, none named after an issue (one GPU verification entry point, gpu-check.sh, with
    parts named for what they check; CI's PostgreSQL start-up)."""
    files = sorted(p.name for p in (ROOT / "scripts").iterdir() if p.is_file())
    assert len(files) <= 8, files
    assert not [f for f in files if "issue" in f.lower()], files
    assert {"gpu-check.sh", "ci_postgres.sh"} <= set(files), files


def test_reports_and_tuning_do_not_import_each_other():
    """The floors: reports turn measurements into files, tuning searches; neither borrows the other's helpers
    (provenance and the results paths live in gemvtune.provenance and gemvtune.workspace), lazy imports included."""
    crossing = []
    for m, p in MODULES.items():
        for a, b in (("gemvtune.tuning", "gemvtune.reports"), ("gemvtune.reports", "gemvtune.tuning")):
            if m.startswith(a):
                crossing += [f"{m} -> {t}" for t in imports_of(m, p) if t.startswith(b)]
    assert not crossing, crossing


# The floors, lowest first. A module may import its own package and the floors below it, never one above, never a
# sibling on its own floor (reports and tuning; bench, hf and transition; build and model). The top-level modules
# (errors, settings, userfile, safefile, workspace, ...) are the ground floor; ``gemvtune`` itself (lazy names) and
# ``__main__`` are the roof.
FLOORS = [
    ("",),                                    # gemvtune.errors, .settings, .userfile, .safefile, .workspace, ...
    ("kernels",),                             # the pure space
    ("build", "model"),                       # render + NVRTC; the cost model (pure)
    ("device",),                              # plan, ltplan, cupy glue, dispatch
    ("runtime",),                             # the table, routes, torch op, export
    ("runners",),                             # measuring: cuda, replay, isolated
    ("reports", "tuning"),
    ("bench", "hf", "transition"),            # the client benchmarks, one room each
    ("cli",),
]


def floor_of(mod: str) -> tuple[int, str]:
    """(floor, package) of a gemvtune module; the roof is past the last floor."""
    parts = mod.split(".")
    if mod in ("gemvtune", "gemvtune.__main__"):
        return len(FLOORS), "gemvtune"
    if len(parts) == 2 and not (PKG / parts[1]).is_dir():
        return 0, ""
    for i, pkgs in enumerate(FLOORS):
        if parts[1] in pkgs:
            return i, parts[1]
    raise AssertionError(f"{mod}: a package on no floor (add it to FLOORS and to docs/ARCHITECTURE.md)")


def test_no_package_imports_one_above_it_or_beside_it():
    wrong = []
    for m, p in MODULES.items():
        fm, pm = floor_of(m)
        for t in imports_of(m, p):
            ft, pt = floor_of(t)
            if ft > fm or (ft == fm and pt != pm and fm > 0):
                wrong.append(f"{m} -> {t}")
    assert not wrong, wrong


def test_runtime_never_imports_runners_and_kernels_are_pure():
    """runtime launches through gemvtune.device (runners use runtime, one way); kernels/ imports no NVRTC, no cupy,
    no cuda-bindings, and no gemvtune package above it."""
    for m, p in MODULES.items():
        deps = imports_of(m, p)
        if m.startswith("gemvtune.runtime"):
            assert not [t for t in deps if t.startswith("gemvtune.runners")], m
        if m.startswith("gemvtune.kernels"):
            assert all(floor_of(t)[0] <= 1 for t in deps), (m, deps)
            text = p.read_text(encoding="utf-8")
            for lib in ("cupy", "cuda.bindings", "cuda.core", "nvrtc", "nvmath", "torch"):
                assert f"import {lib}" not in text and f"from {lib}" not in text, (m, lib)


def test_floor_test_would_catch_a_wrong_import():
    assert floor_of("gemvtune.runtime.table") > floor_of("gemvtune.device.dispatch")
    assert floor_of("gemvtune.runners.replay") > floor_of("gemvtune.runtime.table")
    assert floor_of("gemvtune.reports.tablereport")[0] == floor_of("gemvtune.tuning.search")[0]


# A basename may repeat only where its folder says the difference: the rooms' own ``report``, ``percall`` and
# ``check`` (a benchmark's summary, the per-call cost of ops or of an HF model, table upkeep or an HF model's
# outputs) and the packages' __init__.
REPEATS_ALLOWED = {"report": {"bench", "hf", "transition"}, "percall": {"bench", "hf"}, "check": {"tuning", "hf"}}


def test_no_basename_twice_unless_its_folder_says_the_difference():
    by: dict[str, list[Path]] = {}
    for p in PKG.rglob("*.py"):
        by.setdefault(p.stem, []).append(p)
    for stem, paths in by.items():
        if len(paths) < 2 or stem == "__init__":
            continue
        folders = {q.parent.name for q in paths}
        assert stem in REPEATS_ALLOWED and folders <= REPEATS_ALLOWED[stem], (stem, sorted(map(str, paths)))
