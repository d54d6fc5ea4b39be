import pytest
from conftest import run_cli


def test_help_lists_commands():
    r = run_cli("--help")
    assert r.returncode == 0
    for cmd in ("space", "render", "compile-check"):
        assert cmd in r.stdout


@pytest.mark.parametrize("shape", ["14336", "14336x", "x4096", "0x4096", "-8x4096", "1.5x4096", "abcxdef",
                                   "14336x4096x", "9999999x9999999"])
@pytest.mark.parametrize("cmd", ["space", "render"])
def test_bad_shape_one_line_exit_2(cmd, shape):
    r = run_cli(cmd, "--shape", shape)
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stdout == ""


@pytest.mark.parametrize("args,needle", [
    (["space", "--shape", "64x64", "--batch", "0"], "batch"),
    (["render", "--shape", "64x4100", "--config", "vec=half8"], "not divisible"),
    (["render", "--shape", "64x64", "--config", "colour=red"], "unknown gemv parameter"),
    (["compile-check", "--shape", "64x64", "--configs", "sample:0"], "sample:N"),
    (["compile-check", "--shape", "64x64", "--configs", "nope.json"], "does not exist"),
])
def test_bad_args_one_line_exit_2(args, needle):
    r = run_cli(*args)
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_space_summary():
    r = run_cli("space", "--shape", "14336x4096")
    assert r.returncode == 0
    assert "valid of 345600" in r.stdout and "llama.cpp config" in r.stdout and "invalid, by first reason" in r.stdout


def test_render_prints_source():
    r = run_cli("render", "--shape", "4096x4096", "--config", "vec=half8,tpr=32,unroll=2")
    assert r.returncode == 0 and 'extern "C" __global__' in r.stdout and "typedef uint4 wvec_t;" in r.stdout


def test_compile_check_runs_nvrtc():
    r = run_cli("compile-check", "--shape", "4104x4104", "--configs", "sample:4")
    assert r.returncode == 0, r.stderr
    assert "4 compiled, 0 failed" in r.stdout


def test_report_on_committed_table(tmp_path):
    out = tmp_path / "t.csv"
    r = run_cli("report", "--table", "results/nvidia-h200/table.json", "--csv", str(out))
    assert r.returncode == 0, r.stderr
    assert "NVIDIA H200" in r.stdout and "14336x4096" in r.stdout.replace(" ", "")
    import pandas as pd

    df = pd.read_csv(out)
    assert {"M", "d", "winner", "us", "llama_us", "cublas_us", "x_cublas", "p_vec"} <= set(df.columns)
    sixteen = df[df.weights.isna()]   # (FP8 entries have no llama.cpp point: their baseline is dequantize + F.linear)
    assert (df.us > 0).all() and (sixteen.x_llama >= 1.0).all() and len(sixteen) < len(df)


@pytest.mark.parametrize("args,needle", [
    (["report", "--table", "nope.json"], "does not exist"),
    (["search", "--shape", "64x64", "--trials", "-1"], "1<=x<=10000"),
    (["search", "--shape", "64x64", "--sampler", "sa"], "'sa' is not one of 'tpe'"),
    (["search"], "needs --shape or --model"),
    (["search", "--model", "gpt-9"], "unknown model"),
])
def test_search_report_bad_input(args, needle):
    r = run_cli(*args)
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr, r.stderr
