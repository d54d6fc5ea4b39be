"""The command line: thin. Parse, call, print; one clear line and a non-zero exit on bad input."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

import click

from ..errors import GemvtuneError, UsageError
from ..kernels import gemv as sp
from ..kernels.families import load_configs
from ..kernels.shapes import Shape, parse_batches, parse_shape
from ..tuning.search_options import SEED, ModelPreset
from . import options as _options
from .options import gpu_check as _gpu_check
from .options import one_line_usage_error, one_line_warnings, setup_logging


def _shape_opt(f: Callable) -> Callable:
    return click.option("--shape", "shape_text", required=True, help="M x d, e.g. 14336x4096")(f)


def _shapes(shape_text: str, batch: str = "1") -> list[Shape]:
    return [parse_shape(shape_text, n) for n in parse_batches(batch)]


def select_configs(spec: str, shape: Shape, seed: int = 0) -> list[sp.GemvConfig]:
    """``all`` | ``sample:N`` | ``llama`` | a JSON file of configs | one inline config."""
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
def space(shape_text: str, batch: str) -> None:
    """Summarize the valid configs of each family for a shape and why the others are invalid."""
    from ..kernels.census import census_lines
    from ..kernels.families import FAMILIES

    for shape in _shapes(shape_text, batch):
        for fam in FAMILIES.values():
            for line in census_lines(fam, shape):
                click.echo(line)


@cli.command()
@_shape_opt
@click.option("--config", "config_text", default="llama", show_default=True,
              help="preset (llama), JSON object, or key=value,... over the llama.cpp point")
def render(shape_text: str, config_text: str) -> None:
    """Print the CUDA source of one variant."""
    from ..build.render import render as render_source

    click.echo(render_source(sp.parse_config(config_text), parse_shape(shape_text)), nl=False)


@cli.command("compile-check")
@_shape_opt
@click.option("--configs", "spec", default="sample:32", show_default=True,
              help="all | sample:N | llama | FILE.json | one inline config")
@click.option("--arch", default="sm_90", show_default=True, help="target architecture, sm_XX")
@click.option("--jobs", type=click.IntRange(1, 256), default=None, help="parallel NVRTC compiles (default: cores)")
@click.option("--seed", default=0, show_default=True, type=SEED, help="seed of sample:N")
def compile_check(shape_text: str, spec: str, arch: str, jobs: int | None, seed: int) -> None:
    """Compile variants with NVRTC (no GPU needed) and print their resources."""
    from ..build.compile import CompileError, compile_variants

    shape = parse_shape(shape_text)
    configs = select_configs(spec, shape, seed)
    log.info("compile-check: %d configs selected (%s) for %s", len(configs), spec, shape)
    items, skipped = [], 0
    for c in configs:
        why = c.invalid_reasons(shape)
        if why:
            click.echo(f"  skip {c.label}: {why[0]}")
            skipped += 1
        else:
            items.append((c, shape))
    log.info("compile-check: rendering and compiling %d valid configs for %s (%s)", len(items), shape, arch)
    results = compile_variants(items, arch=arch, jobs=jobs, progress=f"compile {shape}")
    log.info("compile-check: compiled; printing the resources")
    failed = 0
    click.echo(f"{'config':48s} {'regs':>4s} {'spill':>5s} {'stack':>5s} {'smem':>6s} {'s':>6s}")
    for (c, _), r in zip(items, results):
        if isinstance(r, CompileError):
            failed += 1
            click.echo(f"{c.label:48s} FAILED: {r}")
            continue
        res = r.resources
        click.echo(f"{c.label:48s} {res.registers:4d} {res.spill_stores:5d} {res.stack_bytes:5d} "
                   f"{res.smem_bytes:6d} {r.compile_s:6.2f}{' (cached)' if r.cached else ''}")
    click.echo(f"{len(items) - failed} compiled, {failed} failed, {skipped} invalid for {shape} ({arch})")
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
@click.option("--shape", "shape_texts", multiple=True, help="M x d (repeatable)")
@click.option("--suite", type=click.Choice(["decode"]), default=None, help="the decode suite of shapes")
@click.option("--model", default=None, type=ModelPreset(), help="every linear-layer shape of a model preset")
@click.option("--configs", "spec", default="tuned", show_default=True,
              help="tuned (the table's kernel) | all | sample:N | llama | FILE.json | one inline config")
@click.option("--table", "table_path", default=None, help="table for --configs tuned (default results/<gpu>/table.json)")
@click.option("--batch", "batch_text", default="1", show_default=True, help="batch sizes n, e.g. 1,2,4")
@click.option("--rounds", default=3, show_default=True, type=click.IntRange(1, 50),
              help="interleaved rounds (tuned and every baseline) for --configs tuned")
@click.option("--seed", default=0, show_default=True, type=SEED,
              help="seed of sample:N (with --hf-config: of the model's random weights)")
@click.option("--out", "out_dir", default=None, help="output folder (default results/<gpu>/)")
@click.option("--no-spin-check", is_flag=True, help="skip timing llama.cpp with the spin method too")
@_options.NO_INDUCTOR
@_options.DTYPE
@_options.BENCH_MODEL_OPTIONS
def bench(shape_texts: tuple[str, ...], suite: str | None, model: str | None, spec: str, table_path: str | None,
          batch_text: str, rounds: int, seed: int, out_dir: str | None, no_spin_check: bool, no_inductor: bool, dtype: str,
          layers_text: str | None, hf_config: str | None, tokens_text: str | None, prompt_text: str | None) -> None:
    """Benchmark in one process: the read ceiling, then per shape the table's tuned kernel against the
    llama.cpp config (d compiled in), the seed kernel as written (d at run time), cuBLAS and Inductor
    max-autotune (ratios, geometric means per batch, CSV, bar chart); or chosen variants (--configs); or,
    with --layers, one decode step of a model (tuned vs llama.cpp config vs cuBLAS); or, with
    --hf-config, end-to-end greedy decode of a Hugging Face model, stock vs gemvtune."""
    from ..kernels.hfconfig import model_shapes
    from ..kernels.shapes import DECODE_SUITE

    if hf_config is not None:
        _bench_hf(hf_config, layers_text, tokens_text, prompt_text, table_path, out_dir, rounds, seed,
                  shape_texts, suite, model, spec, batch_text, {"--no-spin-check": no_spin_check,
                                                                "--no-inductor": no_inductor}, dtype)
        return
    for text, opt in ((tokens_text, "--tokens"), (prompt_text, "--prompt-tokens")):
        if text is not None:
            raise UsageError(f"{opt} needs --hf-config")
    layers = None
    if layers_text is not None:
        from ..bench.step import check_decode_args

        layers = check_decode_args(model, layers_text, shape_texts, suite, spec, batch_text)
    batches = parse_batches(batch_text)
    shapes = [parse_shape(t) for t in shape_texts]
    if suite == "decode":
        shapes += [Shape(M, d) for M, d in DECODE_SUITE]
    if model:
        shapes += model_shapes(model)
    if not shapes:
        raise UsageError("bench needs --shape, --suite or --model")
    shapes = list(dict.fromkeys(Shape(s.M, s.d, n, dtype) for s in shapes for n in batches))
    if spec == "tuned":
        from ..runtime.table import load_table

        if table_path is None:
            _gpu_check()
            from ..runners.cuda import CudaRunner
            from ..workspace import Workspace

            table_path = str(Workspace.for_gpu(CudaRunner().device_info()["name"]).table)
        load_table(table_path)  # a missing or corrupt table fails before any GPU work
        _gpu_check()
        if layers is not None:
            from ..bench.step import run_decode_step

            assert model is not None   # (check_decode_args refused --layers without --model)
            run_decode_step(model, layers, table_path, out_dir, echo=click.echo, rounds=rounds)
            return
        from ..bench.kernels import run_tuned_bench

        run_tuned_bench(shapes, table_path, out_dir, echo=click.echo, rounds=rounds, inductor=not no_inductor)
        return
    for s in shapes:
        select_configs(spec, s, seed)  # bad --configs fails before any GPU work
    _gpu_check()
    from ..bench.kernels import run_bench

    run_bench(shapes, lambda s: select_configs(spec, s, seed), out_dir, echo=click.echo,
              spin_check=not no_spin_check, inductor=not no_inductor)


def _bench_hf(hf_config: str, layers_text: str | None, tokens_text: str | None, prompt_text: str | None,
              table_path: str | None, out_dir: str | None, rounds: int, seed: int, shape_texts: tuple[str, ...],
              suite: str | None, model: str | None, spec: str, batch_text: str, skips: dict[str, bool], dtype: str) -> None:
    """bench --hf-config: every check that needs no GPU first (options, the config file, transformers,
    the table), then the GPU check, then gemvtune.hf.bench."""
    from ..hf.bench import build_config, check_transformers, positive_int, read_config, run_hf_bench

    clash = [opt for opt, given in (("--shape", shape_texts), ("--suite", suite), ("--model", model),
                                    ("--configs", spec != "tuned"), ("--batch", str(batch_text).strip() != "1"),
                                    *skips.items()) if given]
    if clash:
        raise UsageError(f"--hf-config times a Hugging Face model's generate at batch 1: drop {', '.join(clash)}")
    layers = positive_int(layers_text, "--layers") if layers_text is not None else None
    tokens = positive_int(tokens_text, "--tokens") if tokens_text is not None else 128
    prompt = positive_int(prompt_text, "--prompt-tokens") if prompt_text is not None else 16
    fields, _, cfg_file = read_config(hf_config)        # a bad config.json: one line
    check_transformers()                                # before the GPU check: testable without a GPU
    build_config(fields, layers, where=f"config {cfg_file}")  # a model_type transformers does not know
    if table_path is not None:
        from ..runtime.table import load_table

        load_table(table_path)                          # a missing or corrupt table fails before any GPU work
    _gpu_check()
    if table_path is None:
        from ..hf.bench import default_table_path
        from ..runtime.table import load_table

        table_path = default_table_path()               # results/<gpu>/table.json, named as torch sees the GPU
        load_table(table_path)
    run_hf_bench(hf_config, layers=layers, tokens=tokens, prompt_tokens=prompt, table_path=table_path, out_dir=out_dir,
                 rounds=rounds, echo=click.echo, seed=seed, dtype={"fp16": "float16", "bf16": "bfloat16"}[dtype])


@cli.command()
@click.option("--shape", "shape_texts", multiple=True, required=True, help="M x d (repeatable)")
@click.option("--configs", "spec", default="sample:16", show_default=True,
              help="all | sample:N | llama | FILE.json | one inline config")
@click.option("--seed", default=0, show_default=True, type=SEED, help="seed of sample:N")
@click.option("--batch", default="1", show_default=True, help="batch sizes n, e.g. 1,3,8")
@_options.DTYPE
def verify(shape_texts: tuple[str, ...], spec: str, seed: int, batch: str, dtype: str) -> None:
    """Check variants (either family; a config file may mix them) against a float64 reference on fresh
    random inputs (no timing). Configs invalid for a shape are listed as such. Exit 1 if any is wrong."""
    shapes = [parse_shape(t, n, dtype) for t in shape_texts for n in parse_batches(batch)]
    picks = {s: select_configs(spec, s, seed) for s in shapes}
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
from . import check_cmd as cli_check  # noqa: E402
from . import costmodel_cmd as cli_costmodel  # noqa: E402
from . import export_cmd as cli_export  # noqa: E402
from . import percall_cmd as cli_percall  # noqa: E402
from . import replay_cmd as cli_replay  # noqa: E402
from . import reporting as cli_reporting  # noqa: E402
from . import search_cmd as cli_search  # noqa: E402
from . import transition_cmd as cli_transition  # noqa: E402

for _cmd in (cli_search.search, cli_search.worker, cli_replay.sweep, cli_replay.study, cli_replay.study_report,
             cli_replay.plot_study, cli_export.export, cli_percall.percall, cli_transition.transition,
             cli_costmodel.costmodel, cli_costmodel.predict, cli_check.check, cli_reporting.summarize,
             cli_reporting.report, cli_reporting.which_table):
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
