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
    from gemvtune.compile import _cache_dir

    monkeypatch.setenv("GEMVTUNE_CACHE_DIR", str(tmp_path))
    assert _cache_dir() == tmp_path / "cubin" and (tmp_path / "cubin").is_dir()


def test_a_malformed_flag_is_one_clear_error(monkeypatch):
    monkeypatch.setenv("GEMVTUNE_NO_POOL", "maybe")
    with pytest.raises(UsageError, match="GEMVTUNE_NO_POOL='maybe' is not a flag"):
        settings()
