"""Command-line conventions shared by the commands: option types that list their choices in
``--help`` and refuse bad values in one line, the ``-v``/``-q`` logging set-up, click's usage errors
as one line, and output files checked before any work."""

from __future__ import annotations

import logging
import os
import re
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

import click

from ..errors import UsageError
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


def DTYPE(f: Callable) -> Callable:  # noqa: N802  (a decorator, named like NO_INDUCTOR)
    """--dtype of the commands that take shapes: the element type of W and x."""
    from ..kernels.shapes import DTYPES

    return click.option("--dtype", type=click.Choice(DTYPES), default="fp16", show_default=True,
                        help="dtype of W and x (and the bias): fp16 or bf16")(f)


# ---- bench's options, declared here to keep cli/main.py short --------------------------------------------
NO_INDUCTOR = click.option(
    "--no-inductor", is_flag=True,
    help="skip the Inductor baseline: torch.compile(F.linear, mode=max-autotune-no-cudagraphs), compiled and "
         "autotuned once per shape (tens of seconds each)")


def BENCH_MODEL_OPTIONS(f: Callable) -> Callable:  # noqa: N802  (a decorator, named like NO_INDUCTOR)
    """bench's --layers (a decode step of a model preset, or the HF model's depth), --hf-config, --tokens and
    --prompt-tokens (the Hugging Face end-to-end benchmark), in this order in --help."""
    for opt in reversed((
        click.option("--layers", "layers_text", default=None, metavar="N",
                     help="with --model: time one whole decode step of N layers + LM head (one CUDA graph per "
                          "implementation; default --out results/<gpu>/benchmarks/); with --hf-config: build the model "
                          "with N layers (default: the config's)"),
        click.option("--hf-config", "hf_config", default=None, metavar="PATH",
                     help="a Hugging Face config.json (or its folder): time greedy generate of transformers' model "
                          "(random weights) stock vs swap_linears, eager and compiled (needs gemvtune[hf])"),
        click.option("--tokens", "tokens_text", default=None, metavar="N",
                     help="with --hf-config: new tokens per generate  [default: 128]"),
        click.option("--prompt-tokens", "prompt_text", default=None, metavar="N",
                     help="with --hf-config: random prompt tokens  [default: 16]"))):
        f = opt(f)
    return f
