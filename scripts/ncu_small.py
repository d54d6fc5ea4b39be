"""Profiler target (run under ncu): per shape and batch n, the table's kernel for (M, d, n) (any template
family: --family picks that family's best in the entry instead of the winner) and the read ceiling's
streaming kernel over exactly the shape's weight bytes, each launched a few times on rotating copies
(plain launches, so ncu sees each kernel; ncu flushes caches between them).

    ncu --kernel-name regex:"gemv|splitk|read_stream" --launch-skip 2 --launch-count 4 ... \\
        python3 scripts/ncu_small.py --table results/nvidia-h200/table.json --shape 4096x4096 [--batch 16]
        [--config '{"family": "ring", "mt": 2, ...}']
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from gemvtune.kernels.families import config_from_dict
from gemvtune.kernels.shapes import parse_shape
from gemvtune.runners.cuda import CudaRunner
from gemvtune.runners.cuda._cupy import cp
from gemvtune.runtime.table import load_table


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--table", required=True)
    ap.add_argument("--shape", action="append", required=True)
    ap.add_argument("--launches", type=int, default=4)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--family", default="", help="profile this family's best in the entry (default: the winner)")
    ap.add_argument("--config", default="", help="profile this config (a JSON object with its family) instead")
    a = ap.parse_args()
    table = load_table(a.table)
    r = CudaRunner()
    for text in a.shape:
        s = parse_shape(text, a.batch)
        if a.config:
            cfg = config_from_dict(json.loads(a.config))
        else:
            rec = table.entry(s)[a.family] if a.family else table.entry(s)["winner"]
            cfg = config_from_dict({"family": rec.get("family", a.family or "gemv"), **rec["config"]})
        with r.on_stream():   # the runner's device and stream, as its own launches
            launch = r.launcher(cfg, s)
            b = r.buffers(s)
            for i in range(a.launches):
                launch(b.W[i % b.copies], b.x[i % b.copies], b.y[i % b.copies])
            words = s.weight_bytes // 16
            sink = cp.zeros(1, dtype=cp.uint32)
            for i in range(a.launches):   # the ceiling's kernel, same bytes, its best grid (8 blocks per SM)
                r.read_stream((r.sm_count * 8,), (256,), (b.W[i % b.copies], np.uint64(words), sink))
            cp.cuda.Device().synchronize()
        print(f"{s}: {cfg.label} and read_stream over {s.weight_bytes / 1e6:.1f} MB, {a.launches} launches each")
        r.release()


if __name__ == "__main__":
    main()
