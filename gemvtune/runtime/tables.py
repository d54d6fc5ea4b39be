"""Which table ``load_table()`` loads when given no path: the table of the GPU it runs on, the user's own
(``results/<gpu>/table.json`` under the working folder, or under ``$GEMVTUNE_RESULTS``) if there is one, else the
one shipped in the wheel (``gemvtune/tables/<gpu>/``; in a source checkout, the checkout's ``results/<gpu>/``).
A table of another GPU is never picked: that takes an explicit path."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import NoDeviceError, UsageError
from ..workspace import Workspace, gpu_slug

__all__ = ["Found", "current_gpu_name", "find_table", "gpu_slug", "shipped_gpus", "shipped_root"]


@dataclass(frozen=True)
class Found:
    path: Path
    origin: str     # "your results" or "shipped"
    gpu: str        # the GPU name asked for

    def __str__(self) -> str:
        return f"{self.path} ({'the table shipped with gemvtune' if self.origin == 'shipped' else 'your table'} " \
               f"for {self.gpu})"


def shipped_root() -> Path | None:
    """The folder of the tables gemvtune ships: ``gemvtune/tables`` in an installed wheel, the checkout's
    ``results`` in a source checkout (an editable install), else None."""
    pkg = Path(__file__).resolve().parent.parent
    if (pkg / "tables").is_dir():
        return pkg / "tables"
    if (pkg.parent / "pyproject.toml").is_file() and (pkg.parent / "results").is_dir():
        return pkg.parent / "results"
    return None


def shipped_gpus() -> list[str]:
    """The GPU folders that have a shipped table."""
    root = shipped_root()
    return sorted(p.parent.name for p in root.glob("*/table.json")) if root is not None else []


def find_table(gpu: str) -> Found:
    """The table ``load_table()`` would load on ``gpu`` (its name, as the driver reports it): one UsageError
    naming the GPUs gemvtune ships tables for when there is none."""
    own = Workspace.for_gpu(gpu).table
    if own.is_file():
        return Found(own, "your results", gpu)
    root = shipped_root()
    if root is not None and (shipped := Workspace(root / gpu_slug(gpu)).table).is_file():
        return Found(shipped, "shipped", gpu)
    have = ", ".join(shipped_gpus()) or "none"
    raise UsageError(f"no table for {gpu}: none at {own}, and gemvtune ships tables only for {have}. Tune one for "
                     f"your model (gemvtune tune --hf-config config.json --batch 1,2,4,8,16 --budget 5m writes {own}, "
                     f"planned by the shipped cost model), or load another GPU's table by its path")


def current_gpu_name() -> str:
    """The name of the CUDA device this process would run on: torch's current device where torch is already
    imported and sees one, else CuPy's. NoDeviceError (one line) when no device answers."""
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_available():
                return str(torch.cuda.get_device_name(torch.cuda.current_device()))
        except Exception:   # (a broken CUDA build of torch): ask CuPy
            pass
    from ..device._cupy import cp, cuda_available

    why = cuda_available()
    if why or cp is None:
        raise NoDeviceError(f"load_table() with no path loads the table of this GPU, but {why or 'no CUDA device'}"
                            "; give the table's path instead")
    name = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"]
    return name.decode() if isinstance(name, bytes) else str(name)
