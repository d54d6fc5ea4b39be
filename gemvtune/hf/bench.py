"""End-to-end Hugging Face benchmark (``gemvtune bench hf PATH``): a transformers causal LM built
from a local config.json with random weights on the GPU (no download), greedy ``generate`` timed stock
and with gemvtune's ``swap_linears`` on the same model object (same weights), eager and compiled
(``cache_implementation="static"``, which transformers compiles itself), interleaved over rounds; the
linear layers' share of a decode step from torch.profiler; token agreement and logit differences;
``gemvtune.explain`` of the swapped layers.

This module runs the steps in order; each lives in its own module: the model (gemvtune.hf.model), the
timed rounds (gemvtune.hf.rounds, with torch.compile's bookkeeping in gemvtune.hf.torchcompile), the profile
(gemvtune.hf.profile), the checks (gemvtune.hf.check), the report (pure: gemvtune.hf.report).

torch and transformers are imported inside functions only: ``import gemvtune.hf.bench`` stays light,
and without transformers the CLI says, in one line, to ``pip install 'gemvtune[hf]'``."""

from __future__ import annotations

import contextlib
import datetime as _dt
import platform
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import NoDeviceError, UsageError
from ..reports.runcsv import provenance
from ..workspace import Workspace, replace_previous
from .check import agreement, explain_rows, logit_diffs
from .model import Variants, build_config, build_model, check_transformers, pad_id, read_config
from .profile import profile_linear_share
from .report import ROW_COLUMNS, mode_table, short_table, write_hf_reports, write_rows_csv
from .rounds import Bench, run_rounds
from .torchcompile import compile_summary, raise_recompile_limits

MAX_LAYERS = 1024        # --layers: deeper than any released decoder (Llama-3.1-405B has 126)
MAX_TOKENS = 65536       # --tokens, --prompt-tokens: a bench, not a long-context run
LIMITS = {"--layers": MAX_LAYERS, "--tokens": MAX_TOKENS, "--prompt-tokens": MAX_TOKENS}


def positive_int(value: Any, option: str) -> int:
    """An integer in 1..LIMITS[option] from an option's text (ASCII digits, at most 12), else one UsageError
    naming the option, before anything is built from it."""
    from ..intparse import positive_int as bounded

    return bounded(value, option, LIMITS.get(option, MAX_TOKENS))


def device_env(device: str) -> dict[str, Any]:
    import torch

    env: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda or "", "python": platform.python_version(),
                           "gpu": "cpu", "driver": ""}
    try:
        import transformers

        env["transformers"] = transformers.__version__
    except Exception:
        env["transformers"] = "?"
    from ..provenance import VERSION

    env["gemvtune"] = VERSION
    if str(device).startswith("cuda"):
        p = torch.cuda.get_device_properties(torch.device(device))
        env.update(gpu=p.name, compute_capability=f"{p.major}.{p.minor}", sm_count=p.multi_processor_count,
                   memory_bytes=p.total_memory)
        try:
            # (torch's stub of _CudaDeviceProperties lacks pci_bus_id / pci_device_id, which it has at run time)
            env["pci_bus_id"] = (f"{int(getattr(p, 'pci_domain_id', 0)):08X}:{int(p.pci_bus_id):02X}:"  # type: ignore[attr-defined]
                                 f"{int(p.pci_device_id):02X}.0")  # type: ignore[attr-defined]
        except Exception:
            pass
        try:
            cmd = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
            if env.get("pci_bus_id"):
                cmd.append(f"--id={env['pci_bus_id']}")
            env["driver"] = subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip()
        except Exception:
            pass
    return env


def default_table_path(device: str = "cuda") -> str:
    """results/<gpu>/table.json for the GPU torch sees (no CuPy runner: it would make its own stream
    current in this process)."""
    import torch

    if not torch.cuda.is_available():
        raise NoDeviceError("torch sees no CUDA device (torch.cuda.is_available() is False)")
    return str(Workspace.for_gpu(torch.cuda.get_device_name(torch.device(device))).table)


def _gpu_lock(env: dict[str, Any]) -> Any:
    """The per-GPU timing lock gemvtune's other benchmarks and searches hold (None where unavailable)."""
    if not env.get("pci_bus_id"):
        return None
    try:
        from ..runners.cuda.gpulock import GpuLock

        return GpuLock(env["pci_bus_id"]).held
    except Exception:
        return None


def run_hf_bench(config_path: str, layers: int | None = None, tokens: int = 128, prompt_tokens: int = 16,
                 table_path: str | None = None, out_dir: str | None = None, rounds: int = 3,
                 echo: Callable[[str], None] = print, dtype: str = "float16", device: str = "cuda", seed: int = 0,
                 profile: bool = True, profile_compiled: bool = True, command: str | None = None,
                 group: bool = False, weights: str = "") -> dict[str, Path]:
    """The whole benchmark; returns the paths written (csv, summary_csv, summary_md, provenance, png). ``group``:
    gemvtune's variant is ``swap_linears(model, table, group=True)`` (sibling linears in one launch). ``weights``
    ("e4m3-row", "e4m3-b128"): gemvtune's variant is the model quantised to FP8 (``quantize_fp8``), stock the 16-bit
    model, and the FP8 model's first decode step is checked against a float64 reference of its dequantised weights
    (``gemvtune.hf.fp8check``)."""
    if group and weights:
        raise UsageError("--group and --weights: FP8 layers are not grouped (pick one)")
    for v, opt in ((tokens, "--tokens"), (prompt_tokens, "--prompt-tokens"), (rounds, "--rounds")):
        positive_int(v, opt)
    if layers is not None:
        positive_int(layers, "--layers")
    tf_version = check_transformers()
    fields, name, cfg_file = read_config(config_path)
    cfg, cinfo = build_config(fields, layers, where=f"config {cfg_file}")
    layers = cinfo["layers"]
    if table_path is None:
        raise UsageError("run_hf_bench needs a table path")
    from ..runtime.table import load_table

    table = load_table(table_path)

    import torch

    if str(device).startswith("cuda") and not torch.cuda.is_available():
        raise NoDeviceError("torch sees no CUDA device (torch.cuda.is_available() is False)")
    env = device_env(device)
    out = Path(out_dir) if out_dir else Workspace.for_gpu(env["gpu"]).benchmarks
    try:
        out.mkdir(parents=True, exist_ok=True)  # an unwritable --out fails before the GPU work
    except OSError as e:
        raise UsageError(f"output folder {out} cannot be created: {e.strerror or e}") from None
    if str(device).startswith("cuda"):
        with contextlib.suppress(Exception):
            table._check_gpu(env["gpu"])
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    bench = (f"hf-{name}-L{layers}" + ("" if dtype == "float16" else f"-{dtype}")
             + ("-group" if group else "") + (f"-{weights}" if weights else ""))   # the benchmark; a run adds its stamp
    stem = f"{bench}-{stamp}"
    result: dict[str, Any] = {  # date and command (unless given) as every gemvtune provenance has them
        **provenance(), "model": name, "config_path": str(config_path), "config_file": str(cfg_file), **cinfo,
        "dtype": dtype, "tokens": tokens, "prompt_tokens": prompt_tokens, "rounds": rounds, "seed": seed,
        "table": str(table_path), "device": device, "env": env, "group": bool(group), "weights": weights,
        "notes": []}
    if command:
        result["command"] = command
    result["env"]["transformers"] = tf_version
    echo(f"device: {env['gpu']} (driver {env.get('driver') or '?'}), torch {env['torch']}, transformers {tf_version}")
    if str(device).startswith("cuda"):
        result["dynamo_limits"] = raise_recompile_limits()

    t0 = time.perf_counter()
    model = build_model(cfg, dtype, device, seed)
    nparams = sum(p.numel() for p in model.parameters())
    result.update(architecture=type(model).__name__, parameters=nparams,
                  attn_implementation=str(getattr(model.config, "_attn_implementation", "")))
    echo(f"built {type(model).__name__} from {cfg_file}: {layers} layers (config {cinfo['config_layers']}), "
         f"{nparams / 1e9:.2f} B parameters, {dtype}, in {time.perf_counter() - t0:.1f} s")
    if cinfo["dropped_fields"] or cinfo["adjusted_fields"]:
        result["notes"].append(f"config fields dropped: {cinfo['dropped_fields'] or 'none'}; per-layer lists "
                               f"fitted to {layers} layers: {cinfo['adjusted_fields'] or 'none'}")

    variants = Variants(model, table, group=group, weights=weights)
    if variants.fp8 is not None:
        result["fp8_memory"] = {"before": variants.fp8.before, "after": variants.fp8.fp8,
                                "skipped": variants.fp8.skipped}
        echo(f"quantize_fp8: {variants.fp8}")
    result["swapped"] = len(variants.names)
    result["groups"] = variants.groups
    result["swiglu_mlps"] = variants.mlps
    result["swapped_names"] = variants.names
    if variants.missing:
        result["notes"].append(f"restore_linears did not name {len(variants.missing)} swapped layers "
                               f"(e.g. {variants.missing[0]})")
    echo(f"swap_linears: {len(variants.names)} linear layers"
         + (f", {variants.groups} sibling groups, {variants.mlps} SwiGLU MLPs fused" if group else ""))
    if not variants.names:
        result["notes"].append("swap_linears replaced no layer: gemvtune and stock are the same model")

    vocab = int(getattr(cfg, "vocab_size", 0) or 0)
    if vocab < 2:
        raise UsageError(f"config {cfg_file}: vocab_size must be >= 2")
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (1, prompt_tokens), generator=gen).to(device)
    lock = _gpu_lock(env)
    b = Bench(model, variants, ids, tokens, device, pad_id(cfg), echo, lock)
    meta = {"model": name, "layers": layers, "prompt_tokens": prompt_tokens}

    rows, info = run_rounds(b, rounds, meta)
    result.update({k: v for k, v in info.items() if k != "notes"})
    result["notes"] += info["notes"]
    result["compile"] = compile_summary(info, model)
    write_rows_csv(rows, out / f"{stem}.csv", ROW_COLUMNS)  # the timings survive whatever fails below
    echo(f"timings in {out / f'{stem}.csv'}")

    result["agreement"] = agreement(b)
    result["logits"] = logit_diffs(b)
    echo("logits vs stock: " + (result["logits"].get("error") or
                                f"prefill {result['logits']['prefill_rel']:.2e}, first decode step "
                                f"{result['logits']['decode_rel']:.2e} (max|diff| / max|stock|)"))
    if weights:
        from .fp8check import fp8_accuracy, fp8_line

        result["fp8"] = fp8_accuracy(b)
        echo(fp8_line(result["fp8"]))
    if profile:
        echo("profiling (torch.profiler, CUDA activity)...")
        result["profile"] = profile_linear_share(b, compiled=profile_compiled)
    variants.use("gemvtune")
    result["explain"] = explain_rows(model)
    variants.use("stock")

    paths = write_hf_reports(rows, result, out, stem)
    echo(f"wrote {', '.join(p.name for p in paths.values())} in {out}")
    if not out_dir:   # the workspace's benchmarks: the latest run of each benchmark is kept
        replace_previous(out, bench, stamp)
    echo(short_table(mode_table(rows)))
    return paths
