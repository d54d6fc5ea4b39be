"""The bench commands (a group, registered on the main group): ``bench kernels`` (per shape, the tuned table
or chosen configs against the baselines), ``bench step`` (one decode step of a model preset), ``bench hf``
(greedy decode of a Hugging Face model, stock against gemvtune), ``bench fp8`` (FP8 weights against 16-bit,
dequantize + F.linear and gemlite), ``bench group`` (sibling linears in one launch)
and ``bench guard`` (the never-slower check: swapped layers against stock nn.Linear in a torch-only harness). The old spelling without a subcommand
(``bench --shape ...``, ``bench --model NAME --layers N``, ``bench --hf-config PATH``) runs the same code for
one release, saying so in one line on stderr."""

from __future__ import annotations

from typing import Any

import click

from ..errors import UsageError
from ..kernels.shapes import DTYPES, Shape, parse_batches, parse_shape
from ..tuning.search_options import SEED, ModelPreset
from .options import DTYPE_DECL, WEIGHTS_DECL, Decl, declared, given_options, old_spelling, select_configs
from .options import gpu_check as _gpu_check

# Every option of the bench commands, declared once (keys: the click parameter's name).
OPTS: dict[str, Decl] = {
    "shape_texts": (("--shape", "shape_texts"), {"multiple": True, "help": "M x d (repeatable)"}),
    "suite": (("--suite",), {"type": click.Choice(["decode"]), "help": "the decode suite of shapes"}),
    "model": (("--model",), {"type": ModelPreset(), "help": "every linear-layer shape of a model preset"}),
    "spec": (("--configs", "spec"), {"default": "tuned", "show_default": True,
                                     "help": "tuned (the table's kernel) | all | sample:N | llama | FILE.json | one "
                                             "inline config"}),
    "table_path": (("--table", "table_path"), {"help": "table of the tuned kernels (default results/<gpu>/table.json)"}),
    "batch_text": (("--batch", "batch_text"), {"default": "1", "show_default": True,
                                               "help": "batch sizes n, e.g. 1,2,4"}),
    "rounds": (("--rounds",), {"default": 3, "show_default": True, "type": click.IntRange(1, 50),
                               "help": "interleaved rounds (the tuned kernel and every baseline)"}),
    "seed": (("--seed",), {"default": 0, "show_default": True, "type": SEED, "help": "seed of sample:N"}),
    "out_dir": (("--out", "out_dir"), {"help": "output folder (default results/<gpu>/benchmarks/)"}),
    "no_spin_check": (("--no-spin-check",), {"is_flag": True, "help": "skip timing llama.cpp with the spin method too"}),
    "no_inductor": (("--no-inductor",), {
        "is_flag": True, "help": "skip the Inductor baseline: torch.compile(F.linear, mode=max-autotune-no-cudagraphs), "
                                 "compiled and autotuned once per shape (tens of seconds each)"}),
    "dtype": DTYPE_DECL,
    "dtypes": (("--dtype", "dtypes"), {"type": click.Choice(DTYPES), "multiple": True,
                                       "help": "dtype of W and x: fp16 and/or bf16 (repeatable; default both)"}),
    "replays": (("--replays",), {"default": 10, "show_default": True, "type": click.IntRange(1, 1000),
                                 "help": "graph replays per contender per round"}),
    "layers_text": (("--layers", "layers_text"), {"metavar": "N", "help": "N layers"}),
    "hf_config": (("--hf-config", "hf_config"), {"metavar": "PATH",
                                                 "help": "a Hugging Face config.json (or its folder)"}),
    "tokens_text": (("--tokens", "tokens_text"), {"metavar": "N",
                                                  "help": "new tokens per generate  [default: 128]"}),
    "prompt_text": (("--prompt-tokens", "prompt_text"), {"metavar": "N",
                                                         "help": "random prompt tokens  [default: 16]"}),
    "group": (("--group",), {"is_flag": True, "help": "gemvtune's variant groups sibling linears (q/k/v, gate/up) "
                                                   "into one launch, and SwiGLU MLPs' gate/up into one that writes "
                                                   "silu(g)*u, where the table measured it faster: "
                                                   "swap_linears(model, table, group=True)"}),
    "pdl": (("--pdl",), {"is_flag": True, "help": "also time the fused step with programmatic dependent launch: each "
                                               "kernel loads its first W vectors before it waits for the previous "
                                               "one, at the depth a chain search picks in the step's own graph"}),
    "between": (("--between",), {"metavar": "MODES", "default": "none", "show_default": True,
                                 "help": "comma list of none, plain, pdl: the step as it is, and with stand-ins of the "
                                         "kernels a model runs between its linears (plain: they end a PDL chain; "
                                         "pdl: PDL-aware)"}),
    "fp8_weights": (("--weights", "fp8_weights"), {"type": click.Choice(["e4m3-row", "e4m3-b128"]),
                                                   "default": "e4m3-row", "show_default": True,
                                                   "help": "FP8 format: scales per output row or per 128x128 block"}),
    "hf_weights": (("--weights", "hf_weights"), {
        "type": click.Choice(["e4m3-row", "e4m3-b128"]), "default": None,
        "help": "gemvtune's variant quantises the model's linears to FP8 (quantize_fp8: E4M3 with scales per row or "
                "per 128x128 block) against the stock 16-bit model; its first decode step is checked against a "
                "float64 reference of the dequantised model"}),
    "weights": WEIGHTS_DECL,
    "no_gemlite": (("--no-gemlite",), {"is_flag": True, "help": "skip gemlite's A16W8_FP8 baseline"}),
    "context": (("--context",), {"default": 128, "show_default": True, "type": click.IntRange(1, 1 << 20),
                                 "help": "KV-cache tokens the attention stand-in reads"}),
}
KERNELS = "shape_texts suite model spec table_path batch_text rounds seed out_dir no_spin_check no_inductor dtype"
STEP = "model layers_text table_path rounds out_dir"
HF = "layers_text tokens_text prompt_text table_path out_dir rounds seed dtype"   # after the CONFIG argument


@click.group(invoke_without_command=True)
@declared(OPTS, f"{KERNELS} layers_text hf_config tokens_text prompt_text", hidden=True)   # the old spelling
@click.pass_context
def bench(ctx: click.Context, **params: Any) -> None:
    """Benchmarks in one process on the GPU: the tuned kernels against the baselines per shape (bench
    kernels), one decode step of a model (bench step), a Hugging Face model's greedy decode (bench hf).

    The old spelling without a subcommand (bench --shape ..., bench --model NAME --layers N, bench
    --hf-config PATH) still runs, deprecated: it is removed in the next release."""
    if params["hf_config"] is not None:
        old, new = "bench --hf-config", "bench hf"
    elif params["layers_text"] is not None:
        old, new = "bench --layers", "bench step"
    else:
        old, new = " ".join(["bench", *given_options(ctx)[:1]]), "bench kernels"
    if old_spelling(ctx, old, new):
        _old_bench(params)


def _old_bench(p: dict[str, Any]) -> None:
    """``bench`` without a subcommand, as it behaved: the combinations it refused, with the same words, then
    the run of its mode."""
    if p["hf_config"] is not None:
        clash = [opt for opt, given in (("--shape", p["shape_texts"]), ("--suite", p["suite"]), ("--model", p["model"]),
                                        ("--configs", p["spec"] != "tuned"),
                                        ("--batch", str(p["batch_text"]).strip() != "1"),
                                        ("--no-spin-check", p["no_spin_check"]), ("--no-inductor", p["no_inductor"]))
                 if given]
        if clash:
            raise UsageError(f"--hf-config times a Hugging Face model's generate at batch 1: drop {', '.join(clash)}")
        run_hf(**{k: p[k] for k in ("hf_config", *HF.split())}, group=False, hf_weights=None)
        return
    for text, opt in ((p["tokens_text"], "--tokens"), (p["prompt_text"], "--prompt-tokens")):
        if text is not None:
            raise UsageError(f"{opt} needs --hf-config")
    if p["layers_text"] is not None:
        from ..bench.step import check_decode_args

        layers = check_decode_args(p["model"], p["layers_text"], p["shape_texts"], p["suite"], p["spec"],
                                   p["batch_text"])
        run_step(p["model"], layers, p["table_path"], p["rounds"], p["out_dir"], pdl=False, between=("none",),
                 context=128)
        return
    run_kernels(**{k: p[k] for k in KERNELS.split()})


@bench.command("kernels", short_help="the tuned kernels (or chosen configs) against the baselines, per shape")
@declared(OPTS, KERNELS, seed={"help": "seed of sample:N"},
          rounds={"help": "interleaved rounds (the tuned kernel and every baseline) for --configs tuned"})
def kernels(**params: Any) -> None:
    """Per shape and batch: the read ceiling, then the table's tuned kernel against the llama.cpp config (d
    compiled in), the seed kernel as written (d at run time), cuBLAS and Inductor max-autotune (ratios,
    geometric means per batch, dispatch cost, CSV, summary, bar chart); or chosen variants (--configs)."""
    run_kernels(**params)


@bench.command("fp8", short_help="FP8 weights: the table's FP8 kernel against 16-bit, dequantize and gemlite")
@declared(OPTS, "shape_texts suite model table_path batch_text rounds out_dir dtype fp8_weights no_gemlite")
def fp8(shape_texts: tuple[str, ...], suite: str | None, model: str | None, table_path: str | None, batch_text: str,
        rounds: int, out_dir: str | None, dtype: str, fp8_weights: str, no_gemlite: bool) -> None:
    """Per shape and batch, FP8 weights (E4M3 with FP32 scales) in one process: the table's FP8 kernel against its
    16-bit tuned kernel and cuBLAS on 16-bit weights, dequantize + F.linear (what a model of FP8 weights runs
    without a kernel) and gemlite's A16W8_FP8 with its own autotune (carried source: .peers/gemlite or
    GEMVTUNE_GEMLITE; row scales only); % of the read ceiling on the FP8 bytes, ratios, geomeans per batch."""
    from ..kernels.hfconfig import model_shapes
    from ..kernels.shapes import DECODE_SUITE

    shapes = [parse_shape(t) for t in shape_texts] + ([Shape(M, d) for M, d in DECODE_SUITE] if suite else [])
    shapes += model_shapes(model) if model else []
    if not shapes:
        raise UsageError("bench fp8 needs --shape, --suite or --model")
    fp8s = list(dict.fromkeys(Shape(s.M, s.d, n, dtype, fp8_weights) for s in shapes
                              for n in parse_batches(batch_text)))
    table_path = _tuned_table(table_path)
    from ..bench.fp8bench import run_fp8_bench

    run_fp8_bench(fp8s, table_path, out_dir, echo=click.echo, rounds=rounds, gemlite=not no_gemlite)


@bench.command("step", short_help="one whole decode step of a model preset in CUDA graphs")
@declared(OPTS, STEP + " pdl between context", model={"required": True, "help": "the model preset whose decode step is timed"},
          layers_text={"required": True, "help": "layers of the step (then the LM head once)"})
def step(model: str, layers_text: str, table_path: str | None, rounds: int, out_dir: str | None, pdl: bool,
         between: str, context: int) -> None:
    """One whole decode step of a model preset (N layers + LM head) in one CUDA graph per implementation: the tuned
    kernels on the fused shapes, the fused step (sibling groups, residual and SwiGLU epilogues; with --pdl also with
    chain PDL), llama.cpp config, cuBLAS; with --between, again with stand-ins between the linears; µs per token,
    tokens/s, % of ceiling; CSV, summary, chart."""
    from ..bench.step import check_decode_args, parse_between

    modes = parse_between(between)
    run_step(model, check_decode_args(model, layers_text), table_path, rounds, out_dir, pdl=pdl, between=modes,
             context=context)


@bench.command("hf", short_help="a Hugging Face model's greedy decode, stock against gemvtune")
@click.argument("hf_config", metavar="CONFIG")
@declared(OPTS, HF + " group hf_weights", layers_text={"help": "build the model with N layers (default: the config's)"},
          seed={"help": "seed of the model's random weights"},
          rounds={"help": "interleaved rounds of generate, stock and gemvtune"})
def hf(**params: Any) -> None:
    """End to end in Hugging Face transformers: the model of CONFIG (a local config.json or its folder) with
    random weights, greedy generate stock against swap_linears, eager and compiled, interleaved; tokens/s,
    ms/token, token agreement; CSV, summary, PNG (needs gemvtune[hf])."""
    run_hf(**params)


@bench.command("group", short_help="a model's sibling linears in one grouped launch, against the members one by one")
@declared(OPTS, "model table_path batch_text dtype out_dir",
          model={"required": True, "help": "the model preset whose groups (q, k, v; gate, up) are timed"})
def group(model: str, table_path: str | None, batch_text: str, dtype: str, out_dir: str | None) -> None:
    """Per batch size: each group of a model preset's layer (q, k, v; gate, up) as one grouped launch with the
    fused shape's best GEMV config, against the members one after another with their own table kernels and
    against the plain fused kernel, in CUDA graphs over cold weight copies, in one process; CSV, JSON, summary."""
    batches = parse_batches(batch_text)
    table_path = _tuned_table(table_path)
    from ..bench.groupbench import run_group_bench

    run_group_bench(model, batches, dtype, table_path, out_dir, echo=click.echo)


@bench.command("guard", short_help="the never-slower check: swapped layers against stock nn.Linear, torch only")
@declared(OPTS, "table_path suite shape_texts batch_text dtypes weights rounds replays out_dir",
          weights={"help": "FP8 weights: the layers quantised to E4M3 (scales per row or per 128x128 block) through "
                           "the table's FP8 entries, against dequantize + F.linear of the same weights (what an FP8 "
                           "model runs without a kernel)"},
          table_path={"help": "the table to check (default: the one load_table() loads on this GPU)"},
          suite={"help": "the decode suite of shapes (the default without --shape)"},
          batch_text={"default": None, "show_default": False,
                      "help": "batch sizes n, e.g. 1,2,4  [default: every n in 1..16]"},
          rounds={"default": 7, "type": click.IntRange(2, 50),
                  "help": "interleaved rounds, stock and gemvtune back to back (the order swapped every round)"})
def guard(**params: Any) -> None:
    """The table's promise checked in a harness of its own (torch only, not the search's): per shape, n and dtype,
    stock nn.Linear against the same modules after swap_linears (--weights: FP8 layers through the table against
    dequantize + F.linear of the same weights), each in one CUDA graph over weight copies of at least 3x the L2, replays timed with CUDA events in interleaved rounds, outputs checked against float64; CSV,
    JSON, summary. Exit 1 when a row is slower than stock by more than 1% beyond the paired noise (FAIL) or a
    contender's output is wrong (ERROR); the rule is in docs/commands.md."""
    run_guard(**params)


def run_guard(table_path: str | None, suite: str | None, shape_texts: tuple[str, ...], batch_text: str | None,
              dtypes: tuple[str, ...], rounds: int, replays: int, out_dir: str | None,
              weights: str | None = None) -> None:
    """bench guard: every check that needs no GPU first (shapes, batches, the table, --out, torch), then the GPU."""
    from ..errors import GemvtuneError, NoDeviceError
    from ..kernels.shapes import DECODE_SUITE, MAX_BATCH
    from .options import writable_dir

    shapes = [parse_shape(t) for t in shape_texts]
    if suite == "decode" or not shapes:
        shapes += [Shape(M, d) for M, d in DECODE_SUITE]
    pairs = list(dict.fromkeys((s.M, s.d) for s in shapes))
    batches = parse_batches(batch_text) if batch_text is not None else list(range(1, MAX_BATCH + 1))
    kinds = list(dict.fromkeys(dtypes)) or list(DTYPES)
    weights = weights or ""
    for dt in kinds:
        for M, d in pairs:
            Shape(M, d, 1, dt, weights)
    if table_path is not None:
        from ..runtime.table import load_table

        load_table(table_path)                  # a missing or corrupt table fails before any GPU work
    out = writable_dir(out_dir) if out_dir is not None else None
    try:
        import torch
    except ImportError:
        raise UsageError("bench guard times PyTorch layers and needs torch: pip install 'gemvtune[torch]'") from None
    _gpu_check()
    if not torch.cuda.is_available():
        raise NoDeviceError("torch sees no CUDA device (torch.cuda.is_available() is False)")
    from ..bench.guard import CudaBackend
    from ..bench.guard import run_guard as measure
    from ..bench.guardverdict import estimate_seconds
    from ..runtime.table import load_table
    from ..workspace import Workspace

    backend = CudaBackend()
    name = str(backend.props.name)
    table = load_table(table_path)              # no path: this GPU's table (yours, else the one shipped)
    table._check_gpu(name)
    free = backend.free_bytes()
    # one weight and its float64 reference blocks; FP8: the 16-bit weight it is quantised from, its codes and the
    # dequantised float32 reference
    big = [f"{M}x{d}" for M, d in pairs if (7 if weights else 4) * M * d > free]
    if big:
        raise UsageError(f"not enough free device memory ({free / 1e9:.1f} GB) for one weight and its float64 "
                         f"reference blocks of {', '.join(big)}")
    folder = out if out is not None else writable_dir(Workspace.for_gpu(name).benchmarks)
    est = estimate_seconds(pairs, len(batches), len(kinds), rounds, replays, backend.info()["l2_bytes"])
    click.echo(f"table {table.path} ({table.origin}){f'; {weights} weights' if weights else ''}; {len(pairs)} shapes x "
               f"{len(batches)} n x {len(kinds)} dtypes = "
               f"{len(pairs) * len(batches) * len(kinds)} rows, {rounds} rounds of {replays} replays; about "
               f"{est / 60:.1f} min")
    res = measure(pairs, batches, kinds, table, folder, rounds, replays, echo=click.echo, backend=backend,
                  keep_latest=out is None, weights=weights)
    click.echo(res.markdown)
    click.echo(f"wrote {res.csv}, {res.csv.with_suffix('.json').name} and {res.csv.stem}-summary.md")
    if res.failure:
        raise GemvtuneError(res.failure)


def _tuned_table(table_path: str | None) -> str:
    """The table of --configs tuned (default results/<gpu>/table.json), loaded once: a missing or corrupt
    table fails before any GPU work; then the GPU check."""
    from ..runtime.table import load_table

    if table_path is None:
        _gpu_check()
        from ..runners.cuda import CudaRunner
        from ..workspace import Workspace

        table_path = str(Workspace.for_gpu(CudaRunner().device_info()["name"]).table)
    load_table(table_path)
    _gpu_check()
    return table_path


def run_kernels(shape_texts: tuple[str, ...], suite: str | None, model: str | None, spec: str, table_path: str | None,
                batch_text: str, rounds: int, seed: int, out_dir: str | None, no_spin_check: bool, no_inductor: bool,
                dtype: str) -> None:
    """bench kernels: the shapes and batches first, then the tuned bench or the chosen configs' bench."""
    from ..kernels.hfconfig import model_shapes
    from ..kernels.shapes import DECODE_SUITE

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
        table_path = _tuned_table(table_path)
        from ..bench.kernels import run_tuned_bench

        run_tuned_bench(shapes, table_path, out_dir, echo=click.echo, rounds=rounds, inductor=not no_inductor)
        return
    for s in shapes:
        select_configs(spec, s, seed)  # bad --configs fails before any GPU work
    _gpu_check()
    from ..bench.kernels import run_bench

    run_bench(shapes, lambda s: select_configs(spec, s, seed), out_dir, echo=click.echo,
              spin_check=not no_spin_check, inductor=not no_inductor)


def run_step(model: str, layers: int, table_path: str | None, rounds: int, out_dir: str | None,
             pdl: bool = False, between: tuple[str, ...] = ("none",), context: int = 128) -> None:
    """bench step, its arguments checked (bench.step.check_decode_args, parse_between)."""
    table_path = _tuned_table(table_path)
    from ..bench.step import run_decode_step

    run_decode_step(model, layers, table_path, out_dir, echo=click.echo, rounds=rounds, pdl=pdl, between=between,
                    context=context)


def run_hf(hf_config: str, layers_text: str | None, tokens_text: str | None, prompt_text: str | None,
           table_path: str | None, out_dir: str | None, rounds: int, seed: int, dtype: str, group: bool = False,
           hf_weights: str | None = None) -> None:
    """bench hf: every check that needs no GPU first (the numbers, the config file, transformers, the table),
    then the GPU check, then gemvtune.hf.bench."""
    from ..hf.bench import build_config, check_transformers, positive_int, read_config, run_hf_bench

    layers = positive_int(layers_text, "--layers") if layers_text is not None else None
    tokens = positive_int(tokens_text, "--tokens") if tokens_text is not None else 128
    prompt = positive_int(prompt_text, "--prompt-tokens") if prompt_text is not None else 16
    if group and hf_weights:
        raise UsageError("--group and --weights: FP8 layers are not grouped (pick one)")
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
                 rounds=rounds, echo=click.echo, seed=seed, dtype={"fp16": "float16", "bf16": "bfloat16"}[dtype],
                 group=group, weights=hf_weights or "")
