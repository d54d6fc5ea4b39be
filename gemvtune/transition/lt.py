"""cuBLASLt's best algorithm for one (M, d, n), any n up to ``gemvtune transition``'s limit: the heuristic's top
algorithms (FP16 in, FP32 compute, FP16 out, as ``nn.Linear`` gets), each built, checked by the library, its
answer checked against float64, then timed like the cuBLAS series (a torch CUDA graph over the runner's rotating
weight copies); the fastest is the series' point. Refused or wrong algorithms are counted in the detail."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from statistics import median
from typing import Any

from ..kernels.shapes import MAX_BATCH, Shape

TOP = 8   # heuristic algorithms tried per n


@dataclass(frozen=True)
class WideShape:
    """(M, d, n) for a library call: n may pass the tuned kernels' 16 (Shape refuses that). It carries what
    LtProblem and LtPlan read of a Shape (M, d, n, dtype and its printed name): the transition is FP16."""

    M: int
    d: int
    n: int
    dtype: str = "fp16"

    def __str__(self) -> str:
        return f"{self.M}x{self.d}" + (f"@n{self.n}" if self.n > 1 else "") + (f".{self.dtype}"
                                                                              if self.dtype != "fp16" else "")


def best_cublaslt(runner: Any, M: int, d: int, n: int, launches: Callable[[int], int],
                  check: Callable[..., tuple[bool, str]], top: int = TOP) -> tuple[list[float], str]:
    """(µs per call of each sample, detail) of the fastest correct algorithm among the heuristic's ``top`` for
    (M, d, n); ``launches(copies)`` is the graph length, ``check(torch, W, x, y)`` the answer check. Raises
    LtRefused (the library's reason) when no algorithm is proposed, RuntimeError (one line) when none runs
    correctly."""
    import torch

    from ..device.ltplan import LtPlan, top_algorithms
    from ..kernels.epilogue import Epilogue
    from ..runners.cuda.libtimers import fastest_graph

    shape, epi, dev = WideShape(M, d, n), Epilogue("fp16"), runner.device_id
    with runner.gpu_lock.held(), runner.on_stream(), torch.cuda.device(dev):
        b = runner.buffers(Shape(M, d, min(n, MAX_BATCH)))
        # (LtProblem and LtPlan read only M, d, n of the shape and print it: a WideShape passes n > 16)
        cands = top_algorithms(shape, epi, dev, top)   # type: ignore[arg-type]
        Wt = [torch.from_dlpack(w) for w in b.W]
        xblk = (torch.rand((b.copies, n, d), device=Wt[0].device, dtype=torch.float32) * 2 - 1).half()
        y = torch.empty((n, M), device=Wt[0].device, dtype=torch.float16)
        best: tuple[float, list[float], str] | None = None
        refused: list[str] = []
        for cfg, _ws in cands:
            try:
                plan = LtPlan(cfg, shape, epi, dev)   # type: ignore[arg-type]
            except Exception as e:
                refused.append(f"{cfg.label}: {str(e).splitlines()[0][:80]}")
                continue
            try:
                def calls(k: int, plan: Any = plan) -> None:
                    s = torch.cuda.current_stream().cuda_stream
                    for i in range(k):
                        plan.launch(Wt[i % b.copies].data_ptr(), xblk[i % b.copies].data_ptr(), y.data_ptr(), 0, s)

                y.fill_(float("nan"))
                calls(1)
                ok, bad = check(torch, Wt[0], xblk[0], y)
                if not ok:
                    refused.append(f"{cfg.label}: wrong ({bad})")
                    continue
                t, k = fastest_graph(torch, calls, launches(b.copies), b.copies, b.flush, runner.replays,
                                     runner.warmup, before=runner.flush_l2 if b.flush else None)
                if best is None or median(t) < best[0]:
                    best = (median(t), t, f"cuBLASLt {cfg.label}, graph of {k} calls over {b.copies} copies")
            finally:
                plan.close()
        torch.cuda.empty_cache()
    if best is None:
        raise RuntimeError(f"none of cuBLASLt's {len(cands)} algorithms ran correctly: " + "; ".join(refused[:3]))
    return best[1], best[2] + f" (fastest of {len(cands) - len(refused)} correct of the heuristic's {len(cands)})"
