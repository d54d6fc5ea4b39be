"""Issue 20, item 6: keeping a table fresh. ``stale`` (CPU) flags entries searched with less than the default
budget or beaten by the cost model's predicted best; ``recheck`` flags a winner that drifted past 3% or lost to
cuBLAS (a fake runner with known times); the command writes its CSV and honours --strict."""

import copy
import json

from click.testing import CliRunner
from conftest import ROOT
from fakes import FakeRunner, fake_us

from gemvtune import Shape
from gemvtune.kernels.families import record_config
from gemvtune.kernels.gemv import GemvConfig
from gemvtune.runtime.table import Table
from gemvtune.tuning.check import recheck, stale

TABLE = ROOT / "results" / "nvidia-h200" / "table.json"
KEYS = ("4096x4096x1", "14336x4096x1")


def _data(times=None, budgets=None):
    """Two GEMV entries of the committed table, their recorded winner µs and search budgets replaced."""
    data = json.loads(TABLE.read_text())
    data["entries"] = {k: copy.deepcopy(data["entries"][k]) for k in KEYS}
    for k in KEYS:
        e = data["entries"][k]
        cfg = record_config(e["winner"])
        e["winner"]["us"] = (times or {}).get(k, fake_us(cfg))
        e["baselines"]["cublas"]["us"] = 15.0
        e["baselines"]["cublas-torch"]["us"] = 15.0
        e["search"]["measured_trials"] = (budgets or {}).get(k, 140)
    return data


class Predicts:
    """A cost model that predicts ``best`` at half the time of every other config."""

    def __init__(self, best):
        self.best = best

    def rank(self, configs, shape, k=None):
        us = sorted((5.0 if c == self.best else 10.0, i, c) for i, c in enumerate(configs))
        return [(c, u) for u, _, c in us[:k]]

    def predict_us(self, points):
        return [5.0 if c == self.best else 10.0 for c, _ in points]


def test_stale_flags_short_budgets_and_predicted_better_configs():
    t = Table(_data(budgets={"14336x4096x1": 24}))
    rows = stale(t)
    assert [r["shape"] for r in rows] == ["14336x4096"] and "24 measured trials" in rows[0]["why"]
    better = GemvConfig(block=64, vec="half8", tpr=32)
    rows = stale(t, Predicts(better))
    assert {r["shape"] for r in rows} == {"4096x4096", "14336x4096"}
    assert all(better.label in r["why"] and "faster than the winner" in r["why"] for r in rows)
    assert stale(Table(_data())) == []
    whole = _data(budgets={"14336x4096x1": 108})                       # per family: cuBLASLt's whole space of 8
    whole["entries"]["14336x4096x1"]["search"].update(family_trials={"ring": 100, "cublaslt": 8},
                                                       space_measured=["cublaslt"])
    assert stale(Table(whole)) == []
    whole["entries"]["14336x4096x1"]["search"]["family_trials"]["ring"] = 24     # one family short: stale, said
    assert [r["why"] for r in stale(Table(whole))] == ["ring 24 measured trials (< the default budget 100)"]
    # a predicted best under the winner's prediction but not under its recorded time is no reason to re-tune
    # (the model over-predicts a winner it has few measurements of)
    fast = _data(times={k: 5.1 for k in KEYS})
    assert stale(Table(fast), Predicts(better)) == []
    half = _data(times={"4096x4096x1": 5.1, "14336x4096x1": 5.2 * 1.03})
    assert [r["shape"] for r in stale(Table(half), Predicts(better))] == ["14336x4096"]


def test_stale_flags_an_entry_the_other_dtype_beat_with_the_same_kernel():
    """The BF16 search of 4096x4096 n = 8 never measured the FP16 winner's ring config, which runs as fast in BF16
    (H200 probe of 2026-12-02). An entry is stale when the other dtype's winner is the same kernel in its dtype,
    was never measured for it, and recorded 2% faster; not when the gap is smaller, when it was measured and lost,
    or when the other winner accumulates in FP16 (in BF16 a different kernel)."""
    from gemvtune.kernels.families import config_to_dict
    from gemvtune.runtime.table import entry_key

    fp_cfg, bf_cfg = GemvConfig(block=64, vec="half8", tpr=32), GemvConfig(block=256, vec="half4", tpr=64)
    bf = Shape(14336, 4096, 1, "bf16")

    def table(fp_us=10.0, bf_us=10.3, fp=fp_cfg, measured=()):
        data = _data(budgets={k: 100 for k in KEYS})
        e = data["entries"]["14336x4096x1"]
        e["winner"] = {"family": "gemv", "config": config_to_dict(fp), "us": fp_us}
        b = copy.deepcopy(e)
        b["dtype"] = "bf16"
        b["winner"] = {"family": "gemv", "config": config_to_dict(bf_cfg), "us": bf_us}
        b["candidates"] = [{"family": "gemv", "config": config_to_dict(c), "us": bf_us} for c in (bf_cfg, *measured)]
        data["entries"][entry_key(bf)] = b
        return Table(data)

    rows = stale(table())
    assert [r["shape"] for r in rows] == [str(bf)]
    assert fp_cfg.label in rows[0]["why"] and "3.0% under" in rows[0]["why"] and "FP16 entry" in rows[0]["why"]
    assert stale(table(bf_us=10.1)) == []                                     # 1%: lease-to-lease noise
    assert stale(table(measured=(fp_cfg,))) == []                             # measured for BF16, and lost
    half = GemvConfig(block=64, vec="half8", tpr=32, acc="fp16")
    assert stale(table(fp=half)) == []                                        # an FP16 accumulator: another kernel
    rows = stale(table(fp_us=10.6, bf_us=10.0))                              # the reverse: BF16's winner in FP16
    assert [r["shape"] for r in rows] == ["14336x4096"] and "BF16 entry" in rows[0]["why"]


def test_recheck_flags_drift_and_losses_to_cublas():
    data = _data()
    k = "4096x4096x1"
    cfg = record_config(data["entries"][k]["winner"])
    data["entries"][k]["winner"]["us"] = fake_us(cfg) * 1.10        # the record is 10% off today's time
    rows = recheck(FakeRunner(), Table(data), [Shape(4096, 4096), Shape(14336, 4096)], rounds=2, echo=lambda s: None)
    by = {r["shape"]: r for r in rows}
    assert "drifted" in by["4096x4096"]["flags"] and abs(by["4096x4096"]["drift_pct"] + 100 * (1 - 1 / 1.1)) < 1e-6
    assert by["14336x4096"]["flags"] == "" and by["14336x4096"]["now_cublas_us"] == 15.0

    class SlowKernel(FakeRunner):
        def measure(self, config, shape, kind="variant", verify=True, timed=True, **kw):
            m = super().measure(config, shape, kind, verify, timed, **kw)
            m.us_median = 20.0
            return m

    rows = recheck(SlowKernel(), Table(_data()), [Shape(4096, 4096)], rounds=1, echo=lambda s: None)
    assert "lost to cuBLAS" in rows[0]["flags"]


def test_check_command_stale_only_writes_a_csv_and_strict_fails(tmp_path):
    from gemvtune.cli.main import cli

    path = tmp_path / "table.json"
    path.write_text(json.dumps(_data(budgets={"14336x4096x1": 24})))
    r = CliRunner().invoke(cli, ["check", "--table", str(path), "--stale-only", "--out", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    assert "1 of 2 entries to re-tune" in r.output and list((tmp_path / "c").glob("stale-*.csv"))
    r = CliRunner().invoke(cli, ["check", "--table", str(path), "--stale-only", "--strict", "--out", str(tmp_path / "c")])
    assert r.exit_code == 1 and "stale" in str(r.exception)
    r = CliRunner().invoke(cli, ["check", "--table", str(path), "--stale-only", "--shape", "1000x1000"])
    assert r.exit_code != 0 and "not in the table" in str(r.exception)
    r = CliRunner().invoke(cli, ["check", "--table", str(path), "--stale-only", "--shape", "4096x4096@nx"])
    assert r.exit_code != 0 and "malformed --shape" in str(r.exception)
    r = CliRunner().invoke(cli, ["check", "--table", str(path), "--stale-only", "--shape", "14336x4096@n1",
                                 "--out", str(tmp_path / "c")])
    assert r.exit_code == 0 and "1 of 1 entries" in r.output
