"""BF16 kernels (issue 21, the kernel side), on the CPU: what a BF16 render contains (BF16 types and conversions, the
bf16 mma instruction, no FP16 type for W, x or the bias), the epilogues of BF16 inputs, the refusals (a BF16
accumulator, an output dtype that is neither FP32 nor the inputs', the seed kernel), and that the validity of every
family for a BF16 shape is its FP16 validity less exactly the 16-bit accumulator. NVRTC compiles: test_bf16_compile.py."""

import re

import pytest
from cover import cover

from gemvtune import UsageError
from gemvtune.build.compile import compile_variants
from gemvtune.build.render import DTYPE_VALUES, dtype_values, render
from gemvtune.kernels import gemv, mma, ring, splitk
from gemvtune.kernels.epilogue import ALL_EPILOGUES, DEFAULT, EPILOGUES, Epilogue, epilogues_for
from gemvtune.kernels.families import FAMILIES
from gemvtune.kernels.gemv import BF16_ACC_REASON, GemvConfig
from gemvtune.kernels.launchspec import launch_spec
from gemvtune.kernels.mma import MmaConfig
from gemvtune.kernels.ring import RingConfig
from gemvtune.kernels.shapes import Shape
from gemvtune.kernels.splitk import SplitKConfig
from gemvtune.runners.cuda.seed import compile_seed, seed_invalid_reasons, seed_source

MODS = {"gemv": gemv, "splitk": splitk, "mma": mma, "ring": ring}
BF16_MMA = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
FP16_MMA = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
# The kernel ABI of a BF16 source (y is out_t*: float or __nv_bfloat16), on whitespace-normalized source.
BF16_ABI = re.compile(r"__global__ void (?:__launch_bounds__\([^)]*\) )?(\w+) ?\(const __nv_bfloat16\* __restrict__ W, "
                      r"const __nv_bfloat16\* __restrict__ x, out_t\* __restrict__ y, "
                      r"const __nv_bfloat16\* __restrict__ bias, float\* __restrict__ ws, "
                      r"unsigned int\* __restrict__ counters, int M\)")


def _code(src: str) -> str:
    """The source without its // comments (a config's label names its vector width "half2", "half8", ...)."""
    return "\n".join(line.split("//", 1)[0] for line in src.splitlines())


def _sample(shape: Shape, k: int = 2, seed: int = 5) -> list:
    """Every family's seed and one valid config for every value of every parameter, plus k random ones."""
    out = []
    for name, mod in MODS.items():
        fam = FAMILIES[name]
        out += cover(mod.valid_configs(shape), fam.seed, fam.domains, k, seed)
    return out


def test_dtype_values_name_both_element_types():
    assert set(DTYPE_VALUES) == {"fp16", "bf16"} and set(DTYPE_VALUES["fp16"]) == set(DTYPE_VALUES["bf16"])
    assert dtype_values("bf16")["elem"] == "__nv_bfloat16" and dtype_values("bf16")["mma_ab"] == "bf16"
    assert dtype_values("fp16")["elem"] == "half" and dtype_values("fp16")["dtype_header"] == "cuda_fp16.h"
    with pytest.raises(UsageError, match="fp8"):
        dtype_values("fp8")


def test_epilogues_of_each_input_dtype():
    assert EPILOGUES == epilogues_for("fp16") == (Epilogue(), Epilogue("fp32", True), Epilogue("fp16"),
                                                  Epilogue("fp16", True))
    assert epilogues_for("bf16") == (Epilogue(), Epilogue("fp32", True), Epilogue("bf16"), Epilogue("bf16", True))
    assert len(ALL_EPILOGUES) == 6 and set(ALL_EPILOGUES) == set(EPILOGUES) | set(epilogues_for("bf16"))
    e = Epilogue("bf16", True)
    assert e.out_ctype == "__nv_bfloat16" and e.out_bytes == 2 and e.sixteen_bit and e.label == ".obf16.bias"
    assert Epilogue("fp16").label == ".o16" and not DEFAULT.sixteen_bit and DEFAULT.label == ""
    for dtype in ("fp16", "bf16"):
        s = Shape(64, 4096, 1, dtype)
        assert all(not x.shape_reasons(s) for x in epilogues_for(dtype))
        assert [x for x in ALL_EPILOGUES if x.shape_reasons(s)] == [x for x in ALL_EPILOGUES if x not in epilogues_for(dtype)]
    with pytest.raises(UsageError):
        epilogues_for("fp32")


@pytest.mark.parametrize("out,dtype", [("fp16", "bf16"), ("bf16", "fp16")])
def test_output_dtype_neither_fp32_nor_the_inputs_is_refused(out, dtype):
    """One UsageError, naming the mismatch, for every family; before any family's own epilogue rule (an atomic
    split-K combine, which has no 16-bit output at all, gets the same message)."""
    s = Shape(129, 4104, 3, dtype)
    cfgs = [GemvConfig(), SplitKConfig(split=4, combine="atomic"), SplitKConfig(split=4, combine="pass2"),
            MmaConfig(), RingConfig()]
    for c in cfgs:
        assert c.is_valid(s), c.label
        for bias in (False, True):
            e = Epilogue(out, bias)
            assert e.shape_reasons(s) == [f"out={out} with {dtype} inputs: y is fp32 or the inputs' dtype ({dtype}), "
                                          f"so ask for out=fp32 or out={dtype}"]
            with pytest.raises(UsageError) as err:
                render(c, s, e)
            msg = str(err.value)
            assert "\n" not in msg and f"out={out} with {dtype} inputs" in msg and msg.count("out=fp32 or") == 1
            assert "combine=pass2" not in msg
            with pytest.raises(UsageError, match=f"out={out} with {dtype} inputs"):
                compile_variants([(c, s, e)])


def test_atomic_split_k_has_no_bf16_output():
    s = Shape(7, 4104, 1, "bf16")
    c = next(c for c in splitk.valid_configs(s) if c.split > 1 and c.combine == "atomic")
    for bias in (False, True):
        with pytest.raises(UsageError, match="a BF16 output needs combine=pass2"):
            render(c, s, Epilogue("bf16", bias))
    assert "atomicAdd(y" in render(c, s, Epilogue("fp32", True))   # FP32 out: the atomics work, zero_y writes the bias
    pass2 = SplitKConfig(**{**c.to_dict(), "combine": "pass2"})
    assert "__float2bfloat16_rn" in render(pass2, s, Epilogue("bf16", True))
    for mod in MODS.values():   # every family's rule is the same for both 16-bit outputs
        for cfg in mod.valid_configs(Shape(7, 72, 3, "bf16")):
            assert bool(Epilogue("bf16").invalid_reasons(cfg)) == bool(Epilogue("fp16").invalid_reasons(cfg)), cfg.label


def test_bf16_accumulator_is_invalid_with_its_reason():
    for d in (4096, 14336):
        fp16, bf16 = Shape(4096, d, 1), Shape(4096, d, 1, "bf16")
        c = GemvConfig(acc="fp16", vec="half2", tpr=32, block=256, unroll=4)
        assert c.is_valid(fp16), c.invalid_reasons(fp16)
        assert c.invalid_reasons(bf16) == [BF16_ACC_REASON]
        assert BF16_ACC_REASON == ("a BF16 accumulator is invalid: 8 significant bits lose the sum "
                                   "(acc=fp16 is for FP16 inputs only)")
        assert GemvConfig(**{**c.to_dict(), "acc": "fp32"}).is_valid(bf16)
        with pytest.raises(UsageError, match="a BF16 accumulator is invalid"):
            render(c, bf16)
    # a config invalid for another reason too keeps the BF16 reason, and the FP16 chain reason is not given for BF16
    long_chain = GemvConfig(acc="fp16", vec="half2", tpr=2, block=32)
    assert any("fp16 accumulation chains" in r for r in long_chain.invalid_reasons(Shape(64, 14336)))
    assert long_chain.invalid_reasons(Shape(64, 14336, 1, "bf16")) == [BF16_ACC_REASON]


@pytest.mark.parametrize("M,d,n", [(7, 72, 3), (129, 4104, 1)])
def test_bf16_validity_is_fp16_validity_without_a_16_bit_accumulator(M, d, n):
    """No config of any family accumulates in BF16: the gemv family loses exactly its acc=fp16 configs, the
    tensor-core families (FP32 accumulation and FP32 partial sums whatever the combine) lose nothing."""
    fp16, bf16 = Shape(M, d, n), Shape(M, d, n, "bf16")
    for name, mod in MODS.items():
        v16, vbf = mod.valid_configs(fp16), mod.valid_configs(bf16)
        assert all(getattr(c, "acc", "fp32") == "fp32" for c in vbf), name
        if name == "gemv":
            assert any(c.acc == "fp16" for c in v16)
            assert vbf == [c for c in v16 if c.acc == "fp32"]
        else:
            assert vbf == v16, name


def test_bf16_gemv_source_has_no_fp16_types():
    for s in (Shape(129, 4104, 3, "bf16"), Shape(7, 72, 1, "bf16")):
        cfgs = cover(gemv.valid_configs(s), gemv.LLAMA_CPP, gemv.DOMAINS, 2, 5)
        assert {c.vec for c in cfgs} == set(gemv.DOMAINS["vec"])
        for c in cfgs:
            for e in epilogues_for("bf16"):
                src = render(c, s, e)
                code = _code(src)
                for fp16_name in ("half2", "__half2float", "__half22float2", "__ushort_as_half", "const half*", "half*",
                                  "cuda_fp16.h", "__hfma", "__float2half"):
                    assert fp16_name not in code, (c.label + e.label, fp16_name)
                assert re.search(r"\bhalf\b", code) is None, c.label
                assert "#include <cuda_bf16.h>" in code and "struct Acc { float a, b; };" in code
                assert ("bf16x2_to_float2(bf16x2_word(" in code) == (c.vec != "half")
                assert ("bf16_to_float(__ushort_as_bfloat16(w))" in code) == (c.vec == "half")
                # conversions by bits: cuda_bf16.h's inline-PTX ones keep ptxas from unrolling the load loop
                assert "__bfloat1622float2" not in code and "__bfloat162float" not in code, c.label
                assert f"typedef {e.out_ctype} out_t;" in code
                assert ("bf16_to_float(__ldg(bias + row))" in code) == e.bias
                assert ("__float2bfloat16_rn" in code) == (e.out == "bf16")
                head = src.splitlines()[:2]
                assert head[0].endswith(" " + c.label + e.label)
                assert "W row-major BF16, x BF16, y " + e.out.upper() in head[1]


def test_bf16_sources_of_every_family():
    """Every family's BF16 source: BF16 pointers in every kernel's ABI, the bf16 mma instruction in the tensor-core
    ones, no FP16 type or conversion anywhere (comments aside), and every launch's kernel present."""
    for s in (Shape(129, 4104, 3, "bf16"), Shape(65, 4024, 16, "bf16")):
        for j, c in enumerate(_sample(s, k=1, seed=9)):
            e = epilogues_for("bf16")[j % 4]
            if e.invalid_reasons(c):
                e = Epilogue("fp32", e.bias)
            src = render(c, s, e)
            code = _code(src)
            assert re.search(r"\bhalf2?\b|__half|cuda_fp16\.h|\.f16\.", code) is None, (c.label + e.label)
            names = BF16_ABI.findall(" ".join(code.split()))
            assert len(names) == code.count("__global__") and names, c.label
            assert {k for k, _, _ in launch_spec(c, s, e).kernels} <= set(names), c.label
            if c.family == "gemv":
                assert "mma.sync" not in code
            else:
                assert code.count(BF16_MMA) == 1 and FP16_MMA not in code, c.label
                assert "const __nv_bfloat16* row" in code   # load_w8 / load_x8


def test_fp16_sources_keep_fp16_types():
    s = Shape(129, 4104, 3)
    for c in (GemvConfig(), SplitKConfig(combine="pass2"), MmaConfig(), RingConfig()):
        src = render(c, s, Epilogue("fp16", True))
        assert "#include <cuda_fp16.h>" in src and "bfloat16" not in src and "BF16" not in src
        assert ("mma.sync" not in src) if c.family == "gemv" else (FP16_MMA in src)
        assert render(c, s) != render(c, Shape(129, 4104, 3, "bf16"))


def test_seed_kernel_is_fp16_only():
    assert seed_invalid_reasons(Shape(64, 4096)) == []
    why = seed_invalid_reasons(Shape(64, 4096, 1, "bf16"))
    assert len(why) == 1 and "FP16" in why[0] and "bf16" in why[0]
    with pytest.raises(UsageError, match="FP16 mul_mat_vec as written"):
        seed_source(1, "bf16")
    with pytest.raises(UsageError, match="no 'bf16' version"):
        compile_seed(1, dtype="bf16")
    assert seed_source(3) == seed_source(3, "fp16")
