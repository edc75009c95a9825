"""The rollout op's wave glue (tasks/rollout.py) driven as pyinfra drives it: one gevent greenlet per box, all at
once, each checking in, waiting for its wave at the gate, then following its transaction (here a stand-in that
sleeps and returns the box's outcome). What the fleet's pure gate decides is tested in tests/fleet; this is that the
glue keeps it: a canary alone first, no more of a pool at once than MAX_UNAVAILABLE, a failed wave stops the rest,
boxes with nothing to do never wait."""

from __future__ import annotations

from dataclasses import dataclass, field

import gevent
import pytest

import tasks.rollout as glue
from sparkctl.fleet.placement import Fleet, PlacedPool
from sparkctl.fleet.pools import Pool
from sparkctl.fleet.waves import FleetWaves

SERVICE = "coder"


@dataclass
class Box:
    name: str
    lines: list[str] = field(default_factory=list)

    def log(self, text: str) -> None:
        self.lines.append(text)

    def log_styled(self, text: str, **_kw) -> None:
        self.lines.append(text)


@dataclass
class Inventory:
    boxes: list[Box]

    def get_active_hosts(self):
        return list(self.boxes)


@dataclass
class State:
    inventory: Inventory


def fleet_of(pools: dict[str, list[str]]) -> Fleet:
    placed = tuple(PlacedPool(Pool(name=n, model=n, served_name=n, named=tuple(b), setting="FLEET_POOLS"), tuple(b))
                   for n, b in pools.items())
    return Fleet(topology="pools", hosts=tuple(b for bs in pools.values() for b in bs), pools=placed)


def run(monkeypatch, pools: dict[str, list[str]], outcome: dict[str, bool], work: set[str], waves: list,
        max_unavailable="25%", max_fail=0.0, new: frozenset[str] = frozenset()
        ) -> tuple[dict[str, bool], list[set[str]], dict[str, Box]]:
    """Every box's greenlet at once (new: first installs); returns each box's op result and which boxes were
    rolling out together."""
    fleet = fleet_of(pools)
    ledger = glue.RolloutLedger(plan=glue.WavePlan(FleetWaves(fleet, tuple(waves), max_unavailable), max_fail, 0.01))
    rolling: set[str] = set()
    together: list[set[str]] = []

    def follow(state, host, service, *args, **kwargs):
        rolling.add(host.name)
        together.append(set(rolling))
        gevent.sleep(0.05)
        rolling.discard(host.name)
        return outcome.get(host.name, True)

    monkeypatch.setattr(glue, "_follow", follow)
    boxes = {b: Box(b) for b in fleet.hosts}
    state = State(Inventory(list(boxes.values())))
    for b in boxes:
        ledger.expected.setdefault(SERVICE, set()).add(b)

    def one(box: Box) -> bool:
        gevent.sleep(0.001 * len(box.name))  # check-ins arrive at different moments, as status reads do
        glue.check_in(ledger, SERVICE, box.name, box.name in work, box.name in new)
        if box.name not in work:
            return True
        return glue._wave_turn(state, box, ledger, SERVICE) and glue._follow_in_wave(state, box, ledger, SERVICE)

    greenlets = {b: gevent.spawn(one, box) for b, box in boxes.items()}
    gevent.joinall(list(greenlets.values()), timeout=10, raise_error=True)
    assert all(g.ready() for g in greenlets.values()), "a box waited forever at the gate"
    return {b: g.value for b, g in greenlets.items()}, together, boxes


def test_a_canary_alone_then_waves_never_more_of_a_pool_than_allowed(monkeypatch):
    pools = {"qwen": ["q1", "q2", "q3", "q4"], "laguna": ["l1", "l2"]}
    boxes = {b for bs in pools.values() for b in bs}
    results, together, _ = run(monkeypatch, pools, {}, boxes, [1, "100%"], max_unavailable=2)
    assert all(results.values())
    assert together[0] == {"q1"}  # the canary rolls out alone
    assert max(len(t & set(pools["qwen"])) for t in together) == 2  # MAX_UNAVAILABLE of the pool of four
    assert max(len(t & set(pools["laguna"])) for t in together) == 1  # a pool of two never loses both
    assert max(len(t) for t in together) > 1  # boxes within a wave roll out in parallel


def test_a_failed_canary_stops_the_fleet_and_names_the_boxes_left_alone(monkeypatch):
    pools = {"qwen": ["q1", "q2", "q3"]}
    results, together, boxes = run(monkeypatch, pools, {"q1": False}, {"q1", "q2", "q3"}, [1, "100%"],
                                   max_unavailable=2)
    assert results == {"q1": False, "q2": False, "q3": False}
    assert [t for t in together] == [{"q1"}]  # nobody else was touched
    stop = boxes["q2"].lines[-1]
    assert "failed on q1" in stop and "not rolled out: q2, q3" in stop and "MAX_FAIL_PERCENTAGE = 0" in stop


def test_a_failure_within_the_budget_lets_the_next_wave_go(monkeypatch):
    pools = {"qwen": ["q1", "q2", "q3", "q4", "q5"]}
    results, together, _ = run(monkeypatch, pools, {"q2": False}, set(pools["qwen"]), [1, 2, "100%"],
                               max_unavailable=2, max_fail=50)
    assert results == {"q1": True, "q2": False, "q3": True, "q4": True, "q5": True}


@pytest.mark.parametrize("work", [set(), {"q3"}])
def test_boxes_with_nothing_to_roll_out_never_wait_nor_hold_a_wave(monkeypatch, work):
    pools = {"qwen": ["q1", "q2", "q3"]}
    results, together, _ = run(monkeypatch, pools, {}, work, [1, "100%"])
    assert all(results.values())
    assert [t for t in together] == [{b} for b in sorted(work)]  # the one box with work is its own canary


def test_new_boxes_start_at_once_beside_the_canary_and_take_none_of_max_unavailable(monkeypatch):
    pools = {"qwen": ["q1", "q2", "q3", "q4", "q5"]}
    new = frozenset({"q4", "q5"})
    results, together, boxes = run(monkeypatch, pools, {}, set(pools["qwen"]), [1, "100%"], max_unavailable=1,
                                   new=new)
    assert all(results.values())
    assert any(new | {"q1"} <= t for t in together)  # the canary and both new boxes at once
    assert max(len(t - new) for t in together) == 1  # MAX_UNAVAILABLE = 1 of the serving boxes, new ones aside
    assert "a first install (it serves nothing yet)" in boxes["q4"].lines[0]
    assert boxes["q2"].lines[0].startswith("vllm-coder: wave 2 of 3")


def test_two_joining_boxes_roll_out_together(monkeypatch):
    pools = {"qwen": ["q1", "q2", "q3"]}
    _, together, _ = run(monkeypatch, pools, {}, {"q2", "q3"}, [1, "25%", "100%"], new=frozenset({"q2", "q3"}))
    assert {"q2", "q3"} in together  # today's glue took them one wave each: {q2}, then {q3}
    _, queued, _ = run(monkeypatch, pools, {}, {"q2", "q3"}, [1, "25%", "100%"])
    assert queued == [{"q2"}, {"q3"}]  # the same boxes, were they serving


def test_the_ledger_is_one_per_deploy_run_whichever_host_asks_first():
    run, other_run = State(Inventory([])), State(Inventory([]))
    first = glue.run_ledger(run)
    assert glue.run_ledger(run) is first  # every host's deploy.py of this run gets the same one
    assert glue.run_ledger(other_run) is not first  # a second run starts with an empty one
