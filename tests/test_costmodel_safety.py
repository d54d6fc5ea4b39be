"""A cost model file is data: its LightGBM trees are checked in Python (gemvtune.model.treecheck) before LightGBM's
C++ parses them. Without the check, LightGBM 4.x aborts (SIGABRT) on a tree whose arrays do not match its
num_leaves, a missing tree, a wrong tree_sizes or categorical splits without their arrays; crashes (SIGSEGV) on a
split on feature 2^31-1, a number of thousands of digits, a truncated text or a parameter line without its colon;
corrupts its heap under a multiclass objective; loops for ever in predict on a root that is its own child; and
silently reads out of range or predicts NaN on the rest. With it, each is one UsageError line, and the implicit
loaders (load_table with the model beside the table, a search's warm start, check --stale-only) warn in one line
and go on without it. Every load of a damaged model runs in a child process with a timeout, so that a regression
fails the test instead of killing pytest."""

import gzip
import json
import os
import re
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
from conftest import ROOT, run_cli

from gemvtune import Shape, UsageError

pytest.importorskip("lightgbm", reason="the cost model needs LightGBM (gemvtune[model])")

import lightgbm as lgb  # noqa: E402

from gemvtune.model import costmodel as cm  # noqa: E402
from gemvtune.model import features  # noqa: E402
from gemvtune.model.treecheck import check_model_text  # noqa: E402

COMMITTED = ROOT / "results" / "nvidia-h200" / "costmodel.json.gz"   # (gzip-compressed; load reads it)
TABLE = ROOT / "results" / "nvidia-h200" / "table.json"
SWEEPS = ROOT / "results" / "nvidia-h200" / "measurements"
N = len(features.columns())   # 51


def _fit(rounds=4, **params):
    rng = np.random.default_rng(0)
    X, y = rng.random((300, N)), rng.random(300)
    p = {"objective": "huber", "alpha": 0.05, "num_leaves": 7, "min_data_in_leaf": 5, "verbose": -1, "seed": 0,
         "deterministic": True, "num_threads": 1, **params}
    booster = lgb.train(p, lgb.Dataset(X, label=y, feature_name=cm._safe_names()), num_boost_round=rounds)
    return cm.CostModel(booster, "test GPU", 132, 4000.0, {}), X


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny real model (4 trees of 7 leaves on random 51-feature data) saved through CostModel.save."""
    path = tmp_path_factory.mktemp("model") / "costmodel.json"
    model, _ = _fit()
    model.save(path)
    return json.loads(path.read_text())


# ---- damage, each applied to the saved model's LightGBM text ----------------------------------------------------
def _sub_tree0(text, key, repl, fix_sizes=True):
    """Tree 0's line ``key=...`` replaced by ``repl(values)``; tree_sizes kept consistent (LightGBM seeks by it)."""
    a, b = text.index("Tree=0\n"), text.index("Tree=1\n")
    block = text[a:b]
    line = re.search(f"^{key}=(.*)$", block, re.M)
    new = block[:line.start(1)] + repl(line.group(1).split(" ")) + block[line.end(1):]
    text = text[:a] + new + text[b:]
    if not fix_sizes:
        return text
    sizes = re.search(r"^tree_sizes=(\d+)", text, re.M)
    return text[:sizes.start(1)] + str(int(sizes.group(1)) + len(new) - len(block)) + text[sizes.end(1):]


def _set(i, value):
    def repl(vals):
        vals = list(vals)
        vals[i] = value
        return " ".join(vals)
    return repl


def _drop_last_tree(text):
    return text[:text.rindex("Tree=")] + text[text.index("end of trees"):]


def _cr_hidden_line(text):
    """A CR hides a second split_feature line inside tree 0's is_linear line: Python's line split sees one line,
    LightGBM's two (and takes the hidden one)."""
    inner = int(re.search(r"^num_leaves=(\d+)$", text, re.M).group(1)) - 1
    return _sub_tree0(text, "is_linear", lambda v: "0\rsplit_feature=" + " ".join(["2147483647"] * inner))


DAMAGE = {
    "leaf_value shorter than num_leaves": lambda t: _sub_tree0(t, "leaf_value", lambda v: " ".join(v[:-3])),
    "split_feature shorter than num_leaves - 1": lambda t: _sub_tree0(t, "split_feature", lambda v: " ".join(v[:-1])),
    "a missing tree (tree_sizes lists more)": _drop_last_tree,
    "tree_sizes 7 bytes off": lambda t: re.sub(r"^tree_sizes=(\d+)", lambda m: f"tree_sizes={int(m.group(1)) + 7}",
                                               t, count=1, flags=re.M),
    "the root is its own child": lambda t: _sub_tree0(_sub_tree0(t, "left_child", _set(0, "0")), "right_child",
                                                      _set(0, "0")),
    "a node that is its own child": lambda t: _sub_tree0(t, "left_child", _set(3, "3")),
    "a child pointing backwards": lambda t: _sub_tree0(t, "right_child", _set(5, "1")),
    "a child past the nodes (2^31)": lambda t: _sub_tree0(t, "left_child", _set(0, "2147483648")),
    "a split on feature 2^31-1": lambda t: _sub_tree0(t, "split_feature", _set(0, "2147483647")),
    "a split on feature 51": lambda t: _sub_tree0(t, "split_feature", _set(0, "51")),
    "num_cat > 0": lambda t: _sub_tree0(t, "num_cat", lambda v: "3"),
    "a NaN leaf": lambda t: _sub_tree0(t, "leaf_value", _set(0, "nan")),
    "a 5000-digit number": lambda t: _sub_tree0(t, "left_child", _set(0, "1" * 5000)),
    "non-ASCII digits": lambda t: _sub_tree0(t, "left_child", _set(0, "\u0663")),
    "truncated text": lambda t: t[:len(t) // 2],
    "a parameter line without its colon": lambda t: t.replace("[boosting: gbdt]", "[boosting gbdt]", 1),
    "a multiclass objective": lambda t: t.replace("objective=huber", "objective=multiclass num_class:3", 1),
    "a CR hiding a line": _cr_hidden_line,
}

_LOAD = """
    from gemvtune.errors import UsageError
    from gemvtune.kernels.gemv import GemvConfig
    from gemvtune.kernels.shapes import Shape
    from gemvtune.model import costmodel
    try:
        m = costmodel.load({path!r})
        print("LOADED", m.predict_us([(GemvConfig(), Shape(4096, 4096)), (GemvConfig(), Shape(512, 3584))]))
    except UsageError as e:
        print("REFUSED", str(e).count(chr(10)), e)
"""


def _child(code, timeout=60):
    try:
        return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                              timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        pytest.fail("it hung (LightGBM looping on a damaged tree, or a read that never ends?)")


def _damaged(tiny, what, folder):
    data = dict(tiny, lightgbm=DAMAGE[what](tiny["lightgbm"]))
    p = folder / "costmodel.json"
    p.write_text(json.dumps(data))
    return p


@pytest.mark.parametrize("what", list(DAMAGE))
def test_a_damaged_model_is_one_line_never_a_crash(tiny, tmp_path, what):
    assert DAMAGE[what](tiny["lightgbm"]) != tiny["lightgbm"], what
    r = _child(_LOAD.format(path=str(_damaged(tiny, what, tmp_path))))
    assert r.returncode == 0, (what, r.returncode, r.stderr[-500:])      # not SIGABRT (-6) or SIGSEGV (-11)
    assert r.stdout.startswith("REFUSED 0 cost model "), (what, r.stdout[:300], r.stderr[-300:])
    assert "damaged" in r.stdout and "Traceback" not in r.stderr, (what, r.stdout[:300])


@pytest.mark.parametrize("damage", [
    ("max_feature_idx=50", "max_feature_idx=80"), ("num_class=1", "num_class=2"),
    ("num_tree_per_iteration=1", "num_tree_per_iteration=2"), ("\nend of trees", "\nend of treez"),
    ("pandas_categorical:null", "pandas_categorical:" + "[" * 100000)])
def test_a_damaged_header_or_tail_is_refused_by_the_checker(tiny, damage):
    text = tiny["lightgbm"]
    assert damage[0] in text
    with pytest.raises(UsageError, match="damaged") as e:
        check_model_text(text.replace(damage[0], damage[1], 1), N, "cost model x.json")
    assert "\n" not in str(e.value) and str(e.value).startswith("cost model x.json: ")


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_a_fifo_or_a_link_to_dev_zero_is_one_line_not_a_hang(tmp_path, kind):
    p = tmp_path / "costmodel.json"
    if kind == "fifo":
        os.mkfifo(p)
    else:
        p.symlink_to("/dev/zero")
    r = _child(_LOAD.format(path=str(p)), timeout=30)
    assert r.returncode == 0 and r.stdout.startswith("REFUSED 0 cost model "), (r.stdout, r.stderr[-300:])
    assert "not a regular file" in r.stdout


def _same_predictions(text, model_path, X):
    check_model_text(text, N, "ok")                                   # no exception
    m = cm.load(model_path)
    raw = lgb.Booster(model_str=text)                                 # LightGBM on the same text, unchecked
    assert m.booster.predict(X).tolist() == raw.predict(X).tolist()
    return m


def test_the_committed_model_and_fresh_ones_pass_and_predict_as_before(tmp_path):
    committed = json.loads(gzip.decompress(COMMITTED.read_bytes()))["lightgbm"]
    from gemvtune.kernels.gemv import GemvConfig

    pts = [(GemvConfig(), Shape(4096, 4096)), (GemvConfig(), Shape(14336, 4096, 4))]
    m = _same_predictions(committed, COMMITTED, features.frame(pts, 132).to_numpy())
    assert np.isfinite(m.predict_us(pts)).all()
    for params in ({}, {"min_data_in_leaf": 1000}):   # a fresh model; one whose every tree is a single leaf
        model, X = _fit(rounds=5, **params)
        model.save(tmp_path / "fresh.json")
        text = json.loads((tmp_path / "fresh.json").read_text())["lightgbm"]
        assert ("num_leaves=1\n" in text) == bool(params)
        loaded = _same_predictions(text, tmp_path / "fresh.json", X)
        assert loaded.booster.predict(X).tolist() == model.booster.predict(X).tolist()


# ---- the implicit loaders: a warning, never an error, and they go on without the model -------------------------
def _beside_table(tiny, what, folder):
    (folder / "table.json").write_text(TABLE.read_text())
    _damaged(tiny, what, folder)
    return folder / "table.json"


def test_load_table_with_a_crashing_model_beside_it_warns_once_and_runs_cublas(tiny, tmp_path):
    table = _beside_table(tiny, "a split on feature 2^31-1", tmp_path)
    r = _child(f"""
        import warnings
        from gemvtune.kernels.shapes import Shape
        from gemvtune.runtime.table import load_table
        t = load_table({str(table)!r})
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            print("PICK", t.predicted(Shape(4096, 12288)))   # a shape the table lacks: the model's pick, if any
            print("MODEL", t.costmodel)
        print("WARN", len(w), repr(str(w[0].message)) if w else "")
    """)
    assert r.returncode == 0, r.stderr[-500:]
    assert "PICK None" in r.stdout and "MODEL None" in r.stdout and "WARN 1 " in r.stdout, r.stdout
    assert "damaged" in r.stdout and "run cuBLAS" in r.stdout and "\\n" not in r.stdout, r.stdout


def test_load_table_with_a_fifo_beside_it_warns_and_goes_on(tmp_path):
    (tmp_path / "table.json").write_text(TABLE.read_text())
    os.mkfifo(tmp_path / "costmodel.json")
    r = _child(f"""
        import warnings
        from gemvtune.runtime.table import load_table
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            print("MODEL", load_table({str(tmp_path / "table.json")!r}).costmodel)
        print("WARN", len(w), w[0].message if w else "")
    """, timeout=30)
    assert "MODEL None" in r.stdout and "WARN 1 " in r.stdout and "FIFO" in r.stdout, (r.stdout, r.stderr[-300:])


def test_load_table_turns_any_failure_of_the_model_into_a_warning(tmp_path, monkeypatch):
    (tmp_path / "table.json").write_text(TABLE.read_text())
    (tmp_path / "costmodel.json").write_text("{}")

    def broken(path):
        raise OSError("libgomp.so.1: cannot open shared object file")
    monkeypatch.setattr(cm, "load", broken)
    from gemvtune.runtime.table import load_table

    t = load_table(tmp_path / "table.json")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert t.costmodel is None and t.predicted(Shape(4096, 12288)) is None
    assert len(w) == 1 and "libgomp" in str(w[0].message) and "run cuBLAS" in str(w[0].message)


def test_check_stale_only_with_a_looping_model_warns_in_one_line_and_goes_on(tiny, tmp_path):
    table = _beside_table(tiny, "the root is its own child", tmp_path)
    try:
        r = subprocess.run([sys.executable, "-m", "gemvtune", "check", "--table", str(table), "--stale-only"],
                           capture_output=True, text=True, timeout=90, cwd=ROOT)
    except subprocess.TimeoutExpired:
        pytest.fail("check --stale-only hung on a damaged cost model (LightGBM looping in predict)")
    assert r.returncode == 0 and "Traceback" not in r.stderr, (r.returncode, r.stderr[-500:])
    said = [line for line in r.stderr.splitlines() if "cost model" in line]
    assert len(said) == 1 and "damaged" in said[0] and "run cuBLAS" in said[0], r.stderr[-500:]
    assert "entries to re-tune" in r.stdout, r.stdout[-300:]


def test_a_search_warm_start_with_a_crashing_model_starts_from_its_seed(tiny, tmp_path):
    res = tmp_path / "res"
    res.mkdir()
    _damaged(tiny, "a split on feature 2^31-1", res)
    r = run_cli("search", "--shape", "4096x4096", "--replay", str(SWEEPS), "--trials", "3", "--results", str(res))
    assert r.returncode == 0, (r.returncode, r.stderr[-800:])
    said = [line for line in (r.stdout + r.stderr).splitlines() if "no warm start" in line]
    assert said and all("damaged" in line for line in said), (r.stdout + r.stderr)[-800:]


def test_warm_start_turns_any_failure_of_the_model_into_one_line(tmp_path, monkeypatch):
    from gemvtune.model.warm import warm_start

    (tmp_path / "costmodel.json").write_text("{}")

    def broken(path):
        raise RuntimeError("LightGBM said\nsomething on two lines")
    monkeypatch.setattr(cm, "load", broken)
    said = []
    assert warm_start(tmp_path / "costmodel.json", Shape(4096, 4096), ("gemv",), lambda f: {}, 4, said.append) is None
    assert len(said) == 1 and "no warm start" in said[0] and "\n" not in said[0] and "RuntimeError" in said[0]


def test_an_explicit_damaged_model_is_one_line_and_exit_2(tiny, tmp_path):
    p = _damaged(tiny, "a split on feature 2^31-1", tmp_path)
    r = run_cli("predict", "--shape", "4096x4096", "--model", str(p))
    assert r.returncode == 2 and "Traceback" not in r.stderr, (r.returncode, r.stderr[-500:])
    assert len(r.stderr.strip().splitlines()) == 1 and "damaged" in r.stderr, r.stderr


def test_a_damaged_cost_model_beside_a_table_is_one_warning_line_on_the_command_line(tmp_path):
    """check --stale-only still lists what it can, and the damaged model is one line on stderr, without Python's
    "file:line: UserWarning" prefix."""
    import shutil

    from conftest import ROOT, run_cli

    shutil.copy(ROOT / "results" / "nvidia-h200" / "table.json", tmp_path / "table.json")
    (tmp_path / "costmodel.json").write_text('{"not": "a model"}')
    r = run_cli("check", "--table", str(tmp_path / "table.json"), "--stale-only")
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("gemvtune: cost model"), r.stderr
    assert "UserWarning" not in r.stderr and "warnings.warn" not in r.stderr


def test_a_gzip_model_is_read_capped_and_a_bomb_or_a_truncated_one_is_one_line(tmp_path):
    """A cost model may be gzip-compressed (costmodel.json.gz: the committed H200 model is); decompression stops
    at the model cap (a gzip bomb is one line, never memory), and a truncated or non-gzip .gz is one line."""
    import gzip as gz

    from gemvtune.userfile import MODEL_BYTES

    m = cm.load(COMMITTED)
    assert m.sm_count > 0
    bomb = tmp_path / "bomb.json.gz"
    bomb.write_bytes(gz.compress(b" " * (MODEL_BYTES + 10), compresslevel=9))
    assert bomb.stat().st_size < 1_000_000
    with pytest.raises(UsageError, match="decompresses to more than"):
        cm.load(bomb)
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(COMMITTED.read_bytes()[:5000])
    with pytest.raises(UsageError, match="truncated gzip"):
        cm.load(cut)
    plain = tmp_path / "plain.json.gz"
    plain.write_text('{"format": "gemvtune-costmodel"}')
    with pytest.raises(UsageError, match="not a gzip file"):
        cm.load(plain)
    hidden = tmp_path / "costmodel.json"   # gzip bytes under a .json name: refused as binary, never guessed
    hidden.write_bytes(COMMITTED.read_bytes())
    with pytest.raises(UsageError, match="binary"):
        cm.load(hidden)


def test_save_writes_gzip_for_a_gz_name_and_it_loads_back_the_same(tmp_path):
    m = cm.load(COMMITTED)
    m.save(tmp_path / "m.json.gz")
    m.save(tmp_path / "m.json")
    raw = (tmp_path / "m.json.gz").read_bytes()
    assert raw[:2] == b"\x1f\x8b" and len(raw) < (tmp_path / "m.json").stat().st_size / 2
    import gzip as gz

    assert gz.decompress(raw) == (tmp_path / "m.json").read_bytes()
    from gemvtune.kernels.gemv import valid_configs

    pts = [(c, Shape(4096, 4096)) for c in valid_configs(Shape(4096, 4096))[:50]]
    assert np.array_equal(cm.load(tmp_path / "m.json.gz").predict_rel(pts), m.predict_rel(pts))
