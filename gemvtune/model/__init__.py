"""The learned cost model: training rows from a GPU's recorded measurements (``dataset``), the features of a
(config, shape) point (``features``), the LightGBM model and its JSON file (``costmodel``), leave-one-shape-out
evaluation (``loso``), the warm start of a search (``warm``) and the zero-trial pick for shapes a table lacks
(``zerotrial``). Needs LightGBM (``gemvtune[model]``); nothing here is imported by ``import gemvtune``."""

from ..workspace import MODEL_NAME, MODEL_NAMES, model_beside

__all__ = ["MODEL_NAME", "MODEL_NAMES", "model_beside"]
