"""The README as a new user meets it, and the install it promises.

Python examples. Every ```python block of README.md is checked, in order, as one session (a block may
use the names an earlier block defined, as the PyTorch example's CUDA-graph block does). The rule
for what needs a GPU is explicit: a block that names ``cupy`` or ``cuda`` (``import cupy``,
``.cuda()``, ``device="cuda"``, ``torch.cuda``) needs one. Such a block is compiled, and every name it
uses must exist: each ``gemvtune.X``, each ``from gemvtune... import X``, and every free name must be
a builtin or bound by this or an earlier block. Every other block is executed, in a temporary folder
that holds copies of the ``results/...`` paths the block names.

Commands. Every ``gemvtune <command>`` in a ```bash block is parsed by the command line as written
(options, types, choices; nothing runs). Every ``gemvtune <command>`` in inline code (the commands
table, the troubleshooting table, the text) names a command whose ``--help`` exits 0, and each
option it shows exists on that command.

Package. Every third-party module the package imports is a declared dependency or in an extra;
the wheel ships ``py.typed`` and the LICENSE; ``gemvtune study`` runs with its default samplers on
the declared dependencies (the GP sampler, which needs torch and scipy, is left out where they are
missing, saying so)."""

from __future__ import annotations

import ast
import builtins
import importlib
import re
import shlex
import shutil
import subprocess
import symtable
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT, run_cli

README = (ROOT / "README.md").read_text()
GPU_RULE = re.compile(r"\b(cupy|cuda)\b")


def fenced(lang: str) -> list[tuple[int, str]]:
    """(first line number, code) of every fenced block of ``lang``."""
    out, lines, i = [], README.splitlines(), 0
    while i < len(lines):
        if lines[i].strip() == f"```{lang}":
            j = i + 1
            while lines[j].strip() != "```":
                j += 1
            out.append((i + 2, "\n".join(lines[i + 1:j]) + "\n"))
            i = j
        i += 1
    return out


PY_BLOCKS = fenced("python")
BASH_BLOCKS = fenced("bash")


def _bound_names(code: str) -> set[str]:
    """Names a block binds at module level (assignments, imports, defs, loop and with targets)."""
    st = symtable.symtable(code, "<readme>", "exec")
    return {s.get_name() for s in st.get_symbols() if s.is_assigned() or s.is_imported()}


def _free_names(code: str) -> set[str]:
    """Global names a block reads (in any of its scopes) without binding them at module level."""
    st = symtable.symtable(code, "<readme>", "exec")
    bound = _bound_names(code)
    free, todo = set(), [st]
    while todo:
        t = todo.pop()
        for s in t.get_symbols():
            if s.is_referenced() and (s.is_global() or t.get_type() == "module") and s.get_name() not in bound:
                free.add(s.get_name())
        todo.extend(t.get_children())
    return free


def _gemvtune_names(code: str) -> list[str]:
    """Every ``gemvtune.X`` attribute and ``from gemvtune[.mod] import X`` name, as 'module:X'."""
    out = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "gemvtune":
            out.append(f"gemvtune:{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "gemvtune":
            out += [f"{node.module}:{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            out += [f"{a.name}:" for a in node.names if a.name.split(".")[0] == "gemvtune"]
    return out


def test_readme_has_python_examples_of_both_kinds():
    assert PY_BLOCKS, "README.md lost its python examples"
    kinds = {bool(GPU_RULE.search(code)) for _, code in PY_BLOCKS}
    assert kinds == {True, False}, "expected GPU examples and at least one that runs on a CPU"


def test_python_examples(tmp_path, monkeypatch):
    """Each block in order, one session: CPU blocks run; GPU blocks compile and name only what exists."""
    import gemvtune

    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__readme__"}
    known = set(dir(builtins))
    for line, code in PY_BLOCKS:
        where = f"README.md:{line}"
        compiled = compile(code, where, "exec")                      # a syntax error fails here
        for ref in _gemvtune_names(code):
            mod, _, name = ref.partition(":")
            m = importlib.import_module(mod)
            assert not name or name in dir(m) or hasattr(m, name), f"{where}: {mod}.{name} does not exist"
        missing = _free_names(code) - known
        assert not missing, f"{where}: names used but never defined: {sorted(missing)}"
        known |= _bound_names(code)
        if GPU_RULE.search(code):
            continue
        for ref in sorted(set(re.findall(r"results/[\w./-]+", code))):   # the data a block reads, copied
            src, dst = ROOT / ref, tmp_path / ref
            if src.is_dir():
                shutil.copytree(src, dst, dirs_exist_ok=True)
            elif src.is_file():
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dst)
        exec(compiled, namespace)                                        # noqa: S102 (the README's own code)
    assert "gemvtune" in namespace or gemvtune


# ---- commands -------------------------------------------------------------------------------------

def _bash_commands() -> list[tuple[int, list[str]]]:
    """(line, args after 'gemvtune') of every gemvtune command in the bash blocks."""
    out = []
    for start, code in BASH_BLOCKS:
        for k, raw in enumerate(code.splitlines()):
            text = re.sub(r"(^|\s)#.*$", "", raw)
            for seg in re.split(r"&&|\|\||;|\|", text):
                toks = shlex.split(seg)
                for i, tok in enumerate(toks):
                    if Path(tok).name == "gemvtune":
                        out.append((start + k, toks[i + 1:]))
                        break
    return out


def _inline_commands() -> list[tuple[str, list[str]]]:
    """(span, args) of every inline code span that starts with 'gemvtune ' (fenced blocks left out)."""
    text = re.sub(r"^```.*?^```", "", README, flags=re.S | re.M).replace("\\|", "|")
    out = []
    for span in re.findall(r"`([^`]+)`", text):
        span = " ".join(span.split())
        if span.startswith("gemvtune "):
            out.append((span, span.split()[1:]))
    return out


BASH_COMMANDS = _bash_commands()
INLINE_COMMANDS = _inline_commands()


def _command(name: str):
    from gemvtune.cli import cli

    return cli.commands.get(name)


def _option_names(cmd) -> set[str]:
    names = {"-h", "--help"}
    for p in cmd.params:
        names.update(getattr(p, "opts", []))
        names.update(getattr(p, "secondary_opts", []))
    return names


def test_readme_shows_commands():
    assert len(BASH_COMMANDS) >= 8 and len(INLINE_COMMANDS) >= 40, (len(BASH_COMMANDS), len(INLINE_COMMANDS))
    table = README[README.index("## Commands"):README.index("## The GEMV space")]
    assert table.count("| `gemvtune ") >= 15


@pytest.mark.parametrize("line,args", BASH_COMMANDS, ids=[f"L{ln}:{' '.join(a)[:60]}" for ln, a in BASH_COMMANDS])
def test_bash_commands_parse(line, args, monkeypatch):
    """Parsed (options, types, choices, required options) as written, from the checkout; not run."""
    import click

    from gemvtune.cli import cli

    monkeypatch.chdir(ROOT)
    group_opts = [a for a in args if a in ("-v", "-vv", "-q", "--verbose", "--quiet")]
    rest = args[len(group_opts):]
    cmd = cli.commands.get(rest[0]) if rest else None
    assert cmd is not None, f"README.md:{line}: gemvtune has no command {rest[:1]}"
    with cli.make_context("gemvtune", group_opts + [rest[0]]) as ctx:
        sub = cmd.make_context(rest[0], list(rest[1:]), parent=ctx)   # raises click.UsageError if it does not parse
    assert isinstance(sub, click.Context)


@pytest.mark.parametrize("span,args", INLINE_COMMANDS, ids=[s[:70] for s, _ in INLINE_COMMANDS])
def test_inline_commands_exist_with_their_options(span, args):
    from gemvtune.cli import cli

    while args and args[0].startswith("-"):                  # the group's own options (-v, -q)
        assert args[0] in _option_names(cli), f"`{span}`: gemvtune has no option {args[0]}"
        args = args[1:]
    if not args or args[0].isupper():                          # a placeholder: `gemvtune -v COMMAND`
        return
    cmd = _command(args[0])
    assert cmd is not None, f"`{span}`: gemvtune has no command {args[0]!r}"
    shown = set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", " ".join(args[1:])))
    unknown = shown - _option_names(cmd)
    assert not unknown, f"`{span}`: gemvtune {args[0]} has no option {sorted(unknown)}"


def test_every_shown_command_has_help():
    from click.testing import CliRunner

    from gemvtune.cli import cli

    names = {a[0] for _, a in BASH_COMMANDS + [(0, a) for _, a in INLINE_COMMANDS]
             if a and not a[0].startswith("-") and not a[0].isupper()}
    for name in sorted(names):
        r = CliRunner().invoke(cli, [name, "--help"])
        assert r.exit_code == 0 and "Usage:" in r.output, (name, r.output)
    r = subprocess.run([sys.executable, "-m", "gemvtune", "--help"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0 and all(f" {n} " in r.stdout for n in names), r.stdout + r.stderr


def test_model_presets_are_listed_in_help():
    from click.testing import CliRunner

    from gemvtune.cli import cli
    from gemvtune.hfconfig import PRESETS

    out = CliRunner().invoke(cli, ["bench", "--help"], terminal_width=400).output
    assert all(p in out for p in PRESETS), out


# ---- package --------------------------------------------------------------------------------------

# import name -> the distributions that provide it (where the names differ)
_DISTS = {"cupy": {"cupy-cuda12x", "cupy-cuda13x"}, "cuda": {"cuda-bindings", "cuda-pathfinder"},
          "sklearn": {"scikit-learn"}, "yaml": {"pyyaml"}}
# imported only on paths that check for them and say what to install
_OPTIONAL = {"torch", "transformers", "scipy", "cupy", "sklearn"}


def _requirements() -> tuple[set[str], dict[str, set[str]]]:
    """(base requirement names, extra -> names), from pyproject.toml."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    proj = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    def names(reqs):
        return {re.split(r"[\s<>=!~\[;]", r, maxsplit=1)[0].lower() for r in reqs}

    return names(proj["dependencies"]), {k: names(v) for k, v in proj["optional-dependencies"].items()}


def _third_party_imports() -> set[str]:
    mods = set()
    for p in (ROOT / "gemvtune").rglob("*.py"):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Import):
                mods |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                mods.add(node.module.split(".")[0])
    return {m for m in mods if m not in sys.stdlib_module_names and m != "gemvtune"}


def test_every_import_is_declared():
    base, extras = _requirements()
    for mod in sorted(_third_party_imports()):
        dists = _DISTS.get(mod, {mod})
        if mod in _OPTIONAL:
            assert any(dists & e for e in extras.values()), f"{mod} is imported but in no extra"
        else:
            assert dists <= base, f"{mod} is imported but not a declared dependency ({sorted(dists - base)})"
    # One CUDA build per extra, never in the base install (two CuPy packages overwrite each other).
    assert not any(d.startswith(("cupy", "nvidia-")) for d in base)
    assert {"cupy-cuda12x", "nvidia-cuda-nvrtc-cu12", "nvidia-cuda-runtime-cu12"} <= extras["cu12"]
    assert {"cupy-cuda13x", "nvidia-cuda-nvrtc", "nvidia-cuda-runtime"} <= extras["cu13"]
    assert "gemvtune" in extras["test"]   # gemvtune[cu13]: the README's commands and CI get a CUDA build


def test_optuna_is_bounded_below_its_next_major():
    text = (ROOT / "pyproject.toml").read_text()
    (req,) = re.findall(r'"optuna([<>=!~][^"]*)"', text)
    assert "<6" in req, req
    import optuna

    assert int(optuna.__version__.split(".")[0]) < 6


def test_wheel_ships_py_typed_and_license(tmp_path):
    pytest.importorskip("hatchling", reason="hatchling (the build backend, in the test extra) builds the wheel")
    assert (ROOT / "gemvtune" / "py.typed").is_file() and "MIT" in (ROOT / "LICENSE").read_text()
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                        "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    (whl,) = tmp_path.glob("gemvtune-*.whl")
    with zipfile.ZipFile(whl) as z:
        names = z.namelist()
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "gemvtune/py.typed" in names
    assert any(n.endswith("/LICENSE") and ".dist-info/" in n for n in names), names
    assert "Provides-Extra: cu12" in meta and "Provides-Extra: cu13" in meta


def test_import_gemvtune_loads_no_torch():
    code = ("import sys, gemvtune; gemvtune.load_table; "
            "heavy = [m for m in ('torch', 'cupy', 'optuna', 'pandas') if m in sys.modules]; "
            "print(heavy); sys.exit(1 if heavy else 0)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr


def test_study_runs_with_its_default_samplers(tmp_path):
    sweep = ROOT / "results" / "nvidia-h200" / "sweeps" / "sweep-4096x4096x1.csv.gz"
    r = run_cli("study", "--sweeps", str(sweep), "--seeds", "1", "--budget", "4", "--gp-budget", "4",
                "--jobs", "2", "--out", str(tmp_path))
    assert r.returncode == 0, r.stderr
    from gemvtune.samplers import gp_missing

    if gp_missing(load=False):
        assert "left out gp: the gp sampler needs torch and scipy" in r.stdout and "gemvtune[gp]" in r.stdout
    assert (tmp_path / "summary.md").stat().st_size > 0
