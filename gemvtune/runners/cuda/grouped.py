"""Grouped variants on the CUDA runner (``gemvtune.kernels.group``): one launch over sibling linears that read the
same x, verified against float64 of every member, and timed against the members launched one after another.

Verification gives every member its own allocation of W, y and bias (a kernel that read a row of the wrong
member, or wrote the wrong member's y, answers wrong: the members are not one contiguous matrix). Timing runs
both in CUDA graphs over the same rotating copies of the fused shape's weight (>= 3x L2, cold like decode), the
members laid out in reverse order in each copy, in one process: the group against what the model would run
without it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ...build.compile import CompileError, compile_variant
from ...device._cupy import cp, rand_elems
from ...device.elems import nan_fill, to_float64
from ...device.plan import LaunchPlan
from ...kernels.epilogue import DEFAULT, Epilogue
from ...kernels.families import config_to_dict
from ...kernels.group import GroupShape, group_reasons
from ...kernels.launchspec import launch_spec
from ..base import Measurement, Status
from ..timing import error_bound

_PLANS: dict[tuple, LaunchPlan] = {}


def group_plan(runner: Any, config: Any, group: GroupShape, epilogue: Epilogue = DEFAULT,
               source: str | None = None, name: str | None = None) -> tuple[Any, LaunchPlan]:
    """(compiled, plan) of the grouped variant, compiled (or fetched) and loaded once per runner and group (the
    row ends are the plan's: one source serves every group of the same number of members)."""
    compiled = compile_variant(config, group.fused, runner.arch, source, name, epilogue=epilogue, group=group)
    key = (id(runner), compiled.cubin_path, group, epilogue)
    plan = _PLANS.get(key)
    if plan is None:
        with open(compiled.cubin_path, "rb") as f:
            plan = _PLANS[key] = LaunchPlan(launch_spec(config, group.fused, epilogue, group), f.read(), runner.device_id)
    return compiled, plan


def _launcher(plan: LaunchPlan) -> Callable[..., None]:
    def launch(Ws: Sequence[int], x: int, ys: Sequence[int], biases: Sequence[int] | None = None) -> None:
        plan.launch_group(Ws, x, ys, biases, cp.cuda.get_current_stream().ptr)
    return launch


def verify_group(runner: Any, launch: Callable[..., None], group: GroupShape, bound: float,
                 epilogue: Epilogue = DEFAULT) -> tuple[bool, float, float, str]:
    """One grouped launch on fresh random members (each its own allocation), y poisoned with NaN, checked
    against the float64 products of every member, as one [n, sum M] answer (``Verifier.check``); with a SwiGLU
    epilogue, the one output ``silu(g) * u`` against its float64 value (``swiglu_reference``)."""
    dt, n, d = group.dtype, group.n, group.d
    Ws = [rand_elems((M, d), runner.rng, dt) for M in group.Ms]
    x = rand_elems((d,) if n == 1 else (n, d), runner.rng, dt)
    biases = [rand_elems((M,), runner.rng, dt) for M in group.Ms] if epilogue.bias else None
    ys = [nan_fill(cp, (M,) if n == 1 else (n, M), epilogue.out) for M in group.Ms]
    if epilogue.swiglu:   # one output, silu(g) * u, in the first member's y
        ys[1] = ys[0]
    launch([w.data.ptr for w in Ws], x.data.ptr, [y.data.ptr for y in ys],
           [b.data.ptr for b in biases] if biases is not None else None)
    runner.stream.synchronize()
    x64 = to_float64(x, dt).reshape(n, d)
    if epilogue.swiglu:
        return _check_swiglu(runner, Ws, x64, biases, ys[0], group, bound, epilogue)
    refs, sqs, gots = [], [], []
    for i, (W, y) in enumerate(zip(Ws, ys)):
        W64 = to_float64(W, dt)
        ref, sq = x64 @ W64.T, (x64 * x64) @ (W64 * W64).T
        if biases is not None:
            b64 = to_float64(biases[i], dt)
            ref, sq = ref + b64, sq + b64 * b64
        refs.append(ref)
        sqs.append(sq)
        gots.append(to_float64(y, epilogue.out).reshape(n, -1))
    return runner.verifier.check(cp.concatenate(gots, axis=1), cp.concatenate(refs, axis=1),
                                 cp.sqrt(cp.concatenate(sqs, axis=1)), bound)


# The smallest normal number of each output dtype: below it a stored value is rounded to an absolute step, not a
# relative one (FP16's subnormals are 2^-24 apart), so an output's scale is never taken under it.
NORMAL_MIN = {"fp16": 2.0**-14, "bf16": 2.0**-126, "fp32": 2.0**-126}


def swiglu_reference(g: Any, sg: Any, u: Any, su: Any, out: str = "fp32") -> tuple[Any, Any]:
    """float64 ``silu(g) * u`` and each output's scale from the scales of g and u (their root-sum-squares of terms):
    an error e_g in g and e_u in u move h by ``silu'(g) u e_g + silu(g) e_u`` to first order, so the scale is
    ``|silu'(g)| |u| s_g + |silu(g)| s_u``, and the check's bound on ||e|| / ||s|| carries over unchanged. A scale is
    at least ``out``'s smallest normal number (``NORMAL_MIN``): for g far below 0, silu(g) u underflows there (H200,
    2026-12-04: 0.048 x a scale of ~1e-9 at an FP16 zero), and the store's absolute step is what it can be held to."""
    xp = cp.get_array_module(g)
    sig = 1.0 / (1.0 + xp.exp(-xp.clip(g, -700.0, 700.0)))
    silu = g * sig
    dsilu = sig * (1.0 + g * (1.0 - sig))
    scale = xp.abs(dsilu) * xp.abs(u) * sg + xp.abs(silu) * su
    return silu * u, xp.maximum(scale, NORMAL_MIN[out])


def _check_swiglu(runner: Any, Ws: Sequence[Any], x64: Any, biases: Any, y: Any, group: GroupShape, bound: float,
                  epilogue: Epilogue) -> tuple[bool, float, float, str]:
    parts = []
    for i, W in enumerate(Ws):
        W64 = to_float64(W, group.dtype)
        ref, sq = x64 @ W64.T, (x64 * x64) @ (W64 * W64).T
        if biases is not None:
            b64 = to_float64(biases[i], group.dtype)
            ref, sq = ref + b64, sq + b64 * b64
        parts.append((ref, cp.sqrt(sq)))
    (g, sg), (u, su) = parts
    ref, scale = swiglu_reference(g, sg, u, su, epilogue.out)
    return runner.verifier.check(to_float64(y, epilogue.out).reshape(group.n, -1), ref, scale, bound)


def _member_views(b: Any, i: int, group: GroupShape) -> tuple[list[int], list[int]]:
    """Member pointers into copy ``i`` of the fused shape's buffers: W rows in reverse member order, y (FP32)
    consecutive blocks of n x M_j."""
    W, y = b.W[i % b.copies], b.y[i % b.copies]
    row_bytes, ws, ys = group.d * 2, [], []
    after = sum(group.Ms)
    y_off = 0
    for M in group.Ms:
        after -= M
        ws.append(W.data.ptr + after * row_bytes)
        ys.append(y.data.ptr + y_off * 4)
        y_off += group.n * M
    return ws, ys


def measure_group(runner: Any, config: Any, group: GroupShape, epilogue: Epilogue = DEFAULT, timed: bool = True,
                  source: str | None = None, name: str | None = None) -> Measurement:
    """Compile, verify, then time (default epilogue) the grouped variant of ``config``; nothing raises out of here."""
    fused = group.fused
    m = Measurement.of(name or f"{config.label}{epilogue.label}.g{len(group.Ms)}", "group", fused, Status.OK,
                       params=config_to_dict(config))
    why = group_reasons(config, group, epilogue) + epilogue.shape_reasons(fused) + epilogue.invalid_reasons(config)
    if why:
        m.status, m.error = Status.INVALID, "; ".join(why)
        return m
    with runner.on_stream(), runner.gpu_lock.held():
        try:
            compiled, plan = group_plan(runner, config, group, epilogue, source, name)
        except CompileError as e:
            m.status, m.error = Status.COMPILE_ERROR, str(e)
            return m
        except Exception as e:
            m.status, m.error = Status.LAUNCH_ERROR, f"load: {str(e).splitlines()[0]}"
            return m
        r = compiled.resources
        m.registers, m.spill_bytes, m.smem_bytes, m.compile_s = r.registers, r.spill_stores, r.smem_bytes, compiled.compile_s
        m.bound = error_bound(config.acc, fused.d, out=epilogue.out)
        launch = _launcher(plan)
        try:
            ok, m.relerr, m.rowerr, reason = verify_group(runner, launch, group, m.bound, epilogue)
            if not ok:
                m.status, m.error = Status.WRONG, reason
                return m
            if not timed or epilogue != DEFAULT:
                return m
            b = runner.buffers(fused)
            n = runner.launches(fused, b.copies, flush=b.flush)

            def one(i: int) -> None:
                ws, ys = _member_views(b, i, group)
                launch(ws, b.x[i % b.copies].data.ptr, ys)
            t = runner.time_graph(one, n, flush=b.flush)
        except Exception as e:
            m.status, m.error = Status.LAUNCH_ERROR, (str(e).splitlines() or [type(e).__name__])[0]
            return m
    runner.fill_times(m, t, fused, "graph", n, b)
    return m


def measure_separate(runner: Any, configs: Sequence[Any], group: GroupShape) -> Measurement:
    """The members launched one after another, each with its own (verified) config, in the same graphs and over the
    same buffers as ``measure_group``: what the model runs without the group. Nothing raises out of here."""
    fused = group.fused
    m = Measurement.of("+".join(c.label for c in configs), "separate", fused, Status.OK)
    if len(configs) != len(group.Ms):
        m.status, m.error = Status.INVALID, f"{len(configs)} configs for {len(group.Ms)} members"
        return m
    plans = []
    for c, s in zip(configs, group.members):
        v = runner.measure(c, s, timed=False)
        if not v.ok:
            m.status, m.error = v.status, f"{s}: {c.label}: {v.error}"
            return m
        plans.append(runner.prepare(c, s)[1])
    with runner.on_stream(), runner.gpu_lock.held():
        try:
            b = runner.buffers(fused)
            n = runner.launches(fused, b.copies, flush=b.flush)

            def one(i: int) -> None:
                ws, ys = _member_views(b, i, group)
                x, stream = b.x[i % b.copies].data.ptr, cp.cuda.get_current_stream().ptr
                for p, w, y in zip(plans, ws, ys):
                    p.launch(w, x, y, 0, stream)
            t = runner.time_graph(one, n, flush=b.flush)
        except Exception as e:
            m.status, m.error = Status.LAUNCH_ERROR, (str(e).splitlines() or [type(e).__name__])[0]
            return m
    runner.fill_times(m, t, fused, "graph", n, b)
    return m
