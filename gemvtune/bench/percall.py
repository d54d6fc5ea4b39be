"""Per-call CPU cost of every user-facing path, side by side with ``F.linear``, in one process.

In eager PyTorch a decode step is bound by the CPU: each linear layer costs what its Python call
costs, however fast its kernel. This measures, per shape (batch n), the microseconds per call of a
loop of calls (GPU synchronized before and after, medians over interleaved repeats):

- torch: ``F.linear``; an ``nn.Linear`` module; the same layer as ``GemvLinear`` (eager: the direct
  launch path); ``torch.ops.gemvtune.linear`` (the custom op, as eager code would call it);
  ``table.gemv`` on tensors; the bare ``LaunchPlan.launch`` of the tuned kernel;
- CuPy: ``table.gemv(W, x, out=out)``, the bare launch of the same plan, and ``cupy.matmul``;
- FP8 weights (sm_89 on): the layer quantised per row as ``GemvFp8Linear`` (the table's FP8 route), ``table.gemv``
  with its codes and scales, and dequantize + ``F.linear`` (what an FP8 layer runs without a kernel).

The GPU work of each call is far shorter than its CPU cost at these sizes (the kernels take 2-10 µs),
so the loop times the CPU. The tuned kernel runs on every tuned path whatever the table's route, so
the launch paths are compared like for like; the route each layer would take is reported beside.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from ..kernels.shapes import Shape


def _time(fns: dict[str, Callable[[], Any]], sync: Callable[[], None], calls: int, repeats: int) -> dict[str, float]:
    """µs per call of each function (a loop of ``calls``, synchronized before and after), interleaved
    over ``repeats`` after a warm-up: the median as ``name``, and ``name_min`` / ``name_max``."""
    per: dict[str, list[float]] = {k: [] for k in fns}
    for f in fns.values():          # warm-up: compiles, plans, allocator
        for _ in range(3):
            f()
    for _ in range(repeats):
        for k, f in fns.items():
            sync()
            t0 = time.perf_counter()
            for _ in range(calls):
                f()
            per[k].append((time.perf_counter() - t0) / calls * 1e6)
    sync()
    return {k: statistics.median(v) for k, v in per.items()} | {k + "_min": min(v) for k, v in per.items()} | \
        {k + "_max": max(v) for k, v in per.items()}


def measure_percall(table: Any, shape: Shape, calls: int = 300, repeats: int = 7, cupy: bool = True) -> dict[str, Any]:
    """One row: µs per call of each path for ``shape`` (see the module docstring)."""
    import torch
    import torch.nn.functional as F

    from ..runtime import torch_op
    from ..runtime.table import Table
    from ..runtime.torch_linear import GemvLinear

    tuned = Table(table.data, table.path, policy="tuned", entries=table.entries)
    dev = torch.device("cuda")
    dt, tdt = shape.dtype, torch_op._TORCH[shape.dtype]
    torch.manual_seed(0)
    lin = torch.nn.Linear(shape.d, shape.M, bias=False, device=dev, dtype=tdt).eval()
    W = lin.weight.detach()
    x = torch.randn(shape.n, shape.d, device=dev, dtype=tdt)
    g_tuned = GemvLinear(lin, tuned)                       # the tuned kernel, whatever the route
    g_user = GemvLinear(lin, table)                        # what the table's route gives a user
    route = table.route(shape.M, shape.d, shape.n, "torch", dt, dt)
    tid = torch_op.register_table(tuned)
    out32 = torch.empty(shape.n, shape.M, device=dev, dtype=torch.float32)
    y16 = torch.empty(shape.n, shape.M, device=dev, dtype=tdt)
    plan = torch_op._plan(tid, tuned, tuned.route(shape.M, shape.d, shape.n, "torch", dt, dt).config,
                          shape.M, shape.d, shape.n, False, dt, 0, torch_op._raw_stream(0), dt)
    wp, xp, yp, sp = W.data_ptr(), x.data_ptr(), y16.data_ptr(), torch_op._raw_stream(0)
    xv = x.reshape(-1) if shape.n == 1 else x
    with torch.no_grad():
        fns = {
            "F.linear": lambda: F.linear(x, W),
            "nn.Linear": lambda: lin(x),
            "GemvLinear": lambda: g_tuned(x),
            "GemvLinear (route)": lambda: g_user(x),
            "gemvtune::linear op": lambda: torch.ops.gemvtune.linear(x, W, None, tid),
            "table.gemv torch": lambda: tuned.gemv(W, xv, out=out32),
            "bare launch": lambda: plan.launch(wp, xp, yp, 0, sp),
        }
        res = _time(fns, torch.cuda.synchronize, calls, repeats)
        if torch.cuda.get_device_capability(dev) >= (8, 9):   # (E4M3 conversion: sm_89 on)
            res.update(_time(_fp8_paths(tuned, lin, x, xv, out32), torch.cuda.synchronize, calls, repeats))
    row: dict[str, Any] = {"M": shape.M, "d": shape.d, "n": shape.n, "dtype": dt, "route": route.kind,
                           "route_why": route.why, "config": _plan_config(plan).label, **res}
    cupy = cupy and dt == "fp16"   # (CuPy has no bfloat16 arrays)
    if cupy:
        from ..device import _cupy

        cp = _cupy.cp
        Wc, xc = cp.asarray(W), cp.asarray(xv)
        outc = cp.empty(out32.shape if shape.n > 1 else (shape.M,), dtype=cp.float32)
        tuned.gemv(Wc, xc, out=outc)
        stream = cp.cuda.get_current_stream().ptr
        dispatch = tuned._dispatch
        assert dispatch is not None   # (made by the tuned.gemv on CuPy arrays above)
        cplan = dispatch.plan(tuned, shape.M, shape.d, shape.n, False, "fp32", 0, stream)
        assert cplan is not None   # (policy "tuned" routes every shape to a gemvtune kernel, never cuBLAS)
        a, b, c = Wc.data.ptr, xc.data.ptr, outc.data.ptr
        fns_c = {"table.gemv cupy": lambda: tuned.gemv(Wc, xc, out=outc),
                 "bare launch cupy": lambda: cplan.launch(a, b, c, 0, stream),
                 "cupy.matmul": lambda: cp.matmul(xc, Wc.T)}
        raw = _rawkernel(cp, cplan, Wc, xc, outc)
        if raw is not None:
            fns_c["cupy RawKernel launch"] = raw
        res_c = _time(fns_c, lambda: cp.cuda.Device().synchronize(), calls, repeats)
        row.update(res_c)
    row["GemvLinear / F.linear"] = row["GemvLinear"] / row["F.linear"]
    if "cupy RawKernel launch" in row:
        row["table.gemv cupy / RawKernel"] = row["table.gemv cupy"] / row["cupy RawKernel launch"]
    row["GemvLinear / nn.Linear"] = row["GemvLinear"] / row["nn.Linear"]
    if "GemvFp8Linear" in row:
        row["GemvFp8Linear / dequant + F.linear"] = row["GemvFp8Linear"] / row["dequant + F.linear"]
        row["table.gemv fp8 / GemvFp8Linear"] = row["table.gemv fp8"] / row["GemvFp8Linear"]
    if cupy:
        row["table.gemv cupy / bare"] = row["table.gemv cupy"] / row["bare launch cupy"]
    return row


PATHS = ("F.linear", "nn.Linear", "GemvLinear", "GemvLinear (route)", "gemvtune::linear op", "table.gemv torch",
         "bare launch", "table.gemv cupy", "bare launch cupy", "cupy RawKernel launch", "cupy.matmul",
         "GemvFp8Linear", "table.gemv fp8", "dequant + F.linear")
RATIOS = ("GemvLinear / F.linear", "GemvLinear / nn.Linear", "table.gemv cupy / bare", "table.gemv cupy / RawKernel",
          "GemvFp8Linear / dequant + F.linear", "table.gemv fp8 / GemvFp8Linear")


def _fp8_paths(tuned: Any, lin: Any, x: Any, xv: Any, out32: Any) -> dict[str, Callable[[], Any]]:
    """The FP8 paths of one layer: a copy of ``lin`` quantised per row (``quantize_fp8`` with ``tuned``: its FP8
    route, the table's FP8 kernel or the lookup's pick), ``tuned.gemv`` with its codes and scales (checked once per
    pair of tensors: ``fp8torch.check_once``), and dequantize + ``F.linear`` of the same codes and scales."""
    import copy

    import torch

    from ..runtime.fp8linear import fallback_linear
    from ..runtime.torch_fp8 import quantize_fp8

    holder = torch.nn.Sequential(copy.deepcopy(lin))
    quantize_fp8(holder, tuned)
    q: Any = holder[0]   # (the GemvFp8Linear quantize_fp8 put there)
    codes, scales, layout = q.weight, q.scales, q.layout
    return {"GemvFp8Linear": lambda: q(x),
            "table.gemv fp8": lambda: tuned.gemv(codes, xv, out=out32, scales=scales),
            "dequant + F.linear": lambda: fallback_linear(x, codes, scales, layout)}


def percall_markdown(rows: list[dict[str, Any]], device: dict[str, Any], command: str) -> str:
    """The per-call table: one column per shape, one row per path (median µs, min..max)."""
    def col(r: dict[str, Any]) -> str:
        return f"{r['M']}x{r['d']} n={r['n']}" + (f" {r['dtype']}" if r.get("dtype", "fp16") != "fp16" else "")

    head = "| path | " + " | ".join(col(r) for r in rows) + " |"
    lines = [f"# Per-call CPU cost of each launch path, {device.get('name', '?')}", "",
             f"driver {device.get('driver', '?')}; torch {device.get('torch', '?')}; command: `{command}`", "",
             "µs per call in a Python loop (median of interleaved repeats; min..max).", "",
             head, "|---" * (len(rows) + 1) + "|"]
    for p in PATHS:
        if all(p in r for r in rows):
            lines.append(f"| {p} | " + " | ".join(f"{r[p]:.2f} ({r[p + '_min']:.2f}..{r[p + '_max']:.2f})"
                                                   for r in rows) + " |")
    for ratio in RATIOS:
        if all(ratio in r for r in rows):
            lines.append(f"| **{ratio}** | " + " | ".join(f"**{r[ratio]:.3f}**" for r in rows) + " |")
    lines += ["", "Route a user gets per shape: " + "; ".join(f"{col(r)}: {r['route']} ({r['route_why']})"
                                                      for r in rows), ""]
    return "\n".join(lines)


def _plan_config(plan: Any) -> Any:
    """The config a plan runs: a kernel plan's launch spec names it, a library plan (cuBLASLt) holds it."""
    spec = getattr(plan, "spec", None)
    return spec.config if spec is not None else plan.config


def _rawkernel(cp: Any, plan: Any, W: Any, x: Any, out: Any) -> Callable[[], Any] | None:
    """The same single-kernel variant launched the way a CuPy user would by hand (``RawModule`` +
    ``RawKernel(grid, block, args)``): the reference a dispatch layer over CuPy is judged against."""
    import numpy as np

    spec = getattr(plan, "spec", None)
    if spec is None:
        return None     # (a library's algorithm, e.g. cuBLASLt: no kernel of ours to launch by hand)
    if len(spec.kernels) != 1:
        return None     # (a pdl=on kernel launched without the attribute: griddepcontrol is a no-op)
    from ..build.compile import compile_variant

    path = compile_variant(spec.config, spec.shape, epilogue=spec.epilogue).cubin_path
    name, grid, block = spec.kernels[0]
    fn = cp.RawModule(path=path).get_function(name)
    if spec.smem:   # the dynamic shared memory opt-in the plan makes too
        fn.max_dynamic_shared_size_bytes = spec.smem
    ws = np.uint64(plan._ws)
    cnt = np.uint64(plan._ws + spec.counters_offset if plan._ws else 0)
    args = (W, x, out, np.uint64(0), ws, cnt, np.int32(spec.shape.M))
    return lambda: fn(grid, block, args, shared_mem=spec.smem)


def dispatch_overhead(table: Any, shape: Shape, calls: int = 200, repeats: int = 15) -> dict[str, float]:
    """CPU time per call of ``table.gemv(W, x, out=out)`` on CuPy arrays against the bare launch of the
    same plan (``LaunchPlan.launch`` with the pointers and stream already at hand), interleaved over
    repeats; medians in µs and their ratio. The tuned kernel runs whatever the table's route is."""
    from ..device._cupy import cp
    from ..runtime.table import Table

    tuned = Table(table.data, table.path, policy="tuned", entries=table.entries)
    xs = (shape.d,) if shape.n == 1 else (shape.n, shape.d)
    W = cp.ones((shape.M, shape.d), dtype=cp.float16)
    x = cp.ones(xs, dtype=cp.float16)
    out = cp.empty((shape.M,) if shape.n == 1 else (shape.n, shape.M), dtype=cp.float32)
    tuned.gemv(W, x, out=out)                       # builds the plan (compile, module, workspace)
    stream = cp.cuda.get_current_stream().ptr
    dispatch = tuned._dispatch
    assert dispatch is not None   # (made by the tuned.gemv above)
    plan = dispatch.plan(tuned, shape.M, shape.d, shape.n, False, "fp32", W.data.device_id, stream)
    assert plan is not None   # (policy "tuned" routes every shape to a gemvtune kernel, never cuBLAS)
    wp, xp, yp = W.data.ptr, x.data.ptr, out.data.ptr

    def bare() -> None:
        plan.launch(wp, xp, yp, 0, stream)

    def gemv() -> None:
        tuned.gemv(W, x, out=out)

    r = _time({"bare": bare, "table": gemv}, lambda: cp.cuda.Device().synchronize(), calls, repeats)
    return {"bare_launch_us": r["bare"], "table_gemv_us": r["table"], "dispatch_ratio": r["table"] / r["bare"]}
