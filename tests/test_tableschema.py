"""Issue 17, item 6: ``load_table`` checks the whole schema at load (types, ranges, finite positive times,
configs valid for their shape, baselines, gpu fields): a bad table is one UsageError naming the entry and
the field; a table it accepts never crashes ``report``, ``export`` or the run-time route."""

import copy
import json
import math
import subprocess

import pytest
from conftest import ROOT, run_cli

from gemvtune import Shape, UsageError
from gemvtune.reports.tablereport import table_frame, table_summary
from gemvtune.runtime.export import build_header
from gemvtune.runtime.route import choose
from gemvtune.runtime.table import load_table
from gemvtune.transition.crossover import crossover_frame

TABLE = ROOT / "results" / "nvidia-h200" / "table.json"
GEMV_KEY, SK_KEY = "1024x16384x2", "1024x16384x4"   # a gemv winner with a splitk best; a splitk winner


def test_the_committed_table_still_has_the_entries_these_cases_edit():
    """The cases below edit two entries of the committed table; a search that changes their winners must
    move the keys (the ring family's search of 2026-12-02 turned 4096x4096 n = 2 and 8 into ring winners)."""
    entries = json.loads(TABLE.read_text())["entries"]
    assert entries[GEMV_KEY]["winner"].get("family", "gemv") == "gemv" and "splitk" in entries[GEMV_KEY]
    assert entries[GEMV_KEY]["winner"]["config"]["block"] < 1024     # (so tpr = 1024 exceeds it below)
    assert entries[SK_KEY]["winner"].get("family") == "splitk"


def _base() -> dict:
    data = json.loads(TABLE.read_text())
    data["entries"] = {k: data["entries"][k] for k in (GEMV_KEY, SK_KEY)}
    return data


def _set(path: str, value):
    """A mutation: set the dotted ``path`` (list indices as numbers) of the table to ``value``."""
    def f(d):
        *head, last = path.split(".")
        for p in head:
            d = d[int(p)] if isinstance(d, list) else d[p]
        if isinstance(d, list):
            d[int(last)] = value
        else:
            d[last] = value
    return f


def _del(path: str):
    def f(d):
        *head, last = path.split(".")
        for p in head:
            d = d[int(p)] if isinstance(d, list) else d[p]
        del d[last]
    return f


G, S = f"entries.{GEMV_KEY}", f"entries.{SK_KEY}"
NAN, INF = float("nan"), float("inf")

# (id, mutation, entry named in the error (None: a table-level field), needle)
BAD = [
    ("winner us NaN", _set(f"{G}.winner.us", NAN), GEMV_KEY, "winner.us is nan"),
    ("winner us negative", _set(f"{G}.winner.us", -3.5), GEMV_KEY, "winner.us is -3.5; expected a positive"),
    ("winner us inf", _set(f"{G}.winner.us", INF), GEMV_KEY, "winner.us is inf"),
    ("winner us zero", _set(f"{G}.winner.us", 0), GEMV_KEY, "winner.us is 0"),
    ("winner us a string", _set(f"{G}.winner.us", "9.5"), GEMV_KEY, "winner.us must be a number, got str"),
    ("winner us true", _set(f"{G}.winner.us", True), GEMV_KEY, "winner.us must be a number, got bool"),
    ("winner us_min negative", _set(f"{G}.winner.us_min", -1.0), GEMV_KEY, "winner.us_min"),
    ("winner us_max NaN", _set(f"{G}.winner.us_max", NAN), GEMV_KEY, "winner.us_max is nan"),
    ("winner gbps inf", _set(f"{G}.winner.gbps", INF), GEMV_KEY, "winner.gbps is inf"),
    ("winner pct_ceiling negative", _set(f"{G}.winner.pct_ceiling", -5), GEMV_KEY, "winner.pct_ceiling"),
    ("winner label a number", _set(f"{G}.winner.label", 7), GEMV_KEY, "winner.label must be a string"),
    ("winner missing", _del(f"{G}.winner"), GEMV_KEY, "winner is missing"),
    ("winner a list", _set(f"{G}.winner", [1]), GEMV_KEY, "winner must be a JSON object"),
    ("winner config missing", _del(f"{G}.winner.config"), GEMV_KEY, "winner.config is missing"),
    ("winner config a string", _set(f"{G}.winner.config", "b256"), GEMV_KEY, "winner.config must be a JSON object"),
    ("winner tpr > block", _set(f"{G}.winner.config.tpr", 1024), GEMV_KEY, "tpr=1024 threads per row exceed"),
    ("winner config unknown parameter", _set(f"{G}.winner.config.colour", "red"), GEMV_KEY,
     "winner.config is not a config"),
    ("winner config tpr a string", _set(f"{G}.winner.config.tpr", "256"), GEMV_KEY, "winner.config is not a config"),
    ("winner family unknown", _set(f"{G}.winner.family", "gemm"), GEMV_KEY, "unknown family"),
    ("gemv best us NaN", _set(f"{G}.gemv.us", NAN), GEMV_KEY, "gemv.us is nan"),
    ("splitk best us negative", _set(f"{S}.splitk.us", -2.0), SK_KEY, "splitk.us is -2.0"),
    ("gemv best holds a splitk config", lambda d: d["entries"][SK_KEY].__setitem__(
        "gemv", copy.deepcopy(d["entries"][SK_KEY]["splitk"])), SK_KEY, "gemv.family is 'splitk'"),
    ("splitk best config invalid", _set(f"{S}.splitk.config.mt", 3), SK_KEY, "splitk.config is not a config"),
    ("candidate us_max inf", _set(f"{G}.candidates.0.us_max", INF), GEMV_KEY, "candidates[0].us_max is inf"),
    ("candidates not a list", _set(f"{G}.candidates", {"a": 1}), GEMV_KEY, "candidates must be a list"),
    ("candidate config tpr > block", _set(f"{G}.candidates.1.config.tpr", 1024), GEMV_KEY,
     "candidates[1].config"),
    ("baseline us negative", _set(f"{G}.baselines.cublas.us", -1.0), GEMV_KEY, "baselines.cublas.us is -1.0"),
    ("baseline us NaN", _set(f"{G}.baselines.cublas-torch.us", NAN), GEMV_KEY, "baselines.cublas-torch.us is nan"),
    ("baseline a list", _set(f"{G}.baselines.cublas-torch", [47.2]), GEMV_KEY,
     "baselines.cublas-torch must be a JSON object, got list"),
    ("baseline a number", lambda d: d["entries"][GEMV_KEY]["baselines"].__setitem__("llama.cpp", 42.0), GEMV_KEY, "must be a JSON object, got float"),
    ("baselines a list", _set(f"{G}.baselines", [1, 2]), GEMV_KEY, "baselines must be a JSON object"),
    ("baseline status a number", _set(f"{G}.baselines.cublas.status", 0), GEMV_KEY,
     "baselines.cublas.status must be a string"),
    ("baseline ok without a time", _del(f"{G}.baselines.cublas.us"), GEMV_KEY, "baselines.cublas.us is missing"),
    ("baseline us a string", _set(f"{G}.baselines.cublas.us", "fast"), GEMV_KEY, "must be a number, got str"),
    ("entry a list", _set(G, [1, 2]), GEMV_KEY, "entry must be a JSON object, got list"),
    ("entry a string", _set(G, "4096x4096"), GEMV_KEY, "entry must be a JSON object, got str"),
    ("M a string", _set(f"{G}.M", "4096"), GEMV_KEY, "M must be an integer, got str"),
    ("d a float", _set(f"{G}.d", 4096.0), GEMV_KEY, "d must be an integer, got float"),
    ("n zero", _set(f"{G}.n", 0), GEMV_KEY, "n is 0; expected a positive"),
    ("n above 16", _set(f"{G}.n", 17), GEMV_KEY, "above the supported 16"),
    ("key does not match the shape", _set(f"{G}.M", 2048), GEMV_KEY, "does not match its M, d, n"),
    ("search trials a string", _set(f"{G}.search.measured_trials", "60"), GEMV_KEY,
     "search.measured_trials must be an integer"),
    ("search replayed a string", _set(f"{G}.search.replayed", "no"), GEMV_KEY, "search.replayed must be true or false"),
    ("search a list", _set(f"{G}.search", ["tpe"]), GEMV_KEY, "search must be a JSON object"),
    ("tie a string", _set(f"{G}.tie", "no"), GEMV_KEY, "tie must be true or false"),
    ("updated a number", _set(f"{G}.updated", 20261129), GEMV_KEY, "updated must be a string"),
    ("gpu a string", _set("gpu", "NVIDIA H200"), None, "gpu must be a JSON object"),
    ("gpu missing", _del("gpu"), None, "gpu must be a JSON object, got null"),
    ("gpu sm_count a string", _set("gpu.sm_count", "132"), None, "gpu.sm_count must be an integer"),
    ("gpu name a number", _set("gpu.name", 200), None, "gpu.name must be a string"),
    ("gpu name a dict", _set("gpu.name", {"a": 1}), None, "gpu.name must be a string or a number"),
    ("gpu compute capability code", _set("gpu.compute_capability", "9.0\n#x"), None, "gpu.compute_capability"),
    ("ceiling read_gbps a string", _set("ceiling.read_gbps", "fast"), None, "ceiling.read_gbps must be a number"),
    ("ceiling read_gbps null", _set("ceiling.read_gbps", None), None, "ceiling.read_gbps is null"),
    ("ceiling read_gbps NaN", _set("ceiling.read_gbps", NAN), None, "ceiling.read_gbps is nan"),
    ("ceiling a list", _set("ceiling", [4500]), None, "ceiling must be a JSON object"),
    ("schema true", _set("schema", True), None, "schema must be an integer"),
]


def _write(tmp_path, mutate, name="t.json"):
    data = _base()
    mutate(data)
    p = tmp_path / name
    p.write_text(json.dumps(data))   # NaN / Infinity as Python's json writes them (and reads them back)
    return p


@pytest.mark.parametrize("what,mutate,key,needle", BAD, ids=[b[0] for b in BAD])
def test_bad_table_is_one_clear_error(tmp_path, what, mutate, key, needle):
    p = _write(tmp_path, mutate)
    with pytest.raises(UsageError) as e:
        load_table(p)
    msg = str(e.value)
    assert "\n" not in msg and needle in msg, msg
    assert msg.startswith(f"table {p}: ")
    if key is not None:
        assert f"entry {key} is malformed: " in msg, msg


@pytest.mark.parametrize("what,mutate,key,needle", [BAD[i] for i in (0, 15, 28, 34, 36)],
                         ids=[BAD[i][0] for i in (0, 15, 28, 34, 36)])
def test_bad_table_on_the_command_line(tmp_path, what, mutate, key, needle):
    """report and export: one line on stderr, exit 2, nothing written."""
    p = _write(tmp_path, mutate)
    for args in (["report", "--table", str(p)], ["export", "--table", str(p), "--out", str(tmp_path / "g.cuh")]):
        r = run_cli(*args)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert r.returncode == 2 and len(lines) == 1 and needle in lines[0], (args, r.stderr)
        assert "Traceback" not in r.stderr and not (tmp_path / "g.cuh").exists()


# Tables the schema accepts that hold less than a search writes (hand-made, older, failed baselines):
# report, export, crossover and the route must all work on them.
GOOD = [
    ("winner with only a config", lambda d: d["entries"][GEMV_KEY].__setitem__(
        "winner", {"config": d["entries"][GEMV_KEY]["winner"]["config"]})),
    ("optional numbers null", lambda d: d["entries"][GEMV_KEY]["winner"].update(gbps=None, pct_ceiling=None, spread=None)),
    ("no baselines", _del(f"{G}.baselines")),
    ("empty baselines", _set(f"{G}.baselines", {})),
    ("failed baselines", _set(f"{G}.baselines", {"cublas": {"status": "launch_error", "error": "boom"},
                                                 "cublas-torch": {"status": "missing", "error": ""},
                                                 "llama.cpp": {"status": "wrong", "error": "x"}})),
    ("no search, no candidates, no tie", lambda d: [d["entries"][GEMV_KEY].pop(k) for k in ("search", "candidates", "tie")]),
    ("family bests without configs", lambda d: d["entries"][SK_KEY].update(
        gemv={"label": "x", "us": 10.0}, splitk={"label": "y", "us": 9.0})),
    ("no n (n = 1)", lambda d: d["entries"].__setitem__(GEMV_KEY.rsplit("x", 1)[0] + "x1", {
        k: v for k, v in d["entries"].pop(GEMV_KEY).items() if k != "n"})),
    ("empty gpu and no ceiling", lambda d: (d.__setitem__("gpu", {}), d.pop("ceiling"))),
    ("no entries", _set("entries", {})),
    ("hostile strings", lambda d: (d["gpu"].update(name="\x1b[2J\n#include <cstdlib>", driver="5\n80"),
                                   d["entries"][GEMV_KEY]["winner"].update(label="\x1b]0;pwn\x07\n#define x"),
                                   d["entries"][GEMV_KEY]["search"].update(sampler="tpe\x1b[31m\n#include"))),
]


@pytest.mark.parametrize("what,mutate", GOOD, ids=[g[0] for g in GOOD])
def test_accepted_tables_never_crash_report_export_or_route(tmp_path, what, mutate):
    t = load_table(_write(tmp_path, mutate))
    text = table_summary(t)
    assert "\x1b" not in text and not any(ln.lstrip().startswith("#") for ln in text.splitlines())
    df = table_frame(t)
    assert len(df) == len(t.data["entries"])
    header = build_header(t)
    assert header.isascii() and "#include <cstdlib>" not in header and "#define x" not in header
    crossover_frame(t)
    for key in t.keys():
        s = Shape(*key)
        for fw in ("torch", "cupy"):
            for out in ("fp32", s.dtype):
                for policy in ("fastest", "tuned"):
                    r = choose(t, s.M, s.d, s.n, fw, policy, out, s.dtype, s.weights)
                    assert r.kind in ("tuned", "cublas")
                    assert r.tuned_us is None or (math.isfinite(r.tuned_us) and r.tuned_us > 0)


@pytest.mark.parametrize("what,mutate", [GOOD[0], GOOD[4]], ids=[GOOD[0][0], GOOD[4][0]])
def test_accepted_tables_on_the_command_line(tmp_path, what, mutate):
    p = _write(tmp_path, mutate)
    for args in (["report", "--table", str(p), "--csv", str(tmp_path / "r.csv"), "--crossover", str(tmp_path / "x")],
                 ["export", "--table", str(p), "--out", str(tmp_path / "g.cuh")]):
        r = run_cli(*args)
        assert r.returncode == 0 and "Traceback" not in r.stderr, (args, r.stderr)


def test_every_committed_table_loads():
    paths = subprocess.run(["git", "ls-files", "*table.json"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    paths += [str(p.relative_to(ROOT)) for p in (ROOT / "tests" / "data").rglob("*.json")
              if "entries" in p.read_text() and "schema" in p.read_text()]
    assert "results/nvidia-h200/table.json" in paths
    for p in paths:
        t = load_table(ROOT / p)
        assert len(t.shapes) == len(t.data["entries"]) >= 1
        table_summary(t)
        build_header(t)
