"""Transfer between a tune's searches: a search of one weight (M, d, dtype, weights) at batch size n is warm-started

- with the kernels the table already measured fastest for the same weight at the other n, nearest n first
  (``other_n_warm``). On the H200 (2026-12-05) the tune of Llama-3-8B searched 4096x4096 at n = 8 before n = 16; the
  committed n = 16 winner, ``ring.m16.r1.k4.b512.st3.i1.s1.pf128B`` (10.88 µs), differs from that tune's n = 8 winner
  only in its k-width, the cost model ranked it about 28th of the ring family at n = 16, and the n = 16 search never
  measured it (its pick: 11.69 µs);
- with the fastest kernels of the other weights at the same n, the same d first (``other_shape_warm``). The committed
  H200 table's ring winners at one n differ across weights in one or two parameters (n = 8: 4096x4096, 4096x14336
  and 6144x4096 all won with ``ring.m16.r1.k4.b*.st3/4.i1.s1``); on the H100 (2026-12-06) a 35-trial search of
  1024x4096 at n = 16 ended on cuBLAS at 8.36 µs, where the committed entry's ring kernel, 7.34 µs, differs from
  that tune's 4096x4096 n = 16 winner in its split only.

Each transferred config is a trial of the search's budget. In the H100's 8B tune at 6c83f49 (2026-12-06), 8 of its 23
searches measured their fastest config among the transferred ones (14336x4096 at n = 1: 4096x4096's kernel, the
third trial). What either transfer changes in the tune's result is not isolated by a measurement."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..kernels.families import DEFAULT_FAMILY, FAMILIES
from ..kernels.shapes import Shape

OTHER_N_K = 3       # configs per family taken from the other n (each one a trial of the search's budget)
OTHER_SHAPE_K = 2   # configs per family taken from the other weights at the same n (each one a trial too)


def weight_of(shape: Shape) -> tuple[int, int, str, str]:
    """What a shape's weight is, whatever its n: (M, d, dtype, weight format)."""
    return shape.M, shape.d, shape.dtype, shape.weights


def other_n_warm(table: Any, shape: Shape, families: Sequence[str], arch: str | None = None,
                 k: int = OTHER_N_K) -> dict[str, list[dict[str, Any]]]:
    """{family: up to ``k`` parameter dicts} of ``table``'s measured kernels (each entry's winner, its confirmation's
    candidates, each family's best) for ``shape``'s weight at the other n, nearest n first (by log2 n; ties: the
    smaller n), each valid for ``shape`` on ``arch`` (None: sm_90) and of a searched template family. A dict's
    ``_from`` names where it came from (the search's record of the trial; not a parameter)."""
    if table is None or k <= 0:
        return {}
    others = sorted((s for s in table.shapes if weight_of(s) == weight_of(shape) and s.n != shape.n),
                    key=lambda s: (abs(math.log2(s.n / shape.n)), s.n))
    return _take(table, others, shape, families, arch, k, lambda s: f"n = {s.n}", everything=True)


def other_shape_warm(table: Any, shape: Shape, families: Sequence[str], arch: str | None = None,
                     k: int = OTHER_SHAPE_K) -> dict[str, list[dict[str, Any]]]:
    """{family: up to ``k`` parameter dicts} of ``table``'s fastest kernels (each entry's winner and each family's
    best) for the other weights at ``shape``'s n, dtype and weight format: the same d first, then the nearest in
    size (by log M·d), each valid for ``shape`` on ``arch``. A dict's ``_from`` names the weight it came from."""
    if table is None or k <= 0:
        return {}
    same = (shape.n, shape.dtype, shape.weights)
    size = shape.M * shape.d
    others = sorted((s for s in table.shapes if (s.n, s.dtype, s.weights) == same and (s.M, s.d) != (shape.M, shape.d)),
                    key=lambda s: (s.d != shape.d, abs(math.log(s.M * s.d / size)), s.M, s.d))
    return _take(table, others, shape, families, arch, k, lambda s: f"{s.M}x{s.d}", everything=False)


def _take(table: Any, others: Sequence[Shape], shape: Shape, families: Sequence[str], arch: str | None, k: int,
          where: Callable[[Shape], str], everything: bool) -> dict[str, list[dict[str, Any]]]:
    """Up to ``k`` distinct valid configs per searched template family from ``others``' entries, in order (an
    entry's winner, then its confirmation's candidates where ``everything``, then each family's best)."""
    out: dict[str, list[dict[str, Any]]] = {}
    seen: set[tuple[str, str]] = set()
    for s in others:
        e = table.entry(s)
        if e is None:
            continue
        for rec in (e.winner, *(e.candidates if everything else ()), *e.best.values()):
            fam = rec.family or DEFAULT_FAMILY
            if fam not in families or FAMILIES[fam].library or len(out.get(fam, ())) >= k:
                continue
            try:
                c = rec.config_object()
            except Exception:   # (a record without a readable config: nothing to transfer)
                continue
            if (fam, c.label) in seen or c == FAMILIES[fam].seed or not c.is_valid(shape, arch):
                continue
            seen.add((fam, c.label))
            out.setdefault(fam, []).append({**c.to_dict(), "_from": f"{where(s)}: {c.label}"})
    return out


def merged(first: Mapping[str, Sequence[dict[str, Any]]], then: Mapping[str, Any]) -> dict[str, tuple[dict[str, Any], ...]]:
    """Per family, ``first``'s configs, then ``then``'s (e.g. the cost model's warm start) not among them."""
    def params(p: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in p.items() if k != "_from"}

    out: dict[str, tuple[dict[str, Any], ...]] = {}
    for fam in {*first, *then}:
        have = list(first.get(fam, ()))
        have += [p for p in then.get(fam, ()) if params(p) not in map(params, have)]
        if have:
            out[fam] = tuple(have)
    return out
