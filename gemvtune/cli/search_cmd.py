"""The search and worker commands (registered on the main group): one process, one worker per GPU of
this host (--devices), several processes (--workers), or a worker joining a study by name from anywhere."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from ..errors import UsageError
from ..kernels.shapes import Shape
from ..tuning.api import make_runner as _make_runner
from ..tuning.search_options import click_options, from_cli, from_study, worker_argv
from .options import gpu_check as _gpu_check
from .options import writable_dir as _writable_dir


def _parse_devices(text: str | None) -> list[str]:
    if text is None:
        return []
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts or not all(p.isdigit() for p in parts) or len(set(parts)) != len(parts):
        raise UsageError(f"malformed --devices {text!r}: expected distinct GPU indices like 0,1,2,3")
    return parts


@click.command()
@click_options("search")
def search(**params: Any) -> None:
    """Find the fastest correct kernel per shape and batch with Optuna (the GEMV family and the
    split-K tensor-core GEMM family); record the winners in the GPU's table."""
    # ``params``: the options declared once in tuning.search_options.OPTIONS, by their dest
    from ..tuning.coordination.workers import die_with_parent

    die_with_parent()   # a worker started by --workers/--devices ends with its parent
    from ..tuning.api import tune_shapes

    p = params
    if not (p["shape_texts"] or p["model"] or p["hf_configs"]):
        raise UsageError("search needs --shape or --model (a preset) or --hf-config (a config.json)")
    if p["fused"] and not (p["model"] or p["hf_configs"]):
        raise UsageError("--fused picks the fused shapes of --model/--hf-config: give one of them")
    if p["tp"] is not None and not (p["model"] or p["hf_configs"]):
        raise UsageError("--tp picks one GPU's shards of --model/--hf-config: give one of them")
    shapes = tune_shapes(p["shape_texts"], p["model"], p["hf_configs"], p["fused"], p["batch_text"], p["dtype"],
                         p["tp"] or 1, p["weights"] or "")
    opts = from_cli(params)
    if p["inductor"] and (p["no_reconfirm"] or p["replay_path"]):
        raise UsageError("--inductor is timed by the re-confirmation, which "
                         + ("--no-reconfirm turns off" if p["no_reconfirm"] else "a replayed search never runs"))
    devices = _parse_devices(p["devices_text"])
    if devices and p["workers"] > 1:
        raise UsageError("give --devices (one worker per GPU) or --workers N, not both")
    results_dir, table_path, replay_path, storage = p["results_dir"], p["table_path"], p["replay_path"], p["storage"]
    if devices or p["workers"] > 1:
        if replay_path is None:
            _gpu_check()
        if storage and storage.strip().startswith("memory"):
            raise UsageError("--storage memory: lives in one process; workers need a shared storage")
        from ..tuning.coordination.workers import run_workers
        from ..tuning.search_run import preflight

        # what can be checked before a worker starts (each worker checks the rest: the default folder
        # is named after its GPU, and the table's GPU model is compared with the worker's)
        out = _writable_dir(results_dir) if results_dir else None
        preflight(Path(table_path) if table_path else (out / "table.json" if out else None),
                  storage or (f"journal:{out / 'optuna-journal.log'}" if out else None), None)

        run_workers(["search", *worker_argv(params)], devices=devices, workers=len(devices) or p["workers"])
        return
    runner, domains, default_results = _make_runner(shapes, replay_path, p["watchdog_s"])
    opts.domains = domains
    if replay_path and not p["family_text"]:   # a replayed search searches the families its sweeps recorded
        opts.families = tuple(dict.fromkeys(runner.sweep(s).family for s in shapes))
    from ..tuning.search_run import run_searches

    recorded: list[Shape] = []
    table = run_searches(runner, shapes, opts, results_dir or default_results, table_path, echo=click.echo,
                         writable=_writable_dir, heartbeat_s=p["heartbeat_s"],
                         allow_replay_into_measured=p["allow_replay"], worker_index=p["worker_index"],
                         recorded=recorded)
    if recorded and not runner.replayed and not p["no_reconfirm"]:
        # the entries this process wrote, measured again in a fresh process (docs/search.md#re-confirmation)
        from ..tuning.reconfirm import ReconfirmError, reconfirm, summary

        release = getattr(runner, "close", None)   # (a watched runner's child: its GPU memory back first)
        if callable(release):
            release()
        try:
            click.echo(summary(reconfirm(table, recorded, opts.rounds, p["inductor"], echo=click.echo)))
        except ReconfirmError as e:   # the search's entries are written: say how to re-confirm them later
            raise ReconfirmError(f"{e}; the search's entries are written: re-confirm them with gemvtune check "
                                 f"--reconfirm --table {table}", e.exit_code) from None


@click.command()
@click_options("worker")
def worker(storage, study_names, results_dir, table_path, replay_path, allow_replay, watchdog_s, heartbeat_s,
           timeout) -> None:
    """Join existing studies from any host: run their trials until the study's total budget is spent;
    the settings (shape, families, budget, sampler) come from the study itself."""
    import optuna

    from ..tuning.coordination.storage import open_store

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
        from ..runners.replay import refuse_measured_study_names

        refuse_measured_study_names(study_names, allow_replay)
    if len(settings) != 1:
        raise UsageError("these studies were started with different search settings: join them one at a time")
    opts = from_study(json.loads(settings.pop()), storage=storage, timeout=timeout)
    runner, domains, default_results = _make_runner(shapes, replay_path, watchdog_s)
    opts.domains = domains
    mine = runner.device_info().get("name", "")
    if gpus - {"", mine}:
        raise UsageError(f"the studies were measured on {', '.join(sorted(gpus - {''}))}, this worker has {mine}: "
                         "a study's trials must come from one GPU model")
    from ..tuning.search_run import run_searches

    run_searches(runner, shapes, opts, results_dir or default_results, table_path, echo=click.echo,
                 writable=_writable_dir, heartbeat_s=heartbeat_s, joiner=True, allow_replay_into_measured=allow_replay)
