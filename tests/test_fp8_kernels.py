"""Issue 37 (FP8 weights, W8A16), the CPU half: ``Shape.weights`` and its keys, the table schema of FP8 entries, the
fp8gemv family's validity against every other family's, its rendered text and its NVRTC compiles (sm_89 on; refused
before NVRTC on sm_80 and sm_86)."""

import copy
import json

import pytest
from conftest import ROOT
from cover import fp8_compile_items, fp8_configs

from gemvtune import UsageError
from gemvtune.build.compile import InvalidForArch, _Nvrtc, compile_variant
from gemvtune.build.render import render
from gemvtune.kernels.families import FAMILIES, families_for
from gemvtune.kernels.fp8gemv import DOMAINS, SEED, Fp8GemvConfig, all_configs, valid_configs
from gemvtune.kernels.launchspec import launch_spec
from gemvtune.kernels.shapes import Shape, parse_shape
from gemvtune.runtime.export import build_header
from gemvtune.runtime.keys import entry_key, entry_shape
from gemvtune.runtime.table import load_table

ROW, B128 = "e4m3-row", "e4m3-b128"
CONFIGS = fp8_configs()
EDGE = (300, 8208)   # M and d not multiples of 128: ragged scale blocks in both directions


def test_the_configs_cover_every_value_of_every_parameter():
    for key, values in DOMAINS.items():
        assert {getattr(c, key) for c in CONFIGS} == set(values), key
    assert sum(1 for _ in all_configs()) == 864


# ---- Shape.weights, keys and bytes ----------------------------------------------------------------
def test_fp8_shape_keys_come_after_the_dtype_and_fp16_ones_are_unchanged():
    s = Shape(4096, 4096, 8, "bf16", ROW)
    assert s.key == str(s) == "4096x4096@n8.bf16.e4m3-row" and entry_key(s) == "4096x4096x8.bf16.e4m3-row"
    assert Shape(4096, 4096, 1, "fp16", B128).key == "4096x4096.e4m3-b128"
    assert Shape(4096, 4096, 8, "bf16").key == "4096x4096@n8.bf16" and entry_key(Shape(4096, 4096)) == "4096x4096x1"
    assert Shape(4096, 4096) == Shape(4096, 4096, 1, "fp16", "") != Shape(4096, 4096, 1, "fp16", ROW)
    assert entry_shape({"M": 4096, "d": 4096, "n": 8, "dtype": "bf16", "weights": ROW}) == s
    assert parse_shape("4096x4096", 8, "bf16", ROW) == s


def test_fp8_weight_bytes_are_one_per_code_plus_the_scales():
    assert Shape(4096, 4096).weight_bytes == 2 * 4096 * 4096   # unchanged
    assert Shape(4096, 4096, weights=ROW).weight_bytes == 4096 * 4096 + 4 * 4096
    assert Shape(300, 8208, weights=B128).weight_bytes == 300 * 8208 + 4 * 3 * 65
    s = Shape(300, 8208, 4, weights=ROW)
    assert s.bytes_moved == s.weight_bytes + 4 * 8208 * 2 + 4 * 300 * 4


def test_an_unknown_weight_format_is_one_line():
    for bad in ("e5m2", "fp8", None, 1):
        with pytest.raises(UsageError) as e:
            Shape(64, 64, weights=bad)
        assert "\n" not in str(e.value) and "e4m3-row, e4m3-b128" in str(e.value)


# ---- validity: FP8 weights are the FP8 families' alone (fp8gemv, fp8mma) ----------------------------
FP8_FAMILIES = ("fp8gemv", "fp8mma")


def test_other_families_are_invalid_for_fp8_shapes_and_fp8gemv_for_fp16_ones():
    fp8, fp16 = Shape(4096, 4096, 2, "bf16", ROW), Shape(4096, 4096, 2, "bf16")
    assert families_for(fp8) == FP8_FAMILIES and not set(FP8_FAMILIES) & set(families_for(fp16))
    assert families_for(fp16) == tuple(n for n in FAMILIES if n not in FP8_FAMILIES)
    for name, fam in FAMILIES.items():
        if name in FP8_FAMILIES:
            continue
        seed = fam.seed if fam.seed is not None else fam.config_cls()
        assert seed.invalid_reasons(fp8) == [f"e4m3-row weights: the {name} family reads FP16/BF16 weights only"]
        assert seed.invalid_reasons(fp8, "sm_80") == seed.feature_reasons("bf16", __import__(
            "gemvtune.kernels.arch", fromlist=["ARCHS"]).ARCHS["sm_80"]) + seed.invalid_reasons(fp8)
    assert SEED.invalid_reasons(fp16) == ["FP16/BF16 weights: the fp8gemv family reads FP8 weights only "
                                          "(e4m3-row, e4m3-b128)"]
    assert not valid_configs(fp16) and len(valid_configs(fp8)) > 500
    assert not [c for c in FAMILIES["gemv"].all_configs() if c.is_valid(fp8)][:1]


def test_fp8gemv_shape_reasons():
    assert Fp8GemvConfig(vec=16).invalid_reasons(Shape(64, 4104, weights=ROW)) == [
        "d=4104 is not divisible by the 16-byte W vector (16 E4M3 codes)"]
    assert Fp8GemvConfig(vec=8).is_valid(Shape(64, 4104, weights=ROW))
    assert Fp8GemvConfig(block=64, tpr=128).invalid_reasons(Shape(64, 4096, weights=B128)) == [
        "tpr=128 threads per row exceed the block of 64"]
    assert "the unrolled loop would never run" in Fp8GemvConfig(tpr=256, block=256, unroll=8).invalid_reasons(
        Shape(64, 4096, weights=ROW))[0]


def test_a_launch_of_fp8_weights_passes_the_scales():
    spec = launch_spec(SEED, Shape(4096, 4096, 1, "fp16", ROW))
    assert spec.scales and spec.kernels == (("gemv_fp8", (1024, 1, 1), (128, 1, 1)),) and spec.align == 16
    assert not spec.needs_workspace
    assert not launch_spec(FAMILIES["gemv"].seed, Shape(4096, 4096)).scales


# ---- the rendered source ---------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_the_source_applies_each_layout_s_scale(dtype):
    row = render(SEED, Shape(4096, 4096, 2, dtype, ROW))
    blk = render(SEED, Shape(*EDGE, 2, dtype, B128))
    for src in (row, blk):
        assert "cvt.rn.f16x2.e4m3x2" in src and "griddepcontrol" not in src
        assert "const unsigned char* __restrict__ W" in src and "int M,\n         const float* __restrict__ scales)" in src
    assert "const float sc = __ldg(scales + row);" in row and "epilogue(sum[c] * sc, bias, row)" in row
    assert "srow" not in row
    assert "const float* srow = scales + (size_t)(row / SB) * SCOLS;" in blk
    assert "const float sc = __ldg(srow + col / SB);" in blk and "= fmaf(p, sc, s[0][c])" in blk
    assert "constexpr int SCOLS = (D + SB - 1) / SB;" in blk and "epilogue(sum[c], bias, row)" in blk
    assert ("__nv_bfloat16" in row) == (dtype == "bf16")


def test_other_families_refuse_to_render_fp8_shapes():
    with pytest.raises(UsageError, match="reads FP16/BF16 weights only"):
        render(FAMILIES["gemv"].seed, Shape(4096, 4096, weights=ROW))


# ---- NVRTC -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("arch", ["sm_89", "sm_90", "sm_100", "sm_120"])
def test_fp8_variants_compile_on_each_arch_with_fp8(arch):
    for c, s, epi in fp8_compile_items(CONFIGS, EDGE):
        assert c.is_valid(s, arch), (c.label, s)
        r = compile_variant(c, s, arch, epilogue=epi)
        assert r.resources.registers > 0, (c.label, s, arch)   # (unroll 8 x n 16 x 16 B in 128 registers spills)


@pytest.mark.parametrize("arch", ["sm_80", "sm_86"])
def test_fp8_variants_are_invalid_before_nvrtc_below_sm_89(arch, monkeypatch):
    def no_nvrtc(*a, **k):
        raise AssertionError("NVRTC reached")

    monkeypatch.setattr(_Nvrtc, "compile", no_nvrtc)
    for dtype in ("fp16", "bf16"):
        for c in CONFIGS:
            s = Shape(*EDGE, 2, dtype, B128)
            why = c.invalid_reasons(s, arch)
            assert why and why[0] == (f"the fp8gemv family needs cvt.rn.f16x2.e4m3x2 (FP8 e4m3 pairs to FP16), "
                                      f"sm_89 or newer; {arch} lacks it"), why
            with pytest.raises(InvalidForArch):
                compile_variant(c, s, arch)


# ---- a table's FP8 entries -------------------------------------------------------------------------
TABLE = ROOT / "results" / "nvidia-h200" / "table.json"


def test_fp8_entries_round_trip_through_the_table_apart_from_the_fp16_entry(tmp_path):
    data = json.loads(TABLE.read_text())
    fp16_key = "4096x4096x2"
    base = data["entries"][fp16_key]
    fp8 = copy.deepcopy({k: v for k, v in base.items() if k in ("M", "d", "n", "winner", "updated")})
    fp8["weights"] = ROW
    fp8["winner"] = {**{k: v for k, v in base["winner"].items() if k not in ("config", "family")},
                     "family": "fp8gemv", "config": SEED.to_dict(), "label": SEED.label}
    data["entries"] = {fp16_key: base, "4096x4096x2.e4m3-row": fp8}
    p = tmp_path / "table.json"
    p.write_text(json.dumps(data))
    t = load_table(p, costmodel=None)
    s8, s16 = Shape(4096, 4096, 2, weights=ROW), Shape(4096, 4096, 2)
    assert sorted(t.keys()) == [(4096, 4096, 2, "fp16"), (4096, 4096, 2, "fp16", ROW)]
    assert set(t.shapes) == {s8, s16}
    assert t.lookup(s8) == (SEED, "tuned") and t.lookup(s16)[0].family != "fp8gemv"
    assert t.entry(s8).shape == s8 and t.entry(s16).shape == s16
    assert t.to_json()["entries"]["4096x4096x2.e4m3-row"]["weights"] == ROW
    assert "weights" not in t.to_json()["entries"][fp16_key]
    assert t.lookup(Shape(4096, 4096, 4, weights=ROW)) == (SEED, "winner tuned at n=2")
    assert t.lookup(Shape(4096, 4096, 4, weights=B128))[1] == "fp8 default fallback"
    p.write_text(json.dumps(t.to_json()))
    assert load_table(p, costmodel=None).to_json()["entries"] == t.to_json()["entries"]
    header = build_header(t)   # (FP8 entries: their own dispatcher, scales in its ABI: tests/test_export.py)
    assert "gemvtune_4096_4096_2" in header and "namespace gemvtune_4096_4096_2_e4m3_row" in header
    assert "const unsigned char* W, const float* scales" in header


@pytest.mark.parametrize("change, needle", [
    ({"weights": "e5m2"}, "weights must be one of e4m3-row, e4m3-b128"),
    ({"weights": B128}, "does not match its M, d, n, dtype, weights (expected '4096x4096x2.e4m3-b128')"),
    ({"weights": ""}, "does not match its M, d, n, dtype (expected '4096x4096x2')"),
])
def test_the_schema_checks_an_entry_s_weights_against_its_key(tmp_path, change, needle):
    data = json.loads(TABLE.read_text())
    base = data["entries"]["4096x4096x2"]
    fp8 = {k: v for k, v in base.items() if k in ("M", "d", "n", "updated")}
    fp8["winner"] = {**{k: v for k, v in base["winner"].items() if k not in ("config", "family")},
                     "family": "fp8gemv", "config": SEED.to_dict(), "label": SEED.label}
    fp8.update({"weights": ROW, **change})
    data["entries"] = {"4096x4096x2.e4m3-row": fp8}
    p = tmp_path / "table.json"
    p.write_text(json.dumps(data))
    with pytest.raises(UsageError) as e:
        load_table(p, costmodel=None)
    assert needle in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_the_schema_refuses_an_fp8_config_for_fp16_weights(tmp_path):
    data = json.loads(TABLE.read_text())
    e = data["entries"]["4096x4096x2"]
    e["winner"] = {**e["winner"], "family": "fp8gemv", "config": SEED.to_dict(), "label": SEED.label}
    data["entries"] = {"4096x4096x2": e}
    p = tmp_path / "table.json"
    p.write_text(json.dumps(data))
    with pytest.raises(UsageError, match="the fp8gemv family reads FP8 weights only"):
        load_table(p, costmodel=None)


# ---- a search's families follow the shape's weights -------------------------------------------------
def test_a_search_runs_the_families_that_read_the_shape_s_weights():
    import types

    from gemvtune.kernels.families import FAMILY_NAMES
    from gemvtune.tuning.search import SearchOptions, searchable

    runner = types.SimpleNamespace(replayed=True)   # (cuBLASLt: not searchable here, with a line)
    lines: list[str] = []
    fp16 = searchable(runner, SearchOptions(), lines.append, Shape(4096, 4096))
    assert fp16.families == tuple(f for f in FAMILY_NAMES if f not in (*FP8_FAMILIES, "cublaslt"))
    assert len(lines) == 1 and "cublaslt" in lines[0]   # (no line for the FP8 families: not families of this shape)
    lines.clear()
    fp8 = searchable(runner, SearchOptions(), lines.append, Shape(4096, 4096, weights=ROW))
    assert fp8.families == FP8_FAMILIES and not lines
    named = searchable(runner, SearchOptions(families=("gemv", "fp8gemv")), lines.append, Shape(4096, 4096, weights=B128))
    assert named.families == ("fp8gemv",)
    assert lines == ["the gemv family is not searched for 4096x4096.e4m3-b128: e4m3-b128 weights: the gemv family "
                     "reads FP16/BF16 weights only"]
    with pytest.raises(UsageError, match="no family of gemv reads the weights of 4096x4096.e4m3-row"):
        searchable(runner, SearchOptions(families=("gemv",)), lines.append, Shape(4096, 4096, weights=ROW))
