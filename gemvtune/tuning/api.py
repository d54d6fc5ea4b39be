"""``gemvtune.tune``: the search from Python. Shapes (or a model preset, or Hugging Face configs), batches, dtype,
families, budget: each (M, d, n) searched as ``gemvtune search`` searches it (the same options, checked the same
way), recorded in the GPU's table (``results/<gpu>/`` unless ``results``/``table`` say otherwise), and the loaded
table returned. ``make_runner`` is what the command line's search and worker use too."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..kernels.shapes import Shape, parse_batches, parse_shape
from ..workspace import writable_dir
from .makerunner import make_runner  # noqa: F401  (the search and worker commands' runner, re-exported)
from .search_options import SearchOptions


def batches_of(batch: int | str | Sequence[int]) -> list[int]:
    """The batch sizes of ``batch``: an n, a list of them, or a string like ``"1,4,8"``."""
    if isinstance(batch, bool) or not isinstance(batch, (int, str)) and not all(
            isinstance(b, int) and not isinstance(b, bool) for b in batch):
        raise UsageError(f"batch must be an n, a list of them or a string like '1,4,8', got {batch!r}")
    return parse_batches(batch if isinstance(batch, str) else ",".join(
        str(b) for b in ([batch] if isinstance(batch, int) else batch)))


def tune_shapes(shapes: Iterable[Shape | str] = (), model: str | None = None,
                hf_config: str | Path | Sequence[str | Path] | None = None, fused: bool = False,
                batch: int | str | Sequence[int] = 1, dtype: str = "fp16", tp: int = 1, weights: str = "") -> list[Shape]:
    """The (M, d, n, dtype) a tune covers: the shapes given (``Shape`` or ``"MxD"``), a preset's, HF configs' (their
    decode step's shapes, ``gemvtune.kernels.modelshapes.step_shapes``: on one GPU of ``tp`` tensor-parallel GPUs,
    a routed expert's at the tokens it sees at each batch), shape by shape, each at every batch; with ``weights``
    (an FP8 format, ``Shape.weights``) W of every shape in it."""
    from ..kernels.hfconfig import read_hf_config, read_preset
    from ..kernels.modelshapes import step_shapes

    batches = batches_of(batch)
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
        by_md.setdefault((s.M, s.d), []).extend(Shape(s.M, s.d, n, dtype, weights) for n in batches)
    for m in models:
        for n in batches:
            for ss in step_shapes(m, n, tp, fused, dtype, weights):
                by_md.setdefault((ss.shape.M, ss.shape.d), []).append(ss.shape)
    return list(dict.fromkeys(s for group in by_md.values() for s in group))


def tune(shapes: Iterable[Shape | str] = (), *, model: str | None = None,
         hf_config: str | Path | Sequence[str | Path] | None = None, fused: bool = False,
         batch: int | str | Sequence[int] = 1, dtype: str = "fp16", tp: int = 1, weights: str = "",
         families: Sequence[str] | None = None,
         trials: int | None = None, sampler: str | None = None, seed: int | None = None,
         timeout: float | None = None, storage: str | None = None, results: str | Path | None = None,
         table: str | Path | None = None, replay: str | Path | None = None, watchdog_s: float | None = None,
         echo: Callable[[str], None] | None = None, budget: str | float | None = None) -> Any:
    """Search every shape (× batch) and return the loaded ``Table`` holding the winners. ``tp``: a model's shapes as
    one GPU of that many tensor-parallel GPUs runs them (``tune_shapes``). ``weights``: "e4m3-row" or "e4m3-b128",
    every shape's W in that FP8 format (x and y in ``dtype``), tuned against dequantize + F.linear; "" (the
    default): W in ``dtype``.

    ``trials``, ``sampler``, ``seed``, ``timeout``, ``storage`` and ``families`` are ``gemvtune search``'s options
    (its defaults where None). ``replay``: a folder of recorded sweeps to search instead of the GPU (no GPU needed;
    results go to ``results/<gpu>/replay`` unless ``results`` is given). ``echo``: where the progress lines go
    (default: nowhere).

    ``budget`` (seconds, or a time like ``"5m"``; ``0``: nothing searched): the whole-model tune of ``gemvtune
    tune`` instead, the budget split across (shape, n, family) by the expected gain (``trials`` then does not
    apply), resumable, the new entries re-confirmed."""
    if budget is not None:
        return _budgeted(shapes, model, hf_config, fused, batch, dtype, families, sampler, seed, storage, results,
                         table, replay, watchdog_s, echo, budget, tp, trials, weights)
    todo = tune_shapes(shapes, model, hf_config, fused, batch, dtype, tp, weights)
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


def _budgeted(shapes: Any, model: str | None, hf_config: Any, fused: bool, batch: Any, dtype: str,
              families: Sequence[str] | None, sampler: str | None, seed: int | None, storage: str | None,
              results: Any, table: Any, replay: Any, watchdog_s: float | None, echo: Callable[[str], None] | None,
              budget: str | float, tp: int, trials: int | None, weights: str = "") -> Any:
    """``tune(..., budget=...)``: ``gemvtune tune`` from Python; returns the loaded table."""
    from ..runtime.table import load_table
    from .budget import parse_budget
    from .tunemodel import model_steps, tune_key, tune_model

    if trials is not None:
        raise UsageError("trials and budget: give one (a budgeted tune splits its budget into trials itself)")
    budget_s = parse_budget(budget)
    batches = batches_of(batch)
    texts = [shapes] if isinstance(shapes, (str, Shape)) else list(shapes)
    configs = [] if hf_config is None else [hf_config] if isinstance(hf_config, (str, Path)) else list(hf_config)
    steps = model_steps([f"{s.M}x{s.d}" if isinstance(s, Shape) else str(s) for s in texts],
                        model, configs, fused, batches, dtype, tp, weights)
    given: dict[str, Any] = {"sampler": sampler, "seed": seed, "storage": storage,
                             "families": tuple(families) if families is not None else None}
    opts = SearchOptions(progress=False, **{k: v for k, v in given.items() if v is not None})
    key = tune_key(model, configs, texts, fused, tp, batches, dtype, weights, budget_s, opts.families, opts.rounds)
    res = tune_model(steps, budget_s, opts, results=results, table=table, replay=replay, watchdog_s=watchdog_s,
                     key=key, echo=echo or (lambda line: None))
    if not Path(res.table).is_file():
        raise UsageError(f"a budget of {budget_s:.0f} s bought no search (a shape's confirmation alone costs more; "
                         "nothing was written): give a larger budget")
    return load_table(res.table)
