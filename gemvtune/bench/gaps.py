"""What a decode step runs between its linears, and the bytes each of those kernels moves (pure: no GPU). The decode
step benchmark (``gemvtune bench step --between plain|pdl``) launches a stand-in of each
(``gemvtune.runners.cuda.standins``) where the model runs it, so a chain of linears is timed with the gaps a model
has, not back to back.

Per layer of a Llama-style decoder at batch n, with a KV cache of ``context`` tokens:

- unfused (each linear returns its product; the elementwise work is kernels of its own, as Inductor fuses them):
  ``qkv | attention | o | add+norm | gate_up | silu*mul | down | add+norm`` (the last add+norm is the next layer's
  input norm fused with the residual add, as Inductor emits it);
- fused (gemvtune's epilogues: o and down add the residual, gate_up's group writes ``silu(g)·u``):
  ``qkv | attention | o+r | norm | gate_up→h | down+r | norm``.

The LM head follows the last layer's norm. Bytes at 2 per element (FP16/BF16), weights of the norms included;
attention reads K and V of every cached token and q, and writes its output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

BETWEEN = ("none", "plain", "pdl")   # no stand-ins; stand-ins that end a PDL chain; PDL-aware stand-ins
DEFAULT_CONTEXT = 128


@dataclass(frozen=True)
class Gap:
    name: str
    read_bytes: int
    write_bytes: int

    @property
    def bytes_moved(self) -> int:
        return self.read_bytes + self.write_bytes


def layer_gaps(model: Any, n: int = 1, fused: bool = False, context: int = DEFAULT_CONTEXT) -> dict[str, Gap]:
    """The gap after each linear of one layer, by the linear's name (``qkv``, ``o``, ``gate_up``, ``down``): what
    runs between it and the next linear, for ``model`` (a ``gemvtune.kernels.hfconfig.HFModel``)."""
    if isinstance(context, bool) or not isinstance(context, int) or context < 1:
        raise ValueError(f"context must be a positive number of tokens, got {context!r}")
    h, i, q, kv = model.hidden_size, model.intermediate_size, model.q_width, model.kv_width
    e = 2 * n   # bytes of one element per column
    attention = Gap("attention", e * (q + 2 * kv) + 2 * 2 * context * kv, e * q)
    norm = Gap("norm", e * h + 2 * h, e * h)                      # x and the norm's weight in, normed x out
    add_norm = Gap("add+norm", 2 * e * h + 2 * h, 2 * e * h)      # residual and x in; the sum and the normed x out
    if fused:
        return {"qkv": attention, "o": norm, "down": norm}
    return {"qkv": attention, "o": add_norm, "gate_up": Gap("silu*mul", e * 2 * i, e * i), "down": add_norm}
