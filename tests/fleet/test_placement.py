"""Each box's memory with the capacity planner's arithmetic, and each pool's capacity with its provenance."""

from __future__ import annotations

import pytest

from sparkctl.fleet import placement, pools

FOUR = ["spark-1", "spark-2", "spark-3", "spark-4"]


def placed(cfg, hosts):
    return placement.place(pools.from_settings(cfg, hosts), hosts)


def test_each_box_memory_is_the_planners_sum(config, cfg_with):
    cfg = cfg_with(FLEET_POOLS={"qwen3.8-27b": 3, "laguna-s-2.1": 1})
    memory = {m.box: m for m in placement.box_memory(cfg, config.catalog, placed(cfg, FOUR))}
    qwen, laguna = memory["spark-1"], memory["spark-4"]
    # the write-up's figures: 121.6 usable - 15.6 (OS + embedders) - 44 resident = 62 free; 36 of KV: 26 headroom
    assert (qwen.resident_gib, qwen.kv_gib) == (44.0, 36.0)
    assert qwen.headroom_gib == pytest.approx(26.0) and qwen.fits
    assert laguna.model == "laguna-s-2.1" and laguna.headroom_gib == pytest.approx(8.0) and laguna.fits
    assert qwen.arithmetic.endswith("= 26.0 GiB headroom")


def test_a_pool_without_embedders_gives_its_boxes_their_memory(config, cfg_with):
    cfg = cfg_with(FLEET_POOLS={"laguna-s-2.1": {"boxes": 1, "embedders": False}, "qwen3.8-27b": 1})
    memory = {m.box: m for m in placement.box_memory(cfg, config.catalog, placed(cfg, FOUR[:2]))}
    assert memory["spark-1"].embedders_gib == 0.0
    assert memory["spark-2"].embedders_gib == pytest.approx(9.6)
    assert memory["spark-1"].headroom_gib == pytest.approx(8.0 + 9.6)


def test_a_pairs_worker_runs_no_embedders(config, cfg_with):
    cfg = cfg_with(FLEET_POOLS={"big": {"model": "laguna-s-2.1-main", "boxes": 2, "tensor_parallel": True}},
                   CODER_KV_CACHE_GIB={"qwen3.8-27b": 36, "laguna-s-2.1": 12, "laguna-s-2.1-main": 20})
    memory = {m.box: m for m in placement.box_memory(cfg, config.catalog, placed(cfg, FOUR[:2]))}
    head, worker = memory["spark-1"], memory["spark-2"]
    assert (head.role, worker.role) == ("head", "worker")
    assert worker.embedders_gib == 0 and head.embedders_gib > 0
    assert head.resident_gib == worker.resident_gib < 116.9 / 2 + 24.1  # the weights split over the pair
    assert head.fits and worker.headroom_gib > head.headroom_gib


def test_pool_capacity_multiplies_one_box_by_its_boxes_with_provenance(config, cfg_with):
    cfg = cfg_with(FLEET_POOLS={"qwen3.8-27b": 3, "laguna-s-2.1": 1})
    fleet = placed(cfg, FOUR)
    qwen = placement.pool_capacity(cfg, config.catalog, fleet.pools[0])
    assert qwen.engines == 3 and qwen.boxes == 3
    assert qwen.concurrent_requests == pytest.approx(3 * 1_014_892 / 262_144)
    assert qwen.concurrent_source.startswith("measured: production write-up")
    assert qwen.decode_tokens_per_s == {1: pytest.approx(3 * 18.3), 2: 120.0, 4: 219.0, 8: 366.0}
    assert "Finding 2" in qwen.decode_source and "x 3" in qwen.decode_source
    laguna = placement.pool_capacity(cfg, config.catalog, fleet.pools[1])
    assert laguna.concurrent_requests == pytest.approx(1.2) and laguna.decode_tokens_per_s[8] == 176.0


def test_a_tensor_parallel_pool_is_planned_as_the_existing_tp_plan(config, cfg_with):
    cfg = cfg_with(FLEET_POOLS={"qwen3.8-27b": {"boxes": 4, "tensor_parallel": True}})
    fleet = placed(cfg, FOUR)
    cap = placement.pool_capacity(cfg, config.catalog, fleet.pools[0])
    assert cap.engines == 2 and cap.boxes == 4
    assert cap.decode_tokens_per_s == {} and "never measured" in cap.decode_source
    assert cap.concurrent_source.startswith("estimate")


def test_a_stand_in_checkpoint_inherits_no_published_figures(cfg_with):
    """The simulated Spark's tiny stand-ins serve under the same catalog keys: production's tok/s are not theirs."""
    from sparkctl.check.load import load

    sim = load(["all", "gx10", "sim"])
    fleet = placement.place(pools.from_settings(sim.cfg, ["spark-1"]), ["spark-1"])
    cap = placement.pool_capacity(sim.cfg, sim.catalog, fleet.pools[0])
    assert cap.decode_tokens_per_s == {} and cap.decode_source == "none published for this checkpoint"
