"""The search and worker commands (registered on the main group): one process, one worker per GPU of
this host (--devices), several processes (--workers), or a worker joining a study by name from anywhere."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from .cli_options import gpu_check as _gpu_check, writable_dir as _writable_dir
from .cli_options import SAMPLER, SEED, TRIALS, ModelPreset
from .families import DEFAULT_FAMILY
from .errors import UsageError
from .shapes import Shape, parse_shape
from .storage import HEARTBEAT_S


def _make_runner(shapes: list[Shape], replay_path: str | None, watchdog_s: float | None) -> tuple[Any, Any, str | None]:
    """(runner, family -> the domains to search or None, the default results folder or None)."""
    if replay_path:
        from .report import gpu_slug
        from .runners.replay import ReplayRunner

        runner = ReplayRunner(replay_path)
        for s in shapes:
            runner.sweep(s)  # a shape with no recorded sweep fails before anything is written
        grids = {json.dumps([runner.sweep(s).family, runner.sweep(s).grid], sort_keys=True) for s in shapes}
        grid = runner.sweep(shapes[0]).grid if len(grids) == 1 else None
        domains = {runner.sweep(shapes[0]).family: grid} if grid else None   # the family the sweeps recorded
        return runner, domains, str(Path("results") / gpu_slug(runner.device_info().get("name", "gpu")) / "replay")
    _gpu_check()
    from .runners.cuda import CudaRunner

    if watchdog_s:
        from .runners.isolated import IsolatedRunner

        return IsolatedRunner(CudaRunner, timeout_s=watchdog_s), None, None
    return CudaRunner(), None, None


def _parse_devices(text: str | None) -> list[str]:
    if text is None:
        return []
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts or not all(p.isdigit() for p in parts) or len(set(parts)) != len(parts):
        raise UsageError(f"malformed --devices {text!r}: expected distinct GPU indices like 0,1,2,3")
    return parts


@click.command()
@click.option("--shape", "shape_texts", multiple=True, help="M x d (repeatable)")
@click.option("--model", default=None, type=ModelPreset(), help="tune every linear-layer shape of a model preset")
@click.option("--hf-config", "hf_configs", multiple=True, metavar="PATH",
              help="tune every linear-layer shape of a model given by its Hugging Face config.json "
                   "(the file or its folder; local only; repeatable)")
@click.option("--fused", is_flag=True, default=False,
              help="with --model/--hf-config: the fused shapes engines run (qkv, gate_up) instead of "
                   "transformers' unfused ones (q, k, v, gate, up)")
@click.option("--sampler", default="tpe", show_default=True, type=SAMPLER)
@click.option("--trials", default=None, type=TRIALS,
              help="measured trials per shape, the study's total over all workers; a search also stops when "
                   "its space is measured, or when 200 proposals in a row measure nothing new "
                   "(default: 100, from the search-quality study, see README)")
@click.option("--timeout", default=None, type=click.FloatRange(min=0, min_open=True),
              help="seconds of search per shape in this run")
@click.option("--seed", default=0, show_default=True, type=SEED)
@click.option("--storage", default=None,
              help="Optuna storage: journal:PATH (default, under --results), postgresql://…, sqlite:///…, "
                   "mysql+pymysql://…, redis://…, grpc://HOST:PORT, memory:")
@click.option("--results", "results_dir", default=None, help="results folder (default results/<gpu>/)")
@click.option("--table", "table_path", default=None, help="table to update (default <results>/table.json)")
@click.option("--top-k", default=3, show_default=True, type=click.IntRange(1, 64), help="candidates re-measured before a winner")
@click.option("--rounds", default=5, show_default=True, type=click.IntRange(1, 100), help="interleaved re-measurement rounds")
@click.option("--batch", "batch_text", default="1", show_default=True,
              help="batch sizes n (columns of x) to tune each shape at, e.g. 1,2,4,8,16")
@click.option("--family", "family_text", default=None,
              help="kernel families to search: gemv,splitk (default: both; gemv only on --replay)")
@click.option("--replay", "replay_path", default=None,
              help="search recorded sweeps (a sweep-*.csv.gz or a folder of them) instead of a GPU")
@click.option("--allow-replay-into-measured", "allow_replay", is_flag=True, default=False,
              help="with --replay: write into a table or storage that holds measured (GPU) results")
@click.option("--watchdog", "watchdog_s", default=None, type=click.FloatRange(min=1.0),
              help="run the GPU runner in a child process; a call that gives no answer in this many seconds "
                   "(a hanging kernel) is recorded as timeout and the child replaced")
@click.option("--devices", "devices_text", default=None,
              help="one worker process per GPU of this host, pinned to it (CUDA_VISIBLE_DEVICES), sharing the studies")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 256),
              help="worker processes on this host sharing the studies (without --devices: all on the same GPU)")
@click.option("--heartbeat", "heartbeat_s", default=HEARTBEAT_S, show_default=True, type=click.FloatRange(min=0.1),
              help="seconds between a running trial's heartbeats; a trial silent for 3 of them is failed and retried")
@click.option("--worker-index", "worker_index", default=0, hidden=True, type=click.IntRange(min=0),
              help="(given by --workers/--devices to each worker: offsets its sampler seed)")
def search(shape_texts, model, hf_configs, fused, sampler, trials, timeout, seed, storage, results_dir, table_path,
           top_k, rounds, batch_text, family_text, replay_path, allow_replay, watchdog_s, devices_text, workers,
           heartbeat_s, worker_index) -> None:
    """Find the fastest correct kernel per shape and batch with Optuna (the GEMV family and the
    split-K tensor-core GEMM family); record the winners in the GPU's table."""
    from .workers import die_with_parent

    die_with_parent()   # a worker started by --workers/--devices ends with its parent
    from .families import parse_families
    from .search import SearchOptions
    from .shapes import model_shapes, parse_batches

    batches = parse_batches(batch_text)
    base = [parse_shape(t) for t in shape_texts] + (model_shapes(model, fused=fused) if model else [])
    if hf_configs:
        from .hfconfig import read_hf_config

        for path in hf_configs:
            base += read_hf_config(path).shapes(fused=fused)
    if not base:
        raise UsageError("search needs --shape or --model (a preset) or --hf-config (a config.json)")
    if fused and not (model or hf_configs):
        raise UsageError("--fused picks the fused shapes of --model/--hf-config: give one of them")
    shapes = list(dict.fromkeys(Shape(s.M, s.d, n) for s in dict.fromkeys(base) for n in batches))
    families = parse_families(family_text) if family_text else (("gemv",) if replay_path else None)
    if trials is None:
        trials = SearchOptions.trials
    opts = SearchOptions(sampler=sampler, trials=int(trials), timeout=timeout, seed=seed, storage=storage,
                         top_k=top_k, rounds=rounds, **({"families": families} if families else {}))
    devices = _parse_devices(devices_text)
    if devices and workers > 1:
        raise UsageError("give --devices (one worker per GPU) or --workers N, not both")
    if devices or workers > 1:
        if replay_path is None:
            _gpu_check()
        if storage and storage.strip().startswith("memory"):
            raise UsageError("--storage memory: lives in one process; workers need a shared storage")
        from .search_run import preflight
        from .workers import run_workers

        # what can be checked before a worker starts (each worker checks the rest: the default folder
        # is named after its GPU, and the table's GPU model is compared with the worker's)
        out = _writable_dir(results_dir) if results_dir else None
        preflight(Path(table_path) if table_path else (out / "table.json" if out else None),
                  storage or (f"journal:{out / 'optuna-journal.log'}" if out else None), None)

        args = ["search", "--sampler", sampler, "--trials", str(trials), "--seed", str(seed),
                "--top-k", str(top_k), "--rounds", str(rounds), "--batch", batch_text, "--heartbeat", str(heartbeat_s)]
        for t in shape_texts:
            args += ["--shape", t]
        for path in hf_configs:
            args += ["--hf-config", str(Path(path).expanduser().resolve())]
        if fused:
            args.append("--fused")
        if allow_replay:
            args.append("--allow-replay-into-measured")
        for flag, val in (("--model", model), ("--timeout", timeout), ("--storage", storage),
                          ("--results", results_dir), ("--table", table_path), ("--family", family_text),
                          ("--replay", replay_path), ("--watchdog", watchdog_s)):
            if val is not None:
                args += [flag, str(val)]
        run_workers(args, devices=devices, workers=len(devices) or workers)
        return
    runner, domains, default_results = _make_runner(shapes, replay_path, watchdog_s)
    opts.domains = domains
    from .search_run import run_searches

    run_searches(runner, shapes, opts, results_dir or default_results, table_path, echo=click.echo,
                 writable=_writable_dir, heartbeat_s=heartbeat_s, allow_replay_into_measured=allow_replay,
                 worker_index=worker_index)


@click.command()
@click.option("--storage", required=True, help="the storage URL the study lives in (see search --storage)")
@click.option("--study", "study_names", multiple=True, required=True,
              help="study name to join, as search printed it, e.g. gemvtune-nvidia-h200-14336x4096x1 (repeatable)")
@click.option("--results", "results_dir", default=None, help="results folder (default results/<gpu>/)")
@click.option("--table", "table_path", default=None, help="table to update if this worker confirms")
@click.option("--replay", "replay_path", default=None, help="measure from recorded sweeps instead of a GPU")
@click.option("--allow-replay-into-measured", "allow_replay", is_flag=True, default=False,
              help="with --replay: write into a table or storage that holds measured (GPU) results")
@click.option("--watchdog", "watchdog_s", default=None, type=click.FloatRange(min=1.0))
@click.option("--heartbeat", "heartbeat_s", default=HEARTBEAT_S, show_default=True, type=click.FloatRange(min=0.1))
@click.option("--timeout", default=None, type=float, help="seconds of search per study in this run")
def worker(storage, study_names, results_dir, table_path, replay_path, allow_replay, watchdog_s, heartbeat_s,
           timeout) -> None:
    """Join existing studies from any host: run their trials until the study's total budget is spent;
    the settings (shape, families, budget, sampler) come from the study itself."""
    import optuna

    from .search import SearchOptions
    from .storage import open_store

    store = open_store(storage, heartbeat_s)
    names = {s.study_name for s in optuna.get_all_study_summaries(store.storage, include_best_trial=False)}
    shapes, settings, gpus = [], set(), set()
    for name in study_names:
        if name not in names:
            raise UsageError(f"no study {name!r} in {storage}; it holds: {', '.join(sorted(names)) or 'none'}")
        attrs = optuna.load_study(study_name=name, storage=store.storage).user_attrs
        if "search_options" not in attrs or "shape" not in attrs:
            raise UsageError(f"study {name!r} was not started by gemvtune search (give the first study of a "
                             "search, without a -<family> suffix)")
        shapes.append(Shape(*attrs["shape"]))
        settings.add(json.dumps(attrs["search_options"], sort_keys=True))
        gpus.add(attrs.get("gpu", ""))
    if replay_path:
        from .runners.replay import refuse_measured_study_names

        refuse_measured_study_names(study_names, allow_replay)
    if len(settings) != 1:
        raise UsageError("these studies were started with different search settings: join them one at a time")
    so = json.loads(settings.pop())
    opts = SearchOptions(sampler=so["sampler"], trials=int(so["trials"]), seed=int(so["seed"]), storage=storage,
                         top_k=int(so["top_k"]), rounds=int(so["rounds"]), n_startup=int(so["n_startup"]),
                         families=tuple(so["families"]), timeout=timeout)
    runner, domains, default_results = _make_runner(shapes, replay_path, watchdog_s)
    opts.domains = domains
    mine = runner.device_info().get("name", "")
    if gpus - {"", mine}:
        raise UsageError(f"the studies were measured on {', '.join(sorted(gpus - {''}))}, this worker has {mine}: "
                         "a study's trials must come from one GPU model")
    from .search_run import run_searches

    run_searches(runner, shapes, opts, results_dir or default_results, table_path, echo=click.echo,
                 writable=_writable_dir, heartbeat_s=heartbeat_s, joiner=True, allow_replay_into_measured=allow_replay)
