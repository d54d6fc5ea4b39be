"""The options of a search, declared once (``OPTIONS``), and what is derived from that declaration:
the click options of ``gemvtune search`` and ``gemvtune worker`` (``click_options``), the command
line each worker process of ``--workers``/``--devices`` is started with (``worker_argv``), the
``search_options`` attribute of a study that a worker joining by name reads back (``study_record``,
``from_study``), and the bounds :class:`SearchOptions` checks (each option's click type)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from ..errors import UsageError
from ..kernels.families import FAMILY_NAMES, get_family, parse_families
from ..kernels.shapes import DTYPES, WEIGHTS
from .coordination.storage import HEARTBEAT_S
from .samplers import SAMPLERS
from .spacebound import STALL_PROPOSALS

SEED = click.IntRange(min=0)   # a sampler or sample seed: numpy and Optuna want it >= 0


class ModelPreset(click.Choice):
    """``--model``: the presets of gemvtune.kernels.hfconfig, listed in ``--help``; an unknown one is refused
    with the same words as the API ("unknown model preset ...")."""

    def __init__(self) -> None:
        from ..kernels.hfconfig import PRESETS

        super().__init__(PRESETS)

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter:
            self.fail(f"unknown model preset {value!r}; known: {', '.join(self.choices)}", param, ctx)

MAX_TRIALS = 10_000   # --trials' upper bound: more than any useful budget, and a run that ends
DEFAULT_TRIALS = 100  # --trials' default (the search-quality study, docs/search.md)


@dataclass(frozen=True)
class Opt:
    """One option. ``flag`` None: a search option of the API only (no command-line flag)."""
    flag: str | None
    dest: str                          # the click parameter's name
    type: Any = None                   # click's type: parses the flag, and bounds the SearchOptions field
    default: Any = None
    help: str | None = None
    show_default: bool = False
    multiple: bool = False
    is_flag: bool = False
    hidden: bool = False
    metavar: str | None = None
    field: str | None = None           # the SearchOptions field it sets
    parse: Callable[[Any], Any] | None = None   # the flag's value -> the field's (None: as parsed)
    what: str | None = None            # what a valid value is, in SearchOptions' error (default: from type)
    search: bool = True                # an option of ``gemvtune search``
    workers: bool = True               # passed on to each worker process of --workers/--devices
    study: bool = False                # recorded in the study's search_options (a joining worker reads it)
    arg: Callable[[Any], str] = str    # the value as written on a worker's command line

    def click_kwargs(self, **changes: Any) -> dict[str, Any]:
        kw = {k: getattr(self, k) for k in ("type", "help", "metavar") if getattr(self, k) is not None}
        kw.update({k: True for k in ("show_default", "multiple", "is_flag", "hidden") if getattr(self, k)})
        kw.update(changes)
        kw = {k: v for k, v in kw.items() if v is not None}
        if not (self.multiple or kw.get("required")):
            kw["default"] = self.default
        return kw


def _families(text: str) -> tuple[str, ...] | None:
    return parse_families(text) if text else None


def _abspath(path: str) -> str:
    return str(Path(path).expanduser().resolve())   # (a worker may start elsewhere)


OPTIONS: tuple[Opt, ...] = (   # in ``gemvtune search --help`` order
    Opt("--shape", "shape_texts", multiple=True, help="M x d (repeatable)"),
    Opt("--model", "model", type=ModelPreset(), help="tune every linear-layer shape of a model preset"),
    Opt("--hf-config", "hf_configs", multiple=True, metavar="PATH", arg=_abspath,
        help="tune every linear-layer shape of a model given by its Hugging Face config.json "
             "(the file or its folder; local only; repeatable)"),
    Opt("--fused", "fused", is_flag=True, default=False,
        help="with --model/--hf-config: the fused shapes engines run (qkv, gate_up) instead of "
             "transformers' unfused ones (q, k, v, gate, up)"),
    Opt("--tp", "tp", click.IntRange(min=1), metavar="N",
        help="with --model/--hf-config: the shapes of one GPU of N tensor-parallel GPUs, as vLLM and SGLang shard "
             "the model (heads, intermediate sizes and the padded vocabulary split in N; gemvtune shapes lists them)"),
    Opt("--sampler", "sampler", click.Choice(SAMPLERS), "tpe", show_default=True, field="sampler", study=True),
    Opt("--trials", "trials", click.IntRange(1, MAX_TRIALS), DEFAULT_TRIALS, field="trials", study=True,
        help="measured trials per shape, the study's total over all workers; a search also stops when "
             f"its space is measured, or when {STALL_PROPOSALS} proposals in a row measure nothing new "
             f"(default: {DEFAULT_TRIALS}, from the search-quality study, docs/search.md)"),
    Opt("--timeout", "timeout", click.FloatRange(min=0, min_open=True), field="timeout", what="positive seconds",
        help="seconds of search per shape in this run"),
    Opt("--seed", "seed", SEED, 0, show_default=True, field="seed", study=True),
    Opt("--storage", "storage", field="storage",
        help="Optuna storage: journal:PATH (default, under --results), postgresql://…, sqlite:///…, "
             "mysql+pymysql://…, redis://…, grpc://HOST:PORT, memory:"),
    Opt("--results", "results_dir", help="results folder (default results/<gpu>/)"),
    Opt("--table", "table_path", help="table to update (default <results>/table.json)"),
    Opt("--top-k", "top_k", click.IntRange(1, 64), 3, show_default=True, field="top_k", study=True,
        help="candidates re-measured before a winner"),
    Opt("--rounds", "rounds", click.IntRange(1, 100), 5, show_default=True, field="rounds", study=True,
        help="interleaved re-measurement rounds"),
    Opt("--warm-start", "warm_k", click.IntRange(0, 64), 5, show_default=True, field="warm_k",
        help="configs the GPU's cost model (<results>/costmodel.json, gemvtune costmodel fit) predicts fastest, "
             "enqueued after each family's seed and counted in --trials (0: none; no model: none)"),
    Opt("--batch", "batch_text", default="1", show_default=True,
        help="batch sizes n (columns of x) to tune each shape at, e.g. 1,2,4,8,16"),
    Opt("--dtype", "dtype", click.Choice(DTYPES), "fp16", show_default=True,
        help="dtype of W and x (and the bias): fp16 or bf16; the table keeps their entries apart"),
    Opt("--weights", "weights", click.Choice([w for w in WEIGHTS if w]),
        help="FP8 weights (W8A16): E4M3 codes with FP32 scales per output row (e4m3-row) or per 128x128 block "
             "(e4m3-b128); x and y stay --dtype. The table keeps their entries apart (default: W in --dtype)"),
    Opt("--family", "family_text", field="families", parse=_families, study=True,
        help="kernel families to search, comma-separated: " + ",".join(FAMILY_NAMES) + " (default: all; a "
             "library family, cuBLASLt's algorithms, where this runner can ask it; on --replay: the sweeps' family)"),
    Opt("--replay", "replay_path",
        help="search recorded sweeps (a sweep-*.csv.gz or a folder of them) instead of a GPU"),
    Opt("--allow-replay-into-measured", "allow_replay", is_flag=True, default=False,
        help="with --replay: write into a table or storage that holds measured (GPU) results"),
    Opt("--watchdog", "watchdog_s", click.FloatRange(min=1.0),
        help="run the GPU runner in a child process; a call that gives no answer in this many seconds "
             "(a hanging kernel) is recorded as timeout and the child replaced"),
    Opt("--devices", "devices_text", workers=False,
        help="one worker process per GPU of this host, pinned to it (CUDA_VISIBLE_DEVICES), sharing the studies"),
    Opt("--workers", "workers", click.IntRange(1, 256), 1, show_default=True, workers=False,
        help="worker processes on this host sharing the studies (without --devices: all on the same GPU)"),
    Opt("--no-reconfirm", "no_reconfirm", is_flag=True, default=False,
        help="do not re-confirm the new entries at the end (by default each entry this process writes is measured "
             "again in a fresh process, gemvtune check --reconfirm, and the route needs the win in both; a "
             "replayed search never re-confirms)"),
    Opt("--inductor", "inductor", is_flag=True, default=False,
        help="the re-confirmation times Inductor max-autotune too (best of 2 compiles, tens of seconds per shape), "
             "which the route for callers under torch.compile must also beat"),
    Opt("--heartbeat", "heartbeat_s", click.FloatRange(min=0.1), HEARTBEAT_S, show_default=True,
        help="seconds between a running trial's heartbeats; a trial silent for 3 of them is failed and retried"),
    Opt("--worker-index", "worker_index", click.IntRange(min=0), 0, hidden=True, workers=False,   # (run_workers')
        help="(given by --workers/--devices to each worker: offsets its sampler seed)"),
    # ``gemvtune worker`` only
    Opt("--study", "study_names", multiple=True, search=False, workers=False,
        help="study name to join, as search printed it, e.g. gemvtune-nvidia-h200-14336x4096x1 (repeatable)"),
    # the API's only
    Opt(None, "n_startup", default=10, field="n_startup", study=True),   # TPE/GP: random trials first
    Opt(None, "jobs", click.IntRange(min=1), field="jobs"),   # trials in flight (default: the runner's)
)
BY_FLAG = {o.flag: o for o in OPTIONS if o.flag}
BY_FIELD = {o.field: o for o in OPTIONS if o.field}

# ``gemvtune worker`` (join studies by name): the options it takes, in its --help order, with what it
# changes; the search settings come from the study (``from_study``).
JOIN_OPTIONS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("--storage", {"required": True, "help": "the storage URL the study lives in (see search --storage)"}),
    ("--study", {"required": True}),
    ("--results", {}),
    ("--table", {"help": "table to update if this worker confirms"}),
    ("--replay", {"help": "measure from recorded sweeps instead of a GPU"}),
    ("--allow-replay-into-measured", {}),
    ("--watchdog", {"help": None}),
    ("--heartbeat", {"help": None}),
    ("--timeout", {"type": float, "help": "seconds of search per study in this run"}),
)


def click_options(command: str) -> Callable[[Callable], Callable]:
    """The click options of ``gemvtune search`` or ``gemvtune worker``, as one decorator."""
    specs: list[tuple[Opt, dict[str, Any]]]
    if command == "search":
        specs = [(o, {}) for o in OPTIONS if o.flag and o.search]
    else:
        specs = [(BY_FLAG[flag], changes) for flag, changes in JOIN_OPTIONS]

    def decorate(f: Callable) -> Callable:
        for o, changes in reversed(specs):
            f = click.option(o.flag, o.dest, **o.click_kwargs(**changes))(f)
        return f
    return decorate


def worker_argv(params: dict[str, Any]) -> list[str]:
    """The command line (after ``search``) of a worker of --workers/--devices: every option given to
    this search that the workers share, as it was given (``run_workers`` adds --worker-index)."""
    args: list[str] = []
    for o in OPTIONS:
        if not (o.flag and o.search and o.workers):
            continue
        v = params.get(o.dest)
        if o.is_flag:
            args += [o.flag] if v else []
        elif o.multiple:
            for x in v or ():
                args += [o.flag, o.arg(x)]
        elif v is not None:
            args += [o.flag, o.arg(v)]
    return args


def from_cli(params: dict[str, Any], **more: Any) -> SearchOptions:
    """The SearchOptions of a search command's parsed options (``more``: set besides)."""
    kw = {}
    for o in OPTIONS:
        if o.field and o.flag and params.get(o.dest) is not None:
            v = o.parse(params[o.dest]) if o.parse else params[o.dest]
            if v is not None:
                kw[o.field] = v
    return SearchOptions(**{**kw, **more})


def study_record(opts: SearchOptions) -> dict[str, Any]:
    """The search's ``search_options`` study attribute (JSON): what a worker joining the study by name
    must search with."""
    return {o.field: _json(getattr(opts, o.field)) for o in OPTIONS if o.study and o.field}


def from_study(record: dict[str, Any], **more: Any) -> SearchOptions:
    """The SearchOptions of a study's ``search_options`` attribute (``more``: set besides)."""
    kw = {}
    for o in OPTIONS:
        if o.study and o.field:
            v = record[o.field]
            kw[o.field] = tuple(v) if isinstance(v, list) else int(v) if isinstance(o.type, click.IntRange) else v
    return SearchOptions(**{**kw, **more})


def _json(v: Any) -> Any:
    return list(v) if isinstance(v, tuple) else v


def _what(o: Opt) -> str:
    """What a valid value is, from the option's click type."""
    t = o.type
    if o.what:
        return o.what
    kind = "an integer" if isinstance(t, click.IntRange) else "a number"
    if t.min is not None and t.max is not None:
        return f"{kind} from {t.min} to {t.max}"
    if t.min == 1 and isinstance(t, click.IntRange):
        return "a positive integer"
    return f"{kind} {'>' if t.min_open else '>='} {t.min}" if t.min is not None else f"{kind} <= {t.max}"


def check(o: Opt, v: Any) -> None:
    """A UsageError unless ``v`` is a valid value of option ``o`` (its click type's choices or range)."""
    t = o.type
    if isinstance(t, click.Choice):
        if v not in t.choices:
            raise UsageError(f"unknown {o.dest} {v!r}; choose one of {', '.join(map(str, t.choices))}")
        return
    if not isinstance(t, (click.IntRange, click.FloatRange)):
        return
    ok = not isinstance(v, bool) and isinstance(v, int if isinstance(t, click.IntRange) else (int, float))
    ok = ok and not math.isnan(v) and ((t.min is None or (v > t.min if t.min_open else v >= t.min))
                                      and (t.max is None or (v < t.max if t.max_open else v <= t.max)))
    if not ok:
        raise UsageError(f"{o.flag or '--' + o.dest.replace('_', '-')} must be {_what(o)}, got {v!r}")


def _default(name: str) -> Any:
    return BY_FIELD[name].default


@dataclass
class SearchOptions:
    """A search's settings; those of OPTIONS are checked against its bounds."""
    sampler: str = _default("sampler")
    trials: int = _default("trials")   # measured trials (GPU time) in the study, in total
    timeout: float | None = _default("timeout")   # seconds for this invocation's search phase
    seed: int = _default("seed")
    storage: str | None = _default("storage")
    top_k: int = _default("top_k")
    rounds: int = _default("rounds")
    n_startup: int = _default("n_startup")
    progress: bool = True
    domains: dict[str, dict[str, Any]] | None = None  # family -> the space searched (default: the family's
                                                      # whole space; the gemv sweep's grid on replay)
    families: tuple[str, ...] = FAMILY_NAMES  # one study per family per shape, trials budget each
    jobs: int | None = _default("jobs")   # trials in flight: compiles overlap, GPU measurement is serialized
                                          # (default: the runner's compile_jobs; 1 on replay, reproducible)
    warm_k: int = _default("warm_k")   # the cost model's top-k enqueued after each seed (0: none)
    warm_start: dict[str, tuple[dict[str, Any], ...]] | None = None   # family -> configs (their parameters) the
                                          # cost model predicts fastest, enqueued once after the family's seed
    family_trials: dict[str, int] | None = None   # family -> its own trials budget in place of ``trials`` (a
                                          # whole-model tune's split, gemvtune.tuning.budget)

    def __post_init__(self) -> None:
        for o in OPTIONS:
            if o.field and not (o.default is None and getattr(self, o.field) is None):   # (None: unset)
                check(o, getattr(self, o.field))
        if not self.families:
            raise UsageError("no kernel family to search")
        for f in self.families:
            get_family(f)
        for f, t in (self.family_trials or {}).items():
            get_family(f)
            check(BY_FIELD["trials"], t)

    def for_family(self, family: str) -> SearchOptions:
        """The options one family's study runs with: its own trials budget where ``family_trials`` gives one."""
        t = (self.family_trials or {}).get(family)
        return self if t is None or t == self.trials else dataclasses.replace(self, trials=t)
