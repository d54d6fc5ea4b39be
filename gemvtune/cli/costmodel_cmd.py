"""The cost model's commands (no GPU): ``gemvtune costmodel fit`` trains it on a GPU's recorded measurements and
writes results/<gpu>/costmodel.json; ``gemvtune predict`` lists the valid configs it predicts fastest for a
shape, with their predicted µs and % of the read floor."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ..errors import UsageError
from ..kernels.shapes import MAX_BATCH, parse_shape
from ..model import MODEL_NAME, model_beside
from ..safefile import output_target
from .options import DTYPE, WEIGHTS_OPT


def default_model(weights: str = "") -> Path:
    """The one results/<gpu>/costmodel.json (or .json.gz; costmodel-fp8.json[.gz] for FP8 ``weights``) under the
    working folder, else the one gemvtune ships."""
    from ..runtime.tables import shipped_root
    from ..workspace import results_root

    def under(root: Path) -> list[Path]:   # one model per GPU folder (the .json before its .gz)
        found = {model_beside(p.parent, weights) for p in root.glob("*/costmodel*.json*")}
        return sorted(p for p in found if p.exists())

    name = model_beside(Path(), weights).name.removesuffix(".gz")
    shipped = shipped_root()
    found = under(results_root()) or (under(shipped) if shipped is not None else [])   # else the one shipped
    if not found:
        raise UsageError(f"no cost model under results/*/{name}[.gz]: fit one (gemvtune costmodel fit"
                         f"{' --fp8' if weights else ''}) or pass --model")
    if len(found) > 1:
        found = _preferred(found)
    if len(found) > 1:
        raise UsageError(f"several cost models ({', '.join(map(str, found))}): pick one with --model")
    return found[0]


def _preferred(found: list[Path]) -> list[Path]:
    """Of several GPUs' models: the one of the GPU this runs on, else those fitted on their GPU's own data (not
    continued from another GPU's: ``costmodel fit --prior``)."""
    from ..errors import NoDeviceError
    from ..model import costmodel as cm
    from ..runtime.tables import current_gpu_name
    from ..workspace import gpu_slug

    try:
        mine = [p for p in found if p.parent.name == gpu_slug(current_gpu_name())]
    except (NoDeviceError, UsageError):
        mine = []
    if len(mine) == 1:
        return mine
    own = [p for p in found if cm.load(p).prior_gpu is None]
    return own or found


@click.group("costmodel")
def costmodel() -> None:
    """The learned cost model (LightGBM on every recorded measurement of a GPU)."""


FP8_OPT = click.option("--fp8", is_flag=True, default=False,
                       help="the model of FP8 weights (e4m3-row and e4m3-b128 searches; costmodel-fp8.json), apart "
                            "from the 16-bit one")


PRIOR_OPT = click.option("--prior", "prior_path", default=None, metavar="MODEL",
                         help="another GPU's cost model file (e.g. results/nvidia-h200/costmodel.json.gz) whose trees "
                              "the fit continues on this GPU's data")


@costmodel.command("fit")
@click.option("--results", "results_dir", default="results/nvidia-h200", show_default=True,
              help="a GPU's results folder: its measurements/, sweeps/ and searches/ are the training data")
@click.option("--out", "out_path", default=None, help=f"model file (default RESULTS/{MODEL_NAME}, or the {MODEL_NAME}.gz there; a name ending in .gz is written compressed)")
@click.option("--rounds", default=None, type=click.IntRange(10, 5000),
              help="boosting rounds (default 400; with --prior, 50 more over the prior's)")
@FP8_OPT
@PRIOR_OPT
def fit_cmd(results_dir: str, out_path: str | None, rounds: int | None, fp8: bool, prior_path: str | None) -> None:
    """Fit the cost model on every verified measurement under RESULTS (sweeps and searches, every template
    family and batch) and write it as JSON (LightGBM's text format inside; never serialized Python objects).
    --fp8 fits the FP8 weights' model on their searches into costmodel-fp8.json (or its .gz there). --prior: a GPU
    with few searches of its own (one model's tune) continues another GPU's model of the same SM count on them."""
    import time

    from ..model import costmodel as cm
    from ..model.features import FP8

    group = FP8 if fp8 else ""
    res = Path(results_dir)
    if not res.is_dir():
        raise UsageError(f"--results {res} is not a folder")
    if out_path == "":
        raise UsageError("--out: the path is empty")
    out = Path(out_path) if out_path else model_beside(res, group)   # (refits the model there, compressed or not)
    output_target(out, "--out")   # a FIFO, a device, a link to one: refused before the fit, never renamed over
    if not out.parent.is_dir():
        raise UsageError(f"--out {out}: no folder {out.parent}")
    prior = _prior(prior_path, group, out)
    ds = _dataset(res, group)
    for line in ds.skipped:
        click.echo(f"skipped {line}")
    t = time.time()
    files = sorted(set(ds.frame["source"]))
    model = cm.fit(list(zip(ds.frame["config"], ds.frame["shape"])), ds.frame["rel"].to_numpy(), ds.sm_count,
                   ds.gpu, ds.read_gbps, rounds=cm.rounds_for(rounds, prior), group=group,
                   meta={"results": str(res), "files": len(files), "shapes": len(ds.shapes),
                         "families": sorted(set(ds.frame["family"]))}, prior=prior)
    model.save(out)
    counts = ds.frame.groupby("family").size().to_dict()
    click.echo(f"fitted on {len(ds.frame)} measurements ({', '.join(f'{k} {v}' for k, v in sorted(counts.items()))}) "
               f"of {len(ds.shapes)} shapes from {len(files)} files in {time.time() - t:.1f} s"
               + (f", over {prior.gpu}'s model ({prior.booster.num_trees()} trees)" if prior else "") + f"; wrote {out}")


def _prior(path: str | None, group: str, out: Path | None = None) -> Any:
    """The model of ``--prior`` (None without one): of ``group``'s weights, never the file being written."""
    if path is None:
        return None
    from ..model import costmodel as cm

    p = Path(path)
    if out is not None and p.exists() and out.exists() and p.resolve() == out.resolve():
        raise UsageError(f"--prior {path} is the model this fit writes: give another GPU's model")
    prior = cm.load(p)
    if prior.group != group:
        raise UsageError(f"--prior {path}: a model of {prior.group or '16-bit'} weights, this fit is of "
                         f"{group or '16-bit'} ones")
    return prior


def _dataset(res: Path, group: str) -> Any:
    """The training set of ``group``'s model under ``res``; one line where there is none."""
    from ..model import dataset

    try:
        ds = dataset.training_set(res, group)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if ds.frame.empty or (group and not ds.frame["shape"].map(lambda s: bool(s.weights)).any()):
        raise UsageError(f"no usable measurement{' of FP8 weights' if group else ''} under {res}/measurements, "
                         f"sweeps or searches")
    return ds


@costmodel.command("loso")
@click.option("--results", "results_dir", default="results/nvidia-h200", show_default=True,
              help="a GPU's results folder (its training data)")
@click.option("--top", "top_k", default=5, show_default=True, type=click.IntRange(1, 100),
              help="k of the best-of-top-k column (what a warm-started search enqueues)")
@click.option("--rounds", default=None, type=click.IntRange(10, 5000),
              help="boosting rounds (default 400; with --prior, 50 more over the prior's)")
@click.option("--out", "out_path", default=None, help="CSV of the per-shape rows (default: only printed)")
@FP8_OPT
@click.option("--strict", is_flag=True, default=False,
              help="with --fp8: hold out the M x d's 16-bit measurements too (a shape never measured in any format)")
@PRIOR_OPT
def loso_cmd(results_dir: str, top_k: int, rounds: int | None, out_path: str | None, fp8: bool, strict: bool,
             prior_path: str | None) -> None:
    """Leave one shape out: for each measured M x d, a model fitted without it (at any n) ranks that shape's
    measured configs; its first pick is judged by its measured time against the fastest measured. The 16-bit
    model is judged on the sweeps (every config of a grid; on the searches where the GPU has no sweep); the FP8
    one, without sweeps, on the FP8 searches, holding out their M x d's FP8 measurements (--strict: its 16-bit
    ones too). --prior: the held-out models continue another GPU's, as costmodel fit --prior fits them."""
    from ..cells import write_csv
    from ..model import loso
    from ..model.features import FP8

    if strict and not fp8:
        raise UsageError("--strict holds out an FP8 shape's 16-bit measurements too: give --fp8 with it (the 16-bit "
                         "model's shapes are always held out whole)")
    group = FP8 if fp8 else ""
    if out_path is not None:
        output_target(Path(out_path), "--out")
    prior = _prior(prior_path, group)
    ds = _dataset(Path(results_dir), group)
    # the 16-bit model on its sweeps (every config of a grid); the FP8 one, and a GPU without sweeps, on its searches
    kind = "search" if group or not loso.sweep_shapes(ds, "sweep") else "sweep"
    from ..model.costmodel import rounds_for

    table, _ = loso.evaluate(ds, k=top_k, rounds=rounds_for(rounds, prior), kind=kind,
                             group=group, strict=strict, echo=click.echo, prior=prior)
    if table.empty:
        raise UsageError(f"no {kind} of two shapes or more to hold out under {results_dir}")
    held = "every measurement of its M x d" if strict or not group else "its M x d's FP8 measurements"
    click.echo(f"{len(table)} shapes held out ({kind}es; {held}): zero-trial pick median "
               f"{table.pick_gap_pct.median():.1f}%, worst {table.pick_gap_pct.max():.1f}% from the fastest measured; "
               f"best of the top {top_k} median {table[f'best_of_top{top_k}_gap_pct'].median():.1f}%, worst "
               f"{table[f'best_of_top{top_k}_gap_pct'].max():.1f}%")
    if out_path:
        write_csv(table, Path(out_path), "leave-one-shape-out CSV", float_format="%.6g")
        click.echo(f"wrote {out_path}")


@costmodel.command("spread")
@click.option("--results", "results_dir", default="results/nvidia-h200", show_default=True,
              help="a GPU's results folder: its table.json and the cost model beside it")
@click.option("--min-mb", default=16.0, show_default=True, type=click.FloatRange(0, 1e6),
              help="only entries of at least this many MB of weights (tiny ones are launch-bound)")
@click.option("--fp8", is_flag=True, default=False,
              help="the FP8 entries and the FP8 model (costmodel-fp8), each family's best against its own prediction")
def spread_cmd(results_dir: str, min_mb: float, fp8: bool) -> None:
    """How far the model's predicted optimum of each 16-bit entry (what a whole-model tune plans with) is from the
    fastest kernel the table measured: log(best / predicted) per entry, then its mean and RMS, the spread the
    tune's budget split prices in (budget.OPTIMUM_SIGMA; with --fp8, per FP8 entry and family: budget.FP8_SIGMA)."""
    from ..model import costmodel as cm
    from ..runtime.table import load_table
    from ..tuning.spread import optimum_errors, summary

    res = Path(results_dir)
    path = model_beside(res, "fp8" if fp8 else "")
    if not (res / "table.json").is_file() or not path.exists():
        raise UsageError(f"{results_dir}: needs table.json and {path.name}[.gz] beside it")
    rows = optimum_errors(cm.load(path), load_table(res / "table.json", costmodel=None), min_mb * 1e6, fp8=fp8)
    for r in rows:
        cub = f"{r.cublas_us:9.2f}" if r.cublas_us else "        -"
        click.echo(f"{r.key:>28s}  predicted {r.predicted_us:9.2f}  best {r.best_us:9.2f}  "
                   f"{'dequant' if fp8 else 'cuBLAS'} {cub} µs  log error {r.log_error:+.3f}")
    s = summary(rows)
    what, many = ("FP8 (entry, family) pair", "FP8 (entry, family) pairs") if fp8 else ("16-bit entry", "16-bit entries")
    if not s["n"]:
        raise UsageError(f"{results_dir}/table.json: no {what} of at least {min_mb:g} MB with measured candidates")
    click.echo(f"{s['n']} {many} of at least {min_mb:g} MB: log(best / predicted optimum) mean {s['mean']:+.3f}, "
               f"RMS {s['rms']:.3f}, from {s['min']:+.3f} to {s['max']:+.3f}")


@costmodel.command("pack")
@click.argument("folder")
def pack_cmd(folder: str) -> None:
    """Move a folder's search files (search-*.csv and .json, gzipped or not) into its searches.json.xz, the one
    file the training data keeps them in (byte for byte; `costmodel fit` reads it as it reads the files)."""
    from ..model.archive import ARCHIVE, pack

    if not Path(folder).is_dir():
        raise UsageError(f"pack: no folder {folder}")
    names = pack(folder)
    click.echo(f"packed {len(names)} search files into {Path(folder) / ARCHIVE}" if names
               else f"no search files in {folder} to pack")


@click.command("predict")
@click.option("--shape", "shape_text", required=True, help="M x d, e.g. 5120x4096")
@click.option("--batch", type=click.IntRange(1, MAX_BATCH), default=1, show_default=True, help="batch n")
@click.option("--model", "model_path", default=None,
              help=f"model file (default: the one results/*/{MODEL_NAME}[.gz], costmodel-fp8.json[.gz] for --weights)")
@click.option("--family", "family_text", default=None,
              help="template families to rank, comma-separated (default: every template family that reads the "
                   "weights)")
@click.option("--top", "top_k", default=10, show_default=True, type=click.IntRange(1, 1000))
@DTYPE
@WEIGHTS_OPT
def predict(shape_text: str, batch: int, model_path: str | None, family_text: str | None, top_k: int,
            dtype: str, weights: str | None) -> None:
    """The valid configs the cost model predicts fastest for a shape, with predicted µs and % of the read
    floor (no GPU: a CPU-only machine can run it)."""
    from ..kernels.families import FAMILIES, families_for, parse_families
    from ..model import costmodel as cm

    shape = parse_shape(shape_text, batch, dtype, weights or "")
    if dtype != "fp16":
        raise UsageError(f"the cost model is fitted on FP16 measurements only; it predicts nothing for {dtype}")
    names = parse_families(family_text) if family_text else tuple(n for n in families_for(shape)
                                                                   if not FAMILIES[n].library)
    lib = [n for n in names if FAMILIES[n].library]
    if lib:
        raise UsageError(f"the cost model ranks template families, not {', '.join(lib)} (a library's algorithms)")
    model = cm.load(model_path or default_model(shape.weights))
    other = [n for n in names if n not in model.families]
    if other:
        raise UsageError(f"the {'FP8' if model.group else '16-bit'} cost model has no features for "
                         f"{', '.join(other)} (it ranks {', '.join(model.families)}; "
                         f"{'drop --weights' if model.group else '--weights picks the FP8 model'})")
    configs = [c for n in names for c in FAMILIES[n].all_configs() if c.is_valid(shape)]
    if not configs:
        raise UsageError(f"no valid config of {', '.join(names)} for {shape}")
    ranked = model.rank(configs, shape, top_k)
    floor = model.floor_us(shape)
    click.echo(f"{shape}: {len(configs)} valid configs of {', '.join(names)}; read floor {floor:.2f} µs "
               f"({model.gpu}, read ceiling {model.read_gbps:.0f} GB/s)")
    click.echo(f"{'rank':>4}  {'family':<7} {'predicted µs':>12} {'% floor':>8}  config")
    for i, (c, us) in enumerate(ranked, 1):
        click.echo(f"{i:>4}  {c.family:<7} {us:>12.2f} {100 * floor / us:>7.1f}%  {c.label}")
