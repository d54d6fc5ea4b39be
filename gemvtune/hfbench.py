"""End-to-end Hugging Face benchmark (``gemvtune bench --hf-config PATH``): a transformers causal LM built
from a local config.json with random weights on the GPU (no download), greedy ``generate`` timed stock
and with gemvtune's ``swap_linears`` on the same model object (same weights), eager and compiled
(``cache_implementation="static"``, which transformers compiles itself), interleaved over rounds; the
linear layers' share of a decode step from torch.profiler; token agreement and logit differences;
``gemvtune.explain`` of the swapped layers. The report (pure) is gemvtune.hfbench_report.

torch and transformers are imported inside functions only: ``import gemvtune.hfbench`` stays light,
and without transformers the CLI says, in one line, to ``pip install 'gemvtune[hf]'``."""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import math
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from .errors import NoDeviceError, UsageError
from .hfbench_report import (IMPLS, MODES, ROW_COLUMNS, explain_summary, kernel_totals, mode_table, per_step,
                             short_table, token_agreement, top_kernels, write_hf_reports, write_rows_csv)

MIN_TRANSFORMERS = (4, 50)
INSTALL_HINT = "pip install 'gemvtune[hf]'"
DTYPES = ("float16", "bfloat16", "float32")
PROFILE_TOKENS = 8              # eager profile: a generate of this many tokens minus one of 1 token
DYNAMO_RECOMPILE_LIMIT = 64     # stock and swapped are two guard sets on one code object (default limit 8)


# ---- checks that need no GPU (the CLI runs them before the GPU check) ----------------------------------

def _version_tuple(text: str) -> tuple[int, ...]:
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", str(text))
    return tuple(int(g) for g in m.groups() if g is not None) if m else (0,)


def check_transformers() -> str:
    """transformers (and torch) importable and recent enough, else one UsageError; returns the version."""
    try:
        import transformers
    except Exception as e:  # ImportError, or a broken install raising anything on import
        why = (str(e).splitlines() or [type(e).__name__])[0][:120]
        raise UsageError(f"bench --hf-config needs Hugging Face transformers, which cannot be imported ({why}): "
                         f"{INSTALL_HINT}") from None
    version = str(getattr(transformers, "__version__", "0"))
    if _version_tuple(version) < MIN_TRANSFORMERS:
        raise UsageError(f"bench --hf-config needs transformers >= {'.'.join(map(str, MIN_TRANSFORMERS))}, this is "
                         f"{version}: {INSTALL_HINT} --upgrade")
    try:
        import torch  # noqa: F401
    except Exception as e:
        raise UsageError(f"bench --hf-config needs PyTorch, which cannot be imported "
                         f"({(str(e).splitlines() or [''])[0][:120]})") from None
    return version


def positive_int(value: Any, option: str) -> int:
    """An integer >= 1 from an option's text, else one UsageError naming the option."""
    text = str(value).strip()
    if isinstance(value, bool) or not text.lstrip("+").isdigit() or int(text) < 1:
        raise UsageError(f"{option} must be an integer >= 1, got {value!r}")
    return int(text)


def config_file(path: str | os.PathLike) -> Path:
    """The config.json a --hf-config names: the file itself, or config.json inside a folder."""
    p = Path(path).expanduser()
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise UsageError(f"folder {p} holds no config.json")
        p = p / "config.json"
    if not p.is_file():
        raise UsageError(f"config {p} does not exist")
    return p


def file_name(text: str) -> str:
    """A model name made safe for a file name: ``meta-llama/Meta-Llama-3-8B`` -> ``meta-llama-3-8b``
    (the organisation is dropped; lower case, letters, digits, dots and dashes)."""
    last = str(text).strip().rstrip("/").split("/")[-1]
    return re.sub(r"[^a-z0-9.]+", "-", last.lower()).strip("-.") or "model"


def read_config(path: str | os.PathLike) -> tuple[dict[str, Any], str, Path]:
    """(fields of the config.json, a file-friendly model name, the file). Validated by
    gemvtune.hfconfig.read_hf_config where that module exists (one UsageError per bad file), else by
    the few checks below."""
    p = config_file(path)
    name = None
    try:
        from .hfconfig import read_hf_config
    except ModuleNotFoundError as e:  # only the module's absence; an error inside it surfaces
        if e.name not in (f"{__package__}.hfconfig", "hfconfig"):
            raise
        read_hf_config = None
    if read_hf_config is not None:
        name = getattr(read_hf_config(p), "name", None)
    try:
        fields = json.loads(p.read_bytes().decode("utf-8-sig"))
    except OSError as e:
        raise UsageError(f"config {p} cannot be read: {e.strerror or e}") from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise UsageError(f"config {p} is not valid JSON: {str(e).splitlines()[0][:120]}") from None
    if not isinstance(fields, dict):
        raise UsageError(f"config {p} is not a JSON object (a Hugging Face config.json is one)")
    mt = fields.get("model_type")
    if not isinstance(mt, str) or not mt.strip():
        raise UsageError(f"config {p}: field 'model_type' is missing or not a string")
    if not name:
        named = fields.get("_name_or_path")
        name = named if isinstance(named, str) and named.strip() else (
            p.parent.resolve().name if p.name == "config.json" else p.stem)
    return fields, file_name(name), p


def _per_layer_keys(d: dict[str, Any], layers: int) -> list[str]:
    """Per-layer lists of a config dict (``layer_types``, ``no_rope_layers``, ...): a list whose key names
    layers and whose length is the layer count."""
    return [k for k, v in d.items() if isinstance(v, list) and len(v) == layers and "layer" in k.lower()]


def with_layers(fields: dict[str, Any], layers_key: str, old: int, new: int) -> tuple[dict[str, Any], list[str]]:
    """A copy of the config dict with ``new`` layers: the layer count set, and per-layer lists cut to
    ``new`` (or repeated cyclically up to it). Returns (dict, the lists adjusted)."""
    d = dict(fields)
    for k in {layers_key, "num_hidden_layers"}:
        if k in d or k == layers_key:
            d[k] = new
    adjusted = []
    for k in _per_layer_keys(fields, old):
        d[k] = [fields[k][i % old] for i in range(new)]
        adjusted.append(k)
    return d, adjusted


def build_config(fields: dict[str, Any], layers: int | None, where: str = "config") -> tuple[Any, dict[str, Any]]:
    """A transformers config from the fields (no file access, no download: the config class of
    ``model_type`` from transformers' mapping, ``from_dict``), ``layers`` overriding the layer count.
    ``auto_map`` (remote code) and ``quantization_config`` are dropped: the model is built from
    transformers' own class with plain random weights. Returns (config, info)."""
    import transformers

    d = dict(fields)
    dropped = [k for k in ("auto_map", "quantization_config") if d.pop(k, None) is not None]
    mt = str(d["model_type"]).strip()
    try:
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING

        cls = CONFIG_MAPPING[mt]
    except KeyError:
        raise UsageError(f"{where}: transformers {transformers.__version__} does not know model_type {mt!r}") from None

    def make(dd: dict[str, Any]) -> Any:
        try:
            return cls.from_dict(dict(dd))
        except Exception as e1:
            try:
                kw = {k: v for k, v in dd.items() if k != "model_type"}
                return transformers.AutoConfig.for_model(mt, **kw)
            except Exception:
                raise UsageError(f"{where}: transformers cannot build a {cls.__name__} from it: "
                                 f"{(str(e1).splitlines() or [type(e1).__name__])[0][:160]}") from None

    cfg = make(d)
    old = getattr(cfg, "num_hidden_layers", None)
    if not isinstance(old, int) or old < 1:
        raise UsageError(f"{where}: the {cls.__name__} has no num_hidden_layers (a nested text_config is not "
                         f"supported: give the text model's own config.json)")
    adjusted: list[str] = []
    if layers is not None and layers != old:
        key = getattr(cls, "attribute_map", {}).get("num_hidden_layers", "num_hidden_layers")
        d2, adjusted = with_layers(d, key, old, layers)
        cfg = make(d2)
        if getattr(cfg, "num_hidden_layers", None) != layers:
            cfg.num_hidden_layers = layers
    n = int(cfg.num_hidden_layers)
    return cfg, {"model_type": mt, "config_class": cls.__name__, "config_layers": old, "layers": n,
                 "dropped_fields": dropped, "adjusted_fields": adjusted}


# ---- GPU side --------------------------------------------------------------------------------------------

def _torch_dtype(torch: Any, dtype: str) -> Any:
    if dtype not in DTYPES:
        raise UsageError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return getattr(torch, dtype)


def build_model(cfg: Any, dtype: str = "float16", device: str = "cuda", seed: int = 0) -> Any:
    """``AutoModelForCausalLM.from_config`` with random weights (seeded) built on ``device`` in
    ``dtype``, in eval mode, with gradients off."""
    import torch
    import transformers

    dt = _torch_dtype(torch, dtype)
    kw = {"dtype": dt} if _version_tuple(transformers.__version__) >= (4, 56) else {"torch_dtype": dt}
    torch.manual_seed(seed)
    try:
        with torch.device(device):
            model = transformers.AutoModelForCausalLM.from_config(cfg, **kw)
    except ValueError as e:
        raise UsageError(f"transformers cannot build a causal LM from this config: "
                         f"{(str(e).splitlines() or [''])[0][:200]}") from None
    p = next(model.parameters())
    if p.device.type != torch.device(device).type:
        model.to(device)
    model.eval()
    model.requires_grad_(False)
    return model


def _cache_kwarg(model: Any) -> str:
    """The forward's cache argument: ``cache`` in recent transformers, ``past_key_values`` before."""
    import inspect

    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in params else "past_key_values"


def _cache_of(out: Any) -> Any:
    c = out.get("cache") if hasattr(out, "get") else None
    return c if c is not None else out.past_key_values


class Variants:
    """Stock and swapped on one model object. ``gemvtune.swap_linears`` runs once; its GemvLinear objects
    and (after ``gemvtune.restore_linears``) the original nn.Linear objects are then put in place by
    setattr: every round sees the same module objects of each variant, so torch.compile's guards match
    one of two cached graphs instead of recompiling at each switch."""

    def __init__(self, model: Any, table: Any):
        import gemvtune

        self.model = model
        self.names = list(gemvtune.swap_linears(model, table))
        self.wrapped = [self._slot(n) for n in self.names]
        restored = set(gemvtune.restore_linears(model))
        self.stock = [self._slot(n) for n in self.names]
        self.missing = [n for n in self.names if n not in restored]
        for k, ((parent, attr, obj), (_, _, w)) in enumerate(zip(self.stock, self.wrapped)):
            if obj is w:  # not restored: the wrapper's original module is the stock one
                orig = getattr(w, "original", None)
                if orig is None:
                    raise RuntimeError(f"restore_linears left {self.names[k]} swapped and it has no .original")
                setattr(parent, attr, orig)
                self.stock[k] = (parent, attr, orig)
        self.current = "stock"

    def _slot(self, name: str) -> tuple[Any, str, Any]:
        parent_name, _, attr = name.rpartition(".")
        parent = self.model.get_submodule(parent_name) if parent_name else self.model
        return parent, attr, getattr(parent, attr)

    def use(self, impl: str) -> None:
        if impl not in IMPLS:
            raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
        for parent, attr, obj in (self.wrapped if impl == "gemvtune" else self.stock):
            setattr(parent, attr, obj)
        self.current = impl


def _sync(torch: Any, device: str) -> None:
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def _first_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}"


def _dynamo_counts() -> dict[str, Any]:
    try:
        from torch._dynamo.utils import counters

        return {"unique_graphs": int(counters["stats"]["unique_graphs"]), "frames_ok": int(counters["frames"]["ok"]),
                "graph_breaks": int(sum(counters["graph_break"].values())),
                "break_reasons": dict(counters["graph_break"])}
    except Exception:
        return {}


def _dynamo_delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    if not before or not after:
        return {}
    out = {k: after[k] - before[k] for k in ("unique_graphs", "frames_ok", "graph_breaks")}
    reasons = {k: v - before["break_reasons"].get(k, 0) for k, v in after["break_reasons"].items()}
    out["break_reasons"] = {k[:200]: v for k, v in sorted(reasons.items(), key=lambda kv: -kv[1]) if v > 0}
    return out


def _raise_recompile_limits() -> dict[str, Any]:
    """Room for the two variants' guard sets (and transformers' own recompiles) per code object."""
    import torch._dynamo

    cfg, done = torch._dynamo.config, {}
    for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit", "accumulated_cache_size_limit"):
        try:
            cur = getattr(cfg, name)
        except AttributeError:
            continue
        want = DYNAMO_RECOMPILE_LIMIT if not name.startswith("accumulated") else max(DYNAMO_RECOMPILE_LIMIT * 8, 512)
        try:
            if isinstance(cur, int) and cur < want:
                setattr(cfg, name, want)
            done[name] = getattr(cfg, name)
        except Exception:
            pass
    return done


def reset_compile(model: Any) -> None:
    """Forget every compiled graph: dynamo's caches, CUDA-graph trees, and the compiled callable that
    transformers keeps on the model (``_compiled_call``)."""
    import torch

    with contextlib.suppress(Exception):
        torch._dynamo.reset()
    with contextlib.suppress(Exception):
        from torch._inductor.cudagraph_trees import reset_cudagraph_trees

        reset_cudagraph_trees()
    for attr in ("_compiled_call", "_last_compile_config"):
        with contextlib.suppress(Exception):
            if attr in model.__dict__:
                delattr(model, attr)


class _Bench:
    """One model, one prompt, stock and swapped; every generate wrapped so a failure is a row, not a crash."""

    def __init__(self, model: Any, variants: Variants, ids: Any, tokens: int, device: str, pad_id: int,
                 echo: Callable[[str], None], lock: Any = None):
        import torch

        self.torch, self.model, self.v, self.ids, self.tokens = torch, model, variants, ids, tokens
        self.device, self.pad_id, self.echo = device, pad_id, echo
        self.mask = torch.ones_like(ids)
        self.lock = lock or contextlib.nullcontext
        self.outputs: dict[tuple[str, str], list[list[int]]] = {}

    def generate(self, mode: str, tokens: int | None = None) -> Any:
        kw: dict[str, Any] = {"max_new_tokens": tokens or self.tokens, "min_new_tokens": tokens or self.tokens,
                              "do_sample": False, "attention_mask": self.mask, "pad_token_id": self.pad_id}
        if mode == "compiled":
            kw["cache_implementation"] = "static"
        return self.model.generate(self.ids, **kw)

    def timed(self, impl: str, mode: str) -> dict[str, Any]:
        """One timed generate: seconds, the new tokens, status and error."""
        torch = self.torch
        self.v.use(impl)
        try:
            with self.lock():
                _sync(torch, self.device)
                t0 = time.perf_counter()
                out = self.generate(mode)
                _sync(torch, self.device)
                dt = time.perf_counter() - t0
            new = out[0, self.ids.shape[1]:].tolist()
        except Exception as e:
            with contextlib.suppress(Exception):
                _sync(torch, self.device)
            return {"seconds": math.nan, "status": "error", "error": _first_line(e), "new": []}
        status = "ok" if len(new) == self.tokens else "short"
        return {"seconds": dt, "status": status, "new": new,
                "error": "" if status == "ok" else f"generated {len(new)} of {self.tokens} tokens"}


def _row(meta: dict[str, Any], impl: str, mode: str, rnd: Any, pos: int, res: dict[str, Any], scheme: str,
         tokens: int) -> dict[str, Any]:
    s = res["seconds"]
    good = res["status"] == "ok" and s == s and s > 0
    return {"model": meta["model"], "layers": meta["layers"], "impl": impl, "mode": mode, "round": rnd,
            "position": pos, "tokens": tokens, "prompt_tokens": meta["prompt_tokens"], "seconds": s,
            "tokens_per_s": tokens / s if good else math.nan, "ms_per_token": 1e3 * s / tokens if good else math.nan,
            "status": res["status"], "error": res.get("error", ""), "scheme": scheme}


def run_rounds(b: _Bench, rounds: int, meta: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Warm-up, then ``rounds`` timed rounds. Scheme ``interleaved``: per round, per mode, stock and
    gemvtune back to back (the order alternating between rounds), the compiled graphs of both variants
    kept side by side. If compiled stock fails once the swapped variant has compiled too (switching broke),
    or a compiled call fails during the interleaved rounds, compiled mode is (re-)timed ``blocked``: per
    implementation ``reset_compile``, one warm-up, then all its rounds in a row; eager stays interleaved.
    An (impl, mode) whose warm-up failed is not timed (its rows say why). Returns (rows, info)."""
    echo, T = b.echo, b.tokens
    info: dict[str, Any] = {"warmup": {}, "scheme": "interleaved", "notes": []}

    def warm(impl: str, mode: str, tag: str = "") -> dict[str, Any]:
        before = _dynamo_counts()
        t0 = time.perf_counter()
        res = b.timed(impl, mode)
        w = {"seconds": time.perf_counter() - t0, "status": res["status"], "error": res["error"],
             "dynamo": _dynamo_delta(before, _dynamo_counts())}
        info["warmup"][f"{impl}/{mode}{tag}"] = w
        dyn = w["dynamo"]
        echo(f"warm-up {impl:8s} {mode:8s}{tag}: {w['seconds']:7.1f} s, {res['status']}"
             + (f" ({res['error']})" if res["error"] else "")
             + (f"; dynamo: {dyn.get('unique_graphs', 0)} graphs, {dyn.get('graph_breaks', 0)} graph breaks"
                if dyn and mode == "compiled" else ""))
        return res

    def skipped(impl: str, mode: str, r: int, pos: int, why: str, scheme: str) -> dict[str, Any]:
        return _row(meta, impl, mode, r, pos, {"seconds": math.nan, "status": "skipped",
                                                "error": f"warm-up failed: {why}"}, scheme, T)

    # Warm-up: each (impl, mode) once, in round 0's order; then compiled stock once more, after the swapped
    # variant compiled, to see that switching back finds its graph.
    for mode in MODES:
        for impl in IMPLS:
            warm(impl, mode)
    switch = warm("stock", "compiled", " (switch back)")
    bad = {(i, m): info["warmup"][f"{i}/{m}"]["error"] or info["warmup"][f"{i}/{m}"]["status"]
           for i in IMPLS for m in MODES if info["warmup"][f"{i}/{m}"]["status"] != "ok"}
    blocked = ("stock", "compiled") not in bad and switch["status"] != "ok"
    if blocked:
        info["notes"].append(f"compiled stock failed after the swapped model compiled ({switch['error']}): "
                             "compiled mode timed blocked")
    if (info["warmup"]["stock/compiled (switch back)"].get("dynamo") or {}).get("unique_graphs"):
        info["notes"].append("switching back to stock compiled new graphs during the warm-up (torch.compile's "
                             "guards did not keep both variants)")

    rows: list[dict[str, Any]] = []
    before = _dynamo_counts()
    modes_now = [m for m in MODES if not (blocked and m == "compiled")]
    for r in range(rounds):
        order = IMPLS if r % 2 == 0 else IMPLS[::-1]
        line = []
        for mode in modes_now:
            for pos, impl in enumerate(order):
                if (impl, mode) in bad:
                    rows.append(skipped(impl, mode, r, pos, bad[impl, mode], "interleaved"))
                    continue
                res = b.timed(impl, mode)
                b.outputs.setdefault((impl, mode), []).append(res["new"])
                rows.append(_row(meta, impl, mode, r, pos, res, "interleaved", T))
                line.append(f"{mode} {impl} " + (f"{T / res['seconds']:.1f} tok/s" if res["status"] == "ok"
                                                  else res["status"]))
        echo(f"round {r + 1}/{rounds}: " + ", ".join(line))
    delta = _dynamo_delta(before, _dynamo_counts())
    info["recompiles_during_timing"] = delta.get("unique_graphs", 0) if delta else None

    failed = [x for x in rows if x["mode"] == "compiled" and x["status"] not in ("ok", "skipped")]
    if not blocked and failed:
        blocked = True
        info["notes"].append(f"{len(failed)} interleaved compiled runs failed ({failed[0]['error']}): compiled "
                             "mode re-timed blocked; the interleaved compiled rows are in the provenance JSON "
                             "under abandoned_rows")
        info["abandoned_rows"] = [x for x in rows if x["mode"] == "compiled"]
        rows = [x for x in rows if x["mode"] != "compiled"]
        for k in [k for k in b.outputs if k[1] == "compiled"]:
            del b.outputs[k]
    if blocked:
        info["scheme"] = "eager interleaved, compiled blocked"
        for impl in IMPLS:
            echo(f"compiled {impl}: reset torch.compile, warm up, then {rounds} rounds in a row")
            reset_compile(b.model)
            w = warm(impl, "compiled", " (blocked)")
            for r in range(rounds):
                if w["status"] != "ok":
                    rows.append(skipped(impl, "compiled", r, 0, w["error"] or w["status"], "blocked"))
                    continue
                res = b.timed(impl, "compiled")
                b.outputs.setdefault((impl, "compiled"), []).append(res["new"])
                rows.append(_row(meta, impl, "compiled", r, 0, res, "blocked", T))
                echo(f"  compiled {impl} round {r + 1}/{rounds}: "
                     + (f"{T / res['seconds']:.1f} tok/s" if res["status"] == "ok"
                        else f"{res['status']} {res['error']}"))
    info["scheme_note"] = SCHEME_NOTES[info["scheme"]]
    return rows, info


SCHEME_NOTES = {
    "interleaved": "per round, per mode (eager, then compiled), stock and gemvtune back to back, the order alternating "
                   "between rounds; both variants' compiled graphs kept side by side (swap_linears once, then the same "
                   "module objects switched by setattr, so torch.compile's guards see two fixed module sets).",
    "eager interleaved, compiled blocked": "eager as interleaved; compiled: per implementation torch._dynamo.reset(), "
                                           "CUDA-graph trees reset and transformers' cached compiled call dropped, one "
                                           "warm-up, then all its rounds in a row (switching variants under one "
                                           "compiled model failed).",
}


def compile_summary(info: dict[str, Any], model: Any) -> dict[str, str]:
    """Per implementation, what torch.compile did in its compiled warm-up (graphs, graph breaks, the most
    frequent break reason), and whether transformers kept a compiled callable on the model."""
    out = {}
    for impl in IMPLS:
        warmup = info.get("warmup", {})
        w = warmup.get(f"{impl}/compiled (blocked)") or warmup.get(f"{impl}/compiled") or {}
        d = w.get("dynamo") or {}
        text = f"warm-up {w.get('seconds', math.nan):.1f} s, {w.get('status', '?')}"
        if d:
            text += f", {d.get('unique_graphs', 0)} graphs compiled, {d.get('graph_breaks', 0)} graph breaks"
            reasons = d.get("break_reasons") or {}
            if reasons:
                k = next(iter(reasons))
                text += f" (most: {k[:150]} ×{reasons[k]})"
        out[impl] = text
    out["transformers"] = ("kept a compiled forward on the model (_compiled_call)" if "_compiled_call" in model.__dict__
                           else "kept no compiled forward on the model: compiled mode may not have compiled")
    return out


def agreement(b: _Bench) -> dict[str, Any]:
    out = {}
    for mode in MODES:
        s, g = b.outputs.get(("stock", mode), []), b.outputs.get(("gemvtune", mode), [])
        s_ok, g_ok = [x for x in s if x], [x for x in g if x]
        if not s_ok or not g_ok:
            out[mode] = {"error": "no successful generate of both implementations"}
            continue
        a = token_agreement(s_ok[0], g_ok[0])
        a["stock_repeatable"] = all(x == s_ok[0] for x in s_ok)
        a["gemvtune_repeatable"] = all(x == g_ok[0] for x in g_ok)
        out[mode] = a
    return out


def logit_diffs(b: _Bench) -> dict[str, Any]:
    """Prefill and the first decode step, eager, both fed the prompt and stock's greedy next token:
    max|a - b| / max|a| (a stock, b gemvtune) of the logits."""
    torch, model = b.torch, b.model
    kw = _cache_kwarg(model)
    res: dict[str, Any] = {}

    def run(impl: str, nxt: Any) -> tuple[Any, Any, Any]:
        b.v.use(impl)
        with torch.no_grad():
            out = model(input_ids=b.ids, use_cache=True)
            pre = out.logits.float()
            if nxt is None:
                nxt = pre[:, -1:].argmax(-1)
            out2 = model(input_ids=nxt, use_cache=True, **{kw: _cache_of(out)})
            dec = out2.logits[:, -1].float()
        return pre, dec, nxt

    def rel(a: Any, x: Any) -> float:
        den = float(a.abs().max())
        num = float((a - x).abs().max())
        return num / den if den > 0 and math.isfinite(den) else math.nan

    try:
        pre_s, dec_s, nxt = run("stock", None)
        pre_g, dec_g, _ = run("gemvtune", nxt)
        res = {"prefill_rel": rel(pre_s, pre_g), "decode_rel": rel(dec_s, dec_g),
               "prefill_max_abs_stock": float(pre_s.abs().max()), "decode_max_abs_stock": float(dec_s.abs().max()),
               "decode_argmax_equal": bool((dec_s.argmax(-1) == dec_g.argmax(-1)).all()),
               "gemvtune_finite": bool(torch.isfinite(pre_g).all() and torch.isfinite(dec_g).all())}
    except Exception as e:
        res = {"error": _first_line(e)}
    return res


def _profile_totals(b: _Bench, fn: Callable[[], Any]) -> dict[str, Any]:
    """GPU time by category of whatever ``fn`` launches (torch.profiler, CUDA activity; Chrome trace)."""
    torch = b.torch
    from torch.profiler import ProfilerActivity, profile

    def once(acts: list) -> dict[str, Any]:
        with tempfile.TemporaryDirectory() as d:
            with profile(activities=acts) as prof:
                fn()
                _sync(torch, b.device)
            path = os.path.join(d, "trace.json")
            prof.export_chrome_trace(path)
            with open(path) as f:
                events = json.load(f).get("traceEvents", [])
        return kernel_totals(events)

    tot = once([ProfilerActivity.CUDA])
    if tot["kernel_n"] == 0:  # some builds record GPU activity only alongside CPU activity
        tot = once([ProfilerActivity.CPU, ProfilerActivity.CUDA])
    return tot


def profile_linear_share(b: _Bench, compiled: bool = True) -> dict[str, Any]:
    """Per impl and mode: GPU kernel time per decode step by category (gemvtune.hfbench_report), from a
    profiled generate of k tokens minus one of 1 token over k - 1 (eager: k = PROFILE_TOKENS; compiled:
    k = the timed token count, so the static cache and compiled graphs are the timed ones)."""
    out: dict[str, Any] = {impl: {} for impl in IMPLS}
    if not str(b.device).startswith("cuda"):
        return {impl: {m: {"error": "no CUDA device: not profiled"} for m in MODES} for impl in IMPLS}
    plan = [("eager", max(2, min(PROFILE_TOKENS, b.tokens)))]
    if compiled and b.tokens >= 2:
        plan.append(("compiled", b.tokens))
    for impl in IMPLS:
        for mode, k in plan:
            b.v.use(impl)
            try:
                if mode == "compiled":  # this variant's graphs in place (blocked scheme: the other's were last)
                    b.generate(mode, k)
                    _sync(b.torch, b.device)
                full = _profile_totals(b, lambda: b.generate(mode, k))
                base = _profile_totals(b, lambda: b.generate(mode, 1))
                out[impl][mode] = {"tokens": k, "per_step": per_step(full, base, k - 1),
                                   "top": top_kernels(full, base, k - 1)}
            except Exception as e:
                out[impl][mode] = {"error": _first_line(e)}
    return out


def explain_rows(model: Any) -> dict[str, Any]:
    """``gemvtune.explain(model, n=1)`` of the swapped model, summarized; an error is recorded, not raised."""
    try:
        import gemvtune

        fn = getattr(gemvtune, "explain", None)
        if fn is None:
            from . import torch_linear

            fn = getattr(torch_linear, "explain", None)
        if fn is None:
            return {"error": "gemvtune.explain does not exist in this version"}
        rows = [dict(r) for r in fn(model, n=1)]
        return {"rows": rows, "summary": explain_summary(rows)}
    except Exception as e:
        return {"error": _first_line(e)}


def device_env(device: str) -> dict[str, Any]:
    import torch

    env: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda or "", "python": platform.python_version(),
                           "gpu": "cpu", "driver": ""}
    try:
        import transformers

        env["transformers"] = transformers.__version__
    except Exception:
        env["transformers"] = "?"
    from . import __version__

    env["gemvtune"] = __version__
    if str(device).startswith("cuda"):
        p = torch.cuda.get_device_properties(torch.device(device))
        env.update(gpu=p.name, compute_capability=f"{p.major}.{p.minor}", sm_count=p.multi_processor_count,
                   memory_bytes=p.total_memory)
        try:
            env["pci_bus_id"] = (f"{int(getattr(p, 'pci_domain_id', 0)):08X}:{int(p.pci_bus_id):02X}:"
                                 f"{int(p.pci_device_id):02X}.0")
        except Exception:
            pass
        try:
            cmd = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
            if env.get("pci_bus_id"):
                cmd.append(f"--id={env['pci_bus_id']}")
            env["driver"] = subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip()
        except Exception:
            pass
    return env


def default_table_path(device: str = "cuda") -> str:
    """results/<gpu>/table.json for the GPU torch sees (no CuPy runner: it would make its own stream
    current in this process)."""
    import torch

    if not torch.cuda.is_available():
        raise NoDeviceError("torch sees no CUDA device (torch.cuda.is_available() is False)")
    from .report import gpu_slug

    return str(Path("results") / gpu_slug(torch.cuda.get_device_name(torch.device(device))) / "table.json")


def _gpu_lock(env: dict[str, Any]) -> Any:
    """The per-GPU timing lock gemvtune's other benchmarks and searches hold (None where unavailable)."""
    if not env.get("pci_bus_id"):
        return None
    try:
        from .runners.cuda.gpulock import GpuLock

        return GpuLock(env["pci_bus_id"]).held
    except Exception:
        return None


def _pad_id(cfg: Any) -> int:
    for v in (getattr(cfg, "pad_token_id", None), getattr(cfg, "eos_token_id", None)):
        if isinstance(v, (list, tuple)) and v:
            v = v[0]
        if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
            return v
    return 0


def run_hf_bench(config_path: str, layers: int | None = None, tokens: int = 128, prompt_tokens: int = 16,
                 table_path: str | None = None, out_dir: str | None = None, rounds: int = 3,
                 echo: Callable[[str], None] = print, dtype: str = "float16", device: str = "cuda", seed: int = 0,
                 profile: bool = True, profile_compiled: bool = True, command: str | None = None) -> dict[str, Path]:
    """The whole benchmark; returns the paths written (csv, summary_csv, summary_md, provenance, png)."""
    for v, opt in ((tokens, "--tokens"), (prompt_tokens, "--prompt-tokens"), (rounds, "--rounds")):
        positive_int(v, opt)
    if layers is not None:
        positive_int(layers, "--layers")
    tf_version = check_transformers()
    fields, name, cfg_file = read_config(config_path)
    cfg, cinfo = build_config(fields, layers, where=f"config {cfg_file}")
    layers = cinfo["layers"]
    if table_path is None:
        raise UsageError("run_hf_bench needs a table path")
    from .table import load_table

    table = load_table(table_path)

    import torch

    if str(device).startswith("cuda") and not torch.cuda.is_available():
        raise NoDeviceError("torch sees no CUDA device (torch.cuda.is_available() is False)")
    env = device_env(device)
    from .report import gpu_slug

    out = Path(out_dir) if out_dir else Path("results") / gpu_slug(env["gpu"]) / "bench"
    try:
        out.mkdir(parents=True, exist_ok=True)  # an unwritable --out fails before the GPU work
    except OSError as e:
        raise UsageError(f"output folder {out} cannot be created: {e.strerror or e}") from None
    if str(device).startswith("cuda"):
        with contextlib.suppress(Exception):
            table._check_gpu(env["gpu"])
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%d-%H%M%S")
    stem = f"hf-{name}-L{layers}-{stamp}"
    result: dict[str, Any] = {
        "model": name, "config_path": str(config_path), "config_file": str(cfg_file), **cinfo,
        "dtype": dtype, "tokens": tokens, "prompt_tokens": prompt_tokens, "rounds": rounds, "seed": seed,
        "table": str(table_path), "device": device, "env": env,
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": command or " ".join(shlex.quote(a) for a in ["gemvtune", *sys.argv[1:]]), "notes": []}
    result["env"]["transformers"] = tf_version
    echo(f"device: {env['gpu']} (driver {env.get('driver') or '?'}), torch {env['torch']}, transformers {tf_version}")
    if str(device).startswith("cuda"):
        result["dynamo_limits"] = _raise_recompile_limits()

    t0 = time.perf_counter()
    model = build_model(cfg, dtype, device, seed)
    nparams = sum(p.numel() for p in model.parameters())
    result.update(architecture=type(model).__name__, parameters=nparams,
                  attn_implementation=str(getattr(model.config, "_attn_implementation", "")))
    echo(f"built {type(model).__name__} from {cfg_file}: {layers} layers (config {cinfo['config_layers']}), "
         f"{nparams / 1e9:.2f} B parameters, {dtype}, in {time.perf_counter() - t0:.1f} s")
    if cinfo["dropped_fields"] or cinfo["adjusted_fields"]:
        result["notes"].append(f"config fields dropped: {cinfo['dropped_fields'] or 'none'}; per-layer lists "
                               f"fitted to {layers} layers: {cinfo['adjusted_fields'] or 'none'}")

    variants = Variants(model, table)
    result["swapped"] = len(variants.names)
    result["swapped_names"] = variants.names
    if variants.missing:
        result["notes"].append(f"restore_linears did not name {len(variants.missing)} swapped layers "
                               f"(e.g. {variants.missing[0]}); they were put back by setattr")
    echo(f"swap_linears: {len(variants.names)} linear layers")
    if not variants.names:
        result["notes"].append("swap_linears replaced no layer: gemvtune and stock are the same model")

    vocab = int(getattr(cfg, "vocab_size", 0) or 0)
    if vocab < 2:
        raise UsageError(f"config {cfg_file}: vocab_size must be >= 2")
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (1, prompt_tokens), generator=gen).to(device)
    lock = _gpu_lock(env)
    b = _Bench(model, variants, ids, tokens, device, _pad_id(cfg), echo, lock)
    meta = {"model": name, "layers": layers, "prompt_tokens": prompt_tokens}

    rows, info = run_rounds(b, rounds, meta)
    result.update({k: v for k, v in info.items() if k != "notes"})
    result["notes"] += info["notes"]
    result["compile"] = compile_summary(info, model)
    write_rows_csv(rows, out / f"{stem}.csv", ROW_COLUMNS)  # the timings survive whatever fails below
    echo(f"timings in {out / f'{stem}.csv'}")

    result["agreement"] = agreement(b)
    result["logits"] = logit_diffs(b)
    echo("logits vs stock: " + (result["logits"].get("error") or
                                f"prefill {result['logits']['prefill_rel']:.2e}, first decode step "
                                f"{result['logits']['decode_rel']:.2e} (max|diff| / max|stock|)"))
    if profile:
        echo("profiling (torch.profiler, CUDA activity)...")
        result["profile"] = profile_linear_share(b, compiled=profile_compiled)
    variants.use("gemvtune")
    result["explain"] = explain_rows(model)
    variants.use("stock")

    paths = write_hf_reports(rows, result, out, stem)
    echo(f"wrote {', '.join(p.name for p in paths.values())} in {out}")
    echo(short_table(mode_table(rows)))
    return paths
