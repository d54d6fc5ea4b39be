"""Host cost of one forward of a Hugging Face model in eager PyTorch, stock against ``swap_linears``
(``gemvtune percall hf PATH``).

Eager decode is paced by the host: each token is a Python walk over every module. Whole ``generate`` calls
(``gemvtune bench hf``) swing by ±30% from one to the next on a busy host (the H200's, 2026-12-02),
which hides a difference of a few % between the two implementations. Here the unit is one forward of one
token without a cache (the same linear-layer calls, n = 1, that a decode step makes): short blocks of
forwards, stock and gemvtune back to back in each repeat, the order alternating between repeats, so a drift
of the host falls on both sides of every pair; the per-repeat ratio is what the summary reports with its
spread. Both implementations are the same model object (``hfmodel.Variants``: the same weights, the modules
switched by setattr between blocks).

torch and transformers are imported inside functions only."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from .report import IMPLS


def forward_summary(ms: dict[str, list[float]]) -> dict[str, float]:
    """From each implementation's ms per forward, one value per repeat (the repeats paired by index): medians
    and ranges, the ratio of the medians (stock / gemvtune: above 1, gemvtune's forward costs less) and the
    per-repeat ratios' median and range."""
    if set(ms) != set(IMPLS) or not ms["stock"] or len(ms["stock"]) != len(ms["gemvtune"]):
        raise ValueError(f"need paired samples of {IMPLS}, got {({k: len(v) for k, v in ms.items()})}")
    pairs = [s / g for s, g in zip(ms["stock"], ms["gemvtune"])]
    out: dict[str, float] = {}
    for impl in IMPLS:
        out[f"{impl}_ms"] = statistics.median(ms[impl])
        out[f"{impl}_ms_min"], out[f"{impl}_ms_max"] = min(ms[impl]), max(ms[impl])
    out["ratio"] = out["stock_ms"] / out["gemvtune_ms"]
    out["pair_ratio"] = statistics.median(pairs)
    out["pair_ratio_min"], out["pair_ratio_max"] = min(pairs), max(pairs)
    out["repeats"] = len(pairs)
    return out


def time_forwards(forward: Callable[[], Any], use: Callable[[str], None], sync: Callable[[], None], calls: int,
                  repeats: int, clock: Callable[[], float] = time.perf_counter) -> dict[str, list[float]]:
    """ms per ``forward()`` of each implementation (``use(impl)`` switches), per repeat: a block of ``calls``
    forwards each, synchronized before and after, both implementations back to back, the order alternating
    between repeats; after 3 warm-up forwards of each."""
    for impl in IMPLS:
        use(impl)
        for _ in range(3):
            forward()
    out: dict[str, list[float]] = {impl: [] for impl in IMPLS}
    for r in range(repeats):
        for impl in (IMPLS if r % 2 == 0 else IMPLS[::-1]):
            use(impl)
            sync()
            t0 = clock()
            for _ in range(calls):
                forward()
            sync()
            out[impl].append((clock() - t0) / calls * 1e3)
    return out


def measure_hf_forward(hf_config: str, table: Any, layers: int | None, dtype: str, calls: int, repeats: int,
                       device: str = "cuda", seed: int = 0) -> dict[str, Any]:
    """Build the model (random weights, ``dtype`` "float16" or "bfloat16"), swap its linear layers, and time
    one-token forwards stock against gemvtune (``time_forwards``). One row: the model, layers swapped and
    tuned, and ``forward_summary``."""
    import torch

    from ..runtime.torch_linear import explain
    from .model import Variants, build_config, build_model, read_config

    fields, name, cfg_file = read_config(hf_config)
    cfg, info = build_config(fields, layers, where=f"config {cfg_file}")
    model = build_model(cfg, dtype, device, seed)
    variants = Variants(model, table)
    variants.use("gemvtune")
    routes = [r["route"] for r in explain(model, 1)]
    ids = torch.full((1, 1), 1, dtype=torch.long, device=device)
    sync = torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)

    def forward() -> Any:
        return model(input_ids=ids, use_cache=False)

    with torch.no_grad():
        ms = time_forwards(forward, variants.use, sync, calls, repeats)
    variants.use("stock")
    return {"model": name, "layers": info["layers"], "dtype": dtype, "swapped": len(variants.names),
            "tuned": routes.count("tuned"), "calls": calls, **forward_summary(ms)}


def forward_markdown(row: dict[str, Any], device: dict[str, Any], command: str) -> str:
    """The report of one ``measure_hf_forward`` row."""
    return "\n".join([
        f"# Host cost of a forward in eager PyTorch: {row['model']}, {row['layers']} layers, {row['dtype']}, "
        f"{device.get('name', '?')}", "",
        f"driver {device.get('driver', '?')}; torch {device.get('torch', '?')}; command: `{command}`", "",
        f"One token, no cache, batch 1: the linear-layer calls of a decode step (n = 1). {row['swapped']} linear "
        f"layers swapped for GemvLinear, {row['tuned']} of them on a tuned kernel, the rest on F.linear. "
        f"{row['repeats']} repeats of {row['calls']} forwards per implementation, stock and gemvtune back to back, "
        "the order alternating.", "",
        "| implementation | ms per forward (median) | min..max |", "|---|---|---|",
        *(f"| {impl} | {row[impl + '_ms']:.3f} | {row[impl + '_ms_min']:.3f}..{row[impl + '_ms_max']:.3f} |"
          for impl in IMPLS),
        "", f"**stock / gemvtune: {row['ratio']:.3f}** (medians; above 1 gemvtune costs the host less); per repeat "
        f"{row['pair_ratio']:.3f} ({row['pair_ratio_min']:.3f}..{row['pair_ratio_max']:.3f}).", ""])
