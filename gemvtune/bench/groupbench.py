"""Grouped-linear benchmark (``gemvtune bench group --model NAME``): a model preset's sibling linears (q, k, v;
gate, up) run as one grouped launch against the same members launched one after another with the table's kernels,
and against the plain kernel of the fused shape, each in CUDA graphs over the same rotating weight copies (cold L2),
in one process. The GPU half is ``gemvtune.runners.cuda.grouped``.

The group runs the fused shape's best GEMV-family config in the table (the family with a grouped template); each
member runs its own entry's winner when that is a template config, else its best template config, else the
group's config.
"""

from __future__ import annotations

import datetime as _dt
import json
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..kernels.gemv import LLAMA_CPP, GemvConfig
from ..kernels.group import GROUP_FAMILIES, GroupShape, group_reasons
from ..kernels.hfconfig import read_preset
from ..kernels.shapes import Shape
from ..safefile import write_text
from ..workspace import Workspace, replace_previous

# Configs a SwiGLU group can fall back to (an even number of rows per block): the llama.cpp config's loads on two
# rows per block, then any d (scalar loads, one warp per row).
SWIGLU_FALLBACKS = (GemvConfig(block=256, vec="half2", tpr=128), GemvConfig(vec="half", tpr=32, block=256))

COLUMNS = ["group", "n", "dtype", "grouped_config", "grouped_us", "grouped_spread", "grouped_pct_ceiling",
           "separate_configs", "separate_us", "separate_spread", "fused_plain_us", "separate_over_grouped"]


def _template_records(table: Any, shape: Shape) -> list[tuple[float, Any]]:
    """(µs, config) of the entry's verified template-family records, fastest first (the winner first on a tie),
    without those only a model's chain may choose (``ConfigBase.chain_only``)."""
    from ..kernels.families import FAMILIES

    e = table.entry(shape)
    out = []
    for rec in (e.records() if e is not None else []):
        if rec.ok_us is None or rec.config is None:
            continue
        try:
            cfg = rec.config_object()
        except Exception:
            continue
        if not FAMILIES[cfg.family].library and cfg.is_valid(shape) and not cfg.chain_only():
            out.append((rec.ok_us, cfg))
    return sorted(out, key=lambda p: p[0])


def group_config(table: Any, group: GroupShape, epilogue: Any = None) -> tuple[Any, str]:
    """The config a group runs (with ``epilogue``, when given), and where it comes from: the fused shape's fastest
    measured config of a family with a grouped template that can fuse it, else the first fallback of the GEMV family
    that can (the llama.cpp config, or for SwiGLU, which pairs rows in a block, one with an even number of rows)."""
    def fits(cfg: Any) -> bool:
        return (cfg.family in GROUP_FAMILIES and not group_reasons(cfg, group, epilogue)
                and not (epilogue is not None and epilogue.invalid_reasons(cfg)))
    for _, cfg in _template_records(table, group.fused):
        if fits(cfg):
            return cfg, f"the table's best {cfg.family} config of {group.fused}"
    for cfg in (LLAMA_CPP, *SWIGLU_FALLBACKS):
        if fits(cfg):
            return cfg, f"{cfg.label} ({group.fused} has no grouped-family record in the table that can run it)"
    return LLAMA_CPP, f"the llama.cpp config ({group.fused} has no grouped-family record in the table)"


def member_configs(table: Any, group: GroupShape, fallback: Any) -> list[Any]:
    """Each member's kernel alone: the template config its route's measurements pick (``route.runnable``: the
    winner, or where only a model's chain may choose that, the fastest other measured kernel), else its fastest
    template config, else ``fallback``."""
    from ..kernels.families import FAMILIES
    from ..runtime.route import runnable

    out = []
    for s in group.members:
        e = table.entry(s)
        cands = runnable(e, s, "fp32") if e is not None else []   # (it skips records this version cannot read)
        cfg = cands[0][1] if cands else None
        if cfg is not None and not FAMILIES[cfg.family].library:
            out.append(cfg)      # what the route runs for the member
            continue
        recs = _template_records(table, s)
        out.append(recs[0][1] if recs else fallback)
    return out


def run_group_bench(model: str, batches: list[int], dtype: str, table_path: str, out_dir: str | None,
                    echo: Callable[[str], None] = print) -> Path:
    """Measure every group of ``model`` at each batch; write CSV, JSON provenance and a markdown summary into
    the workspace's benchmarks folder (replacing the previous run), print the summary; returns the CSV path."""
    import pandas as pd

    from ..cells import write_csv
    from ..provenance import provenance
    from ..runners.cuda import CudaRunner
    from ..runners.cuda.grouped import measure_group, measure_separate
    from ..runtime.table import load_table

    table = load_table(table_path)
    runner = CudaRunner()
    info = runner.device_info()
    rows = []
    for n in batches:
        for g in read_preset(model).groups(n, dtype):
            cfg, why = group_config(table, g)
            members = member_configs(table, g, cfg)
            echo(f"{g}: grouped {cfg.label} ({why}); separate {' + '.join(c.label for c in members)}")
            mg = measure_group(runner, cfg, g)
            ms = measure_separate(runner, members, g)
            mf = runner.measure(cfg, g.fused)
            for what, m in (("grouped", mg), ("separate", ms), ("fused plain", mf)):
                if not m.ok:
                    echo(f"  {what}: {m.status}: {m.error}")
            rows.append({"group": str(GroupShape(g.Ms, g.d)), "n": n, "dtype": dtype, "grouped_config": cfg.label,
                         "grouped_us": mg.us_median, "grouped_spread": mg.spread, "grouped_pct_ceiling": mg.pct_ceiling,
                         "separate_configs": " + ".join(c.label for c in members), "separate_us": ms.us_median,
                         "separate_spread": ms.spread, "fused_plain_us": mf.us_median,
                         "separate_over_grouped": ms.us_median / mg.us_median if mg.ok and ms.ok else float("nan")})
            runner.release()
    folder = Path(out_dir) if out_dir else Workspace.for_gpu(info["name"]).benchmarks
    folder.mkdir(parents=True, exist_ok=True)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    stem = f"group-{model}"
    csv = folder / f"{stem}-{stamp}.csv"
    write_csv(pd.DataFrame(rows, columns=COLUMNS), csv)
    prov = provenance(info)
    write_text(folder / f"{stem}-{stamp}.json", json.dumps({**prov, "model": model, "batches": batches, "dtype": dtype,
                                                             "table": str(table_path)}, indent=1) + "\n")
    md = summary(rows, prov, model)
    write_text(folder / f"{stem}-{stamp}.md", md)
    if not out_dir:   # the workspace's benchmarks: the latest run of each benchmark is kept
        replace_previous(folder, stem, stamp)
    echo(md)
    return csv


def summary(rows: list[dict[str, Any]], prov: dict[str, Any], model: str) -> str:
    """The markdown summary of one run (every number from ``rows``)."""
    from ..cells import md_cell

    dev = prov.get("device") or {}
    lines = [f"# Grouped sibling linears, {md_cell(model)}", "",
             f"{md_cell(prov.get('date', ''))}, {md_cell(dev.get('name', ''))}, driver {md_cell(dev.get('driver', ''))}; "
             f"command: `{md_cell(prov.get('command', ''))}`", "",
             "Median µs per call (CUDA graphs over rotating weight copies, cold L2, one process); separate: the members "
             "one after another with their own table kernels; fused plain: the group's config on one contiguous "
             "weight of the fused shape.", "",
             "| group | n | grouped µs | % ceiling | separate µs | fused plain µs | separate / grouped |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {md_cell(r['group'])} | {r['n']} | {r['grouped_us']:.2f} (±{100 * r['grouped_spread'] / 2:.1f}%) | "
                     f"{r['grouped_pct_ceiling']:.1f} | {r['separate_us']:.2f} | {r['fused_plain_us']:.2f} | "
                     f"{r['separate_over_grouped']:.3f} |")
    ratios = [r["separate_over_grouped"] for r in rows if r["separate_over_grouped"] == r["separate_over_grouped"]]
    if ratios:
        lines += ["", f"Geometric mean separate / grouped: {statistics.geometric_mean(ratios):.3f} over {len(ratios)} groups."]
    return "\n".join(lines) + "\n"
