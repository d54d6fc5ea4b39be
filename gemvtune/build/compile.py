"""NVRTC compilation to cubin, with a resource report and a persistent cache keyed by source hash.

NVRTC is called through NVIDIA's Python bindings, ``cuda.bindings.nvrtc`` (package ``cuda-bindings``;
libnvrtc itself from the ``nvidia-cuda-nvrtc`` wheel or the system, found by ``cuda.pathfinder``), so
the same path runs on a CPU-only machine (compile checks, explicit ``sm_XX``) and on a GPU host, where
``gemvtune.device.plan`` loads the cubin with ``cuModuleLoadData`` (every variant the runner, the dispatcher
and the PyTorch op launch). The cache key is the source hash, the options and ``nvrtcVersion``. The architecture is
one of ``gemvtune.kernels.arch.ARCHS``; a config that architecture cannot run (a feature it lacks, a limit it
exceeds) never reaches NVRTC: ``compile_variant`` raises, and ``compile_variants`` returns in its place, an
``InvalidForArch`` saying why.

``nvrtcCompileProgram`` in cuda-bindings 13.5 drops the GIL, so ``compile_many``'s thread pool
compiles on every core and precompiles overlap GPU measurement. Measured on a 2-core CPU host, 8 distinct GEMV variants at 4096x4096, fresh cache, 6
interleaved rounds: jobs=1 0.92 s, jobs=2 0.53 s (median; 1.73x, process CPU/wall 1.8-1.9 with two
jobs), the same as the ctypes bindings this replaced (0.98 s / 0.58 s, 1.69x). A Python thread kept
~90% of its idle rate while the other compiled (~50% against a GIL-holding Python loop).
"""

from __future__ import annotations

import functools
import json
import os
import re
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import GemvtuneError
from ..kernels.arch import DEFAULT as _DEFAULT
from ..kernels.arch import features_in, parse_arch
from ..kernels.epilogue import DEFAULT, Epilogue

DEFAULT_ARCH = _DEFAULT.name   # "sm_90"


class CompileError(GemvtuneError):
    """NVRTC rejected a source. Carries the log, the options and the numbered source."""

    def __init__(self, name: str, log: str, options: Sequence[str], source: str, status: str = ""):
        first = next((ln for ln in log.splitlines() if "error" in ln), "")
        if not first:  # no error line (e.g. a static shared-memory overflow): the status, and what ptxas used
            used = next((ln for ln in reversed(log.splitlines()) if "Used" in ln), "")
            first = f"{status or 'NVRTC error'}" + (f" ({used.split(':', 1)[-1].strip()})" if used else "")
        super().__init__(f"compile of {name} failed: {first.strip()}")
        self.log, self.options, self.source = log, list(options), source

    def details(self) -> str:
        listing = "\n".join(f"{i:4d}  {ln}" for i, ln in enumerate(self.source.splitlines(), 1))
        return f"{self}\noptions: {' '.join(self.options)}\n--- log ---\n{self.log}\n--- source ---\n{listing}"


class NothingToCompile(CompileError):
    """A config of a library family (cuBLASLt): the library runs it, there is no source to compile."""

    def __init__(self, config: Any):
        from ..kernels.families import family_of

        GemvtuneError.__init__(self, f"{config.label} is a {family_of(config).name} algorithm: the library runs it, "
                                     "nothing to compile")
        self.log, self.options, self.source = "", [], ""


class InvalidForArch(CompileError):
    """A config the architecture cannot run (``ConfigBase.arch_reasons``): invalid, never handed to NVRTC. A
    ``CompileError`` so that every caller's compile results keep their type; ``invalid`` tells it from a failure."""

    invalid = True

    def __init__(self, config: Any, arch: str, reasons: Sequence[str]):
        GemvtuneError.__init__(self, f"invalid for {arch}: " + "; ".join(reasons))
        self.config, self.arch, self.reasons = config, arch, list(reasons)
        self.log, self.options, self.source = "", [], ""


class NvrtcUnavailable(GemvtuneError):
    pass


# The extras of pyproject.toml that bring NVRTC, the CUDA headers and cuda-bindings for one CUDA major.
NVRTC_HINT = ("install the extra that matches the NVIDIA driver: pip install 'gemvtune[cu13]' (CUDA 13 driver, "
              ">= 580) or pip install 'gemvtune[cu12]' (CUDA 12 driver); from a checkout pip install -e '.[cu13]' "
              "(they bring nvidia-cuda-nvrtc and cuda-bindings)")


@dataclass(frozen=True)
class Resources:
    """What ptxas reported for the kernel."""

    registers: int = -1
    spill_stores: int = 0
    spill_loads: int = 0
    stack_bytes: int = 0
    smem_bytes: int = 0

    @classmethod
    def parse(cls, log: str, kernel: str | None = None) -> Resources:
        # ptxas reports per entry function; take the block of the named kernel (or the first).
        blocks = re.split(r"Compiling entry function '", log)
        text = blocks[1] if len(blocks) > 1 else log
        if kernel:
            for b in blocks[1:]:
                if b.startswith(kernel + "'"):
                    text = b
        def num(pat: str) -> int:
            m = re.search(pat, text)
            return int(m.group(1)) if m else 0
        regs = re.search(r"Used (\d+) registers", text)
        return cls(
            registers=int(regs.group(1)) if regs else -1,
            spill_stores=num(r"(\d+) bytes spill stores"),
            spill_loads=num(r"(\d+) bytes spill loads"),
            stack_bytes=num(r"(\d+) bytes stack frame"),
            smem_bytes=num(r"(\d+) bytes smem"),
        )


@dataclass(frozen=True)
class Compiled:
    key: str
    cubin_path: str
    resources: Resources
    compile_s: float
    cached: bool
    log: str = field(default="", repr=False)


def _cache_dir() -> Path:
    from ..settings import settings

    d = settings().cache_dir / "cubin"
    d.mkdir(parents=True, exist_ok=True)
    return d


# The NVRTC and CUDA-header wheels of each CUDA major (pyproject.toml's cu12 and cu13 extras, beside their CuPy).
CUDA_WHEELS = {12: ("nvidia-cuda-nvrtc-cu12", "nvidia-cuda-runtime-cu12"),
               13: ("nvidia-cuda-nvrtc", "nvidia-cuda-runtime")}


@functools.lru_cache(maxsize=1)
def _wheel_versions() -> tuple[str, ...]:
    """The installed NVRTC and CUDA-header wheels as name==version (none for a system toolkit's NVRTC)."""
    from importlib import metadata

    out = []
    for name in (w for wheels in CUDA_WHEELS.values() for w in wheels):
        try:
            out.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pass
    return tuple(out)


class _Nvrtc:
    """NVRTC through ``cuda.bindings.nvrtc``: every call returns ``(nvrtcResult, *values)``."""

    def __init__(self) -> None:
        self.nv = self._load()
        self.include_dirs = self._includes()
        err, maj, mi = self.nv.nvrtcVersion()
        self.check(err, "version")
        # The cache key's compiler: NVRTC reports major.minor only ("13.0") and patch releases differ (13.0.88
        # rejects __builtin_offsetof), so the wheels' own versions too, NVRTC's and the headers'.
        self.build = "+".join([f"{maj}.{mi}", *_wheel_versions()])

    @staticmethod
    def _load() -> Any:
        """Import the bindings and make one call, which loads libnvrtc (found by cuda.pathfinder: the
        nvidia-cuda-nvrtc wheel, then the system); any failure becomes a one-line NvrtcUnavailable."""
        try:
            from cuda.bindings import nvrtc as nv

            nv.nvrtcVersion()
            return nv
        except Exception as e:  # ImportError, or cuda.pathfinder's DynamicLibNotFoundError (a RuntimeError)
            why = " ".join(str(e).split()) or type(e).__name__
            raise NvrtcUnavailable(f"NVRTC not found ({why}): {NVRTC_HINT}") from None

    @staticmethod
    def _includes() -> list[str]:
        dirs = []
        try:
            from cuda.pathfinder import find_nvidia_header_directory

            d = find_nvidia_header_directory("cudart")
            if d:
                dirs.append(str(d))
        except Exception:  # pragma: no cover - depends on the host
            pass
        for root in (os.environ.get("CUDA_PATH"), os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
            if root and Path(root, "include", "cuda_fp16.h").is_file():
                dirs.append(str(Path(root, "include")))
        return list(dict.fromkeys(dirs))

    def error_string(self, rc: Any) -> str:
        return self.nv.nvrtcGetErrorString(rc)[1].decode()

    def check(self, rc: Any, what: str) -> None:
        if rc != self.nv.nvrtcResult.NVRTC_SUCCESS:
            raise GemvtuneError(f"NVRTC {what} failed: {self.error_string(rc)}")

    def compile(self, source: str, name: str, options: Sequence[str]) -> tuple[bytes, str]:
        nv = self.nv
        err, prog = nv.nvrtcCreateProgram(source.encode(), f"{name}.cu".encode(), 0, None, None)
        self.check(err, "create")
        try:
            opts = [o.encode() for o in options] + [f"-I{d}".encode() for d in self.include_dirs]
            (rc,) = nv.nvrtcCompileProgram(prog, len(opts), opts)  # drops the GIL (measured: module docstring)
            err, n = nv.nvrtcGetProgramLogSize(prog)
            self.check(err, "get log size")
            buf = bytearray(n)  # (a fresh buffer: the bindings write into it; never a shared bytes object)
            self.check(nv.nvrtcGetProgramLog(prog, buf)[0], "get log")
            log = bytes(buf).split(b"\0", 1)[0].decode(errors="replace")
            if rc != nv.nvrtcResult.NVRTC_SUCCESS:
                raise CompileError(name, log, options, source, self.error_string(rc))
            err, n = nv.nvrtcGetCUBINSize(prog)
            self.check(err, "get cubin size")
            cubin = bytearray(n)
            self.check(nv.nvrtcGetCUBIN(prog, cubin)[0], "get cubin")
            return bytes(cubin), log
        finally:
            nv.nvrtcDestroyProgram(prog)


@functools.lru_cache(maxsize=1)
def nvrtc() -> _Nvrtc:
    return _Nvrtc()


def options_for(arch: Any = DEFAULT_ARCH) -> tuple[str, ...]:
    """NVRTC's options for ``arch`` (a name ``gemvtune.kernels.arch.parse_arch`` reads, or an ``Arch``): one of the
    known architectures, else a UsageError (exit 2)."""
    return (f"-arch={parse_arch(arch).name}", "-std=c++17", "--ptxas-options=-v", "-default-device")


def _atomic_write(path: Path, data: bytes) -> None:
    """A cache file written whole (gemvtune.safefile), private to this user (0600) as the cache has always been."""
    from ..safefile import atomic_write

    atomic_write(path, lambda f: f.write(data), binary=True, mode=0o600)


def compile_source(source: str, name: str = "gemv", arch: str = DEFAULT_ARCH, kernel: str = "gemv",
                   use_cache: bool = True) -> Compiled:
    """Compile (or fetch from the disk cache) one source to a cubin file. Raises CompileError."""
    from .render import source_hash

    a = parse_arch(arch)
    lacks = sorted(features_in(source) - a.features)
    if lacks:   # (a config's own check says why first: compile_variant(s); this guards every source, raw ones too)
        raise InvalidForArch(None, a.name, [a.lacks(f, f"the source {name}") for f in lacks])
    nv = nvrtc()
    opts = options_for(a)
    key = source_hash(source, opts + (nv.build,))
    d = _cache_dir()
    cubin, meta = d / f"{key}.cubin", d / f"{key}.json"
    if use_cache and cubin.is_file() and meta.is_file():
        try:
            m = json.loads(meta.read_text())
            return Compiled(key, str(cubin), Resources(**m["resources"]), m["compile_s"], True, m.get("log", ""))
        except (ValueError, KeyError, TypeError):
            pass  # a damaged cache entry is compiled again
    t0 = time.perf_counter()
    data, log = nv.compile(source, name, opts)
    dt = time.perf_counter() - t0
    res = Resources.parse(log, kernel)
    _atomic_write(cubin, data)
    _atomic_write(meta, json.dumps({"resources": res.__dict__, "compile_s": dt, "log": log}).encode())
    return Compiled(key, str(cubin), res, dt, False, log)


def compile_many(items: Iterable[tuple[str, ...]], arch: str = DEFAULT_ARCH, jobs: int | None = None,
                 kernel: str = "gemv", progress: str | None = None) -> list[Compiled | CompileError]:
    """Compile (name, source[, kernel]) items in parallel; a failure is returned in place, never raised.
    With ``progress`` (its label), a bar counts the compiles on stderr where that is a terminal."""
    from ..progress import progress as bar

    items = list(items)

    def one(it: tuple[str, ...]) -> Compiled | CompileError:
        try:
            return compile_source(it[1], it[0], arch, it[2] if len(it) > 2 else kernel)
        except CompileError as e:
            return e

    jobs = jobs or max(1, os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=jobs) as ex:
        return list(bar(ex.map(one, items), total=len(items), desc=progress or "", unit="kernel",
                        enabled=progress is not None))


def _invalid_for(config: Any, shape: Any, arch: Any) -> InvalidForArch | None:
    """Why ``arch`` cannot run ``config`` for ``shape``, as the result that stands for its compile (None: it can)."""
    a = parse_arch(arch)
    why = config.arch_reasons(shape, a)
    return InvalidForArch(config, a.name, why) if why else None


def compile_variant(config: Any, shape: Any, arch: str = DEFAULT_ARCH, source: str | None = None,
                    name: str | None = None, epilogue: Epilogue = DEFAULT, group: Any = None) -> Compiled:
    """Render for ``arch`` with ``epilogue`` (default: FP32 out, no bias) unless ``source`` is given, and compile
    one variant of a family. A config ``arch`` cannot run raises ``InvalidForArch`` before anything is rendered or
    compiled."""
    from ..kernels.families import family_of, is_library
    from .render import render

    if is_library(config):
        raise NothingToCompile(config)
    bad = _invalid_for(config, shape, arch)
    if bad is not None:
        raise bad
    src = source if source is not None else render(config, shape, epilogue, group, arch)
    suffix = f".g{len(group.Ms)}" if group is not None else ""
    return compile_source(src, (name or config.label + epilogue.label + suffix).replace(".", "_"), arch,
                          family_of(config).main_kernel)


def precompile_variant(config: Any, shape: Any, arch: str = DEFAULT_ARCH, epilogue: Epilogue = DEFAULT) -> None:
    """Compile into the disk cache ahead of a measurement (thread-safe, CPU only); a failure is left
    for the measurement to record; a library family's config has nothing to compile."""
    from ..kernels.families import is_library

    if is_library(config):
        return
    try:
        compile_variant(config, shape, arch, epilogue=epilogue)
    except Exception:
        pass


def compile_variants(pairs: Iterable[tuple[Any, ...]], arch: str = DEFAULT_ARCH, jobs: int | None = None,
                     epilogue: Epilogue = DEFAULT, progress: str | None = None) -> list[Compiled | CompileError]:
    """Render and compile (config, shape), (config, shape, epilogue) or (config, shape, epilogue, group) items in
    parallel, in order (an item without its own epilogue gets ``epilogue``: by default FP32 out, no bias; with a
    group, its grouped variant); compile failures are returned in place (a config or epilogue render refuses raises
    UsageError; a library family's config, which has nothing to compile, gets a NothingToCompile in its place, and a
    config ``arch`` cannot run an InvalidForArch: neither reaches NVRTC); ``progress`` as in ``compile_many``."""
    from ..kernels.families import family_of
    from .render import render

    items: list[tuple[str, ...]] = []
    placed: dict[int, CompileError] = {}
    for i, item in enumerate(pairs):
        c, s = item[0], item[1]
        e = item[2] if len(item) > 2 else epilogue
        g = item[3] if len(item) > 3 else None
        if family_of(c).library:
            placed[i] = NothingToCompile(c)
            continue
        bad = _invalid_for(c, s, arch)
        if bad is not None:
            placed[i] = bad
            continue
        suffix = f".g{len(g.Ms)}" if g is not None else ""
        items.append(((c.label + e.label + suffix).replace(".", "_"), render(c, s, e, g, arch), family_of(c).main_kernel))
    done = iter(compile_many(items, arch=arch, jobs=jobs, progress=progress))
    return [placed[i] if i in placed else next(done) for i in range(len(items) + len(placed))]
