"""A stand-in for ``nvmath.bindings.cublasLt`` on a machine with no GPU: the calls gemvtune.device.ltplan makes,
with the real enums' values and attribute C types, recorded; C memory written and read as the library would
(heuristic results, algorithm structs, attribute buffers at the addresses given). ``install`` puts it in
place of the bindings, the device context and the workspace allocation."""

from __future__ import annotations

import contextlib
import ctypes
import enum

import numpy as np

MatmulDescAttribute = enum.IntEnum("MatmulDescAttribute", {"COMPUTE_TYPE": 0, "SCALE_TYPE": 1, "TRANSA": 3,
                                                           "TRANSB": 4, "EPILOGUE": 7, "BIAS_POINTER": 8,
                                                           "BIAS_DATA_TYPE": 26})
MatmulPreferenceAttribute = enum.IntEnum("MatmulPreferenceAttribute", {
    "MAX_WORKSPACE_BYTES": 1, "MIN_ALIGNMENT_A_BYTES": 5, "MIN_ALIGNMENT_B_BYTES": 6, "MIN_ALIGNMENT_C_BYTES": 7,
    "MIN_ALIGNMENT_D_BYTES": 8})
MatmulAlgoConfigAttribute = enum.IntEnum("MatmulAlgoConfigAttribute", {
    "ID": 0, "TILE_ID": 1, "SPLITK_NUM": 2, "REDUCTION_SCHEME": 3, "CTA_SWIZZLING": 4, "CUSTOM_OPTION": 5,
    "STAGES_ID": 6, "INNER_SHAPE_ID": 7, "CLUSTER_SHAPE_ID": 8})
Epilogue = enum.IntEnum("Epilogue", {"DEFAULT": 1, "BIAS": 4})
matmul_algo_dtype = np.dtype([("data_", "<u8", (8,))])
matmul_heuristic_result_dtype = np.dtype([("algo", matmul_algo_dtype), ("workspace_size", "<u8"), ("state", "<i4"),
                                          ("waves_count", "<f4"), ("reserved", "<i4", (4,))])
_DESC_T = {"COMPUTE_TYPE": np.int32, "SCALE_TYPE": np.int32, "TRANSA": np.int32, "TRANSB": np.int32,
           "EPILOGUE": np.uint32, "BIAS_POINTER": np.int64, "BIAS_DATA_TYPE": np.int32}
_PREF_T = {"MAX_WORKSPACE_BYTES": np.uint64}
_ALGO_T = {"ID": np.int32, "TILE_ID": np.uint32, "SPLITK_NUM": np.int32, "REDUCTION_SCHEME": np.uint32,
           "CTA_SWIZZLING": np.uint32, "CUSTOM_OPTION": np.uint32, "STAGES_ID": np.uint32,
           "INNER_SHAPE_ID": np.uint16, "CLUSTER_SHAPE_ID": np.uint16}


class cuBLASLtError(Exception):
    pass


def get_matmul_desc_attribute_dtype(attr):
    return _DESC_T[MatmulDescAttribute(attr).name]


def get_matmul_preference_attribute_dtype(attr):
    return _PREF_T.get(MatmulPreferenceAttribute(attr).name, np.uint32)


def get_matmul_algo_config_attribute_dtype(attr):
    return _ALGO_T[MatmulAlgoConfigAttribute(attr).name]


def _read(ptr: int, dtype) -> int:
    return int(np.frombuffer(ctypes.string_at(ptr, np.dtype(dtype).itemsize), dtype=dtype)[0])


def _words(algo_ptr: int) -> np.ndarray:
    """The 64 bytes of a cublasLtMatmulAlgo_t as 16 uint32 words: the fake keeps attribute k in word k."""
    return np.frombuffer((ctypes.c_uint8 * 64).from_address(algo_ptr), dtype=np.uint32)


class FakeLt:
    """The module's functions, as methods of one object that records them (``calls``) and holds the state:
    ``algos`` the heuristic gives ([(attributes by CUBLASLT_ALGO_CONFIG_ name, workspace bytes, state)]),
    ``refuse`` (algorithm ids the check refuses), ``refuse_heuristic`` and the descriptors made."""

    def __init__(self):
        for name, value in list(globals().items()):
            if isinstance(value, (type, np.dtype)) or name.startswith("get_"):
                setattr(self, name, value)
        self.calls: list[tuple] = []
        self.layouts: dict[int, tuple[int, int, int, int]] = {}
        self.descs: dict[int, dict] = {}
        self.prefs: dict[int, dict] = {}
        self.algos: list[tuple[dict[str, int], int, int]] = []
        self.refuse: set[int] = set()
        self.refuse_heuristic = False
        self.check_ws = 0
        self._next = 100

    def _id(self) -> int:
        self._next += 1
        return self._next

    def create(self):
        self.calls.append(("create",))
        return 7

    def matmul_desc_create(self, compute, scale):
        h = self._id()
        self.descs[h] = {"COMPUTE_TYPE": compute, "SCALE_TYPE": scale}
        return h

    def matmul_desc_set_attribute(self, desc, attr, buf, size):
        dt = get_matmul_desc_attribute_dtype(attr)
        assert size == np.dtype(dt).itemsize, (MatmulDescAttribute(attr).name, size)
        self.descs[desc][MatmulDescAttribute(attr).name] = _read(buf, dt)
        self.calls.append(("desc_set", MatmulDescAttribute(attr).name, _read(buf, dt)))

    def matmul_desc_destroy(self, desc):
        self.calls.append(("desc_destroy", desc))

    def matrix_layout_create(self, dtype, rows, cols, ld):
        h = self._id()
        self.layouts[h] = (dtype, rows, cols, ld)
        return h

    def matrix_layout_destroy(self, h):
        self.calls.append(("layout_destroy", h))

    def matmul_preference_create(self):
        h = self._id()
        self.prefs[h] = {}
        return h

    def matmul_preference_set_attribute(self, pref, attr, buf, size):
        dt = get_matmul_preference_attribute_dtype(attr)
        assert size == np.dtype(dt).itemsize
        self.prefs[pref][MatmulPreferenceAttribute(attr).name] = _read(buf, dt)

    def matmul_preference_destroy(self, pref):
        self.calls.append(("pref_destroy", pref))

    def matmul_algo_get_heuristic(self, handle, desc, a, b, c, d, pref, requested, results, count):
        self.calls.append(("heuristic", handle, desc, a, b, c, d, pref, requested))
        if self.refuse_heuristic:
            raise cuBLASLtError("CUBLAS_STATUS_NOT_SUPPORTED")
        n = min(requested, len(self.algos))
        size = matmul_heuristic_result_dtype.itemsize
        res = np.frombuffer((ctypes.c_uint8 * (requested * size)).from_address(results), dtype=matmul_heuristic_result_dtype)
        for i, (attrs, ws, state) in enumerate(self.algos[:n]):
            words = _words(results + i * size)
            for name, v in attrs.items():
                words[MatmulAlgoConfigAttribute[name]] = v
            res[i]["workspace_size"], res[i]["state"] = ws, state
        ctypes.memmove(count, np.array([n], dtype=np.int32).ctypes.data, 4)

    def matmul_algo_config_get_attribute(self, algo, attr, buf, size, written):
        dt = get_matmul_algo_config_attribute_dtype(attr)
        assert size == np.dtype(dt).itemsize
        v = np.array([_words(algo)[attr]], dtype=dt)
        ctypes.memmove(buf, v.ctypes.data, size)
        ctypes.memmove(written, np.array([size], dtype=np.uint64).ctypes.data, 8)

    def matmul_algo_config_set_attribute(self, algo, attr, buf, size):
        dt = get_matmul_algo_config_attribute_dtype(attr)
        assert size == np.dtype(dt).itemsize, (MatmulAlgoConfigAttribute(attr).name, size)
        _words(algo)[attr] = _read(buf, dt)

    def matmul_algo_init(self, handle, compute, scale, atype, btype, ctype, dtype, algo_id, algo):
        self.calls.append(("algo_init", compute, scale, atype, btype, ctype, dtype, algo_id))
        words = _words(algo)
        words[:] = 0
        words[0] = algo_id

    def matmul_algo_check(self, handle, desc, a, b, c, d, algo, result):
        words = _words(algo)
        self.calls.append(("algo_check", desc, a, b, c, d, tuple(int(w) for w in words[:9])))
        if int(words[0]) in self.refuse:
            raise cuBLASLtError("CUBLAS_STATUS_NOT_SUPPORTED")
        res = np.frombuffer((ctypes.c_uint8 * matmul_heuristic_result_dtype.itemsize).from_address(result),
                            dtype=matmul_heuristic_result_dtype)
        res[0]["workspace_size"], res[0]["state"] = self.check_ws, 0

    def matmul(self, handle, desc, alpha, a, adesc, b, bdesc, beta, c, cdesc, d, ddesc, algo, ws, ws_size, stream):
        self.calls.append(("matmul", handle, desc, _scalar(alpha), a, adesc, b, bdesc, _scalar(beta), c, cdesc, d,
                           ddesc, tuple(int(w) for w in _words(algo)[:9]), ws, ws_size, stream))


def _scalar(ptr: int) -> float:
    return float(np.frombuffer(ctypes.string_at(ptr, 4), dtype=np.float32)[0])


def install(monkeypatch, lt: FakeLt | None = None) -> FakeLt:
    """The fake in place of the bindings, the device context (none here) and the workspace allocation
    (fake addresses, recorded in ``lt.allocs``)."""
    from gemvtune.device import ltplan

    lt = lt or FakeLt()
    lt.allocs = []
    monkeypatch.setattr(ltplan, "bindings", lambda: lt)
    monkeypatch.setattr(ltplan, "_context", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(ltplan, "_handles", {})

    def alloc(device, nbytes):
        lt.allocs.append((device, nbytes))
        return 0x7000000 + 0x100000 * len(lt.allocs)

    monkeypatch.setattr(ltplan, "_alloc", alloc)
    monkeypatch.setattr(ltplan, "_free", lambda device, ptr: lt.calls.append(("free", ptr)))
    return lt
