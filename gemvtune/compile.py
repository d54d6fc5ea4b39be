"""NVRTC compilation to cubin, with a resource report and a persistent cache keyed by source hash.

NVRTC is called directly (ctypes) so the same path runs on a CPU-only machine (compile checks,
explicit ``sm_XX``) and on a GPU host, where the CUDA runner loads the cubin with
``cupy.RawModule(path=...)``. ctypes drops the GIL during the call, so a thread pool compiles in
parallel on every core.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import re
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from .epilogue import DEFAULT, Epilogue
from .errors import GemvtuneError

DEFAULT_ARCH = "sm_90"


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


class NvrtcUnavailable(GemvtuneError):
    pass


@dataclass(frozen=True)
class Resources:
    """What ptxas reported for the kernel."""

    registers: int = -1
    spill_stores: int = 0
    spill_loads: int = 0
    stack_bytes: int = 0
    smem_bytes: int = 0

    @classmethod
    def parse(cls, log: str, kernel: str | None = None) -> "Resources":
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
    d = Path(os.environ.get("GEMVTUNE_CACHE_DIR") or Path.home() / ".cache" / "gemvtune") / "cubin"
    d.mkdir(parents=True, exist_ok=True)
    return d


class _Nvrtc:
    def __init__(self) -> None:
        self.lib = self._load()
        self.include_dirs = self._includes()
        maj, mi = ctypes.c_int(), ctypes.c_int()
        self.lib.nvrtcVersion(ctypes.byref(maj), ctypes.byref(mi))
        self.version = f"{maj.value}.{mi.value}"
        self.lib.nvrtcGetErrorString.restype = ctypes.c_char_p

    @staticmethod
    def _load() -> ctypes.CDLL:
        errors = []
        try:
            from cuda.pathfinder import load_nvidia_dynamic_lib

            return ctypes.CDLL(load_nvidia_dynamic_lib("nvrtc").abs_path)
        except Exception as e:  # pragma: no cover - depends on the host
            errors.append(str(e))
        for cand in ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"):
            try:
                return ctypes.CDLL(cand)
            except OSError as e:
                errors.append(str(e))
        raise NvrtcUnavailable("NVRTC not found (pip install nvidia-cuda-nvrtc): " + "; ".join(errors[:2]))

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

    def check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise GemvtuneError(f"NVRTC {what} failed: {self.lib.nvrtcGetErrorString(rc).decode()}")

    def compile(self, source: str, name: str, options: Sequence[str]) -> tuple[bytes, str]:
        lib = self.lib
        prog = ctypes.c_void_p()
        self.check(lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), f"{name}.cu".encode(), 0, None, None),
                   "create")
        try:
            opts = [o.encode() for o in options] + [f"-I{d}".encode() for d in self.include_dirs]
            arr = (ctypes.c_char_p * len(opts))(*opts)
            rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
            n = ctypes.c_size_t()
            lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
            buf = ctypes.create_string_buffer(n.value)
            lib.nvrtcGetProgramLog(prog, buf)
            log = buf.value.decode(errors="replace")
            if rc != 0:
                raise CompileError(name, log, options, source, lib.nvrtcGetErrorString(rc).decode())
            lib.nvrtcGetCUBINSize(prog, ctypes.byref(n))
            cubin = ctypes.create_string_buffer(n.value)
            self.check(lib.nvrtcGetCUBIN(prog, cubin), "get cubin")
            return cubin.raw, log
        finally:
            lib.nvrtcDestroyProgram(ctypes.byref(prog))


@functools.lru_cache(maxsize=1)
def nvrtc() -> _Nvrtc:
    return _Nvrtc()


def options_for(arch: str = DEFAULT_ARCH) -> tuple[str, ...]:
    if not re.fullmatch(r"sm_\d{2,3}a?", arch):
        raise GemvtuneError(f"bad architecture {arch!r}: expected e.g. sm_90")
    return (f"-arch={arch}", "-std=c++17", "--ptxas-options=-v", "-default-device")


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def compile_source(source: str, name: str = "gemv", arch: str = DEFAULT_ARCH, kernel: str = "gemv",
                   use_cache: bool = True) -> Compiled:
    """Compile (or fetch from the disk cache) one source to a cubin file. Raises CompileError."""
    from .render import source_hash

    nv = nvrtc()
    opts = options_for(arch)
    key = source_hash(source, opts + (nv.version,))
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
                 kernel: str = "gemv") -> list[Compiled | CompileError]:
    """Compile (name, source[, kernel]) items in parallel; a failure is returned in place, never raised."""
    items = list(items)

    def one(it: tuple[str, ...]) -> Compiled | CompileError:
        try:
            return compile_source(it[1], it[0], arch, it[2] if len(it) > 2 else kernel)
        except CompileError as e:
            return e

    jobs = jobs or max(1, os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=jobs) as ex:
        return list(ex.map(one, items))


def compile_variant(config: Any, shape: Any, arch: str = DEFAULT_ARCH, source: str | None = None,
                    name: str | None = None, epilogue: Epilogue = DEFAULT) -> Compiled:
    """Render with ``epilogue`` (default: FP32 out, no bias) unless ``source`` is given, and compile
    one variant of a family."""
    from .families import family_of
    from .render import render

    src = source if source is not None else render(config, shape, epilogue)
    return compile_source(src, (name or config.label + epilogue.label).replace(".", "_"), arch,
                          family_of(config).main_kernel)


def precompile_variant(config: Any, shape: Any, arch: str = DEFAULT_ARCH, epilogue: Epilogue = DEFAULT) -> None:
    """Compile into the disk cache ahead of a measurement (thread-safe, CPU only); a failure is left
    for the measurement to record."""
    try:
        compile_variant(config, shape, arch, epilogue=epilogue)
    except Exception:
        pass


def compile_variants(pairs: Iterable[tuple[Any, ...]], arch: str = DEFAULT_ARCH, jobs: int | None = None,
                     epilogue: Epilogue = DEFAULT) -> list[Compiled | CompileError]:
    """Render and compile (config, shape) or (config, shape, epilogue) items in parallel, in order
    (an item without its own epilogue gets ``epilogue``: by default FP32 out, no bias); compile failures
    are returned in place (a config or epilogue render refuses raises UsageError)."""
    from .families import family_of
    from .render import render

    items = []
    for item in pairs:
        c, s = item[0], item[1]
        e = item[2] if len(item) > 2 else epilogue
        items.append(((c.label + e.label).replace(".", "_"), render(c, s, e), family_of(c).main_kernel))
    return compile_many(items, arch=arch, jobs=jobs)
