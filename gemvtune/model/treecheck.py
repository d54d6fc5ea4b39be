"""LightGBM's model text checked in Python before LightGBM's C++ parses it: a cost model file is data a user may
hand gemvtune, and LightGBM trusts its text. A tree whose arrays do not match its ``num_leaves``, or a missing tree,
aborts the process; a node that is its own child loops for ever in ``predict``; a split on a feature past the
model's count reads out of range or crashes. Here every tree is checked: its arrays' lengths, every number ASCII
and finite, split features below the feature count, children in range and each greater than its parent (so no
cycle), every node and leaf reached exactly once, no categorical or linear trees (gemvtune's models have none),
one block per ``tree_sizes`` entry of exactly that many bytes (LightGBM seeks by them). Anything else is one
UsageError naming the file and the first problem."""

from __future__ import annotations

import math
import re

from ..errors import UsageError

MAX_LEAVES = 1 << 17
MAX_TREES = 100_000
_INT = r"-?[0-9]{1,12}"
_FLOAT = r"[-+]?(?:[0-9]{1,400}(?:\.[0-9]{0,400})?|\.[0-9]{1,400})(?:[eE][-+]?[0-9]{1,4})?|[-+]?inf"
_INT_LINE = re.compile(f"(?:{_INT})(?: {_INT})*", re.ASCII)
_FLOAT_LINE = re.compile(f"(?:{_FLOAT})(?: (?:{_FLOAT}))*", re.ASCII)
_TREE_LINE = re.compile(r"^Tree=([0-9]{1,7})$", re.M | re.ASCII)
# per tree: the arrays of internal nodes (L - 1 entries) and of leaves (L entries)
_INTERNAL_INT = ("split_feature", "decision_type", "left_child", "right_child")
_INTERNAL_FLOAT = ("split_gain", "threshold", "internal_value", "internal_weight", "internal_count")
_LEAF_FLOAT = ("leaf_value", "leaf_weight", "leaf_count")


class _Bad(Exception):
    pass


def _ints(text: str, what: str) -> list[int]:
    if not text:
        return []
    if not _INT_LINE.fullmatch(text):
        raise _Bad(f"{what} holds something that is not an integer of at most 12 ASCII digits")
    return [int(t) for t in text.split(" ")]


def _floats(text: str, what: str, inf_ok: bool = False) -> list[float]:
    if not text:
        return []
    if not _FLOAT_LINE.fullmatch(text):
        raise _Bad(f"{what} holds something that is not a plain ASCII number")
    out = [float(t) for t in text.split(" ")]
    if not all(map(math.isfinite, out)) and not (inf_ok and not any(map(math.isnan, out))):
        raise _Bad(f"{what} holds a number that is not finite")
    return out


def _fields(block: str, where: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in block.split("\n"):
        if not line:
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise _Bad(f"{where}: line {line[:30]!r} is not key=value")
        if key in out:
            raise _Bad(f"{where}: {key} is given twice")
        out[key] = value
    return out


def _one(fields: dict[str, str], key: str, where: str) -> int:
    if key not in fields:
        raise _Bad(f"{where}: {key} is missing")
    vals = _ints(fields[key], f"{where} {key}")
    if len(vals) != 1:
        raise _Bad(f"{where}: {key} is not one integer")
    return vals[0]


def _check_tree(block: str, index: int, n_features: int) -> None:
    where = f"tree {index}"
    body = block.split("\n", 1)[1] if "\n" in block else ""
    f = _fields(body, where)
    leaves = _one(f, "num_leaves", where)
    if not 1 <= leaves <= MAX_LEAVES:
        raise _Bad(f"{where}: num_leaves {leaves} is outside 1..{MAX_LEAVES}")
    if _one(f, "num_cat", where) != 0:
        raise _Bad(f"{where}: categorical splits (num_cat), which gemvtune's models never have")
    if "is_linear" in f and _one(f, "is_linear", where) != 0:
        raise _Bad(f"{where}: a linear tree, which gemvtune's models never are")
    if "shrinkage" in f:
        _floats(f["shrinkage"], f"{where} shrinkage")
    if "leaf_value" not in f:
        raise _Bad(f"{where}: leaf_value is missing")
    for key in _LEAF_FLOAT:
        if key in f and len(_floats(f[key], f"{where} {key}")) != leaves:
            raise _Bad(f"{where}: {key} has not num_leaves ({leaves}) entries")
    if leaves == 1:
        return
    inner = leaves - 1
    arrays: dict[str, list[int]] = {}
    for key in _INTERNAL_INT:
        if key not in f:
            raise _Bad(f"{where}: {key} is missing")
        arrays[key] = _ints(f[key], f"{where} {key}")
    for key in _INTERNAL_FLOAT:
        if key in f or key in ("split_gain", "threshold"):
            if key not in f:
                raise _Bad(f"{where}: {key} is missing")
            if len(_floats(f[key], f"{where} {key}", inf_ok=key == "threshold")) != inner:
                raise _Bad(f"{where}: {key} has not num_leaves - 1 ({inner}) entries")
    for key, vals in arrays.items():
        if len(vals) != inner:
            raise _Bad(f"{where}: {key} has {len(vals)} entries, not num_leaves - 1 ({inner})")
    for feat in arrays["split_feature"]:
        if not 0 <= feat < n_features:
            raise _Bad(f"{where}: a split on feature {feat}; the model has {n_features} features")
    for dt in arrays["decision_type"]:
        if not 0 <= dt < 16 or dt & 1 or (dt >> 2) & 3 == 3:
            raise _Bad(f"{where}: decision_type {dt} is not a numerical split")
    seen_nodes, seen_leaves = [0] * inner, [0] * leaves
    for parent, pair in enumerate(zip(arrays["left_child"], arrays["right_child"])):
        for child in pair:
            if child >= 0:
                if not parent < child < inner:
                    raise _Bad(f"{where}: node {parent} has child node {child}; a child must come after its "
                               f"parent and below {inner} (a cycle or an out-of-range node)")
                seen_nodes[child] += 1
            else:
                leaf = ~child
                if not 0 <= leaf < leaves:
                    raise _Bad(f"{where}: node {parent} has leaf {leaf}; the tree has {leaves} leaves")
                seen_leaves[leaf] += 1
    if any(c != 1 for c in seen_nodes[1:]) or seen_nodes[0] != 0:
        raise _Bad(f"{where}: its nodes do not form one tree (a node reached twice or never)")
    if any(c != 1 for c in seen_leaves):
        raise _Bad(f"{where}: its leaves do not form one tree (a leaf reached twice or never)")


def check_model_text(text: str, n_features: int, where: str) -> None:
    """One UsageError (naming ``where``) unless ``text`` is LightGBM model text of a regression model on
    ``n_features`` features whose every tree is well formed (see the module doc)."""
    try:
        _check(text, n_features)
    except _Bad as e:
        raise UsageError(f"{where}: its LightGBM trees are damaged ({e}); refit it (gemvtune costmodel fit)") from None


def _check(text: str, n_features: int) -> None:
    if not text.startswith("tree\n"):
        raise _Bad("the text does not begin with LightGBM's 'tree' header")
    end = text.find("\nend of trees")
    if end < 0:
        raise _Bad("'end of trees' is missing (truncated?)")
    trees = list(_TREE_LINE.finditer(text, 0, end + 1))
    if not trees:
        raise _Bad("no tree")
    if len(trees) > MAX_TREES:
        raise _Bad(f"{len(trees)} trees, more than {MAX_TREES}")
    header = _fields(text[len("tree\n"):trees[0].start()], "the header")
    if _one(header, "max_feature_idx", "the header") != n_features - 1:
        raise _Bad(f"max_feature_idx is not {n_features - 1} (a model on {n_features} features)")
    for key in ("num_class", "num_tree_per_iteration"):
        if _one(header, key, "the header") != 1:
            raise _Bad(f"{key} is not 1 (a regression model)")
    starts = [m.start() for m in trees] + [end + 1]
    for i, m in enumerate(trees):
        if int(m.group(1)) != i:
            raise _Bad(f"tree {i} is numbered {m.group(1)}")
    if "tree_sizes" in header:
        sizes = _ints(header["tree_sizes"], "tree_sizes")
        if len(sizes) != len(trees):
            raise _Bad(f"tree_sizes lists {len(sizes)} trees, the text holds {len(trees)}")
        for i, size in enumerate(sizes):
            got = len(text[starts[i]:starts[i + 1]].encode("utf-8"))
            if size != got:
                raise _Bad(f"tree_sizes says tree {i} is {size} bytes, it is {got}")
    for i in range(len(trees)):
        _check_tree(text[starts[i]:starts[i + 1]].rstrip("\n"), i, n_features)
