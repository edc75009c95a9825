"""The real GX10 group data, typed through the real schema, and its resolved catalog."""

from __future__ import annotations

import pytest

from sparkctl.check.load import load
from tests.conftest import changed


@pytest.fixture(scope="module")
def config():
    return load(["all", "gx10"])


@pytest.fixture
def cfg_with(config):
    """The GX10 settings with some changed, validated again as an operator's --data would be."""
    def make(**settings):
        return changed(config.cfg, **settings)
    return make
