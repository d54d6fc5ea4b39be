"""The cost model's commands (no GPU): ``gemvtune costmodel fit`` trains it on a GPU's recorded measurements and
writes results/<gpu>/costmodel.json; ``gemvtune predict`` lists the valid configs it predicts fastest for a
shape, with their predicted µs and % of the read floor."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import UsageError
from ..kernels.shapes import MAX_BATCH, parse_shape
from ..model import MODEL_NAME, MODEL_NAMES, model_beside
from ..safefile import output_target
from .options import DTYPE


def default_model() -> Path:
    """The one results/<gpu>/costmodel.json (or .json.gz) under the working folder, else the one gemvtune ships."""
    from ..runtime.tables import shipped_root
    from ..workspace import results_root

    def under(root: Path) -> list[Path]:   # one model per GPU folder (costmodel.json before its .gz)
        return sorted({model_beside(p.parent) for name in MODEL_NAMES for p in root.glob(f"*/{name}")})

    shipped = shipped_root()
    found = under(results_root()) or (under(shipped) if shipped is not None else [])   # else the one shipped
    if not found:
        raise UsageError(f"no cost model under results/*/{MODEL_NAME}[.gz]: fit one (gemvtune costmodel fit) or "
                         f"pass --model")
    if len(found) > 1:
        raise UsageError(f"several cost models ({', '.join(map(str, found))}): pick one with --model")
    return found[0]


@click.group("costmodel")
def costmodel() -> None:
    """The learned cost model (LightGBM on every recorded measurement of a GPU)."""


@costmodel.command("fit")
@click.option("--results", "results_dir", default="results/nvidia-h200", show_default=True,
              help="a GPU's results folder: its measurements/, sweeps/ and searches/ are the training data")
@click.option("--out", "out_path", default=None, help=f"model file (default RESULTS/{MODEL_NAME}, or the {MODEL_NAME}.gz there; a name ending in .gz is written compressed)")
@click.option("--rounds", default=400, show_default=True, type=click.IntRange(10, 5000), help="boosting rounds")
def fit_cmd(results_dir: str, out_path: str | None, rounds: int) -> None:
    """Fit the cost model on every verified measurement under RESULTS (sweeps and searches, every template
    family and batch) and write it as JSON (LightGBM's text format inside; never serialized Python objects)."""
    import time

    from ..model import costmodel as cm
    from ..model import dataset

    res = Path(results_dir)
    if not res.is_dir():
        raise UsageError(f"--results {res} is not a folder")
    if out_path == "":
        raise UsageError("--out: the path is empty")
    out = Path(out_path) if out_path else model_beside(res)   # (refits the model there, compressed or not)
    output_target(out, "--out")   # a FIFO, a device, a link to one: refused before the fit, never renamed over
    if not out.parent.is_dir():
        raise UsageError(f"--out {out}: no folder {out.parent}")
    try:
        ds = dataset.load(res)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if ds.frame.empty:
        raise UsageError(f"no usable measurement under {res}/sweeps or {res}/searches")
    for line in ds.skipped:
        click.echo(f"skipped {line}")
    t = time.time()
    files = sorted(set(ds.frame["source"]))
    model = cm.fit(list(zip(ds.frame["config"], ds.frame["shape"])), ds.frame["rel"].to_numpy(), ds.sm_count,
                   ds.gpu, ds.read_gbps, rounds=rounds,
                   meta={"results": str(res), "files": len(files), "shapes": len(ds.shapes),
                         "families": sorted(set(ds.frame["family"]))})
    model.save(out)
    counts = ds.frame.groupby("family").size().to_dict()
    click.echo(f"fitted on {len(ds.frame)} measurements ({', '.join(f'{k} {v}' for k, v in sorted(counts.items()))}) "
               f"of {len(ds.shapes)} shapes from {len(files)} files in {time.time() - t:.1f} s; wrote {out}")


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
@click.option("--model", "model_path", default=None, help=f"model file (default: the one results/*/{MODEL_NAME}[.gz])")
@click.option("--family", "family_text", default=None,
              help="template families to rank, comma-separated (default: every template family)")
@click.option("--top", "top_k", default=10, show_default=True, type=click.IntRange(1, 1000))
@DTYPE
def predict(shape_text: str, batch: int, model_path: str | None, family_text: str | None, top_k: int,
            dtype: str) -> None:
    """The valid configs the cost model predicts fastest for a shape, with predicted µs and % of the read
    floor (no GPU: a CPU-only machine can run it)."""
    from ..kernels.families import FAMILIES, parse_families
    from ..model import costmodel as cm

    shape = parse_shape(shape_text, batch, dtype)
    if dtype != "fp16":
        raise UsageError(f"the cost model is fitted on FP16 measurements only; it predicts nothing for {dtype}")
    names = parse_families(family_text) if family_text else tuple(n for n, f in FAMILIES.items() if not f.library)
    lib = [n for n in names if FAMILIES[n].library]
    if lib:
        raise UsageError(f"the cost model ranks template families, not {', '.join(lib)} (a library's algorithms)")
    model = cm.load(model_path or default_model())
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
