"""The whole-model tune (gemvtune tune; gemvtune.tune(..., budget=...)) on the committed H200 sweeps through the
replay runner: it stays inside its budget, writes a valid table, resumes after an interrupt and after a kill, and
bad input is one line."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from conftest import ROOT

import gemvtune
from gemvtune import Shape, UsageError
from gemvtune.runners.replay import ReplayRunner
from gemvtune.tuning.search_options import SearchOptions
from gemvtune.tuning.tunemodel import model_steps
from gemvtune.tuning.tunerun import Step, run_tune
from gemvtune.tuning.tunestate import NAME, load_state

SWEEPS = ROOT / "results" / "nvidia-h200" / "measurements"
SHAPES = ["4096x4096", "6144x4096"]


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "gemvtune", *args], capture_output=True, text=True, timeout=600,
                          cwd=cwd)


def test_a_budgeted_tune_ends_inside_its_budget_and_writes_a_valid_table(tmp_path):
    table = gemvtune.tune(SHAPES, replay=SWEEPS, results=tmp_path, budget="20s")
    assert {(s.M, s.d, s.n) for s in table.shapes} == {(4096, 4096, 1), (6144, 4096, 1)}
    state = json.loads((tmp_path / NAME).read_text())
    assert state["spent_s"] <= 20 and sorted(state["done"])   # by the tune's own clock, kept in its state == ["4096x4096x1", "6144x4096x1"]
    for s in table.shapes:
        e = table.entry(s)
        budgets = e.search.family_budgets
        assert budgets and sum(budgets.values()) >= e.search.measured_trials > 0   # the plan's split, honoured
    from gemvtune.runtime.tableschema import validate_table

    assert len(validate_table(json.loads((tmp_path / "table.json").read_text()), tmp_path / "table.json")) == 2


class _Interrupting(ReplayRunner):
    """A replay runner that is interrupted (Ctrl-C) at the first measurement of ``shape``."""

    def __init__(self, path, shape):
        super().__init__(path)
        self.stop_at = shape

    def measure(self, config, shape, *a, **kw):
        if shape == self.stop_at:
            raise KeyboardInterrupt
        return super().measure(config, shape, *a, **kw)


def _steps():
    return [Step(Shape(4096, 4096), 32.0), Step(Shape(6144, 4096), 32.0)]


def test_an_interrupted_tune_resumes_where_it_stopped(tmp_path):
    opts = SearchOptions(families=("gemv",), progress=False)
    key = {"test": 1}
    runner = _Interrupting(str(SWEEPS), Shape(6144, 4096))
    first = None
    with pytest.raises(KeyboardInterrupt):
        run_tune(runner, _steps(), 30.0, opts, tmp_path, tmp_path / "table.json", echo=lambda s: None, key=key,
                 reconfirm=False)
    state, how = load_state(tmp_path / NAME, key, 30.0)
    assert how == "resumed" and state.done == ["4096x4096x1"] and 0 < state.spent_s < 30
    first = state.spent_s
    lines: list[str] = []
    res = run_tune(ReplayRunner(str(SWEEPS)), _steps(), 30.0, opts, tmp_path, tmp_path / "table.json",
                   echo=lines.append, key=key, reconfirm=False)
    assert res.searched == [Shape(6144, 4096)]                        # the first shape is not searched again
    assert res.skipped == {"4096x4096x1": "done earlier in this tune"}
    assert res.state.spent_s > first and res.state.resumed == 1
    assert any("resumed" in line for line in lines)
    # other settings: another tune, started afresh
    _, how = load_state(tmp_path / NAME, {"test": 2}, 30.0)
    assert how.startswith("another tune")


def test_a_killed_tune_resumes_from_its_state_and_journal(tmp_path):
    args = ["tune", "--shape", "4096x4096", "--shape", "6144x4096", "--shape", "14336x4096", "--replay", str(SWEEPS),
            "--results", str(tmp_path), "--budget", "60s", "--family", "gemv"]
    p = subprocess.Popen([sys.executable, "-m", "gemvtune", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    state = tmp_path / NAME
    t0 = time.monotonic()
    while time.monotonic() - t0 < 120 and p.poll() is None:
        if state.is_file() and len(json.loads(state.read_text() or "{}").get("done", [])) == 1:
            break
        time.sleep(0.02)
    killed = p.poll() is None
    if killed:
        os.kill(p.pid, signal.SIGKILL)
    p.communicate(timeout=60)
    done = json.loads(state.read_text())["done"]
    r = _cli(*args)
    assert r.returncode == 0, r.stderr
    assert "resumed" in r.stdout
    final = json.loads(state.read_text())
    assert final["done"][:len(done)] == done and len(final["done"]) == 3
    table = gemvtune.load_table(tmp_path / "table.json", costmodel=None)
    assert len(table.shapes) == 3


def test_zero_budget_weighs_the_tables_route_without_searching(tmp_path):
    # a copy of the committed table with its cost model beside it (on a GPU the measurement writes beside the table)
    with_model, without = tmp_path / "with", tmp_path / "without"
    for d in (with_model, without):
        d.mkdir()
        shutil.copy(ROOT / "results" / "nvidia-h200" / "table.json", d / "table.json")
    shutil.copy(ROOT / "results" / "nvidia-h200" / "costmodel.json.gz", with_model / "costmodel.json.gz")
    out = tmp_path / "out"
    r = _cli("tune", "--shape", "5000x4096", "--shape", "4096x4096", "--batch", "1,3", "--budget", "0",
             "--table", str(with_model / "table.json"), "--results", str(out))
    assert r.returncode == 0, r.stderr
    assert "nothing searched" in r.stdout and "predicted x" in r.stdout and "routes: " in r.stdout
    assert not out.exists()                                           # nothing written
    if importlib.util.find_spec("lightgbm") is not None:              # the cost model beside the table
        assert "(its cost model's zero-trial picks where it lacks a 16-bit shape)" in r.stdout
        assert "to a zero-trial pick" in r.stdout                     # 5000x4096 n = 1: predicted well clear
    # a copy of the table without its cost model: no zero-trial picks, said so (on the H200, 2026-12-05, such a copy
    # routed three unseen models wholly to cuBLAS under a line that named the cost model's picks)
    r = _cli("tune", "--shape", "5000x4096", "--batch", "1", "--budget", "0", "--table", str(without / "table.json"))
    assert r.returncode == 0, r.stderr
    assert "no cost model loaded (none beside it, costmodel.json[.gz], or no LightGBM): the 16-bit shapes it lacks " \
           "run cuBLAS)" in r.stdout
    assert "routes: 1 to cuBLAS" in r.stdout and "zero-trial pick" not in r.stdout.split("routes: ")[1]
    # FP8 weights the table lacks follow the FP8 route's rule, model or not
    r = _cli("tune", "--shape", "5000x4096", "--batch", "1", "--weights", "e4m3-row", "--budget", "0",
             "--table", str(without / "table.json"))
    assert r.returncode == 0, r.stderr
    assert "; the FP8 shapes it lacks follow the FP8 route's rule)" in r.stdout


@pytest.mark.parametrize("args,needle", [
    (["--shape", "4096x4096", "--budget", "5 parsecs"], "malformed budget"),
    (["--shape", "4096x4096", "--budget", "0s"], "is 0 s"),
    (["--shape", "4096x4096", "--budget", "-3"], "malformed budget"),
    (["--shape", "4096x4096", "--tp", "2"], "--tp shards a model"),
    (["--shape", "4096x4096", "--fused"], "--fused picks"),
    (["--budget", "5m"], "tune needs"),
    (["--shape", "4096x4096", "--budget", "0", "--replay", str(SWEEPS)], "--budget 0 with --replay"),
    (["--shape", "4096xx4096"], "malformed shape"),
    (["--shape", "4096x4096", "--batch", "17"], "outside 1..16"),
])
def test_bad_input_is_one_line_and_exit_2(args, needle):
    r = _cli("tune", *args)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert needle in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_a_state_file_that_is_not_a_tune_state_is_refused_and_kept(tmp_path):
    (tmp_path / NAME).write_text('{"format": "something else"}')
    r = _cli("tune", "--shape", "4096x4096", "--replay", str(SWEEPS), "--results", str(tmp_path), "--budget", "10")
    assert r.returncode == 2 and "not a gemvtune tune state" in r.stderr
    assert json.loads((tmp_path / NAME).read_text()) == {"format": "something else"}


def test_model_steps_count_every_launch_of_a_step():
    steps = model_steps(model="llama-3-8b", batches=[1, 4])
    by = {(s.shape.M, s.shape.d, s.shape.n): s for s in steps}
    assert by[(4096, 4096, 1)].calls == 64          # q_proj and o_proj, 32 layers each
    assert by[(14336, 4096, 4)].calls == 64         # gate_proj and up_proj
    assert by[(128256, 4096, 1)].calls == 1         # the LM head, once a step
    with pytest.raises(UsageError, match="tune needs"):
        model_steps()


def test_a_terminal_shows_the_budget_left(monkeypatch, tmp_path):
    import io

    class TTY(io.StringIO):
        def isatty(self):
            return True

    tty = TTY()
    monkeypatch.setattr(sys, "stderr", tty)
    run_tune(ReplayRunner(str(SWEEPS)), _steps(), 30.0, SearchOptions(families=("gemv",)), tmp_path,
             tmp_path / "table.json", echo=lambda s: None, key={"tty": 1}, reconfirm=False)
    shown = tty.getvalue()
    assert "tune (budget)" in shown and "s left" in shown and "shapes to go" in shown


def test_two_tables_side_by_side_flag_the_slower_route(tmp_path):
    from fakes import FakeRunner

    from gemvtune.runtime.table import load_table
    from gemvtune.tuning.against import side_by_side
    from gemvtune.tuning.search_run import run_searches
    from gemvtune.workspace import writable_dir

    shape = Shape(4096, 4096)
    paths = {}
    for name, trials in (("few", 1), ("many", 40)):   # one trial: the seed alone (a slower kernel)
        opts = SearchOptions(families=("gemv",), trials=trials, progress=False, storage="memory:", warm_k=0)
        paths[name] = run_searches(FakeRunner(), [shape], opts, str(tmp_path / name), None, echo=lambda s: None,
                                   writable=writable_dir)
    few, many = (load_table(paths[k], costmodel=None) for k in ("few", "many"))
    runner = FakeRunner()
    rows, total = side_by_side(runner, few, many, [shape], rounds=2, weights={shape: 32.0}, echo=lambda s: None)
    (row,) = rows
    assert row["ratio"] > 1.02 and "against the other table" in row["flags"]
    assert row["table_spread"] >= 0 and row["against_spread"] >= 0   # each side's rounds: (max - min) / median
    assert total["table_us"] == pytest.approx(32 * row["table_us"]) and not total["within"]
    lines: list[str] = []
    rows, total = side_by_side(runner, many, many, [shape], rounds=2, echo=lines.append)
    assert rows[0]["ratio"] == pytest.approx(1.0) and not rows[0]["flags"] and total["within"]
    assert f"(rounds' spreads {100 * rows[0]['table_spread']:.1f}% + {100 * rows[0]['against_spread']:.1f}%)" in lines[0]


def test_a_tune_is_compared_on_every_step_shape_either_table_holds(tmp_path):
    """A shape the tune left on cuBLAS where the other table holds a kernel is measured (the tune's side: cuBLAS), not
    left out of the comparison (the H200 8B tune of 2026-12-05 compared only the 12 shapes both tables held)."""
    from fakes import FakeRunner

    from gemvtune.tuning.search_run import run_searches
    from gemvtune.tuning.tunemodel import compare
    from gemvtune.workspace import writable_dir

    s1, s2, s3 = Shape(4096, 4096), Shape(1024, 4096), Shape(6144, 4096)
    paths = {}
    for name, shapes in (("tune", [s1]), ("other", [s1, s2])):
        opts = SearchOptions(families=("gemv",), trials=20, progress=False, storage="memory:", warm_k=0)
        paths[name] = run_searches(FakeRunner(), shapes, opts, str(tmp_path / name), None, echo=lambda s: None,
                                   writable=writable_dir)
    echoed: list[str] = []
    (line,) = compare(FakeRunner(), paths["tune"], paths["other"], [Step(s1, 32.0), Step(s2, 32.0), Step(s3, 32.0)],
                      echoed.append)
    assert "the 2 of the step's 3 shapes either table holds" in echoed[0]
    (row2,) = [ln for ln in echoed if ln.split()[0] == str(s2)]
    assert row2.split()[1] == "cublas"                      # the tune's route for the shape it lacks
    assert "those 2 shapes" in line
    assert compare(FakeRunner(), paths["tune"], paths["other"], [Step(s3, 32.0)], echoed.append) == [
        f"against {paths['other']}: neither table holds a shape of the step (both run cuBLAS)"]


def test_model_steps_of_tensor_parallel_shards():
    steps = {(s.shape.M, s.shape.d, s.shape.n): s for s in model_steps(model="llama-3-70b", batches=[1, 8], tp=8)}
    assert steps[(3584, 8192, 8)].calls == 160      # gate and up: 28672 / 8 rows, 80 layers each
    assert steps[(8192, 3584, 1)].calls == 80       # down: 28672 / 8 columns
    with pytest.raises(UsageError):
        model_steps(model="llama-3-70b", tp=3)      # 64 heads, 8 KV heads: 3 divides neither


def test_another_gpus_plan_rests_on_the_shipped_model_at_its_own_floor(tmp_path):
    pytest.importorskip("lightgbm")
    from gemvtune.tuning.tuneplan import predict, sample_valid
    from gemvtune.tuning.tunerun import _model, _tables

    tables, model = _tables(tmp_path, "NVIDIA A100-SXM4-80GB"), _model(tmp_path, "NVIDIA A100-SXM4-80GB")
    assert tables == [] and model is not None and model.gpu == "NVIDIA H200"   # no table of its own; a prior
    s = Shape(4096, 4096)
    slow, fast = predict(model, s, ["gemv"], 2000.0)["gemv"], predict(model, s, ["gemv"], 4000.0)["gemv"]
    assert slow.optimum_us == pytest.approx(2 * fast.optimum_us) and slow.warm == fast.warm and len(fast.warm) == 4
    floor = predict(None, s, ["gemv", "splitk", "cublaslt"], 4000.0)
    assert set(floor) == {"gemv", "splitk"} and floor["gemv"].optimum_us == pytest.approx(s.weight_bytes / 4e6)
    configs = sample_valid("gemv", s, 300)
    assert len(configs) == len(set(configs)) == 300 and all(c.is_valid(s) for c in configs)
    assert configs == sample_valid("gemv", s, 300)                      # seeded: the same plan twice


def test_model_steps_of_fp8_weights_keep_the_step_and_change_only_w():
    plain = model_steps(model="llama-3-8b", batches=[1, 8])
    fp8 = model_steps(model="llama-3-8b", batches=[1, 8], weights="e4m3-row")
    assert [(s.shape.M, s.shape.d, s.shape.n, s.calls) for s in fp8] == [(s.shape.M, s.shape.d, s.shape.n, s.calls)
                                                                        for s in plain]
    assert {s.shape.weights for s in fp8} == {"e4m3-row"} and {s.shape.weights for s in plain} == {""}
    assert model_steps(["4096x4096"], weights="e4m3-b128")[0].shape == Shape(4096, 4096, 1, "fp16", "e4m3-b128")
    with pytest.raises(UsageError, match="weights must be one of"):
        model_steps(["4096x4096"], weights="e5m2")


def test_a_budgeted_tune_of_fp8_weights_searches_the_fp8_families_against_dequantize(tmp_path):
    """FP8 steps: only the families that read FP8 weights are searched, planned by the FP8 cost model gemvtune ships
    (costmodel-fp8.json.gz: a predicted optimum above the read floor, where a plan without it takes the floor), the
    entries are FP8 ones, and the gains are against dequantize + F.linear, the route's fallback for FP8 weights."""
    from fakes import Fp8Runner

    from gemvtune.tuning.tunemodel import report_lines

    steps = [Step(Shape(4096, 4096, 1, "fp16", "e4m3-row"), 32.0), Step(Shape(14336, 4096, 1, "fp16", "e4m3-row"), 64.0)]
    lines: list[str] = []
    runner = Fp8Runner(dequant_us=30.0)
    res = run_tune(runner, steps, 60.0, SearchOptions(progress=False, rounds=2), tmp_path, tmp_path / "table.json",
                   echo=lines.append, reconfirm=False)
    assert set(res.searched) == {s.shape for s in steps} and res.baseline == "dequantize + F.linear"
    # the shipped models are the H200's, the fake GPU is not: the plan counts on the cold curve (20%+ after the
    # first chunk), where 4096x4096's first chunk saves more (32 x (30 - 9.84 x 1.1) against 64 x (30 - 18.88 x 1.1))
    assert any("cost model of NVIDIA H200, none of Fake GPU" in ln and "cold search curve" in ln for ln in lines)
    assert res.searched[0] == steps[0].shape
    assert {c.family for c in runner.calls} <= {"fp8gemv", "fp8mma"} and runner.calls
    table = gemvtune.load_table(tmp_path / "table.json", costmodel=None)
    for s in steps:
        r = table.route(s.shape.M, s.shape.d, 1, "torch", "fp16", "fp16", "e4m3-row")
        assert r.tuned and r.config.family == "fp8gemv" and r.tuned_us == pytest.approx(5.0)
        assert not table.route(s.shape.M, s.shape.d, 1, "torch", "fp16", "fp16").tuned   # no 16-bit entry
    assert res.search_gain == pytest.approx(30.0 / 5.0)
    assert res.sixteen_bit_gain == pytest.approx(15.0 / 5.0)              # the fake's cuBLAS on 16-bit weights
    assert any(ln.startswith("4096x4096.e4m3-row: dequantize + F.linear 30.00 µs") for ln in lines), lines
    floor = steps[0].shape.weight_bytes / runner.ceiling()["read_gbps"] * 1e-3
    (best,) = [float(ln.split("best predicted ")[1].split()[0]) for ln in lines
               if ln.startswith("4096x4096.e4m3-row: dequantize")]
    assert best > 1.05 * floor, (best, floor)   # the FP8 model's prediction, not the read floor
    out = report_lines(res, 60.0)
    assert any("against dequantize + F.linear: predicted x" in ln and "measured x6.000 in the search" in ln
               for ln in out), out


def test_zero_budget_of_fp8_weights_weighs_the_fp8_entries(tmp_path):
    r = _cli("tune", "--shape", "14336x4096", "--shape", "4096x4096", "--batch", "1,3", "--weights", "e4m3-row",
             "--budget", "0", "--table", str(ROOT / "results" / "nvidia-h200" / "table.json"), "--no-measure")
    assert r.returncode == 0, r.stderr
    assert "e4m3-row weights" in r.stdout and "against dequantize + F.linear: predicted x" in r.stdout
    # the committed table's FP8 entries are at n = 1 and 8: at n = 3 the winner at n = 1 runs (fp8route: every FP8
    # entry beat dequantize + F.linear by far)
    assert "routes: 2 to a zero-trial pick, 2 to the table's kernel" in r.stdout, r.stdout
    assert "the FP8 step against cuBLAS on the 16-bit weights (the table's measurements): x1." in r.stdout
    r = _cli("tune", "--shape", "4096x4096", "--batch", "1,3", "--weights", "e4m3-b128", "--budget", "0", "--table",
             str(ROOT / "results" / "nvidia-h200" / "table.json"), "--no-measure")   # no entry of that format
    assert r.returncode == 0 and "routes: 2 to dequantize + F.linear" in r.stdout, r.stdout + r.stderr


def test_a_python_tune_takes_fp8_weights(tmp_path):
    with pytest.raises(UsageError, match="weights must be one of"):
        gemvtune.tune(["4096x4096"], weights="e5m2", replay=SWEEPS, results=tmp_path, budget="10s")
    table = gemvtune.tune(["14336x4096"], weights="e4m3-row", batch=[1, 8], budget=0,
                          table=ROOT / "results" / "nvidia-h200" / "table.json")
    assert table.route(14336, 4096, 1, "torch", "fp16", "fp16", "e4m3-row").tuned


def test_the_measured_step_gain_weighs_each_shape_by_its_launches_and_skips_error_rows():
    from gemvtune.bench.tunegain import step_gain

    fp8 = Shape(4096, 4096, 1, "fp16", "e4m3-row")
    steps = [Step(Shape(4096, 4096), 32.0), Step(Shape(14336, 4096), 64.0), Step(fp8, 32.0)]
    row = {"M": 4096, "d": 4096, "n": 1, "dtype": "fp16"}
    rows = [{**row, "weights": "", "stock_us": 10.0, "gemvtune_us": 8.0},
            {"M": 14336, "d": 4096, "n": 1, "dtype": "fp16", "weights": "", "stock_us": float("nan"),
             "gemvtune_us": float("nan")},                                    # an ERROR row: no times
            {**row, "weights": "e4m3-row", "stock_us": 100.0, "gemvtune_us": 5.0}]
    assert step_gain(rows, steps) == pytest.approx((32 * 10 + 32 * 100) / (32 * 8 + 32 * 5))
    assert step_gain(rows, steps[:2]) == pytest.approx(10 / 8)
    assert step_gain([rows[2]], steps[:1]) is None                          # an FP8 row never serves a 16-bit step
    assert step_gain(rows[1:2], steps) is None


class _OnGpu(ReplayRunner):
    """The replay runner as a GPU's runner looks to the tune: the end's re-confirmation is planned and run."""

    replayed = False
    arch = "sm_90"    # (the H200 the sweeps were recorded on)


def _spy_reconfirm(monkeypatch, calls):
    import gemvtune.tuning.reconfirm as rc

    def fake(table, shapes, rounds=3, inductor=False, echo=print, child=None, timeout_s=None):
        calls.append((list(shapes), timeout_s))
        return []

    monkeypatch.setattr(rc, "reconfirm", fake)


def test_the_reconfirmation_runs_in_the_budget_left(tmp_path, monkeypatch):
    from gemvtune.tuning.tunerun import reserve_s

    calls: list = []
    _spy_reconfirm(monkeypatch, calls)
    lines: list[str] = []
    res = run_tune(_OnGpu(str(SWEEPS)), _steps(), 40.0, SearchOptions(families=("gemv",), progress=False), tmp_path,
                   tmp_path / "table.json", echo=lines.append, key={"gpu": 1})
    assert res.searched and calls and calls[0][0] == res.searched
    # the searches left the end its reserve, and the re-confirmation is stopped where the budget ends
    assert reserve_s(2) <= calls[0][1] <= 40.0 and res.state.spent_s <= 40.0


def test_no_reconfirmation_starts_past_the_budget(tmp_path, monkeypatch):
    """A search that ran past its plan (a slow, shared GPU) leaves no time: the tune plans nothing more, starts no
    re-confirmation, says so, and its clock stops at what it spent."""
    import gemvtune.tuning.search_run as sr

    calls: list = []
    _spy_reconfirm(monkeypatch, calls)
    late = [0.0]
    real = sr.run_searches

    def slow(*a, **kw):
        out = real(*a, **kw)
        late[0] += 100.0        # this search took 100 s more than the plan
        return out

    monkeypatch.setattr(sr, "run_searches", slow)
    lines: list[str] = []
    res = run_tune(_OnGpu(str(SWEEPS)), _steps(), 40.0, SearchOptions(families=("gemv",), progress=False), tmp_path,
                   tmp_path / "table.json", echo=lines.append, key={"gpu": 2},
                   clock=lambda: time.monotonic() + late[0])
    assert len(res.searched) == 1 and not calls
    assert any(ln.startswith("no time left in the budget to re-confirm the 1 entries") for ln in lines), lines
    assert "not worth its time" in next(iter(res.skipped.values()))


def test_a_search_never_runs_past_the_budget_left():
    from gemvtune.tuning.tunerun import search_timeout

    assert search_timeout({"gemv": 100, "mma": 40}, 0.1, 60.0, 6.0) == 15.0     # room for 1.5x its planned trials
    assert search_timeout({"gemv": 10}, 0.1, 60.0, 6.0) == 5.0                  # at least 5 s where the budget has it
    assert search_timeout({"gemv": 400}, 0.1, 30.0, 6.0) == pytest.approx(23.9)   # capped: the budget left, less the
    assert search_timeout({"gemv": 400}, 0.1, 3.0, 6.0) == 1.0                  # shape's fixed work and the trial in
                                                                                # flight at its end; 1 s at least
    # the trials compiled ahead end after the search's timeout: their time comes off it (16 in flight at 0.15 s)
    assert search_timeout({"gemv": 400}, 0.15, 30.0, 6.0, in_flight=16) == pytest.approx(30.0 - 6.0 - 2.4)
    assert search_timeout({"gemv": 10}, 0.1, 60.0, 6.0, in_flight=16) == 5.0   # (far from the budget's end: unchanged)


def test_the_warm_start_is_four_configs_beside_the_seed_even_where_the_model_ranks_the_seed_among_them():
    from gemvtune.kernels.families import FAMILIES
    from gemvtune.tuning.tuneplan import WARM_K, predict

    s = Shape(4096, 4096, 16)
    seed = FAMILIES["ring"].seed

    class Model:   # ranks the seed first, then the sample in its order
        families = ("ring",)

        def predict_rel(self, rows):
            return [1.0 if c == seed else 2.0 + i for i, (c, _) in enumerate(rows)]

    got = predict(Model(), s, ["ring"], 4000.0, k=64)["ring"]
    assert len(got.warm) == WARM_K and seed.to_dict() not in got.warm          # before: the seed and 3 others
    assert got.optimum_us == pytest.approx(s.weight_bytes / 4e6)                 # the optimum is still the seed's
