"""A cost model file is data: its LightGBM trees are checked in Python (gemvtune.model.treecheck) before LightGBM's
C++ parses them. Without the check, each damaged model below aborts (SIGABRT), crashes (SIGSEGV), loops for ever
in predict, or reads out of range; with it, each is one UsageError, and the implicit loaders (load_table with the
model beside the table, a search's warm start, check --stale-only) warn in one line and go on without it. Every
load runs in a child process with a timeout, so that a regression fails the test instead of killing pytest."""

import json
import re
import subprocess
import sys
import textwrap

import pytest
from conftest import ROOT

pytest.importorskip("lightgbm", reason="the cost model needs LightGBM (gemvtune[model])")

MODEL = ROOT / "results" / "nvidia-h200" / "costmodel.json"
TABLE = ROOT / "results" / "nvidia-h200" / "table.json"


def _text():
    return json.loads(MODEL.read_text())["lightgbm"]


def _tree0(text):
    a = text.index("Tree=0\n")
    return a, text.index("Tree=1\n")


def _sub_tree0(text, key, repl):
    """Tree 0's line ``key=...`` replaced by ``repl(values)``; tree_sizes is kept consistent unless told."""
    a, b = _tree0(text)
    block = text[a:b]
    line = re.search(f"^{key}=(.*)$", block, re.M)
    new = block[:line.start(1)] + repl(line.group(1).split(" ")) + block[line.end(1):]
    sizes = re.search(r"^tree_sizes=(\d+)", text, re.M)
    text = text[:a] + new + text[b:]
    delta = len(new.encode()) - len(block.encode())
    return text[:sizes.start(1)] + str(int(sizes.group(1)) + delta) + text[sizes.end(1):]


def _children_self_loop(vals):
    vals = list(vals)
    vals[3] = "3"          # node 3 is its own child
    return " ".join(vals)


def _child_backwards(vals):
    vals = list(vals)
    vals[5] = "1"          # node 5 points back to node 1
    return " ".join(vals)


def _drop_last_tree(text):
    last = text.rindex("Tree=")
    end = text.index("end of trees")
    return text[:last] + text[end:]


DAMAGE = {
    "array shorter than num_leaves": lambda t: _sub_tree0(t, "leaf_value", lambda v: " ".join(v[:-5])),
    "split_feature shorter": lambda t: _sub_tree0(t, "split_feature", lambda v: " ".join(v[:-1])),
    "missing tree (tree_sizes lists more)": _drop_last_tree,
    "tree_sizes wrong": lambda t: re.sub(r"^tree_sizes=(\d+)", lambda m: f"tree_sizes={int(m.group(1)) + 7}", t,
                                         count=1, flags=re.M),
    "a node that is its own child": lambda t: _sub_tree0(t, "left_child", _children_self_loop),
    "a child pointing backwards": lambda t: _sub_tree0(t, "right_child", _child_backwards),
    "split on feature 2^31-1": lambda t: _sub_tree0(t, "split_feature", lambda v: " ".join(["2147483647", *v[1:]])),
    "split on feature 51": lambda t: _sub_tree0(t, "split_feature", lambda v: " ".join(["51", *v[1:]])),
    "categorical splits": lambda t: _sub_tree0(t, "num_cat", lambda v: "3"),
    "a NaN leaf": lambda t: _sub_tree0(t, "leaf_value", lambda v: " ".join(["nan", *v[1:]])),
    "a 5000-digit number": lambda t: _sub_tree0(t, "left_child", lambda v: " ".join(["1" * 5000, *v[1:]])),
    "non-ASCII digits": lambda t: _sub_tree0(t, "left_child", lambda v: " ".join(["٣", *v[1:]])),
    "truncated": lambda t: t[:len(t) // 2],
    "max_feature_idx wrong": lambda t: t.replace("max_feature_idx=50", "max_feature_idx=80", 1),
}


def _load_in_child(path, code=None, timeout=90):
    code = code or f"""
        from gemvtune.errors import UsageError
        from gemvtune.model import costmodel
        try:
            m = costmodel.load({str(path)!r})
            import numpy as np
            from gemvtune.kernels.gemv import GemvConfig
            from gemvtune.kernels.shapes import Shape
            print("LOADED", m.predict_us([(GemvConfig(), Shape(4096, 4096))]))
        except UsageError as e:
            print("REFUSED", str(e).count(chr(10)), e)
    """
    try:
        return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                              timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        pytest.fail("loading the model hung (LightGBM looping on a damaged tree?)")


@pytest.mark.parametrize("what", sorted(DAMAGE))
def test_a_damaged_model_is_one_line_never_a_crash(tmp_path, what):
    data = json.loads(MODEL.read_text())
    data["lightgbm"] = DAMAGE[what](data["lightgbm"])
    p = tmp_path / "costmodel.json"
    p.write_text(json.dumps(data))
    r = _load_in_child(p)
    assert r.returncode == 0, (what, r.returncode, r.stderr[-500:])      # not SIGABRT (-6) or SIGSEGV (-11)
    assert r.stdout.startswith("REFUSED 0 "), (what, r.stdout[:300], r.stderr[-300:])
    assert "cost model" in r.stdout and "Traceback" not in r.stderr


def test_the_committed_model_and_a_fresh_one_pass_and_predict_as_before(tmp_path):
    import lightgbm as lgb

    from gemvtune.model import costmodel, features
    from gemvtune.model.treecheck import check_model_text

    check_model_text(_text(), len(features.columns()), "committed")
    m = costmodel.load(MODEL)
    raw = lgb.Booster(model_str=_text())                                   # LightGBM on the same text, unchecked
    from gemvtune.kernels.gemv import GemvConfig
    from gemvtune.kernels.shapes import Shape

    pts = [(GemvConfig(), Shape(4096, 4096)), (GemvConfig(), Shape(14336, 4096, 4))]
    X = features.frame(pts, m.sm_count).to_numpy()
    assert list(m.booster.predict(X)) == list(raw.predict(X))
    import numpy as np

    rng = np.random.default_rng(0)
    n = len(features.columns())
    booster = lgb.train({"objective": "regression", "verbose": -1, "num_leaves": 7, "min_data_in_leaf": 2},
                        lgb.Dataset(rng.random((200, n)), label=rng.random(200)), num_boost_round=5)
    check_model_text(booster.model_to_string(), n, "fresh")


def _with_model(tmp_path, damage):
    (tmp_path / "table.json").write_text(TABLE.read_text())
    data = json.loads(MODEL.read_text())
    data["lightgbm"] = DAMAGE[damage](data["lightgbm"])
    (tmp_path / "costmodel.json").write_text(json.dumps(data))
    return tmp_path / "table.json"


def test_load_table_with_a_crashing_model_beside_it_warns_and_runs_cublas(tmp_path):
    table = _with_model(tmp_path, "split on feature 2^31-1")
    r = _load_in_child(None, code=f"""
        import warnings
        from gemvtune.runtime.table import load_table
        t = load_table({str(table)!r})
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            print("MODEL", t.costmodel)
        print("WARN", len(w), w[0].message if w else "")
    """)
    assert r.returncode == 0, r.stderr[-500:]
    assert "MODEL None" in r.stdout and "WARN 1 " in r.stdout and "run cuBLAS" in r.stdout, r.stdout


def test_check_stale_only_with_a_looping_model_warns_and_goes_on(tmp_path):
    table = _with_model(tmp_path, "a node that is its own child")
    try:
        r = subprocess.run([sys.executable, "-m", "gemvtune", "check", "--table", str(table), "--stale-only"],
                           capture_output=True, text=True, timeout=120, cwd=ROOT)
    except subprocess.TimeoutExpired:
        pytest.fail("check --stale-only hung on a damaged cost model")
    assert r.returncode in (0, 1) and "Traceback" not in r.stderr, (r.returncode, r.stderr[-500:])
    assert "damaged" in r.stderr, r.stderr[-500:]


def test_a_search_warm_start_with_a_damaged_model_starts_from_its_seed(tmp_path):
    res = tmp_path / "res"
    res.mkdir()
    _with_model(res, "split on feature 51")
    (res / "table.json").unlink()
    r = subprocess.run([sys.executable, "-m", "gemvtune", "search", "--shape", "4096x4096", "--replay",
                        str(ROOT / "results" / "nvidia-h200" / "sweeps"), "--trials", "3", "--results", str(res)],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-800:]
    assert "no warm start" in r.stdout + r.stderr and "damaged" in r.stdout + r.stderr
