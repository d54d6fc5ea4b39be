"""The environment knobs, read in one typed place (CPU only)."""

from pathlib import Path

import pytest

from gemvtune.errors import UsageError
from gemvtune.settings import settings


def test_defaults_and_values(monkeypatch, tmp_path):
    monkeypatch.delenv("GEMVTUNE_CACHE_DIR", raising=False)
    monkeypatch.delenv("GEMVTUNE_NO_POOL", raising=False)
    s = settings()
    assert s.cache_dir == Path.home() / ".cache" / "gemvtune" and s.no_pool is False
    monkeypatch.setenv("GEMVTUNE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("GEMVTUNE_NO_POOL", "1")
    s = settings()
    assert s.cache_dir == tmp_path and s.no_pool is True


def test_compile_cache_follows_the_setting(monkeypatch, tmp_path):
    from gemvtune.build.compile import _cache_dir

    monkeypatch.setenv("GEMVTUNE_CACHE_DIR", str(tmp_path))
    assert _cache_dir() == tmp_path / "cubin" and (tmp_path / "cubin").is_dir()


def test_a_malformed_flag_is_one_clear_error(monkeypatch):
    monkeypatch.setenv("GEMVTUNE_NO_POOL", "maybe")
    with pytest.raises(UsageError, match="GEMVTUNE_NO_POOL='maybe' is not a flag"):
        settings()


def test_workers_get_their_index_as_an_argument(monkeypatch):
    """--workers N: worker i runs `search ... --worker-index i` (no environment variable), and the
    search command takes it (hidden) into its coordinator's worker."""
    import subprocess

    from gemvtune.tuning.coordination import workers

    argvs = []

    class Done:
        returncode = 0
        stdout = iter(())

        def __init__(self, argv, env=None, **kw):
            argvs.append((argv, env))

        def poll(self):
            return 0

    monkeypatch.setattr(subprocess, "Popen", Done)
    workers.run_workers(["search", "--shape", "64x64"], devices=[], workers=3)
    assert [a[a.index("--worker-index") + 1] for a, _ in argvs] == ["0", "1", "2"]
    assert all("GEMVTUNE_WORKER_INDEX" not in env for _, env in argvs)
    from gemvtune.cli.main import cli

    ctx = cli.make_context("gemvtune", ["search", "--shape", "64x64", "--worker-index", "2"])
    sub = cli.get_command(ctx, "search")
    assert sub.make_context("search", ["--shape", "64x64", "--worker-index", "2"]).params["worker_index"] == 2
