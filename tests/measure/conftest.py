"""The measure tests' shared set-up."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _history_index_cache(tmp_path_factory, monkeypatch):
    """`bench judge` caches a history's index in the user's cache (history_index.py): a test's goes to its own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
