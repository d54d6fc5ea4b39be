"""Issue 18: tests marked slow are skipped by default and run with --runslow, -m slow or CI=true (the
CI job), through tests/conftest.py's own hooks, run here on a two-test project."""

import pytest
from conftest import ROOT, SLOW_REASON, run_slow

pytest_plugins = ["pytester"]


@pytest.mark.parametrize("runslow,markexpr,env,want", [
    (False, "", {}, False),
    (False, "", {"CI": "false"}, False),
    (False, "", {"CI": ""}, False),
    (False, "gpu", {}, False),
    (True, "", {}, True),
    (False, "slow", {}, True),
    (False, "", {"CI": "true"}, True),
    (False, "", {"CI": "TRUE"}, True),
    (False, "", {"CI": "1"}, True),
])
def test_run_slow(runslow, markexpr, env, want):
    assert run_slow(runslow, markexpr, env) is want


@pytest.fixture
def project(pytester):
    pytester.makeconftest((ROOT / "tests" / "conftest.py").read_text(encoding="utf-8"))
    pytester.makeini("[pytest]\nmarkers =\n    slow: slow\n    gpu: gpu\naddopts = -ra\n")
    pytester.makepyfile(test_two="""
        import pytest

        def test_quick():
            pass

        @pytest.mark.slow
        def test_long():
            pass
    """)
    return pytester


@pytest.mark.parametrize("args,env,ran", [
    ((), {}, {"passed": 1, "skipped": 1}),
    ((), {"CI": "true"}, {"passed": 2}),
    (("--runslow",), {}, {"passed": 2}),
    (("-m", "slow"), {}, {"passed": 1, "deselected": 1}),
    (("-m", "not slow"), {"CI": "true"}, {"passed": 1, "deselected": 1}),
])
def test_conftest_selects_slow_tests(project, monkeypatch, args, env, ran):
    monkeypatch.delenv("CI", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    r = project.runpytest("-p", "no:cacheprovider", *args)
    r.assert_outcomes(**ran)
    if "skipped" in ran:
        r.stdout.fnmatch_lines([f"SKIPPED*{SLOW_REASON}*"])
