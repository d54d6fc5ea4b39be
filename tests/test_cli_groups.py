"""bench and percall are command groups, one subcommand per mode (bench kernels|step|hf, percall ops|hf), each
with only its own options; the old spelling without a subcommand runs the same code for one release, saying so in
one line on stderr, with the exit codes it had. search takes its declared options once (no parameter list)."""

from __future__ import annotations

import inspect

import pytest
from click.testing import CliRunner
from conftest import ROOT, run_cli

TABLE = str(ROOT / "results" / "nvidia-h200" / "table.json")
CFG = str(ROOT / "gemvtune" / "kernels" / "hf_configs" / "llama-3-8b.json")


def _dep(old: str, new: str) -> str:
    return f"gemvtune: {old} is deprecated; use 'gemvtune {new}' (removed in the next release)"


SUBCOMMANDS = [   # (argv, options it has, options it must not have)
    (["bench", "kernels"], ["--shape", "--suite", "--model", "--configs", "--batch", "--no-inductor", "--dtype"],
     ["--layers", "--hf-config", "--tokens"]),
    (["bench", "step"], ["--model", "--layers", "--table", "--rounds", "--out"],
     ["--shape", "--suite", "--configs", "--batch", "--dtype", "--hf-config", "--tokens", "--no-inductor"]),
    (["bench", "hf"], ["CONFIG", "--layers", "--tokens", "--prompt-tokens", "--rounds", "--seed", "--dtype"],
     ["--shape", "--suite", "--model", "--configs", "--batch", "--hf-config", "--no-inductor"]),
    (["percall", "ops"], ["--shape", "--batch", "--calls", "--repeats", "--dtype"], ["--hf-config", "--layers"]),
    (["percall", "hf"], ["CONFIG", "--layers", "--calls", "--repeats", "--dtype"], ["--shape", "--batch", "--hf-config"]),
]


@pytest.mark.parametrize("argv,has,lacks", SUBCOMMANDS, ids=[" ".join(a) for a, _, _ in SUBCOMMANDS])
def test_each_subcommand_has_help_with_only_its_options(argv, has, lacks):
    from gemvtune.cli.main import cli

    r = CliRunner().invoke(cli, [*argv, "--help"], prog_name="gemvtune", terminal_width=200)
    assert r.exit_code == 0 and f"Usage: gemvtune {' '.join(argv)} " in r.output, r.output
    assert all(o in r.output for o in has) and not [o for o in lacks if o in r.output], r.output


@pytest.mark.parametrize("group,subs", [("bench", ["kernels", "step", "hf"]), ("percall", ["ops", "hf"])])
def test_group_help_lists_subcommands_not_the_old_options(group, subs):
    r = run_cli(group, "--help")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    text, _, options = r.stdout.partition("\nOptions:")
    assert all(f"  {s} " in options for s in subs) and "--shape" not in options and "deprecated" in text, r.stdout


# (old argv, its deprecation line, the new argv): the same function is called with the same arguments
SAME = [
    (["bench", "--shape", "4096x4096", "--batch", "1,2", "--table", TABLE, "--rounds", "2", "--no-inductor"],
     _dep("'bench --shape'", "bench kernels"), ["bench", "kernels"]),
    (["bench", "--suite", "decode", "--configs", "sample:3", "--seed", "4", "--no-spin-check", "--dtype", "bf16"],
     _dep("'bench --suite'", "bench kernels"), ["bench", "kernels"]),
    (["bench", "--model", "llama-3-8b", "--layers", "2", "--table", TABLE, "--rounds", "1", "--out", "o"],
     _dep("'bench --layers'", "bench step"), ["bench", "step"]),
    (["bench", "--hf-config", CFG, "--layers", "2", "--tokens", "8", "--prompt-tokens", "4", "--rounds", "1",
      "--seed", "3", "--dtype", "bf16"], _dep("'bench --hf-config'", "bench hf"), ["bench", "hf", CFG]),
    (["percall"], _dep("'percall' without a subcommand", "percall ops"), ["percall", "ops"]),
    (["percall", "--shape", "1024x4096", "--batch", "4", "--calls", "5", "--out", "o"],
     _dep("'percall --shape'", "percall ops"), ["percall", "ops"]),
    (["percall", "--hf-config", CFG, "--layers", "2", "--dtype", "bf16", "--repeats", "3"],
     _dep("'percall --hf-config'", "percall hf"), ["percall", "hf", CFG]),
]


def _new_argv(old: list[str], new: list[str]) -> list[str]:
    rest = old[1:]
    if "--hf-config" in rest:
        i = rest.index("--hf-config")
        rest = rest[:i] + rest[i + 2:]
    return new + rest


@pytest.mark.parametrize("old,line,new", SAME, ids=[" ".join(o[:3])[:50] for o, _, _ in SAME])
def test_old_spelling_runs_the_same_code_with_one_deprecation_line(monkeypatch, old, line, new):
    import gemvtune.cli.bench_cmd as bc
    import gemvtune.cli.percall_cmd as pc
    from gemvtune.cli.main import cli

    calls: list[tuple[str, dict]] = []
    for mod in (bc, pc):
        for name in ("run_kernels", "run_step", "run_hf", "run_ops"):
            f = getattr(mod, name, None)
            if f is not None:
                monkeypatch.setattr(mod, name, lambda *a, _f=f, **k: calls.append(
                    (f"{_f.__module__}.{_f.__name__}", dict(inspect.signature(_f).bind(*a, **k).arguments))))
    r_old = CliRunner().invoke(cli, old)
    r_new = CliRunner().invoke(cli, _new_argv(old, new))
    assert r_old.exit_code == 0 and r_new.exit_code == 0, (r_old.output, r_new.output)
    assert r_old.stderr.splitlines() == [line] and r_new.stderr == "", (r_old.stderr, r_new.stderr)
    assert len(calls) == 2 and calls[0] == calls[1], calls


def _lines(r):
    return [ln for ln in r.stderr.splitlines() if ln.strip()]


BAD = [   # (the old spelling, the new one or None, what the one error line says)
    (["bench", "--shape", "4096x4096", "--table", "{tmp}/none.json"],
     ["bench", "kernels", "--shape", "4096x4096", "--table", "{tmp}/none.json"], "does not exist"),
    (["bench", "--suite", "decode", "--table", "{tmp}/bad.json"],
     ["bench", "kernels", "--suite", "decode", "--table", "{tmp}/bad.json"], "not valid JSON"),
    (["bench", "--model", "llama-3-8b", "--layers", "2", "--table", "{tmp}/none.json"],
     ["bench", "step", "--model", "llama-3-8b", "--layers", "2", "--table", "{tmp}/none.json"], "does not exist"),
    (["bench", "--hf-config", "{tmp}/none.json"], ["bench", "hf", "{tmp}/none.json"], "does not exist"),
    (["bench"], ["bench", "kernels"], "bench needs --shape, --suite or --model"),
    (["percall", "--hf-config", "{tmp}/none.json"], ["percall", "hf", "{tmp}/none.json"], "does not exist"),
    (["percall", "--layers", "2"], None, "--layers needs --hf-config"),
]


@pytest.mark.parametrize("old,new,needle", BAD, ids=[" ".join(o)[:40] for o, _, _ in BAD])
def test_old_spelling_bad_input_exit_2_as_before(tmp_path, old, new, needle):
    (tmp_path / "bad.json").write_text("{not json")
    r = run_cli(*[a.replace("{tmp}", str(tmp_path)) for a in old])
    lines = _lines(r)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert len(lines) == 2 and "is deprecated; use 'gemvtune " in lines[0] and needle in lines[1], r.stderr
    if new is not None:   # the new spelling: the same line alone
        r = run_cli(*[a.replace("{tmp}", str(tmp_path)) for a in new])
        assert r.returncode == 2 and _lines(r) == lines[1:], (r.stderr, lines)


@pytest.mark.parametrize("args", [["bench", "--shape", "4096x4096", "--table", TABLE],
                                  ["bench", "--model", "llama-3-8b", "--layers", "2", "--table", TABLE],
                                  ["percall", "--shape", "1024x4096", "--table", TABLE],
                                  ["percall"]], ids=["kernels", "step", "percall ops", "percall bare"])
def test_old_spelling_without_a_gpu_exit_3_as_before(args):
    from gemvtune.device._cupy import cuda_available

    if not cuda_available():
        pytest.skip("a CUDA device answers here")
    r = run_cli(*args)
    lines = _lines(r)
    assert r.returncode == 3 and "Traceback" not in r.stderr, r.stderr
    assert len(lines) == 2 and "is deprecated" in lines[0] and "no CUDA device answers" in lines[1], r.stderr


def test_old_options_before_a_subcommand_are_refused():
    r = run_cli("bench", "--shape", "64x64", "kernels")
    assert r.returncode == 2 and _lines(r) == [
        "gemvtune: error: --shape: give the options after the subcommand (gemvtune bench kernels --shape ...)"], r.stderr


def test_search_takes_its_declared_options_once():
    from gemvtune.cli.search_cmd import search
    from gemvtune.tuning.search_options import OPTIONS

    params = list(inspect.signature(search.callback).parameters.values())
    assert [p.kind for p in params] == [inspect.Parameter.VAR_KEYWORD]
    assert {p.name for p in search.params} == {o.dest for o in OPTIONS if o.flag and o.search}
