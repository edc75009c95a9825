"""The node exporter's scrape path is no served model's: a cross-field rule of the checks (check/rules.py
scrape_node_path), refused before the box is touched; the render that writes the paths trusts it."""

from __future__ import annotations

import pytest

from sparkctl.check.validate import validate_host
from sparkctl.errors import SettingError
from sparkctl.render.monitoring import scrape_targets


def test_a_scrape_node_path_equal_to_an_embedders_served_name_is_refused_naming_it(gx10_data):
    served = [s.served_name for s in validate_host(gx10_data, "test-box", read_secrets=False).services]
    embedder = served[-1]
    with pytest.raises(SettingError) as refused:
        validate_host({**gx10_data, "SCRAPE_NODE_PATH": embedder}, "test-box", read_secrets=False)
    assert "SCRAPE_NODE_PATH" in str(refused.value) and repr(embedder) in str(refused.value)
    assert "a path segment no served model uses" in str(refused.value) and ", ".join(served) in str(refused.value)


def test_the_paths_written_are_each_service_and_the_node(gx10_data):
    settings = validate_host(gx10_data, "test-box", read_secrets=False)
    paths = [t["path"] for t in scrape_targets(settings.cfg, settings.services)]
    assert paths == [s.served_name for s in settings.services if not s.headless] + [settings.cfg.SCRAPE_NODE_PATH]
