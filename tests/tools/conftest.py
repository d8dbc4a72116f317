"""Fixtures for the tools and task-suite tests: one sandbox per module, an isolated index cache."""

from __future__ import annotations

import pytest

from jgem.envs.tools.sandbox import Sandbox, SandboxConfig


@pytest.fixture(scope="module")
def sandbox():
    sb = Sandbox(SandboxConfig(timeout=1.0, max_output=4096), workers=2)
    yield sb
    sb.close()


@pytest.fixture(autouse=True)
def _index_cache(tmp_path_factory, monkeypatch):
    # Every test session builds its own BM25 cache, never touching ~/.cache.
    monkeypatch.setenv("JGEM_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "jgem-cache"))
