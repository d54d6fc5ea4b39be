"""Issue 17: tiny shapes (MoE routers, LoRA factors, small heads) as the runner now times them: at most
MAX_COPIES weight copies, one pass per sample after an L2 flush (method graph+flush), against the same
launches timed warm (several passes over copies already in L2, no flush), with cuBLAS (torch F.linear,
cupy.matmul) under the same protocol, and the launch floor from the same run.

    python3 scripts/tiny_cold.py --out results/nvidia-h200/runs/issue17
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from gemvtune import LLAMA_CPP
from gemvtune.kernels.shapes import Shape, parse_shape
from gemvtune.reports.report import provenance, write_csv
from gemvtune.runners.cuda import CudaRunner
from gemvtune.runners.timing import summarize

SHAPES = ("1x4096", "8x4096", "16x4096", "64x4096", "256x1024", "33x8200", "256x7168", "16x4096x8", "1024x4096")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--shape", action="append", default=None)
    a = ap.parse_args()
    r = CudaRunner()
    ceil = r.ceiling()
    rows, table = [], []
    for text in a.shape or SHAPES:
        parts = text.split("x")
        s = parse_shape("x".join(parts[:2]))
        s = Shape(s.M, s.d, int(parts[2]) if len(parts) > 2 else 1)
        t0 = time.perf_counter()
        cold = r.measure(LLAMA_CPP, s)
        b = r.buffers(s)
        launch = r.launcher(LLAMA_CPP, s)
        warm = summarize(r.time_graph(lambda i: launch(b.W[i % b.copies], b.x[i % b.copies], b.y[i % b.copies]),
                                      4 * b.copies))
        base = {m.kind: m for m in r.baselines(s)}
        wall = time.perf_counter() - t0
        rows += [cold, *base.values()]
        tb = base.get("cublas-torch")
        table.append({"shape": str(s), "weight_kb": s.weight_bytes / 1024, "copies": b.copies, "method": cold.method,
                      "launch_bound": cold.launch_bound, "llama_cold_us": cold.us_median,
                      "llama_cold_spread": cold.spread, "llama_warm_us": warm.median,
                      "cold_over_warm": cold.us_median / warm.median,
                      "torch_cublas_cold_us": tb.us_median if tb is not None and tb.ok else None,
                      "floor_us": ceil["launch_floor_us"], "wall_s": wall})
        r.release()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = provenance(r.device_info(), ceiling=ceil, command=" ".join(["python3", "scripts/tiny_cold.py", *sys.argv[1:]]))
    write_csv(rows, out / "tiny-cold.csv", meta)
    (out / "tiny-cold-summary.json").write_text(json.dumps({**meta, "rows": table}, indent=1, default=str) + "\n")
    print(f"{'shape':>12} {'KB':>8} {'copies':>6} {'method':>12} {'lb':>3} {'cold us':>8} {'warm us':>8} "
          f"{'cold/warm':>9} {'torch us':>8} {'wall s':>6}")
    for t in table:
        tc = f"{t['torch_cublas_cold_us']:8.2f}" if t["torch_cublas_cold_us"] else "       -"
        print(f"{t['shape']:>12} {t['weight_kb']:8.0f} {t['copies']:6d} {t['method']:>12} {int(t['launch_bound']):3d} "
              f"{t['llama_cold_us']:8.2f} {t['llama_warm_us']:8.2f} {t['cold_over_warm']:9.3f} {tc} {t['wall_s']:6.1f}")
    print(f"launch floor {ceil['launch_floor_us']:.3f} us, read ceiling {ceil['read_gbps']:.0f} GB/s")


if __name__ == "__main__":
    main()
