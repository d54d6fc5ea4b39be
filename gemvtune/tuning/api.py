"""``gemvtune.tune``: the search from Python. Shapes (or a model preset, or Hugging Face configs), batches, dtype,
families, budget: each (M, d, n) searched as ``gemvtune search`` searches it (the same options, checked the same
way), recorded in the GPU's table (``results/<gpu>/`` unless ``results``/``table`` say otherwise), and the loaded
table returned. ``make_runner`` is what the command line's search and worker use too."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from ..errors import NoDeviceError, UsageError
from ..kernels.shapes import Shape, parse_batches, parse_shape
from ..workspace import Workspace, writable_dir
from .search_options import SearchOptions


def make_runner(shapes: Sequence[Shape], replay_path: str | None, watchdog_s: float | None = None
                ) -> tuple[Any, Any, str | None]:
    """(runner, family -> the domains to search or None, the default results folder or None): the replay runner on
    recorded sweeps (its results go to ``results/<gpu>/replay``), else the CUDA runner (NoDeviceError, one line,
    where no device answers), in a watched child process with ``watchdog_s``."""
    if replay_path:
        from ..runners.replay import ReplayRunner

        runner = ReplayRunner(replay_path)
        for s in shapes:
            runner.sweep(s)  # a shape with no recorded sweep fails before anything is written
        grids = {json.dumps([runner.sweep(s).family, runner.sweep(s).grid], sort_keys=True) for s in shapes}
        grid = runner.sweep(shapes[0]).grid if len(grids) == 1 else None
        domains = {runner.sweep(shapes[0]).family: grid} if grid else None   # the family the sweeps recorded
        return runner, domains, str(Workspace.for_gpu(runner.device_info().get("name", "gpu")).replay)
    from ..runners.cuda import CudaRunner, cuda_available

    why = cuda_available()
    if why:
        raise NoDeviceError(why)
    if watchdog_s:
        from ..runners.isolated import IsolatedRunner

        return IsolatedRunner(CudaRunner, timeout_s=watchdog_s), None, None
    return CudaRunner(), None, None


def tune_shapes(shapes: Iterable[Shape | str] = (), model: str | None = None,
                hf_config: str | Path | Sequence[str | Path] | None = None, fused: bool = False,
                batch: int | str | Sequence[int] = 1, dtype: str = "fp16", tp: int = 1) -> list[Shape]:
    """The (M, d, n, dtype) a tune covers: the shapes given (``Shape`` or ``"MxD"``), a preset's, HF configs' (their
    decode step's shapes, ``gemvtune.kernels.modelshapes.step_shapes``: on one GPU of ``tp`` tensor-parallel GPUs,
    a routed expert's at the tokens it sees at each batch), shape by shape, each at every batch."""
    from ..kernels.hfconfig import read_hf_config, read_preset
    from ..kernels.modelshapes import step_shapes

    if isinstance(batch, bool) or not isinstance(batch, (int, str)) and not all(
            isinstance(b, int) and not isinstance(b, bool) for b in batch):
        raise UsageError(f"batch must be an n, a list of them or a string like '1,4,8', got {batch!r}")
    batches = parse_batches(batch if isinstance(batch, str) else ",".join(
        str(b) for b in ([batch] if isinstance(batch, int) else batch)))
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise UsageError(f"tp must be a positive number of tensor-parallel GPUs, got {tp!r}")
    if isinstance(shapes, (str, Shape)):
        shapes = [shapes]
    base = [s if isinstance(s, Shape) else parse_shape(str(s)) for s in shapes]
    configs = [] if hf_config is None else [hf_config] if isinstance(hf_config, (str, Path)) else list(hf_config)
    models = ([read_preset(model)] if model else []) + [read_hf_config(str(path)) for path in configs]
    if not (base or models):
        raise UsageError("tune needs shapes, a model preset or an HF config")
    if fused and not models:
        raise UsageError("fused picks the fused shapes of a model preset or an HF config: give one of them")
    if tp != 1 and not models:
        raise UsageError("tp picks one GPU's shards of a model preset or an HF config: give one of them")
    by_md: dict[tuple[int, int], list[Shape]] = {}   # (M, d) first seen first, then each batch
    for s in base:
        by_md.setdefault((s.M, s.d), []).extend(Shape(s.M, s.d, n, dtype) for n in batches)
    for m in models:
        for n in batches:
            for ss in step_shapes(m, n, tp, fused, dtype):
                by_md.setdefault((ss.shape.M, ss.shape.d), []).append(ss.shape)
    return list(dict.fromkeys(s for group in by_md.values() for s in group))


def tune(shapes: Iterable[Shape | str] = (), *, model: str | None = None,
         hf_config: str | Path | Sequence[str | Path] | None = None, fused: bool = False,
         batch: int | str | Sequence[int] = 1, dtype: str = "fp16", tp: int = 1,
         families: Sequence[str] | None = None,
         trials: int | None = None, sampler: str | None = None, seed: int | None = None,
         timeout: float | None = None, storage: str | None = None, results: str | Path | None = None,
         table: str | Path | None = None, replay: str | Path | None = None, watchdog_s: float | None = None,
         echo: Callable[[str], None] | None = None) -> Any:
    """Search every shape (× batch) and return the loaded ``Table`` holding the winners. ``tp``: a model's shapes as
    one GPU of that many tensor-parallel GPUs runs them (``tune_shapes``).

    ``trials``, ``sampler``, ``seed``, ``timeout``, ``storage`` and ``families`` are ``gemvtune search``'s options
    (its defaults where None). ``replay``: a folder of recorded sweeps to search instead of the GPU (no GPU needed;
    results go to ``results/<gpu>/replay`` unless ``results`` is given). ``echo``: where the progress lines go
    (default: nowhere)."""
    todo = tune_shapes(shapes, model, hf_config, fused, batch, dtype, tp)
    given: dict[str, Any] = {"trials": trials, "sampler": sampler, "seed": seed, "timeout": timeout, "storage": storage,
             "families": tuple(families) if families is not None else None}
    opts = SearchOptions(progress=False, **{k: v for k, v in given.items() if v is not None})
    runner, domains, default_results = make_runner(todo, str(replay) if replay else None, watchdog_s)
    opts.domains = domains
    if replay and families is None:   # a replayed search searches the families its sweeps recorded
        opts.families = tuple(dict.fromkeys(runner.sweep(s).family for s in todo))
    from ..runtime.table import load_table
    from .search_run import run_searches

    path = run_searches(runner, todo, opts, str(results) if results else default_results,
                        str(table) if table else None, echo=echo or (lambda line: None), writable=writable_dir)
    return load_table(path)
