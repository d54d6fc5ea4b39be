"""The learned cost model: training rows from a GPU's recorded measurements (``dataset``), the features of a
(config, shape) point (``features``), the LightGBM model and its JSON file (``costmodel``), leave-one-shape-out
evaluation (``loso``), the warm start of a search (``warm``) and the zero-trial pick for shapes a table lacks
(``zerotrial``). Needs LightGBM (``gemvtune[model]``); nothing here is imported by ``import gemvtune``."""

import os
from pathlib import Path

MODEL_NAME = "costmodel.json"   # a GPU's model file in its results folder (beside its table.json)
MODEL_NAMES = (MODEL_NAME, MODEL_NAME + ".gz")   # or gzip-compressed (the committed H200 model: 2.4 MB -> 0.75 MB)


def model_beside(folder: str | Path) -> Path:
    """The cost model of a results folder: costmodel.json, else costmodel.json.gz, else (neither there) the path
    costmodel.json would have."""
    for name in MODEL_NAMES:
        if os.path.lexists(Path(folder) / name):
            return Path(folder) / name
    return Path(folder) / MODEL_NAME
