"""The search command's driver: per shape, search, write the trial CSV, record the table entry."""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import Any, Callable

from .report import gpu_slug, provenance
from .coord import Coordinator, this_worker
from .search import SearchOptions, run_search, study_name
from .storage import HEARTBEAT_S, open_store
from .shapes import Shape
from .errors import UsageError
from .table import load_table, record


def _ratio(a: Any, b: Any) -> str:
    try:
        return f"{a / b:.3f}"
    except (TypeError, ZeroDivisionError):
        return "-"


def device_label(dev: dict[str, Any]) -> str:
    """What the CSV's device column says: the device index this process used, its name and PCI bus id
    (tells workers pinned to different GPUs apart)."""
    return " ".join(str(x) for x in (dev.get("device", ""), dev.get("name", ""), dev.get("pci_bus_id", "")) if x != "")


def run_searches(runner: Any, shapes: list[Shape], opts: SearchOptions, results_dir: str | None,
                 table_path: str | None, echo: Callable[[str], None], writable: Callable[[str], Path],
                 heartbeat_s: float = HEARTBEAT_S, joiner: bool = False) -> Path:
    import pandas as pd

    dev = runner.device_info()
    slug = gpu_slug(dev["name"])
    out = writable(results_dir or str(Path("results") / slug))
    table = Path(table_path) if table_path else out / "table.json"
    if table.exists():  # a table we could not update fails now, before any search output is written
        made = load_table(table).gpu.get("name")
        if made and made != dev.get("name"):
            raise UsageError(f"table {table} was made on {made}, not {dev.get('name')}: use a table per GPU")
    storage_url = opts.storage or f"journal:{out / 'optuna-journal.log'}"
    store = open_store(storage_url, heartbeat_s)
    storage = store.storage
    coord = Coordinator(store, this_worker(device_label(dev)))
    ceil = runner.ceiling()
    replay = " (REPLAYED from recorded sweeps)" if getattr(runner, "replayed", False) else ""
    echo(f"{dev['name']}{replay}: read ceiling {ceil['read_gbps']:.0f} GB/s; storage {storage_url}; table {table}")
    for shape in shapes:
        name = study_name(shape, slug)
        res = run_search(runner, shape, opts, storage, name, echo=echo, coord=coord, joiner=joiner)
        if res is None:   # another worker of this study confirms and writes the table
            runner.release()
            continue
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
        csv = out / f"search-{shape.M}x{shape.d}x{shape.n}-{stamp}.csv"
        pd.DataFrame(res.trials).to_csv(csv, index=False, float_format="%.6g")
        meta = provenance(dev, ceiling=ceil, replayed=bool(getattr(runner, "replayed", False)), study=name, storage=storage_url, shape=[shape.M, shape.d, shape.n],
                          search=res.entry["search"], winner=res.entry["winner"], baselines=res.entry["baselines"])
        csv.with_suffix(".json").write_text(json.dumps(meta, indent=1, sort_keys=True, default=str) + "\n")
        record(table, shape, res.entry, dev, ceil)
        w, b = res.entry["winner"], res.entry["baselines"]
        cub = (b.get("cublas-torch") or b.get("cublas") or {}).get("us")
        lla = b["llama.cpp"].get("us")
        fams = "  ".join(f"{f} {res.entry[f]['us']:.2f}" for f in opts.families if f in res.entry)
        echo(f"{shape!s:>14s}  {w['label']:44s} {w['us']:8.2f} µs  {w['pct_ceiling']:5.1f}% ceiling  "
             f"x{_ratio(cub, w['us'])} cuBLAS  x{_ratio(lla, w['us'])} llama.cpp  [{fams}]  "
             f"({res.new_measured} new / {res.measured} measured trials{', tie' if res.tie else ''}) -> {csv.name}")
        runner.release()
    coord.close()
    return table
