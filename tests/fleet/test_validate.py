"""validate_fleet: every refusal names the setting, the value and what is valid; good fleets pass."""

from __future__ import annotations

import pytest

from sparkctl.errors import SettingError
from sparkctl.fleet.validate import fail_percentage, validate_fleet

FOUR = ["spark-1", "spark-2", "spark-3", "spark-4"]
KV = {"qwen3.8-27b": 36, "laguna-s-2.1": 12}


def refused(config, cfg, hosts, host_models=None) -> str:
    with pytest.raises(SettingError) as exc:
        validate_fleet(cfg, config.catalog, hosts, host_models)
    return str(exc.value)


def test_todays_configurations_and_the_four_box_example_pass(config, cfg_with):
    assert validate_fleet(config.cfg, config.catalog, ["gx10"]).units == (("gx10",),)
    assert len(validate_fleet(config.cfg, config.catalog, FOUR[:2]).units) == 2
    split = cfg_with(SPARK_TOPOLOGY="split")
    validate_fleet(split, config.catalog, FOUR[:2], {"spark-2": "laguna-s-2.1"})
    fleet = validate_fleet(cfg_with(FLEET_POOLS={"qwen3.8-27b": 3, "laguna-s-2.1": 1}), config.catalog, FOUR)
    assert [len(p.boxes) for p in fleet.pools] == [3, 1]


@pytest.mark.parametrize("settings,hosts,host_models,words", [
    # a placement that does not fit a box
    ({"FLEET_POOLS": {"laguna-s-2.1": 1}, "CODER_KV_CACHE_GIB": {**KV, "laguna-s-2.1": 30}}, FOUR[:1], None,
     ["FLEET_POOLS['laguna-s-2.1'] = 'spark-1'", "-10.0 GiB headroom", "at most 14.9 GiB"]),
    ({"FLEET_POOLS": {"laguna-s-2.1-main": 1}, "CODER_KV_CACHE_GIB": {**KV, "laguna-s-2.1-main": 4}}, FOUR[:1],
     None, ["FLEET_POOLS['laguna-s-2.1-main'] = 'spark-1'", "tensor-parallel pool"]),
    # a box in two pools; a box not in the inventory; a pool short of boxes; a box in no pool
    ({"FLEET_POOLS": {"qwen3.8-27b": ["spark-1", "spark-2"], "laguna-s-2.1": ["spark-2"]}}, FOUR[:2], None,
     ["FLEET_POOLS['laguna-s-2.1'] = 'spark-2'", "already in pool 'qwen3.8-27b'"]),
    ({"FLEET_POOLS": {"qwen3.8-27b": ["spark-9"]}}, FOUR[:1], None, ["'spark-9'", "one of spark-1"]),
    ({"FLEET_POOLS": {"qwen3.8-27b": 3, "laguna-s-2.1": 2}}, FOUR, None,
     ["FLEET_POOLS['laguna-s-2.1'] = 2", "at most 1 boxes"]),
    ({"FLEET_POOLS": {"qwen3.8-27b": 3}}, FOUR, None, ["spark-4 is in none"]),
    # an empty pool; a tensor-parallel pool with an odd box count
    ({"FLEET_POOLS": {"qwen3.8-27b": 4, "laguna-s-2.1": 0}}, FOUR, None,
     ["FLEET_POOLS['laguna-s-2.1'] = 0", "at least one box"]),
    ({"FLEET_POOLS": {"qwen3.8-27b": []}}, FOUR[:1], None, ["FLEET_POOLS['qwen3.8-27b'] = 0"]),
    ({"FLEET_POOLS": {"qwen3.8-27b": {"boxes": 3, "tensor_parallel": True}}}, FOUR[:3], None,
     ["= 3 is not valid", "an even number of boxes"]),
    # a pool naming an unknown model; one without a KV budget
    ({"FLEET_POOLS": {"qwen3.9": 1}}, FOUR[:1], None, ["FLEET_POOLS['qwen3.9'].model = 'qwen3.9'", "laguna-s-2.1"]),
    ({"FLEET_POOLS": {"q": {"model": "qwen3.5-122b-a10b-nvfp4", "boxes": 1}}}, FOUR[:1], None,
     ["CODER_KV_CACHE_GIB['qwen3.5-122b-a10b-nvfp4']"]),
    # waves that could take a whole pool down
    ({"MAX_UNAVAILABLE": "100%"}, FOUR[:2], None, ["MAX_UNAVAILABLE = '100%'", "fewer than the 2 units"]),
    ({"MAX_UNAVAILABLE": 2}, FOUR[:2], None, ["MAX_UNAVAILABLE = 2"]),
    # ROLLOUT_WAVES: no canary, shrinking, not ending at the whole fleet
    ({"ROLLOUT_WAVES": [2, "100%"]}, FOUR, None, ["ROLLOUT_WAVES = [2, '100%']", "starting with 1"]),
    ({"ROLLOUT_WAVES": [1, 3, 2, "100%"]}, FOUR, None, ["ROLLOUT_WAVES[2] = 2", "no smaller than ROLLOUT_WAVES[1]"]),
    ({"ROLLOUT_WAVES": [1, "50%"]}, FOUR, None, ["ROLLOUT_WAVES[1] = '50%'", '"100%"']),
    # FLEET_POOLS beside another topology
    ({"FLEET_POOLS": {"qwen3.8-27b": 2}, "SPARK_TOPOLOGY": "split"}, FOUR[:2], None,
     ["SPARK_TOPOLOGY = 'split'", "while FLEET_POOLS is set"]),
    # GX10_HOSTS naming one box twice; two boxes with the same CX7 address
    ({}, ["spark-1", "spark-1"], None, ["GX10_HOSTS = 'spark-1,spark-1'", "listed twice"]),
    ({"CX7_ADDRESSES": {"spark-1": ["192.168.100.10/24"], "spark-2": ["192.168.100.10/24"]}}, FOUR[:2], None,
     ["CX7_ADDRESSES['spark-2'][0] = '192.168.100.10/24'", "spark-1's"]),
    # a replicas pool whose boxes would serve different models under one served name
    ({}, FOUR[:2], {"spark-2": "laguna-s-2.1"}, ["CODING_MODEL of spark-2 = 'laguna-s-2.1'", "qwen3.8-27b"]),
    ({"FLEET_POOLS": {"qwen3.8-27b": 2}}, FOUR[:2], {"spark-1": "laguna-s-2.1"}, ["CODING_MODEL of spark-1"]),
    ({"FLEET_POOLS": {"qwen3.8-27b": 1, "l": {"model": "laguna-s-2.1", "boxes": 1, "served_name": "coder"}}},
     FOUR[:2], None, ["FLEET_POOLS['l'].served_name = 'coder'", "not already serving qwen3.8-27b"]),
    ({"FLEET_POOLS": {"qwen3.8-27b": {"boxes": 1, "served_name": "embed-bge-m3"}}}, FOUR[:1], None,
     ["served_name = 'embed-bge-m3'"]),
])
def test_each_refusal_names_the_setting_the_value_and_what_is_valid(config, cfg_with, settings, hosts, host_models,
                                                                   words):
    message = refused(config, cfg_with(**settings), hosts, host_models)
    for word in words:
        assert word in message, message


@pytest.mark.parametrize("value", [-1, 100.5, True, "10"])
def test_a_failure_budget_outside_0_to_100_is_refused(value):
    with pytest.raises(SettingError, match="MAX_FAIL_PERCENTAGE .* a percentage from 0 to 100"):
        fail_percentage(value)


def test_a_pool_of_one_may_roll_out_whole_as_today(config, cfg_with):
    """A single box, or a split box, has no other box to serve while it rolls out: not refused."""
    validate_fleet(cfg_with(MAX_UNAVAILABLE="100%"), config.catalog, ["gx10"])
    validate_fleet(cfg_with(FLEET_POOLS={"qwen3.8-27b": 3, "laguna-s-2.1": 1}), config.catalog, FOUR)
