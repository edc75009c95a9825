"""Pools as data: FLEET_POOLS read as pools, and today's SPARK_TOPOLOGY read as pools reproducing today's roles."""

from __future__ import annotations

import pytest

from sparkctl.config import topology
from sparkctl.fleet import placement, pools

FOUR = ["spark-1", "spark-2", "spark-3", "spark-4"]


def fleet(cfg, hosts, host_models=None):
    return placement.place(pools.from_settings(cfg, hosts, host_models), hosts)


@pytest.mark.parametrize("setting,hosts,models", [
    ("replicas", ["gx10"], {}),
    ("replicas", ["spark-1", "spark-2"], {}),
    ("split", ["spark-1", "spark-2"], {"spark-1": "laguna-s-2.1"}),
    ("split", ["spark-1", "spark-2"], {}),
    ("split", ["gx10"], {}),
    ("tensor-parallel", ["spark-1", "spark-2"], {}),
])
def test_todays_topologies_as_pools_give_todays_roles(cfg_with, setting, hosts, models):
    cfg = cfg_with(SPARK_TOPOLOGY=setting)
    f = fleet(cfg, hosts, models)
    for host in hosts:
        assert f.role(host) == topology.role_of(cfg, host, hosts).name, host


def test_tensor_parallel_head_is_tp_head_and_the_pair_is_one_unit(cfg_with):
    cfg = cfg_with(SPARK_TOPOLOGY="tensor-parallel", TP_HEAD="spark-2")
    f = fleet(cfg, ["spark-1", "spark-2"])
    assert f.units == (("spark-2", "spark-1"),)
    assert f.role("spark-2") == topology.role_of(cfg, "spark-2", ["spark-1", "spark-2"]).name == "head"


def test_todays_pools_serve_what_each_box_served(cfg_with):
    split = fleet(cfg_with(SPARK_TOPOLOGY="split"), ["spark-1", "spark-2"], {"spark-2": "laguna-s-2.1"})
    assert [(p.pool.model, p.boxes, p.pool.served_name) for p in split.pools] == [
        ("qwen3.8-27b", ("spark-1",), "coder"), ("laguna-s-2.1", ("spark-2",), "coder")]
    replicas = fleet(cfg_with(), ["spark-1", "spark-2"])
    assert [(p.pool.model, p.boxes) for p in replicas.pools] == [("qwen3.8-27b", ("spark-1", "spark-2"))]


def test_counted_pools_are_placed_in_inventory_order_after_named_ones(cfg_with):
    cfg = cfg_with(FLEET_POOLS={"qwen3.8-27b": 3, "laguna-s-2.1": ["spark-2"]})
    f = fleet(cfg, FOUR)
    assert {p.pool.name: p.boxes for p in f.pools} == {"qwen3.8-27b": ("spark-1", "spark-3", "spark-4"),
                                                       "laguna-s-2.1": ("spark-2",)}
    assert f.role("spark-2") == "split"
    served = {p.pool.name: p.pool.served_name for p in f.pools}
    assert served == {"qwen3.8-27b": "coder", "laguna-s-2.1": "laguna-s-2.1"}  # CODING_MODEL's pool keeps "coder"


def test_a_tensor_parallel_pool_pairs_its_boxes_in_order(cfg_with):
    cfg = cfg_with(FLEET_POOLS={"qwen3.8-27b": 2, "big": {"model": "laguna-s-2.1-main", "boxes": 4,
                                                          "tensor_parallel": True, "served_name": "laguna"}})
    hosts = [f"spark-{i}" for i in range(1, 7)]
    f = fleet(cfg, hosts)
    big = f.pool_of("spark-3")
    assert big.units == (("spark-3", "spark-4"), ("spark-5", "spark-6"))
    assert [f.role(h) for h in hosts[2:]] == ["head", "worker", "head", "worker"]
    assert len(f.units) == 4  # two boxes and two pairs


def test_each_box_is_told_its_pools_model_served_name_and_embedders(cfg_with):
    cfg = cfg_with(FLEET_POOLS={"qwen3.8-27b": 1, "laguna": {"model": "laguna-s-2.1", "boxes": 1, "embedders": False}})
    f = fleet(cfg, ["spark-1", "spark-2"])
    assert f.host_settings("spark-1") == {"CODING_MODEL": "qwen3.8-27b", "CODER_SERVED_NAME": "coder",
                                          "embedders": True}
    assert f.host_settings("spark-2") == {"CODING_MODEL": "laguna-s-2.1", "CODER_SERVED_NAME": "laguna",
                                          "embedders": False}
