"""The wave gate as the deploy's greenlets drive it: waves in order, nothing-to-do boxes never wait, the failure
budget stops the rollout and names the boxes left untouched."""

from __future__ import annotations

from sparkctl.fleet.gate import Decision, WaveGate

GO, WAIT, STOP = Decision.GO, Decision.WAIT, Decision.STOP
WAVES = [[("a",)], [("b",), ("c",)], [("d",), ("e",)]]


def test_a_wave_starts_only_once_the_one_before_has_every_result():
    gate = WaveGate(WAVES, 0)
    assert [gate.may_start(b) for b in "abd"] == [GO, WAIT, WAIT]
    gate.record("a", ok=True)
    assert [gate.may_start(b) for b in "bcd"] == [GO, GO, WAIT]
    gate.record("b", ok=True)
    assert gate.may_start("d") is WAIT
    gate.record("c", ok=True)
    assert gate.may_start("d") is GO and gate.current_wave == 2


def test_boxes_with_nothing_to_do_never_wait_nor_hold_a_wave_back():
    gate = WaveGate(WAVES, 0)
    for box in "edcb":  # the later waves report first: none of them waits
        gate.nothing_to_do(box)
    assert gate.may_start("a") is GO
    gate.record("a", ok=True)
    assert gate.done and not gate.stopped and gate.not_rolled_out() == []


def test_a_failed_canary_stops_the_fleet_and_names_the_boxes_not_rolled_out():
    gate = WaveGate(WAVES, 0)
    gate.nothing_to_do("e")
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
    gate = WaveGate([[("a",)], [("b",), ("c",), ("d",), ("e",)]], 30)
    gate.may_start("a")
    gate.record("a", ok=True)
    for b in "cde":
        gate.nothing_to_do(b)
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


def test_limit_keeps_only_the_limited_boxes_so_no_wave_waits_for_a_box_outside_it():
    gate = WaveGate.restricted(WAVES, {"b", "d"}, 0)
    assert gate.waves == [[("b",)], [("d",)]]
    assert gate.may_start("b") is GO
    try:
        gate.may_start("a")
    except Exception as exc:  # noqa: BLE001
        assert "no box 'a'" in str(exc)
    else:
        raise AssertionError("a box outside the waves must be refused")
