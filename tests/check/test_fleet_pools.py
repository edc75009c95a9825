"""The fleet in the deploy's own validation (check/validate.py): FLEET_POOLS gives each box its pool's coding model
and served name over the group data, and a fleet that cannot work is refused for every host before any is
touched, naming the setting. What the pools, placement and refusals compute is tested in tests/fleet."""

from __future__ import annotations

import pytest

from sparkctl.check.validate import validate_host
from sparkctl.errors import SettingError

HOSTS = ["spark-1", "spark-2", "spark-3", "spark-4"]
FOUR_BOXES = {"qwen3.8-27b": 3, "laguna-s-2.1": 1}  # the README's example: 3 x Qwen + 1 x Laguna


def settings_of(data: dict, box: str, hosts=HOSTS, host_models=None):
    return validate_host(data, box, read_secrets=False, hosts=hosts, host_models=host_models)


def test_each_box_serves_its_pools_model_under_its_pools_name(gx10_data):
    data = {**gx10_data, "FLEET_POOLS": FOUR_BOXES}
    served = {box: (settings_of(data, box).coder.model.key, settings_of(data, box).coder.served_name) for box in HOSTS}
    assert served == {"spark-1": ("qwen3.8-27b", "coder"), "spark-2": ("qwen3.8-27b", "coder"),
                      "spark-3": ("qwen3.8-27b", "coder"), "spark-4": ("laguna-s-2.1", "laguna-s-2.1")}


def test_without_pools_a_two_box_group_data_is_read_as_before(gx10_data):
    for box in HOSTS[:2]:
        s = settings_of(gx10_data, box, hosts=HOSTS[:2])
        assert (s.coder.model.key, s.coder.served_name, s.role.name) == ("qwen3.8-27b", "coder", "replica")


@pytest.mark.parametrize("change, setting", [
    ({"FLEET_POOLS": {"qwen3.8-27b": 5}}, "FLEET_POOLS"),  # more boxes than the inventory has
    ({"FLEET_POOLS": {"qwen3.8-27b": 3}}, "FLEET_POOLS"),  # a box in no pool
    ({"FLEET_POOLS": {"qwen3-8b": 4}}, "FLEET_POOLS"),  # an unknown model
    ({"MAX_FAIL_PERCENTAGE": 101}, "MAX_FAIL_PERCENTAGE"),
    ({"ROLLOUT_WAVES": [2, "100%"]}, "ROLLOUT_WAVES"),  # no canary
    ({"ROLLOUT_WAVES": [1, "50%", "25%"]}, "ROLLOUT_WAVES"),  # shrinking, not ending at the whole fleet
])
def test_a_fleet_that_cannot_work_is_refused_for_every_host_naming_the_setting(gx10_data, change, setting):
    data = {**gx10_data, **change}
    for box in HOSTS:
        with pytest.raises(SettingError) as exc:
            settings_of(data, box)
        assert setting in str(exc.value)


def test_a_replicas_pool_whose_boxes_would_serve_different_models_is_refused(gx10_data):
    with pytest.raises(SettingError) as exc:
        settings_of(gx10_data, "spark-1", hosts=HOSTS[:2], host_models={"spark-2": "laguna-s-2.1"})
    assert "CODING_MODEL" in str(exc.value) and "split" in str(exc.value)
