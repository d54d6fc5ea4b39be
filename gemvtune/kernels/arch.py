"""The NVIDIA architectures gemvtune compiles for: what PTX each one has that the templates use, and the limits
the families' validity and occupancy rules read. Pure: no NVRTC, no device.

Each arch is a compute capability NVRTC (13.x, ``nvrtcGetSupportedArchs``) compiles for and that has every PTX
instruction a family needs at sm_80 or newer: sm_80, sm_86, sm_87, sm_89, sm_90, sm_100, sm_103, sm_110, sm_120 and
sm_121. Older GPUs (sm_75 and before: no cp.async, no m16n8k16 BF16 mma, no L2 cache hints) are refused.

Limits, from the CUDA Programming Guide, section 5.1 "Compute Capabilities" (Table 30, "Device and Streaming
Multiprocessor (SM) Information per Compute Capability", and Table 31, "Memory Information per Compute Capability";
KB = 1024 bytes):

    compute capability                8.0   8.6  8.7  8.9  9.0  10.0 10.3 11.0 12.x
    shared memory per block (opt-in)  163   99   163  99   227  227  227  227  99    KB
    resident threads per SM           2048  1536 1536 1536 2048 2048 2048 1536 1536
    resident blocks per SM            32    16   16   24   32   32   32   24   24

(NVIDIA's CCCL ``cuda/__device/arch_traits.h`` agrees for 8.0, 8.6, 8.9, 9.0 and 10.x; it gives 12.0 32 blocks per SM
and 11.0 2048 threads, where the guide gives 24 and 1536: the guide's numbers are used.) Static shared memory is
48 KB per block on every one of them; more takes dynamic shared memory and an opt-in (the ring family's).

Features, each with the first architecture whose PTX ISA has it (PTX ISA reference, each instruction's "Target ISA
notes"): ``cp.async`` (sm_80), ``mma.sync.aligned.m16n8k16`` with FP16 and with BF16 operands (sm_80), L2
cache-eviction hints (``createpolicy``, ``ld ... L2::cache_hint``: sm_80), ``discard.global.L2`` (sm_80), BF16
conversions (``cvt`` to and from ``.bf16``: sm_80), ``cvt.rn.f16x2.e4m3x2`` (FP8 e4m3 pairs to FP16: sm_89) and
``griddepcontrol`` (programmatic dependent launch: sm_90). ``tests/test_arch.py`` compiles a probe of each feature
for each arch with NVRTC: a feature an arch is said to have compiles there, one it lacks fails in ptxas.

Names: ``sm_90``, ``sm_90a`` (an architecture-specific target: the templates use baseline features only, so it is
its base ``sm_90``, whose cubin runs on that GPU too), ``9.0`` or ``(9, 0)``. A device of a compute capability not
listed but newer than every listed one of its major (a 12.5, say) is taken as the newest listed arch of that major
(sm_121): its cubins run there by binary compatibility within a major, and the guide gives one column for 10.x and
12.x. Anything else (sm_75, sm_999, an 8.8) is one UsageError naming the known ones.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError


@dataclass(frozen=True)
class Feature:
    name: str
    what: str                 # in words, for a reason
    since: tuple[int, int]    # the first compute capability whose PTX has it
    marker: str               # a regular expression matching its use in a CUDA source (an instruction, not a comment)

    @property
    def since_name(self) -> str:
        return f"sm_{self.since[0]}{self.since[1]}"


FEATURES: dict[str, Feature] = {f.name: f for f in (
    Feature("cp.async", "cp.async (asynchronous global-to-shared copies)", (8, 0),
            r"cp\.async\.(?:ca|cg|commit_group|wait_group|wait_all)\b"),
    Feature("mma.f16", "mma.sync m16n8k16 with FP16 operands", (8, 0), r"mma\.sync\.aligned\.m16n8k16\.[a-z0-9.]*\.f16\.f16"),
    Feature("mma.bf16", "mma.sync m16n8k16 with BF16 operands", (8, 0),
            r"mma\.sync\.aligned\.m16n8k16\.[a-z0-9.]*\.bf16\.bf16"),
    Feature("l2.cache_hint", "L2 cache-eviction hints (createpolicy, ld ... L2::cache_hint)", (8, 0),
            r"createpolicy\.|L2::cache_hint"),
    Feature("discard.l2", "discard.global.L2", (8, 0), r"discard\.global\.L2"),
    Feature("bf16", "BF16 conversions (cvt to and from .bf16)", (8, 0), r"__nv_bfloat16|cvt\.[a-z.]*\.bf16"),
    Feature("fp8.e4m3", "cvt.rn.f16x2.e4m3x2 (FP8 e4m3 pairs to FP16)", (8, 9), r"\.e4m3x2\b"),
    Feature("griddepcontrol", "griddepcontrol (programmatic dependent launch)", (9, 0),
            r"griddepcontrol\.(?:wait|launch_dependents)\b"),
)}
_MARKERS = {f.name: re.compile(f.marker) for f in FEATURES.values()}


@dataclass(frozen=True)
class Arch:
    """One target: NVRTC's ``-arch`` name, its compute capability, its limits and the features it has."""

    name: str                 # "sm_90"
    major: int
    minor: int
    smem_optin: int           # bytes of shared memory (static + dynamic) one block may opt in to
    threads_per_sm: int       # resident threads per SM
    blocks_per_sm: int        # resident blocks per SM
    features: frozenset[str]

    @property
    def capability(self) -> str:
        return f"{self.major}.{self.minor}"

    def has(self, feature: str) -> bool:
        if feature not in FEATURES:
            raise KeyError(f"unknown feature {feature!r}; known: {', '.join(FEATURES)}")
        return feature in self.features

    def lacks(self, feature: str, need: str) -> str:
        """The reason ``need`` (e.g. "pdl=on") cannot run here for want of ``feature`` (one line)."""
        f = FEATURES[feature]
        return f"{need} needs {f.what}, {f.since_name} or newer; {self.name} lacks it"

    def __str__(self) -> str:
        return self.name


def features_in(source: str) -> set[str]:
    """The features a CUDA source uses, read from its text (``Feature.marker``): what an architecture must have for
    NVRTC to compile it (``gemvtune.build.compile.compile_source`` refuses the rest before NVRTC)."""
    return {name for name, rx in _MARKERS.items() if rx.search(source)}


def _arch(major: int, minor: int, smem_kib: int, threads: int, blocks: int) -> Arch:
    have = frozenset(f.name for f in FEATURES.values() if (major, minor) >= f.since)
    return Arch(f"sm_{major}{minor}", major, minor, smem_kib * 1024, threads, blocks, have)


ARCHS: dict[str, Arch] = {a.name: a for a in (
    _arch(8, 0, 163, 2048, 32),
    _arch(8, 6, 99, 1536, 16),
    _arch(8, 7, 163, 1536, 16),
    _arch(8, 9, 99, 1536, 24),
    _arch(9, 0, 227, 2048, 32),
    _arch(10, 0, 227, 2048, 32),
    _arch(10, 3, 227, 2048, 32),
    _arch(11, 0, 227, 1536, 24),
    _arch(12, 0, 99, 1536, 24),
    _arch(12, 1, 99, 1536, 24),
)}
DEFAULT = ARCHS["sm_90"]   # the H200's: what every default (space, search, tables, compile) has always meant

_NAME_RE = re.compile(r"^sm_([1-9][0-9]?)([0-9])([af]?)$", re.ASCII)
_CC_RE = re.compile(r"^([1-9][0-9]?)\.([0-9])$", re.ASCII)


def known() -> str:
    return ", ".join(ARCHS)


def _unknown(text: str, why: str = "") -> UsageError:
    return UsageError(f"bad architecture {text[:40]!r}{why}: gemvtune targets {known()}")


def parse_arch(value: Any) -> Arch:
    """An ``Arch`` from ``sm_90``, ``sm_90a``, ``9.0``, ``(9, 0)`` or an Arch; None is the default (sm_90). Anything
    else, or an architecture not in ``ARCHS``, is one UsageError naming the known ones."""
    if value is None:
        return DEFAULT
    if isinstance(value, Arch):
        return value
    if isinstance(value, tuple) and len(value) == 2 and all(type(v) is int for v in value):
        a = ARCHS.get(f"sm_{value[0]}{value[1]}")
        if a is None:
            raise _unknown(f"{value[0]}.{value[1]}")
        return a
    if not isinstance(value, str):
        raise _unknown(repr(value), " (expected e.g. sm_90 or 9.0)")
    text = value.strip()
    m = _NAME_RE.match(text) or _CC_RE.match(text)
    if m is None:
        raise _unknown(value, " (expected e.g. sm_90 or 9.0)")
    name = f"sm_{m.group(1)}{m.group(2)}"
    a = ARCHS.get(name)
    if a is None:
        old = (int(m.group(1)), int(m.group(2))) < (8, 0)
        raise _unknown(value, f" ({name} is older than sm_80: no cp.async, BF16 mma or L2 hints)" if old else "")
    return a


def for_device(major: int, minor: int) -> Arch:
    """The arch a device of compute capability ``major.minor`` runs as: its own, or, newer than every listed arch of
    its major, the newest of them (module docstring); else one UsageError."""
    a = ARCHS.get(f"sm_{major}{minor}")
    if a is not None:
        return a
    same = [x for x in ARCHS.values() if x.major == major]
    if same and minor > max(x.minor for x in same):
        return max(same, key=lambda x: x.minor)
    raise UsageError(f"this GPU's compute capability {major}.{minor} is not one gemvtune targets ({known()})")


def capability_arch(capability: Any) -> Arch | None:
    """The arch of a table's recorded ``compute_capability`` ("9.0"), by ``for_device``'s rule; None where it records
    none or one gemvtune does not target (a table is still read)."""
    m = _CC_RE.match(capability) if isinstance(capability, str) else None
    if m is None:
        return None
    try:
        return for_device(int(m.group(1)), int(m.group(2)))
    except UsageError:
        return None
