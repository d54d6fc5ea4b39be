"""Issue 17: does an L2 flush before each sample make a tiny weight as cold as the old way (enough
rotating copies to exceed 3x L2, one pass)? Per shape, the same llama.cpp launches timed five ways in
one process: warm (passes over 256 copies, no flush), a streaming-read flush (3x L2, the read-ceiling
kernel), a write flush (memset of 3x L2), the runner's flush (write 3x L2 then discard the lines), and
full rotation (copies >= 3x L2, one pass: the reference).

    python3 scripts/flush_check.py --out results/nvidia-h200/runs/issue17
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from gemvtune import LLAMA_CPP
from gemvtune.kernels.shapes import Shape
from gemvtune.reports.report import provenance
from gemvtune.runners.cuda import CudaRunner
from gemvtune.runners.cuda._cupy import _rand_half, cp
from gemvtune.runners.timing import copies_for, summarize


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    r = CudaRunner(replays=15)
    ceil = r.ceiling()
    with r.on_stream():   # the runner's device and stream: this script's arrays and launches too
        big = cp.empty(3 * r.l2_bytes, dtype=cp.uint8)
        sink = cp.zeros(1, dtype=cp.uint32)
        rows = []
        for s in (Shape(1, 4096), Shape(8, 4096), Shape(16, 4096), Shape(64, 4096), Shape(256, 1024), Shape(33, 8200),
                  Shape(16, 4096, 8)):
            launch = r.launcher(LLAMA_CPP, s)
            b = r.buffers(s)
            c = b.copies
            op = lambda i: launch(b.W[i % c], b.x[i % c], b.y[i % c])   # noqa: E731
            warm = summarize(r.time_graph(op, 4 * c))
            runner_flush = summarize(r.time_graph(op, c, flush=True))
            read = summarize(r.time_graph(op, c, before=lambda st: r.read_stream(
                (r.sm_count * 8,), (256,), (big, np.uint64(big.size // 16), sink), stream=st)))
            write = summarize(r.time_graph(op, c, before=lambda st: cp.cuda.runtime.memsetAsync(
                big.data.ptr, 1, big.nbytes, st.ptr)))
            full = copies_for(s.weight_bytes, r.l2_bytes, cap=10**9)   # the old rule: one pass > 3x L2
            W = [_rand_half((s.M, s.d), r.rng) for _ in range(full)]
            x = [_rand_half(r.x_shape(s), r.rng) for _ in range(64)]
            y = [cp.empty(r.y_shape(s), dtype=cp.float32) for _ in range(64)]
            rot = summarize(r.time_graph(lambda i: launch(W[i], x[i % 64], y[i % 64]), full))
            W.clear()
            rows.append({"shape": str(s), "copies": c, "rotation_copies": full, "warm_us": warm.median,
                         "read_flush_us": read.median, "write_flush_us": write.median,
                         "runner_flush_us": runner_flush.median, "rotation_us": rot.median,
                         "runner_flush_spread": runner_flush.spread, "rotation_spread": rot.spread,
                         "runner_over_rotation": runner_flush.median / rot.median})
            r.release()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = provenance(r.device_info(), ceiling=ceil, command=" ".join(["python3", "scripts/flush_check.py", *sys.argv[1:]]))
    (out / "flush-check.json").write_text(json.dumps({**meta, "rows": rows}, indent=1, default=str) + "\n")
    print(f"{'shape':>10} {'warm':>7} {'read':>7} {'write':>7} {'runner':>7} {'rotation':>8} {'runner/rot':>10} "
          "(us per launch by flush; rotation copies)")
    for x_ in rows:
        print(f"{x_['shape']:>10} {x_['warm_us']:7.3f} {x_['read_flush_us']:7.3f} {x_['write_flush_us']:7.3f} "
              f"{x_['runner_flush_us']:7.3f} {x_['rotation_us']:8.3f} {x_['runner_over_rotation']:10.3f} "
              f"({x_['rotation_copies']})")


if __name__ == "__main__":
    main()
