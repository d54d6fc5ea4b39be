"""The watchdog: a runner in a child process, every call bounded in time; a hang becomes a
``timeout`` measurement, the child is replaced, and the search goes on."""

import time

from fakes import HangRunner

from gemvtune import LLAMA_CPP, GemvConfig, Shape
from gemvtune.kernels.gemv import DOMAINS
from gemvtune.runners.isolated import IsolatedRunner
from gemvtune.tuning.coordination.storage import make_storage
from gemvtune.tuning.search import SearchOptions, run_search

S = Shape(4096, 4096)
FLAT = {k: v for k, v in DOMAINS.items() if k != "occ"}   # the fake runners ignore occ: leave it out


def test_hang_becomes_timeout_and_the_runner_recovers():
    r = IsolatedRunner(HangRunner, timeout_s=2.0)
    try:
        assert r.device_info()["name"] == "Fake GPU" and r.compile_jobs == 1
        t0 = time.perf_counter()
        m = r.measure(GemvConfig(vec="half8", tpr=32, unroll=8), S)
        assert m.status == "timeout" and "no answer within 2 s" in m.error
        assert time.perf_counter() - t0 < 10
        ok = r.measure(LLAMA_CPP, S)                    # a fresh child answers the next call
        assert ok.ok and r.restarts == 1
        assert r.baselines(S)[0].kind == "cublas"
    finally:
        r.close()


def test_search_survives_hangs_and_never_tables_them(tmp_path):
    r = IsolatedRunner(HangRunner, timeout_s=1.5)
    try:
        opts = SearchOptions(sampler="random", trials=12, seed=3, progress=False, families=("gemv",), rounds=2,
                             domains={"gemv": FLAT})
        res = run_search(r, S, opts, make_storage(f"journal:{tmp_path / 'j.log'}"), "w", echo=lambda s: None)
    finally:
        r.close()
    timeouts = [t for t in res.trials if t.get("status") == "timeout"]
    assert timeouts and all(t["state"] == "PRUNED" and t.get("measured") for t in timeouts)
    assert res.measured == 12
    assert res.entry["winner"]["config"]["unroll"] != 8
    assert all(c["config"]["unroll"] != 8 for c in res.candidates)
