"""The census of a family's space for a shape on an architecture (``gemvtune space``): how many configs are valid,
how many valid ones take each parameter value, and why the others are invalid (by first reason: on an arch that lacks
a feature, that feature first). A library family (cuBLASLt) has no census without a GPU: its line says where its
configs come from."""

from __future__ import annotations

import collections
import re
from collections.abc import Iterable
from typing import Any

from .arch import DEFAULT, parse_arch
from .shapes import Shape


def census(configs: Iterable[Any], shape: Shape, domains: dict[str, Any], arch: Any = None
           ) -> tuple[int, int, collections.Counter, dict[str, collections.Counter]]:
    """(total, valid, invalid count by first reason, valid count per parameter value) on ``arch`` (None: sm_90)."""
    a = parse_arch(arch)
    total, valid = 0, 0
    reasons: collections.Counter[str] = collections.Counter()
    per_param: dict[str, collections.Counter] = {k: collections.Counter() for k in domains}
    for c in configs:
        total += 1
        r = c.invalid_reasons(shape, a)
        if r:
            reasons[reason_kind(r[0])] += 1
        else:
            valid += 1
            for k, v in c.to_dict().items():
                per_param[k][v] += 1
    return total, valid, reasons, per_param


def reason_kind(reason: str) -> str:
    """Group reasons by their wording with the numbers taken out."""
    return re.sub(r"\d+", "N", reason)


def census_lines(family: Any, shape: Shape, arch: Any = None) -> list[str]:
    """The lines ``gemvtune space`` prints for one family (a ``gemvtune.kernels.families.Family``) and shape on
    ``arch`` (None: sm_90, the one arch whose lines name none): the count, the family's seed config, valid configs per parameter
    value, invalid ones by reason. A library family's space is the library's answer on the GPU: its line says so
    (``Family.census_note``) instead."""
    a = parse_arch(arch)
    on = "" if a is DEFAULT else f" on {a}"
    if family.library:
        return [f"shape {shape} (M={shape.M}, d={shape.d}, n={shape.n}){on}: {family.name}: {family.census_note}"]
    total, valid, reasons, per_param = census(family.all_configs(), shape, family.domains, a)
    lines = [f"shape {shape} (M={shape.M}, d={shape.d}, n={shape.n}){on}: {valid} valid of {total} {family.name} "
             "configs"]
    why = family.seed.invalid_reasons(shape, a)
    lines.append(f"  {family.seed_name} config {family.seed.label}: {'valid' if not why else 'INVALID: ' + why[0]}")
    lines.append("  valid configs per parameter value:")
    for k, cnt in per_param.items():
        lines.append(f"    {k:8s} " + "  ".join(f"{v}:{cnt.get(v, 0)}" for v in family.domains[k]))
    if reasons:
        lines.append("  invalid, by first reason:")
        lines += [f"    {n:7d}  {kind}" for kind, n in reasons.most_common()]
    return lines
