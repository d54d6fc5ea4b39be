"""Command-line conventions shared by the commands: option types that list their choices in
``--help`` and refuse bad values in one line, the ``-v``/``-q`` logging set-up, click's usage errors
as one line, output files checked before any work, options declared once for the commands that share
them (``declared``, ``--configs``), and the old spelling of a command that became a group (``old_spelling``)."""

from __future__ import annotations

import logging
import os
import re
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import click

from ..errors import UsageError
from ..kernels.arch import ARCHS
from ..kernels.shapes import DTYPES, WEIGHTS
from ..workspace import writable_dir  # noqa: F401  (the commands' results folders; defined with the workspace)

log = logging.getLogger("gemvtune")

# SEED, ModelPreset and the search's own options (--trials, --sampler, ...) are declared in
# gemvtune.tuning.search_options.


def setup_logging(verbosity: int) -> None:
    """``-v``/``-q`` on the group: the ``gemvtune`` logger (and Optuna's, which logs through the
    standard library) at INFO/DEBUG for -v/-vv, WARNING by default, ERROR with -q. -q also silences
    gemvtune's Python warnings (a table lookup falling back, a table of another GPU model)."""
    level = {-1: logging.ERROR, 0: logging.WARNING, 1: logging.INFO}.get(max(-1, min(verbosity, 2)), logging.DEBUG)
    log.setLevel(level)
    if not log.handlers:
        h = logging.StreamHandler()   # stderr
        h.setFormatter(logging.Formatter("gemvtune: %(levelname)s: %(message)s"))
        log.addHandler(h)
        log.propagate = False
    if verbosity:
        # Optuna's root logger, without importing optuna; set only when asked (never at import time).
        logging.getLogger("optuna").setLevel(logging.DEBUG if verbosity > 1 else level)
    if verbosity < 0:
        warnings.filterwarnings("ignore", message="gemvtune: ")


def one_line_warnings() -> None:
    """On the command line (``gemvtune`` itself, not the library), gemvtune's own warnings (they start
    "gemvtune: ") are one line on stderr, without Python's "file:line: UserWarning:" prefix and source line;
    any other warning prints as Python prints it."""
    default = warnings.showwarning
    if getattr(default, "gemvtune_one_line", False):
        return

    def show(message: Warning | str, category: type[Warning], filename: str, lineno: int,
             file: TextIO | None = None, line: str | None = None) -> None:
        text = str(message)
        if not text.startswith("gemvtune: "):
            default(message, category, filename, lineno, file, line)
            return
        try:
            print(" ".join(text.split()), file=file if file is not None else sys.stderr)
        except OSError:   # (stderr closed): a warning never becomes an error
            pass

    show.gemvtune_one_line = True   # type: ignore[attr-defined]
    warnings.showwarning = show


def one_line_usage_error(e: click.UsageError) -> str:
    """click's usage error (bad option value, unknown option, missing option) as one line."""
    msg = " ".join(e.format_message().split())
    cmd = e.ctx.command_path if e.ctx is not None else "gemvtune"
    return f"{cmd}: error: {msg} (see {cmd} --help)"


def writable_file(path: str, what: str = "output file") -> Path:
    """An output file's folder exists and can be written, checked before any work is done."""
    if not str(path):
        raise UsageError(f"{what}: the path is empty")
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        raise UsageError(f"{what} {p} is a directory")
    if not parent.is_dir():
        raise UsageError(f"cannot write {what} {p}: folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise UsageError(f"cannot write {what} {p}: permission denied")
    return p


_SHAPE_LINE = re.compile(r"^\s*(\d+)x(\d+)\s+n=(\d+)\b")


def sort_shape_lines(text: str) -> str:
    """A summary's per-shape lines (``  MxD n=N ...`` after a heading line) in numeric (M, d, n) order;
    left as it is when any body line is not one of them."""
    head, *body = text.split("\n")
    keys = [m for m in (_SHAPE_LINE.match(ln) for ln in body) if m is not None]
    if not body or len(keys) != len(body):
        return text
    order = sorted(range(len(body)), key=lambda i: tuple(int(g) for g in keys[i].groups()))
    return "\n".join([head] + [body[i] for i in order])


def gpu_check() -> None:
    """NoDeviceError (exit 3, one line saying which case applies) where no CUDA device answers."""
    from ..errors import NoDeviceError
    from ..runners.cuda import cuda_available

    why = cuda_available()
    if why:
        raise NoDeviceError(why)


# ---- options declared once, for the commands and the subcommands that share them -------------------------
Decl = tuple[tuple[str, ...], dict[str, Any]]   # click.option's declarations and keywords

DTYPE_DECL: Decl = (("--dtype",), {"type": click.Choice(DTYPES), "default": "fp16", "show_default": True,
                                   "help": "dtype of W and x (and the bias): fp16 or bf16"})


def declared(table: dict[str, Decl], names: str, hidden: bool = False, **changes: dict[str, Any]) -> Callable:
    """One decorator adding the options ``names`` (space-separated keys of ``table``, its dests) in this order in
    ``--help``; ``changes[key]`` overrides an option's keywords for this command (its help, a default);
    ``hidden``: the options of a deprecated spelling, parsed but left out of ``--help``."""
    keys = names.split()
    unknown = sorted(set(changes) - set(keys))
    if unknown:
        raise KeyError(f"changes to options this command does not take: {', '.join(unknown)}")

    def decorate(f: Callable) -> Callable:
        for key in reversed(keys):
            decls, kw = table[key]
            kw = {**kw, **changes.get(key, {})}
            f = click.option(*decls, **({**kw, "hidden": True} if hidden else kw))(f)
        return f
    return decorate


DTYPE = declared({"dtype": DTYPE_DECL}, "dtype")   # --dtype of the commands that take shapes
WEIGHTS_DECL: Decl = (("--weights",), {"type": click.Choice([w for w in WEIGHTS if w]), "default": None,
                                       "help": "FP8 weights: E4M3 codes with FP32 scales per row (e4m3-row) or per "
                                               "128x128 block (e4m3-b128) (default: W in the --dtype)"})
WEIGHTS_OPT = declared({"weights": WEIGHTS_DECL}, "weights")   # --weights of the commands that render kernels
# --arch of the commands that work for an architecture without a GPU (read by gemvtune.kernels.arch.parse_arch in the
# command: an unknown one is a UsageError naming the known ones, exit 2)
ARCH_DECL: Decl = (("--arch",), {"default": None, "metavar": "SM",
                                 "help": f"target architecture: {', '.join(ARCHS)}, or a compute capability like 8.6 "
                                         "(default: sm_90)"})
ARCH = declared({"arch": ARCH_DECL}, "arch")


def config_module(shape: Any) -> Any:
    """The family module whose presets, samples and ``key=value`` configs a command reads for ``shape``: the GEMV
    family's, or the FP8 family's for FP8 weights."""
    from ..kernels import fp8gemv, gemv

    return fp8gemv if getattr(shape, "weights", "") else gemv


def select_configs(spec: str, shape: Any, seed: int = 0) -> list[Any]:
    """``--configs``: ``all`` | ``sample:N`` | ``llama`` (FP8 weights: ``default``) | a JSON file of configs | one
    inline config."""
    from ..kernels.families import load_configs

    sp = config_module(shape)

    if spec == "all":
        return sp.valid_configs(shape)
    if spec.startswith("sample:"):
        from ..intparse import parse_int

        try:
            k = parse_int(spec.split(":", 1)[1], "sample:N", 1, 1_000_000)
        except UsageError:
            raise UsageError(f"bad --configs {spec[:40]!r}: expected sample:N with N in 1..1000000") from None
        return sp.sample_configs(shape, k, seed)
    if spec.endswith(".json"):
        return load_configs(spec)
    return [sp.parse_config(spec)]


# ---- a command that became a group: its old spelling runs for one release ------------------------------

def given_options(ctx: click.Context) -> list[str]:
    """The options given on the command line of ``ctx``, as their flags (``--shape``), in declaration order."""
    from click.core import ParameterSource

    return [p.opts[0] for p in ctx.command.params
            if p.name and isinstance(p, click.Option) and ctx.get_parameter_source(p.name) is ParameterSource.COMMANDLINE]


def old_spelling(ctx: click.Context, old: str, new: str) -> bool:
    """In a group's callback (``invoke_without_command``, the old options hidden on the group): False when a
    subcommand follows (refusing the old options before it); else the one deprecation line on stderr, and
    True: the caller runs the old spelling ``old``, now ``gemvtune new``."""
    if ctx.invoked_subcommand is not None:
        given = given_options(ctx)
        if given:
            raise UsageError(f"{' '.join(given)}: give the options after the subcommand "
                             f"(gemvtune {ctx.info_name} {ctx.invoked_subcommand} {given[0]} ...)")
        return False
    what = f"'{old}'" if " " in old else f"'{old}' without a subcommand"
    click.echo(f"gemvtune: {what} is deprecated; use 'gemvtune {new}' (removed in the next release)", err=True)
    return True
