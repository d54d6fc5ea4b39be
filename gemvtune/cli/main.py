"""The command line: thin. Parse, call, print; one clear line and a non-zero exit on bad input."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

import click

from ..errors import GemvtuneError
from ..kernels.shapes import Shape, parse_batches, parse_shape
from ..tuning.search_options import SEED
from . import options as _options
from .options import gpu_check as _gpu_check
from .options import one_line_usage_error, one_line_warnings, select_configs, setup_logging


def _shape_opt(f: Callable) -> Callable:
    return click.option("--shape", "shape_text", required=True, help="M x d, e.g. 14336x4096")(f)


def _shapes(shape_text: str, batch: str = "1", dtype: str = "fp16", weights: str = "") -> list[Shape]:
    return [parse_shape(shape_text, n, dtype, weights) for n in parse_batches(batch)]


log = logging.getLogger("gemvtune")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="gemvtune")
@click.option("-v", "--verbose", count=True, help="more log output on stderr (-vv: debug, with tracebacks of errors)")
@click.option("-q", "--quiet", count=True, help="errors only on stderr (no warnings)")
def cli(verbose: int, quiet: int) -> None:
    """gemvtune: find the fastest FP16 or BF16 GEMV (y = W x, and X of n <= 16 tokens: LLM decode) for your shapes on
    your GPU."""
    setup_logging(verbose - quiet)


@cli.command()
@_shape_opt
@click.option("--batch", default="1", show_default=True, help="batch sizes n, e.g. 1,2,4")
@_options.DTYPE
@_options.WEIGHTS_OPT
@_options.ARCH
def space(shape_text: str, batch: str, dtype: str, weights: str | None, arch: str | None) -> None:
    """Summarize the valid configs of each family for a shape (on an architecture) and why the others are invalid."""
    from ..kernels.arch import parse_arch
    from ..kernels.census import census_lines
    from ..kernels.families import FAMILIES, families_for

    target = parse_arch(arch)
    for shape in _shapes(shape_text, batch, dtype, weights or ""):
        for fam in map(FAMILIES.get, families_for(shape)):   # (the families that read its weights: FP8 or not)
            for line in census_lines(fam, shape, target):
                click.echo(line)


@cli.command()
@_shape_opt
@click.option("--config", "config_text", default="llama", show_default=True,
              help="preset (llama), JSON object, or key=value,... over the llama.cpp point (FP8 weights: the preset "
                   "default, and key=value over it)")
@_options.DTYPE
@_options.WEIGHTS_OPT
@_options.ARCH
def render(shape_text: str, config_text: str, dtype: str, weights: str | None, arch: str | None) -> None:
    """Print the CUDA source of one variant."""
    from ..build.render import render as render_source
    from ..kernels.arch import parse_arch

    target = parse_arch(arch)
    shape = parse_shape(shape_text, 1, dtype, weights or "")
    if weights and config_text == "llama":   # (the default: the FP8 family's own default point)
        config_text = "default"
    config = _options.config_module(shape).parse_config(config_text)
    click.echo(render_source(config, shape, arch=target), nl=False)


@cli.command("compile-check")
@_shape_opt
@click.option("--configs", "spec", default="sample:32", show_default=True,
              help="all | sample:N | llama | FILE.json | one inline config")
@_options.DTYPE
@_options.WEIGHTS_OPT
@_options.ARCH
@click.option("--jobs", type=click.IntRange(1, 256), default=None, help="parallel NVRTC compiles (default: cores)")
@click.option("--seed", default=0, show_default=True, type=SEED, help="seed of sample:N")
def compile_check(shape_text: str, spec: str, dtype: str, weights: str | None, arch: str | None, jobs: int | None,
                  seed: int) -> None:
    """Compile variants with NVRTC (no GPU needed) and print their resources. A config the architecture cannot run
    (a feature it lacks, a limit it exceeds) is listed as invalid with why, and never compiled."""
    from ..build.compile import CompileError, InvalidForArch, compile_variants
    from ..kernels.arch import parse_arch

    target = parse_arch(arch)
    shape = parse_shape(shape_text, 1, dtype, weights or "")
    configs = select_configs(spec if not (weights and spec == "llama") else "default", shape, seed)
    log.info("compile-check: %d configs selected (%s) for %s", len(configs), spec, shape)
    items, skipped = [], 0
    for c in configs:
        why = c.invalid_reasons(shape, target)
        if why:
            click.echo(f"  skip {c.label}: {why[0]}")
            skipped += 1
        else:
            items.append((c, shape))
    log.info("compile-check: rendering and compiling %d valid configs for %s (%s)", len(items), shape, target)
    results = compile_variants(items, arch=target.name, jobs=jobs, progress=f"compile {shape}")
    log.info("compile-check: compiled; printing the resources")
    failed = compiled = 0
    click.echo(f"{'config':48s} {'regs':>4s} {'spill':>5s} {'stack':>5s} {'smem':>6s} {'s':>6s}")
    for (c, _), r in zip(items, results):
        if isinstance(r, InvalidForArch):   # (never: the configs were checked above; said as invalid all the same)
            skipped += 1
            click.echo(f"  skip {c.label}: {r}")
            continue
        if isinstance(r, CompileError):
            failed += 1
            click.echo(f"{c.label:48s} FAILED: {r}")
            continue
        compiled += 1
        res = r.resources
        click.echo(f"{c.label:48s} {res.registers:4d} {res.spill_stores:5d} {res.stack_bytes:5d} "
                   f"{res.smem_bytes:6d} {r.compile_s:6.2f}{' (cached)' if r.cached else ''}")
    click.echo(f"{compiled} compiled, {failed} failed, {skipped} invalid for {shape} ({target})")
    if failed:
        sys.exit(1)


@cli.command()
@click.option("--gib", default=1.0, show_default=True, type=click.FloatRange(0.0625, 64), help="buffer size")
def ceiling(gib: float) -> None:
    """Measure the GPU's read bandwidth (the denominator of every % of ceiling) and the launch floor."""
    _gpu_check()
    from ..runners.cuda import CudaRunner

    r = CudaRunner()
    dev = r.device_info()
    c = r.ceiling(gib=gib)
    click.echo(f"{dev['name']} (driver {dev['driver']}, {dev['sm_count']} SMs, L2 {dev['l2_bytes'] / 2**20:.0f} MiB)")
    click.echo(f"read ceiling   {c['read_gbps']:8.0f} GB/s  (min..max over replays {c['read_gbps_min']:.0f}.."
               f"{c['read_gbps_max']:.0f}; {c['read_blocks_per_sm']} blocks/SM; {c['read_bytes'] / 2**30:.2f} GiB x 2)")
    click.echo(f"launch floor   {c['launch_floor_us']:8.3f} µs per empty kernel in a CUDA graph")


@cli.command()
@click.option("--shape", "shape_texts", multiple=True, required=True, help="M x d (repeatable)")
@click.option("--configs", "spec", default="sample:16", show_default=True,
              help="all | sample:N | llama | FILE.json | one inline config")
@click.option("--seed", default=0, show_default=True, type=SEED, help="seed of sample:N")
@click.option("--batch", default="1", show_default=True, help="batch sizes n, e.g. 1,3,8")
@_options.DTYPE
@_options.WEIGHTS_OPT
def verify(shape_texts: tuple[str, ...], spec: str, seed: int, batch: str, dtype: str, weights: str | None) -> None:
    """Check variants (either family; a config file may mix them) against a float64 reference on fresh
    random inputs (no timing); with --weights, FP8 weights against the float64 product of their exact
    dequantisation. Configs invalid for a shape are listed as such. Exit 1 if any is wrong."""
    shapes = [parse_shape(t, n, dtype, weights or "") for t in shape_texts for n in parse_batches(batch)]
    picks = {s: select_configs(spec if not (weights and spec == "llama") else "default", s, seed) for s in shapes}
    _gpu_check()
    from ..build.compile import compile_variants
    from ..runners.cuda import CudaRunner

    r = CudaRunner()
    compile_variants([(c, s) for s, cs in picks.items() for c in cs if c.is_valid(s)], arch=r.arch)  # in parallel
    bad = total = 0
    for s, configs in picks.items():
        for c in configs:
            m = r.measure(c, s, timed=False)
            total += 1
            if m.status not in ("ok", "invalid"):
                bad += 1
            click.echo(f"{s!s:>14s} {c.label:46s} {m.status:13s} relerr {m.relerr:9.2e} "
                       f"(bound {m.bound:8.2e}) {m.error[:70]}")
    click.echo(f"{total - bad} of {total} verified or invalid, {bad} failed")
    if bad:
        sys.exit(1)


# The one registration point of the commands defined in the other cli_* modules (they import nothing
# from here: no import loop).
from . import bench_cmd as cli_bench  # noqa: E402
from . import check_cmd as cli_check  # noqa: E402
from . import costmodel_cmd as cli_costmodel  # noqa: E402
from . import export_cmd as cli_export  # noqa: E402
from . import percall_cmd as cli_percall  # noqa: E402
from . import replay_cmd as cli_replay  # noqa: E402
from . import reporting as cli_reporting  # noqa: E402
from . import search_cmd as cli_search  # noqa: E402
from . import shapes_cmd as cli_shapes  # noqa: E402
from . import transition_cmd as cli_transition  # noqa: E402
from . import tune_cmd as cli_tune  # noqa: E402

for _cmd in (cli_search.search, cli_search.worker, cli_replay.sweep, cli_replay.study, cli_replay.study_report,
             cli_replay.plot_study, cli_export.export, cli_bench.bench, cli_percall.percall, cli_transition.transition,
             cli_costmodel.costmodel, cli_costmodel.predict, cli_check.check, cli_reporting.summarize,
             cli_reporting.report, cli_reporting.which_table, cli_shapes.shapes, cli_tune.tune, cli_tune.convergence):
    cli.add_command(_cmd)


def _interrupted(e: BaseException) -> bool:
    """Whether ``e`` is, or was raised while handling, a Ctrl-C (KeyboardInterrupt): e.g. click's Abort,
    or an error Optuna raises from its own clean-up of the trial the interrupt stopped."""
    seen: set[int] = set()
    x: BaseException | None = e
    while x is not None and id(x) not in seen:
        if isinstance(x, KeyboardInterrupt):
            return True
        seen.add(id(x))
        x = x.__cause__ or x.__context__
    return False


def _exit_interrupted() -> None:
    """Ctrl-C: one line, exit 130 (what was complete is kept; the same command resumes a search)."""
    log.debug("interrupted", exc_info=True)
    click.echo("gemvtune: interrupted", err=True)
    sys.exit(130)


def main(argv: list[str] | None = None) -> None:
    """Entry point: every GemvtuneError becomes one line on stderr and its exit code; Ctrl-C is one
    line and exit 130, never a traceback; gemvtune's warnings are one line each."""
    one_line_warnings()
    try:
        cli.main(args=argv, prog_name="gemvtune", standalone_mode=False)
    except click.exceptions.Abort:
        _exit_interrupted()
    except click.UsageError as e:           # a bad option value, an unknown or missing option: one line
        log.debug("usage error", exc_info=True)
        click.echo(one_line_usage_error(e), err=True)
        sys.exit(e.exit_code)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except GemvtuneError as e:
        log.debug("the error's traceback (shown with -vv)", exc_info=True)
        click.echo(f"gemvtune: error: {e}", err=True)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        _exit_interrupted()
    except OSError as e:   # a file error no reader or writer turned into its own line: still one line, exit 1
        from ..userfile import os_reason

        log.debug("the error's traceback (shown with -vv)", exc_info=True)
        where = f"{e.filename}: " if e.filename else ""
        click.echo(f"gemvtune: error: {where}{os_reason(e)}", err=True)
        sys.exit(1)
    except Exception as e:
        if not _interrupted(e):
            raise
        _exit_interrupted()
