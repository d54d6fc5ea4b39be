"""LightGBM's model text checked in Python before LightGBM's C++ parses it. A cost model file is data a user may
hand gemvtune, and LightGBM trusts its text: a tree whose arrays do not match its ``num_leaves``, a missing tree or
a ``tree_sizes`` that does not match the blocks aborts the process; a node that is its own child loops for ever in
``predict``; a split on a feature past the model's count reads out of range or crashes; a number of thousands of
digits, a truncated text, a parameter line without its colon or a multiclass objective on a one-class model crash
it too. So the text must be laid out exactly as LightGBM writes it (``Booster.model_to_string()``), and only as
gemvtune's models are:

- printable ASCII and newlines only (no CR or NUL, which LightGBM's and Python's line splitting see differently);
- the header: known keys once each, ``max_feature_idx`` = the feature count - 1, ``num_class`` =
  ``num_tree_per_iteration`` = 1, a regression objective, ``tree_sizes`` one entry per tree, each the exact byte
  length of its block (LightGBM seeks by them: from ``Tree=i`` to the next ``Tree=`` or ``end of trees``);
- each tree numbered 0..k-1 in order, its key=value lines (known keys once each, no more than LightGBM's parser
  reads) followed by two blank lines; every array of the length ``num_leaves`` gives it, every number plain ASCII
  of bounded length and finite, split features below the feature count, numerical splits only, each child node
  after its parent and every node and leaf reached exactly once (one tree, no cycle), no categorical or linear tree;
- the tail as LightGBM writes it: ``end of trees``, the feature importances, ``parameters:`` with ``[key: value]``
  lines, ``end of parameters`` and the Python package's ``pandas_categorical:null``.

Anything else is one UsageError naming the file and the first problem."""

from __future__ import annotations

import math
import re

from ..errors import UsageError

MAX_LEAVES = 1 << 17
MAX_TREES = 100_000
MAX_TREE_LINES = 22           # LightGBM's Tree parser reads no more lines of a tree than this
MAX_LEAF_SUM = 1e6            # bound on the sum over trees of the largest |leaf value|: predictions stay finite
_PRINTABLE = re.compile(r"[\n -~]*")
_INT = r"-?[0-9]{1,12}"
_FLOAT = r"[-+]?(?:[0-9]{1,400}(?:\.[0-9]{0,400})?|\.[0-9]{1,400})(?:[eE][-+]?[0-9]{1,4})?|[-+]?inf"
_INT_LINE = re.compile(f"(?:{_INT})(?: {_INT})*")
_FLOAT_LINE = re.compile(f"(?:{_FLOAT})(?: (?:{_FLOAT}))*")
_TREE_LINE = re.compile(r"^Tree=([0-9]{1,7})$", re.M)
_TAIL = re.compile(
    r"end of trees\n\nfeature_importances:\n(?:[^\n=]{1,1000}=[0-9][0-9.eE+-]{0,40}\n)*"
    r"\nparameters:\n(?:\[[a-z][a-z0-9_]{0,99}: [^\n]{0,100000}\]\n)*\nend of parameters\n\npandas_categorical:null\n")
_HEADER_KEYS = frozenset({"version", "num_class", "num_tree_per_iteration", "label_index", "max_feature_idx",
                          "objective", "feature_names", "monotone_constraints", "feature_infos", "tree_sizes"})
# objectives whose output LightGBM passes through unchanged (gemvtune's: huber); a multiclass or ranking
# objective on a one-class model writes past its output buffer
_OBJECTIVES = frozenset({"regression", "regression_l1", "huber", "fair", "quantile", "mape"})
# per tree: the arrays of internal nodes (num_leaves - 1 entries) and of leaves (num_leaves entries)
_INTERNAL_INT = ("split_feature", "decision_type", "left_child", "right_child", "internal_count")
_INTERNAL_FLOAT = ("split_gain", "threshold", "internal_value", "internal_weight")
_LEAF_INT = ("leaf_count",)
_LEAF_FLOAT = ("leaf_value", "leaf_weight")
_REQUIRED_INTERNAL = ("split_feature", "split_gain", "threshold", "decision_type", "left_child", "right_child")
_TREE_KEYS = frozenset({"num_leaves", "num_cat", "is_linear", "shrinkage", *_INTERNAL_INT, *_INTERNAL_FLOAT,
                        *_LEAF_INT, *_LEAF_FLOAT})


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
        raise _Bad(f"{what} holds something that is not a finite number in plain ASCII digits")
    out = [float(t) for t in text.split(" ")]
    if inf_ok:
        if any(map(math.isnan, out)):
            raise _Bad(f"{what} holds a number that is not a number (NaN)")
    elif not all(map(math.isfinite, out)):
        raise _Bad(f"{what} holds a number that is not finite")
    return out


def _fields(lines: list[str], where: str, keys: frozenset[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in lines:
        key, sep, value = line.partition("=")
        if not sep:
            raise _Bad(f"{where}: line {line[:30]!r} is not key=value")
        if key not in keys:
            raise _Bad(f"{where}: line {line[:30]!r} is not one LightGBM writes")
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


def _arrays(f: dict[str, str], where: str, leaves: int) -> dict[str, list[float] | list[int]]:
    """Every array of tree ``f`` parsed and of its length (num_leaves - 1 or num_leaves entries; a one-leaf tree
    may leave its leaf weights and counts empty, and has no internal node)."""
    out: dict[str, list[float] | list[int]] = {}
    for key in (*_INTERNAL_INT, *_INTERNAL_FLOAT, *_LEAF_INT, *_LEAF_FLOAT):
        if key not in f:
            if key == "leaf_value" or (leaves > 1 and key in _REQUIRED_INTERNAL):
                raise _Bad(f"{where}: {key} is missing")
            continue
        what = f"{where} {key}"
        vals: list[float] | list[int]
        vals = _ints(f[key], what) if key in _INTERNAL_INT + _LEAF_INT else _floats(f[key], what, key == "threshold")
        want = leaves if key in _LEAF_INT + _LEAF_FLOAT else leaves - 1
        if len(vals) != want and not (leaves == 1 and key != "leaf_value" and not vals):
            raise _Bad(f"{where}: {key} has {len(vals)} entries, not {want} (num_leaves {leaves})")
        out[key] = vals
    for key in ("leaf_count", "internal_count"):
        if any(not 0 <= c < 1 << 31 for c in out.get(key, [])):
            raise _Bad(f"{where}: {key} holds a count outside 0..2^31-1")
    return out


def _check_tree(block: str, index: int, n_features: int) -> float:
    """Tree ``index`` (its block from ``Tree=`` to the next one) checked; its largest |leaf value|."""
    where = f"tree {index}"
    head = f"Tree={index}\n"
    if not block.startswith(head) or not block.endswith("\n\n\n") or len(block) < len(head) + 3:
        raise _Bad(f"{where}: not laid out as LightGBM writes a tree (its lines, then two blank lines)")
    lines = block[len(head):-3].split("\n")
    if "" in lines:
        raise _Bad(f"{where}: a blank line among its lines (LightGBM would stop reading the tree there)")
    if len(lines) > MAX_TREE_LINES:
        raise _Bad(f"{where}: {len(lines)} lines, more than LightGBM reads of a tree ({MAX_TREE_LINES})")
    f = _fields(lines, where, _TREE_KEYS)
    leaves = _one(f, "num_leaves", where)
    if not 1 <= leaves <= MAX_LEAVES:
        raise _Bad(f"{where}: num_leaves {leaves} is outside 1..{MAX_LEAVES}")
    if _one(f, "num_cat", where) != 0:
        raise _Bad(f"{where}: categorical splits (num_cat), which gemvtune's models never have")
    if "is_linear" in f and _one(f, "is_linear", where) != 0:
        raise _Bad(f"{where}: a linear tree, which gemvtune's models never are")
    if "shrinkage" in f and len(_floats(f["shrinkage"], f"{where} shrinkage")) != 1:
        raise _Bad(f"{where}: shrinkage is not one number")
    a = _arrays(f, where, leaves)
    top = max(abs(v) for v in a["leaf_value"])
    if leaves == 1:
        return top
    inner = leaves - 1
    for feat in a["split_feature"]:
        if not 0 <= feat < n_features:
            raise _Bad(f"{where}: a split on feature {feat}; the model has {n_features} features")
    for dt in a["decision_type"]:
        # bit 0: categorical; bit 1: missing values go left; bits 2-3: the missing type (0 none, 1 zero, 2 NaN)
        if not 0 <= dt < 16 or int(dt) & 1 or (int(dt) >> 2) & 3 == 3:
            raise _Bad(f"{where}: decision_type {dt} is not a numerical split")
    seen_nodes, seen_leaves = [0] * inner, [0] * leaves
    for parent, pair in enumerate(zip(a["left_child"], a["right_child"])):
        for c in pair:
            child = int(c)
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
    if any(c != 1 for c in seen_nodes[1:]):
        raise _Bad(f"{where}: its nodes do not form one tree (a node reached twice or never)")
    if any(c != 1 for c in seen_leaves):
        raise _Bad(f"{where}: its leaves do not form one tree (a leaf reached twice or never)")
    return top


def check_model_text(text: str, n_features: int, where: str) -> None:
    """One UsageError (naming ``where``) unless ``text`` is LightGBM model text of a regression model on
    ``n_features`` features whose every tree is well formed (see the module doc)."""
    try:
        _check(text, n_features)
    except _Bad as e:
        raise UsageError(f"{where}: its LightGBM trees are damaged ({e}); refit it (gemvtune costmodel fit)") from None


def _check_header(header: str, n_features: int, n_trees: int) -> list[int] | None:
    """The header's checks; its tree_sizes (None where it has none)."""
    lines = [line for line in header.split("\n") if line]
    h = _fields(lines, "the header", _HEADER_KEYS)
    if _one(h, "max_feature_idx", "the header") != n_features - 1:
        raise _Bad(f"max_feature_idx is not {n_features - 1} (a model on {n_features} features)")
    for key in ("num_class", "num_tree_per_iteration"):
        if _one(h, key, "the header") != 1:
            raise _Bad(f"{key} is not 1 (a regression model)")
    for key in ("feature_names", "feature_infos"):
        if len(h.get(key, "").split(" ")) != n_features:
            raise _Bad(f"{key} does not list {n_features} features")
    if "objective" in h and h["objective"] not in _OBJECTIVES:
        raise _Bad(f"objective {h['objective'][:40]!r} is not a regression objective")
    if "tree_sizes" not in h:
        return None
    sizes = _ints(h["tree_sizes"], "tree_sizes")
    if len(sizes) != n_trees:
        raise _Bad(f"tree_sizes lists {len(sizes)} trees, the text holds {n_trees}")
    return sizes


def _check(text: str, n_features: int) -> None:
    if not _PRINTABLE.fullmatch(text):
        bad = _PRINTABLE.match(text)
        at = bad.end() if bad else 0
        raise _Bad(f"character {text[at]!r} at {at}: LightGBM's text is printable ASCII and newlines")
    if not text.startswith("tree\n"):
        raise _Bad("the text does not begin with LightGBM's 'tree' header")
    end = text.find("\nend of trees")
    if end < 0:
        raise _Bad("'end of trees' is missing (truncated?)")
    if not _TAIL.fullmatch(text, end + 1):
        raise _Bad("the text after 'end of trees' is not LightGBM's (feature importances, parameters, "
                   "pandas_categorical:null; truncated?)")
    trees = list(_TREE_LINE.finditer(text, 0, end + 1))
    if not trees:
        raise _Bad("no tree")
    if len(trees) > MAX_TREES:
        raise _Bad(f"{len(trees)} trees, more than {MAX_TREES}")
    for i, m in enumerate(trees):
        if m.group(1) != str(i):
            raise _Bad(f"tree {i} is numbered {m.group(1)}")
    sizes = _check_header(text[len("tree\n"):trees[0].start()], n_features, len(trees))
    starts = [m.start() for m in trees] + [end + 1]
    total = 0.0
    for i in range(len(trees)):
        got = starts[i + 1] - starts[i]   # bytes: the text is ASCII
        if sizes is not None and sizes[i] != got:
            raise _Bad(f"tree_sizes says tree {i} is {sizes[i]} bytes, its block is {got}")
        total += _check_tree(text[starts[i]:starts[i + 1]], i, n_features)
    if total > MAX_LEAF_SUM:
        raise _Bad(f"leaf values summing to {total:.3g}: predictions would overflow")
