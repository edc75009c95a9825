"""The wave gate as the deploy's greenlets drive it: waves in order, boxes with nothing to roll out never in it
(so never waited for), the failure budget stops the rollout and names the boxes left untouched."""

from __future__ import annotations

import pytest

from sparkctl.errors import SparkctlError
from sparkctl.fleet.wave_gate import Decision, WaveGate, rollout_gate

GO, WAIT, STOP = Decision.GO, Decision.WAIT, Decision.STOP
WAVES = [[("a",)], [("b",), ("c",)], [("d",), ("e",)]]
EVERY = set("abcde")


def test_a_wave_starts_only_once_the_one_before_has_every_result():
    gate = WaveGate(WAVES, 0)
    assert [gate.may_start(b) for b in "abd"] == [GO, WAIT, WAIT]
    gate.record("a", ok=True)
    assert [gate.may_start(b) for b in "bcd"] == [GO, GO, WAIT]
    gate.record("b", ok=True)
    assert gate.may_start("d") is WAIT
    gate.record("c", ok=True)
    assert gate.may_start("d") is GO and gate.current_wave == 2


def test_boxes_with_nothing_to_roll_out_hold_no_wave_back():
    gate = rollout_gate(WAVES, work={"a", "d"}, active=EVERY, max_fail_percentage=0)
    assert gate.waves == [[("a",)], [("d",)]]  # b, c and e are not in it: no one waits for them
    assert [gate.may_start(b) for b in "ad"] == [GO, WAIT]
    gate.record("a", ok=True)
    assert gate.may_start("d") is GO
    gate.record("d", ok=True)
    assert gate.done and not gate.stopped and gate.not_rolled_out() == []
    with pytest.raises(SparkctlError, match="no box 'b'"):
        gate.may_start("b")


def test_a_failed_canary_stops_the_fleet_and_names_the_boxes_not_rolled_out():
    gate = rollout_gate(WAVES, work=set("abcd"), active=EVERY, max_fail_percentage=0)
    assert gate.may_start("a") is GO
    gate.record("a", ok=False)
    assert gate.stopped and gate.stopped_at == 0
    assert [gate.may_start(b) for b in "bcd"] == [STOP, STOP, STOP]
    assert gate.not_rolled_out() == ["b", "c", "d"] and gate.failed() == ["a"]


def test_the_budget_is_a_percentage_of_the_waves_boxes_that_roll_out():
    waves = [[("a",)], [(b,) for b in "bcdefghijk"], [("l",)]]
    gate = WaveGate(waves, 10)
    gate.may_start("a")
    gate.record("a", ok=True)
    for b in "bcdefghijk":
        assert gate.may_start(b) is GO
    gate.record("b", ok=False)  # 1 of 10 = 10 %: not beyond the budget
    assert not gate.stopped
    gate.record("c", ok=False)  # 2 of 10: beyond it, whatever the other eight do
    assert gate.stopped and gate.not_rolled_out() == ["l"]


def test_a_failure_among_boxes_with_nothing_to_do_counts_against_the_boxes_that_rolled():
    gate = rollout_gate([[("a",)], [("b",), ("c",), ("d",), ("e",)]], {"a", "b"}, EVERY, 30)
    gate.may_start("a")
    gate.record("a", ok=True)
    gate.may_start("b")
    gate.record("b", ok=False)  # 1 of the 1 that rolled out: 100 %
    assert gate.stopped


def test_a_pair_has_its_result_when_both_boxes_report_and_fails_if_either_failed():
    gate = WaveGate([[("h1", "w1")], [("x",)]], 0)
    assert gate.may_start("h1") is GO and gate.may_start("w1") is GO
    gate.record("w1", ok=True)
    assert gate.may_start("x") is WAIT
    gate.record("h1", ok=False)
    assert gate.stopped and gate.not_rolled_out() == ["x"]


def test_limit_keeps_only_the_active_boxes_so_no_wave_waits_for_a_box_outside_it():
    gate = rollout_gate(WAVES, work=EVERY, active={"b", "d"}, max_fail_percentage=0)  # --limit b,d
    assert gate.waves == [[("b",)], [("d",)]]
    assert gate.may_start("b") is GO
    with pytest.raises(SparkctlError, match="no box 'a'"):
        gate.may_start("a")


def test_a_pairs_worker_runs_no_rollout_op_so_its_head_alone_reports_for_the_pair():
    gate = rollout_gate([[("h1", "w1")], [("x",)]], work={"h1", "x"}, active={"h1", "w1", "x"}, max_fail_percentage=0)
    assert gate.waves == [[("h1",)], [("x",)]]
    gate.may_start("h1")
    gate.record("h1", ok=True)
    assert gate.may_start("x") is GO


def test_thirty_two_greenlets_keep_the_waves_and_a_quarter_of_the_pool_at_most(cfg_with):
    """The gate as the deploy drives it: one greenlet per box, some with nothing to do, rollouts of varied length,
    over the waves planned for 32 boxes of one pool."""
    import random

    import gevent

    from sparkctl.fleet import placement, pools
    from sparkctl.fleet import waves as waves_mod
    from sparkctl.fleet.wave_gate import wait_turn

    boxes = [f"spark-{i}" for i in range(1, 33)]
    cfg = cfg_with()
    fleet = placement.place(pools.from_settings(cfg, boxes), boxes)
    waves = waves_mod.plan_waves(fleet, cfg.ROLLOUT_WAVES, cfg.MAX_UNAVAILABLE)
    limit = waves_mod.pool_limit(cfg.MAX_UNAVAILABLE, 32)
    rng = random.Random(7)
    idle = set(rng.sample(boxes[1:], 10))
    gate = rollout_gate(waves, set(boxes) - idle, set(boxes), 0)
    in_flight, most, started, finished = set(), 0, [], []

    def rollout(box):
        nonlocal most
        if box in idle:  # the glue never takes a box with nothing to roll out to the gate
            return
        assert wait_turn(gate, box, lambda: gevent.sleep(0.001)) is GO
        started.append(box)
        in_flight.add(box)
        most = max(most, len(in_flight))
        gevent.sleep(rng.uniform(0.001, 0.01))
        in_flight.discard(box)
        finished.append(box)
        gate.record(box, ok=True)

    gevent.joinall([gevent.spawn(rollout, b) for b in reversed(boxes)], timeout=30, raise_error=True)
    assert gate.done and not gate.stopped and sorted(finished) == sorted(set(boxes) - idle)
    assert started[0] == "spark-1" and finished[0] == "spark-1"  # the canary, alone and first
    assert 1 < most <= limit == 8  # never more than MAX_UNAVAILABLE (25 % of the pool) out at once
    wave_of = {b: i for i, w in enumerate(waves) for u in w for b in u}
    assert [wave_of[b] for b in started] == sorted(wave_of[b] for b in started)  # waves in order
