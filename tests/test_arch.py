"""The architecture registry (gemvtune.kernels.arch): its names and their parsing, the rule for a device newer than
every listed arch of its major, the limits from the CUDA Programming Guide's tables, and its feature table checked
against NVRTC itself (a probe of each feature compiles for every arch that has it and fails in ptxas on every one
that lacks it). On the command line an unknown architecture is one line, exit 2, naming the known ones."""

import pytest
from conftest import run_cli

from gemvtune.build.compile import CompileError, InvalidForArch, compile_source
from gemvtune.errors import UsageError
from gemvtune.kernels.arch import ARCHS, DEFAULT, FEATURES, capability_arch, features_in, for_device, parse_arch

KNOWN = ("sm_80", "sm_86", "sm_87", "sm_89", "sm_90", "sm_100", "sm_103", "sm_110", "sm_120", "sm_121")


def test_the_known_architectures_and_the_default():
    assert tuple(ARCHS) == KNOWN
    assert DEFAULT is ARCHS["sm_90"] and parse_arch(None) is DEFAULT


@pytest.mark.parametrize("text,name", [("sm_90", "sm_90"), ("sm_90a", "sm_90"), ("sm_100f", "sm_100"), ("8.6", "sm_86"),
                                       (" sm_121 ", "sm_121"), ((12, 0), "sm_120"), ((8, 9), "sm_89")])
def test_names_compute_capabilities_and_specific_targets_parse(text, name):
    assert parse_arch(text).name == name
    assert parse_arch(parse_arch(text)) is ARCHS[name]


@pytest.mark.parametrize("bad", ["sm_75", "sm_999", "sm_88", "7.5", "12", "sm90", "garbage", "sm_٩٠", (7, 5), 90, ""])
def test_an_unknown_or_unsupported_architecture_is_one_usage_error_naming_the_known(bad):
    with pytest.raises(UsageError) as e:
        parse_arch(bad)
    msg = str(e.value)
    assert "\n" not in msg and "bad architecture" in msg and ", ".join(KNOWN) in msg
    if bad == "sm_75":
        assert "older than sm_80" in msg


def test_a_device_newer_than_every_listed_arch_of_its_major_runs_as_the_newest_of_them():
    assert for_device(9, 0) is ARCHS["sm_90"] and for_device(8, 7) is ARCHS["sm_87"]
    assert for_device(12, 5) is ARCHS["sm_121"] and for_device(10, 7) is ARCHS["sm_103"]
    assert for_device(8, 9) is ARCHS["sm_89"]
    for major, minor in ((7, 5), (8, 8), (13, 0), (6, 1)):
        with pytest.raises(UsageError, match=f"compute capability {major}.{minor} is not one gemvtune targets"):
            for_device(major, minor)
    assert capability_arch("9.0") is ARCHS["sm_90"] and capability_arch("12.7") is ARCHS["sm_121"]
    assert capability_arch("7.5") is None and capability_arch(None) is None and capability_arch("9") is None


# CUDA Programming Guide 5.1, Tables 30 and 31: (shared memory a block may opt in to, KB; threads; blocks per SM)
GUIDE = {"sm_80": (163, 2048, 32), "sm_86": (99, 1536, 16), "sm_87": (163, 1536, 16), "sm_89": (99, 1536, 24),
         "sm_90": (227, 2048, 32), "sm_100": (227, 2048, 32), "sm_103": (227, 2048, 32), "sm_110": (227, 1536, 24),
         "sm_120": (99, 1536, 24), "sm_121": (99, 1536, 24)}


def test_limits_are_the_programming_guides():
    got = {a.name: (a.smem_optin // 1024, a.threads_per_sm, a.blocks_per_sm) for a in ARCHS.values()}
    assert got == GUIDE
    assert all(a.capability == f"{a.major}.{a.minor}" and a.name == f"sm_{a.major}{a.minor}" for a in ARCHS.values())


def test_features_by_architecture():
    assert set(FEATURES) == {"cp.async", "mma.f16", "mma.bf16", "l2.cache_hint", "discard.l2", "bf16", "fp8.e4m3",
                             "griddepcontrol"}
    pdl = [a.name for a in ARCHS.values() if a.has("griddepcontrol")]
    fp8 = [a.name for a in ARCHS.values() if a.has("fp8.e4m3")]
    assert pdl == ["sm_90", "sm_100", "sm_103", "sm_110", "sm_120", "sm_121"]
    assert fp8 == ["sm_89"] + pdl
    base = FEATURES.keys() - {"griddepcontrol", "fp8.e4m3"}
    assert all(a.features >= base for a in ARCHS.values())
    with pytest.raises(KeyError, match="unknown feature"):
        DEFAULT.has("tma")
    assert ARCHS["sm_86"].lacks("griddepcontrol", "pdl=on") == \
        "pdl=on needs griddepcontrol (programmatic dependent launch), sm_90 or newer; sm_86 lacks it"


# One probe kernel per feature: its instructions, and nothing an sm_80 lacks besides.
PROBES = {
    "cp.async": 'extern "C" __global__ void k(const int4* g) { __shared__ int4 s[32]; '
                'unsigned a = (unsigned)__cvta_generic_to_shared(&s[threadIdx.x]); '
                'asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(a), "l"(g + threadIdx.x)); '
                'asm volatile("cp.async.commit_group;"); asm volatile("cp.async.wait_group 0;"); }',
    "l2.cache_hint": 'extern "C" __global__ void k(const unsigned* p, unsigned* o) { unsigned long long pol; '
                     'asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol)); unsigned v; '
                     'asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.b32 %0, [%1], %2;" : "=r"(v) '
                     ': "l"(p), "l"(pol)); o[threadIdx.x] = v; }',
    "discard.l2": 'extern "C" __global__ void k(char* p) { '
                  'asm volatile("discard.global.L2 [%0], 128;" :: "l"(p + threadIdx.x * 128) : "memory"); }',
    "bf16": '#include <cuda_bf16.h>\nextern "C" __global__ void k(const float* a, __nv_bfloat16* o) { unsigned short r; '
            'asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r) : "f"(a[threadIdx.x])); o[threadIdx.x] = __ushort_as_bfloat16(r); }',
    "fp8.e4m3": 'extern "C" __global__ void k(const unsigned short* a, unsigned* o) { unsigned r; '
                'asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(r) : "h"(a[threadIdx.x])); o[threadIdx.x] = r; }',
    "griddepcontrol": 'extern "C" __global__ void k(int* o) { asm volatile("griddepcontrol.wait;" ::: "memory"); '
                      'asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); o[threadIdx.x] = 1; }',
}
for _t in ("f16", "bf16"):
    PROBES[f"mma.{_t}"] = (
        'extern "C" __global__ void k(float* c, unsigned a) { float d[4] = {0, 0, 0, 0}; '
        f'asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.{_t}.{_t}.f32 {{%0,%1,%2,%3}}, {{%4,%5,%6,%7}}, '
        '{%8,%9}, {%0,%1,%2,%3};" : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) '
        ': "r"(a), "r"(a), "r"(a), "r"(a), "r"(a), "r"(a)); c[threadIdx.x] = d[0] + d[1] + d[2] + d[3]; }')


def test_each_probe_uses_its_feature_alone():
    assert set(PROBES) == set(FEATURES)
    for f, src in PROBES.items():
        assert features_in(src) == {f}, f


@pytest.mark.parametrize("arch", KNOWN)
def test_the_feature_table_is_what_nvrtc_compiles(arch, monkeypatch):
    """A feature the registry gives ``arch`` compiles there; one it does not give it fails in ptxas, where NVRTC is
    let through (compile_source's own check, which refuses it first, is switched off for the probe)."""
    import gemvtune.build.compile as gc

    a = ARCHS[arch]
    for f, src in PROBES.items():
        if a.has(f):
            assert compile_source(src, f"probe_{f}", arch, "k").resources.registers > 0, (arch, f)
            continue
        with pytest.raises(InvalidForArch, match=f"{arch} lacks it"):   # refused before NVRTC ...
            compile_source(src, f"probe_{f}", arch, "k")
        monkeypatch.setattr(gc, "features_in", lambda s: set())
        with pytest.raises(CompileError) as e:                           # ... and NVRTC would have failed
            compile_source(src, f"probe_{f}", arch, "k", use_cache=False)
        assert not isinstance(e.value, InvalidForArch) and "ptxas" in e.value.log, (arch, f)
        monkeypatch.undo()


def test_the_command_line_refuses_an_unknown_architecture_in_one_line():
    for args in (("space", "--shape", "64x64", "--arch", "sm_75"), ("render", "--shape", "64x64", "--arch", "sm_999"),
                 ("compile-check", "--shape", "64x64", "--arch", "garbage")):
        r = run_cli(*args)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert r.returncode == 2 and len(lines) == 1 and "bad architecture" in lines[0], (args, r.stderr)
        assert ", ".join(KNOWN) in lines[0] and "Traceback" not in r.stderr


def test_compile_check_on_sm80_lists_the_pdl_configs_as_invalid_and_exits_0():
    r = run_cli("compile-check", "--shape", "4096x4096", "--arch", "sm_80", "--configs", "sample:6")
    assert r.returncode == 0, r.stdout + r.stderr
    skips = [ln for ln in r.stdout.splitlines() if ln.startswith("  skip ")]
    assert len(skips) == 2 and all(".pdl" in ln and "needs griddepcontrol" in ln and "sm_80 lacks it" in ln
                                   for ln in skips), r.stdout
    assert r.stdout.splitlines()[-1] == "4 compiled, 0 failed, 2 invalid for 4096x4096 (sm_80)"
    assert "FAILED" not in r.stdout
