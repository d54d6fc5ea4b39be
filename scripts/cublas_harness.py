"""Issue 19, item 5: which way of calling cuBLAS is fastest, and why the runner's cuBLAS baselines read
slower than a plain harness. One process, one H200, per shape (n = 1 and 8 by default), interleaved:

  runner-cupy     the runner's measure_cublas: cupy.matmul, spin-timed over its rotating copies
  runner-torch    the runner's measure_torch_linear: F.linear(x[n, d], W) in a CUDA graph, ~target_us of
                  launches over the runner's copies (CuPy-made, handed to torch by DLPack)
  plain-96        F.linear(x[n, d], W) in a torch CUDA graph of 96 calls over 6 torch-made weight copies
  plain-out       torch.matmul(x, W.T, out=y) in the same graph (no allocation inside)
  plain-mv        n = 1 only: F.linear(x[d], W), the 1-D input (torch's mv path)
  runner-len      as runner-torch, with runner-torch's graph length and copies, on torch-made tensors

  python3 scripts/cublas_harness.py --out DIR [--shape 4096x4096 ...] [--batch 1,8] [--reps 5]
Writes DIR/cublas-harness.csv and .json (device, driver, command) and prints a table."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

from gemvtune.kernels.shapes import DECODE_SUITE, Shape, parse_batches, parse_shape
from gemvtune.reports.report import provenance
from gemvtune.runners.cuda import CudaRunner
from gemvtune.runners.cuda.baselines import torch_graph, torch_replay_times


def graph_us(calls, n_calls: int, reps: int) -> list[float]:
    """µs per call of ``calls()`` (n_calls of them) captured in one torch CUDA graph, ``reps`` replays
    after one warm-up replay (the runner's own capture and replay helpers)."""
    g, _ = torch_graph(torch, calls, calls)
    t = torch_replay_times(torch, g, reps, n_calls, warmup=1)
    del g
    return t


def plain(shape: Shape, copies: int, n_calls: int, reps: int, how: str) -> list[float]:
    W = [torch.randn(shape.M, shape.d, device="cuda", dtype=torch.float16) * 0.1 for _ in range(copies)]
    x = [torch.randn(shape.n, shape.d, device="cuda", dtype=torch.float16) for _ in range(copies)]
    y = [torch.empty(shape.n, shape.M, device="cuda", dtype=torch.float16) for _ in range(copies)]
    F = torch.nn.functional
    if how == "linear":
        def calls():
            return [F.linear(x[i % copies], W[i % copies]) for i in range(n_calls)]
    elif how == "out":
        def calls():
            for i in range(n_calls):
                torch.matmul(x[i % copies], W[i % copies].t(), out=y[i % copies])
    elif how == "mv":
        x1 = [v.view(shape.d) for v in x]

        def calls():
            return [F.linear(x1[i % copies], W[i % copies]) for i in range(n_calls)]
    else:
        raise ValueError(how)
    t = graph_us(calls, n_calls, reps)
    W.clear(), x.clear(), y.clear()
    torch.cuda.empty_cache()
    return t


def by_length(args) -> None:
    """Does the per-call time depend on how many calls one graph holds, for cuBLAS and our kernel alike?"""
    from gemvtune.kernels.gemv import LLAMA_CPP

    shapes = [parse_shape(s) for s in args.shape] if args.shape else [Shape(4096, 4096), Shape(1024, 16384)]
    lengths = [int(v) for v in args.lengths.split(",")]
    r = CudaRunner()
    rows = []
    for s in shapes:
        b = r.buffers(s)
        launch = r.launcher(LLAMA_CPP, s)
        for _ in range(args.reps):
            for k in lengths:
                ours = statistics.median(r.time_graph(lambda i: launch(b.W[i % b.copies], b.x[i % b.copies],
                                                                       b.y[i % b.copies]), k))
                cub = statistics.median(plain(s, 6, k, 7, "linear"))
                rows.append({"M": s.M, "d": s.d, "n": s.n, "copies": b.copies, "length": k,
                             "llama_us": ours, "cublas_torch_us": cub})
        r.release()
    import pandas as pd

    df = pd.DataFrame(rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "graph-length.csv", index=False)
    meta = {**provenance(r.device_info()), "torch": torch.__version__, "command": " ".join(["python3", *sys.argv])}
    (out / "graph-length.json").write_text(json.dumps(meta, indent=1, default=str))
    print(df.groupby(["M", "d", "length"])[["llama_us", "cublas_torch_us"]].median().round(2).to_string())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--shape", action="append", default=None)
    ap.add_argument("--batch", default="1,8")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--lengths", default="", help="e.g. 24,96,240,480: per-call time against graph length, "
                    "cuBLAS (F.linear) and the llama.cpp config through the runner, 6 copies, n = 1")
    args = ap.parse_args()
    if args.lengths:
        return by_length(args)
    shapes = [parse_shape(s) for s in args.shape] if args.shape else [Shape(M, d) for M, d in DECODE_SUITE]
    r = CudaRunner()
    rows = []
    for base in shapes:
        for n in parse_batches(args.batch):
            s = Shape(base.M, base.d, n)
            b = r.buffers(s)
            runner_len = r.launches(s, b.copies, flush=b.flush)
            copies6 = max(6, b.copies)
            res: dict[str, list[float]] = {k: [] for k in ("runner-cupy", "runner-torch", "plain-96", "plain-out",
                                                            "plain-mv", "runner-len")}
            for _ in range(args.reps):   # interleaved rounds
                res["runner-cupy"].append(r.measure_cublas(s).us_median)
                t = r.measure_torch_linear(s)
                res["runner-torch"].append(t.us_median if t is not None else float("nan"))
                res["plain-96"].append(statistics.median(plain(s, copies6, 96, 7, "linear")))
                res["plain-out"].append(statistics.median(plain(s, copies6, 96, 7, "out")))
                res["plain-mv"].append(statistics.median(plain(s, copies6, 96, 7, "mv")) if n == 1 else float("nan"))
                res["runner-len"].append(statistics.median(plain(s, b.copies, runner_len, 7, "linear")))
            r.release()
            row = {"M": s.M, "d": s.d, "n": n, "copies": b.copies, "runner_graph_len": runner_len}
            for k, v in res.items():
                row[k + "_us"] = statistics.median(v)
                row[k + "_min"], row[k + "_max"] = min(v), max(v)
            rows.append(row)
            print(f"{s.M}x{s.d} n={n} copies={b.copies} len={runner_len}: " +
                  "  ".join(f"{k} {row[k + '_us']:.2f}" for k in res), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    import pandas as pd

    pd.DataFrame(rows).to_csv(out / "cublas-harness.csv", index=False)
    meta = {**provenance(r.device_info()), "torch": torch.__version__,
            "command": " ".join(["python3", *sys.argv])}
    (out / "cublas-harness.json").write_text(json.dumps(meta, indent=1, default=str))


if __name__ == "__main__":
    main()
