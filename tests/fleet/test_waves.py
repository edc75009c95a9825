"""Waves with Ansible's `serial:` meaning, bounded per pool by MAX_UNAVAILABLE."""

from __future__ import annotations

import pytest

from sparkctl.fleet import placement, pools, waves

DEFAULT = [1, "25%", "100%"]


def fleet(cfg_with, hosts, **settings):
    cfg = cfg_with(**settings)
    return placement.place(pools.from_settings(cfg, hosts), hosts)


def hosts(n):
    return [f"spark-{i}" for i in range(1, n + 1)]


@pytest.mark.parametrize("setting,total,sizes", [
    ([1, "25%", "100%"], 10, [1, 2, 7]),   # 25 % of 10 rounds down to 2, as Ansible's pct_to_int
    ([1, "25%", "100%"], 2, [1, 1]),       # 25 % of 2 rounds to 0: at least one
    ([1, 2], 7, [1, 2, 2, 2]),             # the last size repeats until every box is done
    (["100%"], 3, [3]),
])
def test_batch_sizes_read_as_ansible_serial(setting, total, sizes):
    assert waves.batch_sizes(setting, total) == sizes


@pytest.mark.parametrize("value,pool,limit", [("25%", 1, 1), ("25%", 2, 1), ("25%", 8, 2), ("100%", 2, 1),
                                              (5, 4, 3), ("50%", 4, 2)])
def test_a_pool_never_loses_all_its_boxes_and_at_least_one_rolls(value, pool, limit):
    assert waves.pool_limit(value, pool) == limit


def test_four_boxes_three_qwen_one_laguna(cfg_with):
    f = fleet(cfg_with, hosts(4), FLEET_POOLS={"qwen3.8-27b": 3, "laguna-s-2.1": 1})
    planned = waves.wave_boxes(waves.plan_waves(f, DEFAULT, "25%"))
    assert planned == [["spark-1"], ["spark-2"], ["spark-3", "spark-4"]]  # one Qwen box down at a time


def test_thirty_two_boxes_take_five_waves_with_a_quarter_of_the_pool_down_at_most(cfg_with):
    f = fleet(cfg_with, hosts(32))
    planned = waves.plan_waves(f, DEFAULT, "25%")
    assert [len(w) for w in planned] == [1, 8, 8, 8, 7]
    assert sorted(b for w in waves.wave_boxes(planned) for b in w) == sorted(hosts(32))


def test_a_pair_of_two_replicas_never_loses_both(cfg_with):
    f = fleet(cfg_with, hosts(2))
    assert waves.wave_boxes(waves.plan_waves(f, ["100%"], "100%")) == [["spark-1"], ["spark-2"]]


def test_tensor_parallel_pairs_count_as_one_unit(cfg_with):
    f = fleet(cfg_with, hosts(4), FLEET_POOLS={"qwen3.8-27b": {"boxes": 4, "tensor_parallel": True}})
    assert waves.wave_boxes(waves.plan_waves(f, DEFAULT, "25%")) == [["spark-1", "spark-2"], ["spark-3", "spark-4"]]


def test_only_boxes_with_work_are_planned_the_canary_among_them(cfg_with):
    f = fleet(cfg_with, hosts(8))
    planned = waves.wave_boxes(waves.plan_waves(f, DEFAULT, "25%", with_work={"spark-5", "spark-6", "spark-7"}))
    assert planned == [["spark-5"], ["spark-6", "spark-7"]]


def test_two_new_boxes_start_at_once_beside_the_canary_the_committed_keep_max_unavailable(cfg_with):
    f = fleet(cfg_with, hosts(5))  # one pool: spark-1..3 serve, spark-4 and spark-5 join
    new = {"spark-4", "spark-5"}
    planned = waves.wave_boxes(waves.plan_waves(f, DEFAULT, "25%", first_installs=new))
    assert planned == [["spark-1", "spark-4", "spark-5"], ["spark-2"], ["spark-3"]]
    wider = waves.wave_boxes(waves.plan_waves(f, ["100%"], 2, first_installs=new))
    assert wider == [["spark-1", "spark-2", "spark-4", "spark-5"], ["spark-3"]]  # 2 of the 3 serving, never all


def test_joining_boxes_do_not_queue_behind_each_other(cfg_with):
    f = fleet(cfg_with, hosts(3))  # spark-1 serves and is unchanged; spark-2 and spark-3 join
    join = {"spark-2", "spark-3"}
    assert waves.wave_boxes(waves.plan_waves(f, DEFAULT, "25%", with_work=join)) == [["spark-2"], ["spark-3"]]
    assert waves.wave_boxes(waves.plan_waves(f, DEFAULT, "25%", with_work=join, first_installs=join)) == \
        [["spark-2", "spark-3"]]


def test_max_unavailable_counts_only_a_pools_serving_boxes(cfg_with):
    f = fleet(cfg_with, hosts(4))  # spark-1, spark-2 serve; the pool of four would allow two at "50%"
    planned = waves.wave_boxes(waves.plan_waves(f, ["100%"], "50%", first_installs={"spark-3", "spark-4"}))
    assert planned == [["spark-1", "spark-3", "spark-4"], ["spark-2"]]  # a pool of two serving never loses both


def test_a_pools_one_serving_box_waits_for_the_boxes_joining_it(cfg_with):
    f = fleet(cfg_with, hosts(2))  # spark-1 serves alone; spark-2 joins; both change
    assert waves.wave_boxes(waves.plan_waves(f, DEFAULT, "25%", first_installs={"spark-2"})) == \
        [["spark-2"], ["spark-1"]]


def test_a_tensor_parallel_pair_is_a_first_install_only_when_both_its_boxes_are(cfg_with):
    f = fleet(cfg_with, hosts(4), FLEET_POOLS={"qwen3.8-27b": {"boxes": 4, "tensor_parallel": True}})
    half = waves.wave_boxes(waves.plan_waves(f, ["100%"], "25%", first_installs={"spark-3"}))
    assert half == [["spark-1", "spark-2"], ["spark-3", "spark-4"]]  # a box of the pair serves: it counts
    whole = waves.wave_boxes(waves.plan_waves(f, ["100%"], "25%", first_installs={"spark-3", "spark-4"}))
    assert whole == [["spark-3", "spark-4"], ["spark-1", "spark-2"]]  # the new pair first: the pool's one serving
