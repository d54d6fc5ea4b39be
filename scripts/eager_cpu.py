"""Where eager decode spends host time, stock transformers against gemvtune (GPU). A Llama config cut to a few
layers, built once with random weights, both variants on the same module objects (gemvtune.clients.hfmodel.Variants):

1. per call, each distinct linear layer with the input decode gives it ([1, 1, d]): nn.Linear against GemvLinear,
   the timing thread's CPU time (time.thread_time) and wall time over CALLS calls, alternated REPEATS times;
2. eager generate of TOKENS new tokens, stock and gemvtune back to back PAIRS times: wall and CPU ms per token;
3. cProfile of one generate each: the functions with the most own time.

    python3 scripts/eager_cpu.py --table results/nvidia-h200/table.json [--layers 4] [--tokens 64] [--pairs 8]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="gemvtune/kernels/hf_configs/llama-3-8b.json")
    ap.add_argument("--table", default="results/nvidia-h200/table.json")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    import torch

    from gemvtune.clients.hfmodel import Variants, build_config, build_model, pad_id, read_config
    from gemvtune.runtime.table import load_table

    fields, name, _ = read_config(a.config)
    cfg, _ = build_config(fields, a.layers)
    model = build_model(cfg)
    v = Variants(model, load_table(a.table))
    print(f"{name}: {a.layers} layers, {len(v.names)} linear layers swapped; torch {torch.__version__}", flush=True)

    # 1. per call
    seen = {}
    for (_, _, stock), (_, _, tuned) in zip(v.stock, v.wrapped):
        seen.setdefault((stock.out_features, stock.in_features), (stock, tuned))
    print(f"\nper call, input [1, 1, d], {a.calls} calls x {a.repeats} alternated repeats (median µs; CPU / wall):")
    with torch.no_grad():
        for (M, d), (stock, tuned) in seen.items():
            x = torch.randn(1, 1, d, device="cuda", dtype=torch.float16)
            res = {"nn.Linear": ([], []), "GemvLinear": ([], [])}
            for _ in range(a.repeats):
                for label, mod in (("nn.Linear", stock), ("GemvLinear", tuned)):
                    mod(x)
                    torch.cuda.synchronize()
                    t0, c0 = time.perf_counter(), time.thread_time()
                    for _ in range(a.calls):
                        mod(x)
                    c1, t1 = time.thread_time(), time.perf_counter()
                    torch.cuda.synchronize()
                    res[label][0].append(1e6 * (c1 - c0) / a.calls)
                    res[label][1].append(1e6 * (t1 - t0) / a.calls)
            s, g = ({k: statistics.median(x) for k, x in zip(("cpu", "wall"), res[lab])} for lab in res)
            route = tuned.table.route(M, d, 1, "torch", "fp16").kind
            print(f"  {M}x{d} ({route}): nn.Linear {s['cpu']:.2f} / {s['wall']:.2f}   GemvLinear {g['cpu']:.2f} / "
                  f"{g['wall']:.2f}   GemvLinear/nn.Linear CPU {g['cpu'] / s['cpu']:.3f}", flush=True)

    # 2. generate, back to back
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, cfg.vocab_size, (1, 16), generator=gen).to("cuda")
    kw = {"max_new_tokens": a.tokens, "min_new_tokens": a.tokens, "do_sample": False,
          "attention_mask": torch.ones_like(ids), "pad_token_id": pad_id(cfg)}

    def timed(impl: str) -> tuple[float, float]:
        v.use(impl)
        torch.cuda.synchronize()
        t0, c0 = time.perf_counter(), time.thread_time()
        model.generate(ids, **kw)
        torch.cuda.synchronize()
        return 1e3 * (time.perf_counter() - t0) / a.tokens, 1e3 * (time.thread_time() - c0) / a.tokens

    with torch.no_grad():
        for impl in ("stock", "gemvtune"):
            timed(impl)
        rows = []
        for p in range(a.pairs):
            order = ("stock", "gemvtune") if p % 2 == 0 else ("gemvtune", "stock")
            got = {impl: timed(impl) for impl in order}
            rows.append(got)
        print(f"\neager generate, {a.tokens} tokens, {a.pairs} back-to-back pairs (ms/token wall, CPU):")
        for p, got in enumerate(rows):
            print(f"  pair {p + 1}: stock {got['stock'][0]:.2f}, {got['stock'][1]:.2f}   gemvtune {got['gemvtune'][0]:.2f}, "
                  f"{got['gemvtune'][1]:.2f}   stock/gemvtune wall {got['stock'][0] / got['gemvtune'][0]:.3f}")
        ratios = [g["stock"][0] / g["gemvtune"][0] for g in rows]
        print(f"  median stock/gemvtune wall ratio {statistics.median(ratios):.3f} "
              f"(min {min(ratios):.3f}, max {max(ratios):.3f})")

        # 3. cProfile
        for impl in ("stock", "gemvtune"):
            v.use(impl)
            prof = cProfile.Profile()
            prof.enable()
            model.generate(ids, **kw)
            torch.cuda.synchronize()
            prof.disable()
            buf = io.StringIO()
            st = pstats.Stats(prof, stream=buf)
            print(f"\ncProfile, {impl}: total {st.total_tt * 1e3 / a.tokens:.2f} ms/token; most own time:")
            st.sort_stats("tottime").print_stats(14)
            print("\n".join(ln[:150] for ln in buf.getvalue().splitlines()[6:24]))


if __name__ == "__main__":
    main()
