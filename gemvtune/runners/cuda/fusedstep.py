"""The fused decode step's GPU half (``gemvtune.bench.chain`` chooses its kernels): per layer one grouped launch for
q, k, v (the members' rows of the step's qkv weight, each written to its own output), o adding the residual, one
grouped launch for gate and up writing ``silu(g)·u`` into h, down reading that h and adding the residual; then the
LM head. The stand-ins of ``gemvtune.bench.gaps`` go between the linears where asked, for this step and for the
unfused ones (``gap_calls``). Everything is enqueued on the runner's stream, so ``DecodeStepBench.capture_sequence``
captures it into one CUDA graph.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

from ...device._cupy import cp, rand_elems
from ...device.elems import from_float32, nan_fill, to_float64
from ..timing import error_bound
from .grouped import group_plan, swiglu_reference

Call = Callable[[], None]


class GapBuffers:
    """Each stand-in's own input and output per (layer, linear it follows), allocated once on the runner's stream."""

    def __init__(self, runner: Any, standins: Any, gaps: dict[str, Any], layers: int):
        self.standins, self.gaps = standins, gaps
        self.bufs: dict[tuple[int, str], tuple[Any, int, Any, int]] = {}
        with runner.on_stream():
            for layer in range(layers):
                for after, gap in gaps.items():
                    n_in, n_out = -(-gap.read_bytes // 16), -(-gap.write_bytes // 16)
                    src = rand_elems((8 * n_in,), runner.rng, "fp16")   # 16 bytes a word
                    dst = cp.empty(8 * n_out, dtype=cp.float16)
                    self.bufs[(layer, after)] = (src, n_in, dst, n_out)

    @property
    def bytes_per_layer(self) -> int:
        return sum(g.bytes_moved for g in self.gaps.values())

    def call(self, layer: int, after: str, pdl: bool, stream: Callable[[], int] | None = None) -> Call | None:
        """The stand-in that runs after linear ``after`` of ``layer`` (None: nothing runs there), on ``stream()``
        (default: CuPy's current stream; a torch capture passes torch's)."""
        b = self.bufs.get((layer, after))
        if b is None:
            return None
        src, n_in, dst, n_out = b
        si = self.standins
        on = stream or _cupy_stream

        def go() -> None:
            si.launch(src.data.ptr, n_in, dst.data.ptr, n_out, on(), pdl)
        return go


def _cupy_stream() -> int:
    return int(cp.cuda.get_current_stream().ptr)


def _grouped(plan: Any, ws: list[int], x: int, ys: list[int]) -> Call:
    def go() -> None:
        plan.launch_group(ws, x, ys, None, _cupy_stream())
    return go


def _plain(plan: Any, w: int, x: int, y: int, r: int) -> Call:
    def go() -> None:
        plan.launch(w, x, y, r, _cupy_stream())
    return go


def slot_plan(runner: Any, k: Any) -> Any:
    """The launch plan of one ``StepKernel`` (compiled and loaded once)."""
    if k.group is not None:
        return group_plan(runner, k.config, k.group, k.epilogue)[1]
    return runner.prepare(k.config, k.shape, epilogue=k.epilogue)[1]


def verify_kernel(runner: Any, k: Any) -> tuple[bool, float, str]:
    """(ok, relative error, why) of one ``StepKernel`` on fresh random inputs against float64 (the runner's checks)."""
    from .grouped import measure_group

    if k.group is not None:
        m = measure_group(runner, k.config, k.group, k.epilogue, timed=False)
    else:
        m = runner.measure(k.config, k.shape, timed=False, epilogue=k.epilogue)
    return m.ok, m.relerr, m.error or ""


class FusedStep:
    """The fused step's buffers over a ``DecodeStepBench``'s weights (its ops: qkv, o, gate_up, down per layer, then
    the LM head); ``calls(kernels, gaps, pdl_gaps)`` is one step's launches in order."""

    def __init__(self, bench: Any, model: Any, layers: int, dtype: str = "fp16"):
        self.bench, self.layers, self.dtype = bench, layers, dtype
        h, i, q, kv = model.hidden_size, model.intermediate_size, model.q_width, model.kv_width
        self.widths = (q, kv, kv)
        self.i = i
        runner = bench.runner
        with runner.on_stream():
            self.qkv_y = [[nan_fill(cp, (w,), dtype) for w in self.widths] for _ in range(layers)]
            self.o_y = [nan_fill(cp, (h,), dtype) for _ in range(layers)]
            self.r = [rand_elems((h,), runner.rng, dtype) for _ in range(layers)]    # the residual stream
            # gate/up's own x, 1/16 of the others' (exact): silu(g)·u of U(-1, 1) data and weights is ~d/9 large, and
            # down's sum of d products of it would pass FP16's range; a model's activations are normed first
            self.x_gu = [from_float32(runner.rng.random(h, dtype=cp.float32) * 0.125 - 0.0625, dtype)
                         for _ in range(layers)]
            self.h = [nan_fill(cp, (i,), dtype) for _ in range(layers)]
            self.down_y = [nan_fill(cp, (h,), dtype) for _ in range(layers)]
            self.head_y = nan_fill(cp, (model.vocab_size,), dtype)
            runner.stream.synchronize()

    def _op(self, layer: int, j: int) -> int:
        return 4 * layer + j

    def calls(self, kernels: dict[str, Any], plans: dict[str, Any], gaps: Any = None, pdl_gaps: bool = False) -> list[Call]:
        """One step's launches: ``kernels`` and ``plans`` by slot; the stand-ins of ``gaps`` (a ``GapBuffers`` of the
        fused gaps, or None) after the linears they follow."""
        W, x = self.bench.W, self.bench.x
        d_row = {"qkv": W[0].shape[1] * 2, "gate_up": W[2].shape[1] * 2}   # bytes of one weight row
        out: list[Call] = []
        for layer in range(self.layers):
            wq, wg = W[self._op(layer, 0)], W[self._op(layer, 2)]
            offs, t = [], 0
            for w in self.widths:
                offs.append(wq.data.ptr + t * d_row["qkv"])
                t += w
            out.append(_grouped(plans["qkv"], offs, x[self._op(layer, 0)].data.ptr,
                                [y.data.ptr for y in self.qkv_y[layer]]))
            self._gap(out, gaps, layer, "qkv", pdl_gaps)
            out.append(_plain(plans["o"], W[self._op(layer, 1)].data.ptr, x[self._op(layer, 1)].data.ptr,
                              self.o_y[layer].data.ptr, self.r[layer].data.ptr))
            self._gap(out, gaps, layer, "o", pdl_gaps)
            hp = self.h[layer].data.ptr
            out.append(_grouped(plans["gate_up"], [wg.data.ptr, wg.data.ptr + self.i * d_row["gate_up"]],
                                self.x_gu[layer].data.ptr, [hp, hp]))
            self._gap(out, gaps, layer, "gate_up", pdl_gaps)
            out.append(_plain(plans["down"], W[self._op(layer, 3)].data.ptr, hp, self.down_y[layer].data.ptr,
                              self.r[layer].data.ptr))
            self._gap(out, gaps, layer, "down", pdl_gaps)
        out.append(_plain(plans["lm_head"], W[-1].data.ptr, x[-1].data.ptr, self.head_y.data.ptr, 0))
        return out

    @staticmethod
    def _gap(out: list[Call], gaps: Any, layer: int, after: str, pdl: bool,
             stream: Callable[[], int] | None = None) -> None:
        c = gaps.call(layer, after, pdl, stream) if gaps is not None else None
        if c is not None:
            out.append(c)

    def outputs(self) -> list[Any]:
        return [y for ys in self.qkv_y for y in ys] + self.o_y + self.h + self.down_y + [self.head_y]

    def check_last_layer(self, runner: Any, kernels: dict[str, Any]) -> list[tuple[str, bool, float, str]]:
        """After a replay: the last layer's outputs and the LM head's against float64 of their inputs (down's input
        is the h its gate/up group wrote in the same replay, so a kernel that read x before the previous one had
        written it is caught)."""
        L, W, x = self.layers - 1, self.bench.W, self.bench.x
        dt = self.dtype
        res = []
        ref_of = runner.verifier.reference   # float64 W x and per-row scales, row-chunked
        with runner.on_stream():
            runner.stream.synchronize()
            t = 0
            for name, w, y in zip(("q", "k", "v"), self.widths, self.qkv_y[L]):
                ref, scale = ref_of(W[self._op(L, 0)][t:t + w], x[self._op(L, 0)], dt)
                t += w
                res.append((f"qkv.{name}", *runner.verifier.check(to_float64(y, dt), ref, scale,
                                                                   _bound(kernels["qkv"]))[:2]))
            r64 = to_float64(self.r[L], dt)
            ref, scale = ref_of(W[self._op(L, 1)], x[self._op(L, 1)], dt)
            res.append(("o+r", *runner.verifier.check(to_float64(self.o_y[L], dt), ref + r64,
                                                      cp.sqrt(scale * scale + r64 * r64), _bound(kernels["o"]))[:2]))
            wg = W[self._op(L, 2)]
            (g, sg), (u, su) = ref_of(wg[:self.i], self.x_gu[L], dt), ref_of(wg[self.i:], self.x_gu[L], dt)
            ref, scale = swiglu_reference(g, sg, u, su, dt)
            res.append(("silu(g)*u", *runner.verifier.check(to_float64(self.h[L], dt), ref, scale,
                                                            _bound(kernels["gate_up"]))[:2]))
            ref, scale = ref_of(W[self._op(L, 3)], self.h[L], dt)
            res.append(("down+r", *runner.verifier.check(to_float64(self.down_y[L], dt), ref + r64,
                                                         cp.sqrt(scale * scale + r64 * r64), _bound(kernels["down"]))[:2]))
            ref, scale = ref_of(W[-1], x[-1], dt)
            res.append(("lm_head", *runner.verifier.check(to_float64(self.head_y, dt), ref, scale,
                                                          _bound(kernels["lm_head"]))[:2]))
        return [(name, ok, rel, "" if ok else f"relative error {rel:.3g}") for name, ok, rel in res]


def _bound(k: Any) -> float:
    return error_bound(k.config.acc, k.shape.d, out=k.epilogue.out)


def unfused_calls(ops: Sequence[tuple[str, Any]], linear: Callable[[int], None], gaps: Any = None,
                  pdl_gaps: bool = False, stream: Callable[[], int] | None = None,
                  names: Sequence[str] = ("qkv", "o", "gate_up", "down")) -> list[Call]:
    """The unfused step's launches: ``linear(i)`` enqueues op i (each op its own kernel on the step's fused weights),
    with the stand-ins of ``gaps`` (the unfused gaps) after the linears they follow, on ``stream()``."""
    out: list[Call] = []
    per = len(names)
    for i in range(len(ops)):
        out.append(functools.partial(linear, i))
        if i < len(ops) - 1:
            FusedStep._gap(out, gaps, i // per, names[i % per], pdl_gaps, stream)
    return out
