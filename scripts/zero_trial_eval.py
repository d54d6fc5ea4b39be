"""Issue 20 on the GPU: zero-trial dispatch on shapes in no table entry and no training data. Per shape: the
committed table's cost-model pick (what `load_table` runs for it) is compared, in one process and interleaved
over rounds, with cuBLAS (torch F.linear in a CUDA graph) and with the winner of a fresh search of that shape
(`gemvtune search --warm-start 0`, every family at the default budget, run first into a scratch folder: the tuned
time the pick must come within 5% of). A shape in the table or in the model's training data is refused. Writes one CSV row per (shape, n) and prints a short table.
``--tuned-from CSV`` takes each shape's tuned winner from an earlier run's zero-trial.csv instead of searching
again (its config re-measured here, in the same process as the pick and cuBLAS).

    python3 scripts/zero_trial_eval.py --shape 11008x4096 --shape 4096x11008 --batch 1 --out DIR
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gemvtune.kernels.shapes import Shape, parse_shape  # noqa: E402
from gemvtune.reports.report import provenance  # noqa: E402
from gemvtune.runtime.table import load_table  # noqa: E402
from gemvtune.tuning.search_options import DEFAULT_TRIALS  # noqa: E402

GEMV_LABEL = re.compile(r"b(?P<block>\d+)\.(?P<vec>half[248]?)\.(?P<acc>fp16|fp32)\.t(?P<tpr>\d+)\.u(?P<unroll>\d+)"
                        r"\.k(?P<split_k>\d+)\.(?P<hint>default|nc|evict_first)\.(?P<x_load>ldg|smem)(?P<pdl>\.pdl)?"
                        r"(?:\.occ(?P<occ>half|full))?")


def _earlier(path: str) -> dict[tuple[str, int], object]:
    """{(M x d, n): the tuned config} of an earlier zero-trial.csv (its tuned_config column, or a GEMV label)."""
    import pandas as pd

    from gemvtune.kernels.families import config_from_dict
    from gemvtune.kernels.gemv import GemvConfig

    got = {}
    for _, r in pd.read_csv(path).iterrows():
        if isinstance(r.get("tuned_config"), str):
            cfg = config_from_dict(json.loads(r["tuned_config"]))
        else:
            m = GEMV_LABEL.fullmatch(str(r["tuned"]))
            if m is None:
                sys.exit(f"{path}: tuned config {r['tuned']!r} is not a GEMV label and the row has no tuned_config")
            g = m.groupdict()
            cfg = GemvConfig(block=int(g["block"]), vec=g["vec"], acc=g["acc"], tpr=int(g["tpr"]), unroll=int(g["unroll"]),
                             split_k=int(g["split_k"]), hint=g["hint"], x_load=g["x_load"],
                             pdl="on" if g["pdl"] else "off", occ=g["occ"] or "auto")
            if cfg.label != r["tuned"]:
                sys.exit(f"{path}: label {r['tuned']!r} parsed as {cfg.label!r}")
        got[(f"{int(r['M'])}x{int(r['d'])}", int(r["n"]))] = cfg
    return got


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", action="append", required=True)
    ap.add_argument("--batch", default="1")
    ap.add_argument("--trials", type=int, default=DEFAULT_TRIALS)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--table", default="results/nvidia-h200/table.json")
    ap.add_argument("--out", required=True)
    ap.add_argument("--tuned-from", help="an earlier run's zero-trial.csv: its tuned winners, re-measured (no search)")
    a = ap.parse_args()
    import pandas as pd

    from gemvtune.runners.cuda import CudaRunner

    table = load_table(a.table)
    if table.costmodel is None:
        sys.exit(f"no cost model beside {a.table} (or LightGBM missing)")
    shapes = [Shape(b.M, b.d, int(n)) for t in a.shape for b in [parse_shape(t)] for n in a.batch.split(",")]
    from gemvtune.model.dataset import load as load_dataset

    seen = {(t.M, t.d) for t in load_dataset(Path(a.table).parent).shapes}
    for s in shapes:
        if (s.M, s.d, s.n) in set(table.keys()) or (s.M, s.d) in seen:
            sys.exit(f"{s} is in the table or the model's training data: not an unseen shape")
    scratch = Path(tempfile.mkdtemp(prefix="zt-"))
    tuned = {}
    earlier = _earlier(a.tuned_from) if a.tuned_from else None
    for s in shapes:
        if earlier is not None:
            if (f"{s.M}x{s.d}", s.n) not in earlier:
                sys.exit(f"{s} is not in {a.tuned_from}")
            tuned[s] = earlier[(f"{s.M}x{s.d}", s.n)]
            continue   # the fresh searches first (their own processes), then every time in this one
        cmd = [sys.executable, "-m", "gemvtune", "search", "--shape", f"{s.M}x{s.d}", "--batch", str(s.n),
               "--trials", str(a.trials), "--warm-start", "0", "--results", str(scratch)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        print(f"search {s}: rc={r.returncode} {r.stdout.strip().splitlines()[-1][:200] if r.stdout.strip() else r.stderr[-300:]}",
              flush=True)
        fresh = load_table(scratch / "table.json", costmodel=None)
        tuned[s] = fresh.lookup(s)[0]
    runner = CudaRunner()
    dev, ceil = runner.device_info(), runner.ceiling()
    rows = []
    for s in shapes:
        route = table.route(s.M, s.d, s.n, "torch")
        pick, pred = table.predicted(s)
        t_pick, t_tuned, t_cub = [], [], []
        for r in range(a.rounds):
            mp = runner.measure(pick, s, kind="zero-trial", verify=r == 0)
            mt = runner.measure(tuned[s], s, kind="tuned", verify=r == 0)
            base = {b.kind: b for b in runner.baselines(s)}
            cub = base.get("cublas-torch") or base.get("cublas")
            if mp.ok:
                t_pick.append(mp.us_median)
            if mt.ok:
                t_tuned.append(mt.us_median)
            if cub is not None and cub.ok:
                t_cub.append(cub.us_median)
        p, t, c = (statistics.median(v) if v else float("nan") for v in (t_pick, t_tuned, t_cub))
        rows.append({"shape": str(s), "M": s.M, "d": s.d, "n": s.n, "route": route.kind, "route_why": route.why,
                     "pick": pick.label, "pick_predicted_us": pred, "pick_us": p, "tuned": tuned[s].label,
                     "tuned_config": json.dumps({"family": tuned[s].family, **tuned[s].to_dict()}), "tuned_us": t,
                     "cublas_us": c, "pick_x_cublas": c / p, "pick_over_tuned": p / t,
                     "routed_x_cublas": (c / p) if route.tuned else 1.0})
        runner.release()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    df = pd.DataFrame(rows)
    df.to_csv(out / "zero-trial.csv", index=False, float_format="%.6g")
    (out / "zero-trial.json").write_text(json.dumps(provenance(dev, ceiling=ceil, shapes=a.shape, trials=a.trials,
                                                              tuned_from=a.tuned_from,
                                                              rounds=a.rounds, table=a.table), indent=1, default=str))
    print(df[["shape", "route", "pick", "pick_predicted_us", "pick_us", "tuned_us", "cublas_us", "pick_x_cublas",
              "pick_over_tuned", "routed_x_cublas"]].to_string(index=False))


if __name__ == "__main__":
    main()
