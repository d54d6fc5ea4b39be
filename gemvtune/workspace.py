"""The one owner of a GPU's results folder, ``results/<gpu>/`` (``$GEMVTUNE_RESULTS`` moves ``results``): every
default path a command writes or reads is built here.

- ``table.json``, ``costmodel.json`` (and ``costmodel-fp8.json`` for FP8 weights): the product (the H200's ship in
  the wheel);
- ``measurements/``: the cost model's training data, compressed; ``searches/`` and ``sweeps/``: what new runs add;
- ``benchmarks/``: the latest summary of each benchmark (a new run replaces the previous one of its kind);
- ``replay/``: replayed searches (never committed).
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass
from pathlib import Path

MODEL_NAME = "costmodel.json"   # a GPU's model file in its results folder (beside its table.json)
MODEL_NAMES = (MODEL_NAME, MODEL_NAME + ".gz")   # or gzip-compressed (the committed H200 model: 2.4 MB -> 0.75 MB)
# The model of FP8 weights (e4m3-row and e4m3-b128: gemvtune.model.features.FP8), a file of its own beside it: its
# families and columns are not the 16-bit model's, and fitting one never changes the other's trees.
FP8_MODEL_NAME = "costmodel-fp8.json"


def model_group(weights: str) -> str:
    """The cost model a shape's weights are predicted by: "" (W in the input dtype) or "fp8" (any FP8 format)."""
    return "fp8" if weights else ""


def model_beside(folder: str | Path, weights: str = "") -> Path:
    """The cost model of a results folder for ``weights`` (a shape's format, or the group "fp8"): costmodel.json, else
    costmodel.json.gz, else (neither there) the path costmodel.json would have; costmodel-fp8.json[.gz] for FP8."""
    base = FP8_MODEL_NAME if model_group(weights) else MODEL_NAME
    for name in (base, base + ".gz"):
        if os.path.lexists(Path(folder) / name):
            return Path(folder) / name
    return Path(folder) / base


# a file of a stamped run: <stem>-YYYYMMDD-HHMMSS<rest> (rest: .csv, -summary.md, .png, ...)
_STAMPED = re.compile(r"^(?P<stem>.+)-(?P<stamp>\d{8}-\d{6})(?P<rest>(?:-[a-z]+)*\.[a-z.]+)$", re.ASCII)


def gpu_slug(name: str) -> str:
    """The folder name of a GPU (``NVIDIA H200`` -> ``nvidia-h200``), as every results folder is named."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "gpu"


def results_root() -> Path:
    return Path(os.environ.get("GEMVTUNE_RESULTS") or "results")


@dataclass(frozen=True)
class Workspace:
    root: Path

    @classmethod
    def for_gpu(cls, name: str) -> Workspace:
        """The workspace of a GPU by its name as the driver reports it."""
        return cls(results_root() / gpu_slug(name))

    @property
    def table(self) -> Path:
        return self.root / "table.json"

    @property
    def costmodel(self) -> Path:
        """costmodel.json, or the costmodel.json.gz there (model_beside)."""
        return model_beside(self.root)

    @property
    def measurements(self) -> Path:
        return self.root / "measurements"

    @property
    def searches(self) -> Path:
        return self.root / "searches"

    @property
    def sweeps(self) -> Path:
        return self.root / "sweeps"

    @property
    def replay(self) -> Path:
        return self.root / "replay"

    @property
    def benchmarks(self) -> Path:
        return self.root / "benchmarks"

    @property
    def transition(self) -> Path:
        return self.benchmarks / "transition"


def writable_dir(path: str | Path) -> Path:
    """A results folder, made if missing, that this process can write (probed), before any work."""
    from .errors import UsageError

    p = Path(path)
    try:
        p.mkdir(parents=True, exist_ok=True)
        probe = p / f".gemvtune-write-test-{os.getpid()}"  # per process: concurrent searches share folders
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise UsageError(f"results directory {p} is not writable: {e.strerror or e}") from None
    return p


def replace_previous(folder: Path, stem: str, stamp: str) -> list[Path]:
    """After a run wrote ``<stem>-<stamp>*`` into a workspace's benchmarks folder: remove that benchmark's
    earlier runs there (files ``<stem>-<other stamp><rest>``, the same stem exactly), so the folder keeps the
    latest summary of each benchmark. Only stamped files of that stem go; a file that cannot be removed stays.
    Returns the removed paths."""
    removed = []
    for p in sorted(folder.glob(f"{glob.escape(stem)}-*")):
        m = _STAMPED.match(p.name)
        if m is None or m["stem"] != stem or m["stamp"] == stamp or not p.is_file() or p.is_symlink():
            continue
        try:
            p.unlink()
            removed.append(p)
        except OSError:
            continue
    return removed

