"""The checkpoint fan-out's plan (sparkctl/fleet/fanout.py): one Hub download per checkpoint, a doubling tree of
copies, the CX7 link of a pair, fallbacks, and the refusals of air-gapped boxes and the seed setting."""

from __future__ import annotations

import pytest

from sparkctl.errors import SettingError
from sparkctl.fleet.fanout import HUB, Box, plan, rounds_for

QWEN, BGE = "unsloth/Qwen3.8-27B-NVFP4@aaa", "BAAI/bge-m3@bbb"


def boxes(n: int, keeps=(QWEN, BGE), **per_box) -> list[Box]:
    out = []
    for i in range(1, n + 1):
        name = f"spark-{i}"
        out.append(Box(name=name, address=f"10.0.0.{i}", keeps=tuple(keeps), **per_box.get(name, {})))
    return out


@pytest.mark.parametrize("n", [1, 2, 3, 8, 32])
def test_each_checkpoint_comes_from_the_hub_once_and_every_box_gets_it(n):
    p = plan(boxes(n))
    for key in (QWEN, BGE):
        fetches = [f for f in p.fetches if f.checkpoint == key]
        assert sorted(f.box for f in fetches) == sorted(f"spark-{i}" for i in range(1, n + 1))
        assert [f.box for f in fetches if f.from_hub] == ["spark-1"]
    assert p.hub_fetches() == 2
    assert p.rounds == 1 + rounds_for(n)  # round 0 (the Hub) + ceil(log2 n) copy rounds


def test_holders_double_each_round_and_a_box_copies_only_from_a_box_that_holds_it_by_then():
    p = plan(boxes(8, keeps=(QWEN,)))
    had: dict[str, int] = {}
    for f in sorted(p.fetches, key=lambda f: f.round):
        if f.round:
            assert had[f.sources[0].box] < f.round, f  # its source finished in an earlier round
        had[f.box] = f.round
    per_round = [len([f for f in p.fetches if f.round == r]) for r in range(p.rounds)]
    assert per_round == [1, 1, 2, 4]  # a tree: every holder sends to one new box per round
    senders = [f.sources[0].box for f in p.fetches if f.round == 3]
    assert len(set(senders)) == 4  # never a queue behind one sender


def test_fallbacks_are_the_other_holders_then_the_hub():
    p = plan(boxes(4, keeps=(QWEN,)))
    last = next(f for f in p.fetches if f.round == 2 and f.box == "spark-4")
    names = [s.box for s in last.sources]
    assert names[-1] == HUB and set(names[:-1]) == {"spark-1", "spark-2"} and names[0] != names[1]
    assert last.sources[0].address.startswith("10.0.0.")


def test_boxes_that_already_hold_it_are_the_sources_and_the_hub_serves_nothing():
    """A box joining a fleet copies from a box that has it: adding boxes costs LAN time, not WAN time."""
    p = plan(boxes(3, **{"spark-2": {"holds": (QWEN, BGE)}, "spark-3": {"holds": (QWEN, BGE)}}))
    assert p.hub_fetches() == 0
    assert [(f.box, f.round, f.sources[0].box) for f in p.fetches if f.checkpoint == QWEN] == \
        [("spark-1", 1, "spark-2")]
    assert p.held["spark-2"] == (QWEN, BGE)


def test_a_second_run_plans_nothing():
    assert plan(boxes(3, **{f"spark-{i}": {"holds": (QWEN, BGE)} for i in (1, 2, 3)})).fetches == ()


def test_a_tensor_parallel_worker_copies_from_its_head_over_the_cx7_link():
    pair = {"spark-2": {"peer": "spark-3", "link_address": "192.168.100.2"},
            "spark-3": {"peer": "spark-2", "link_address": "192.168.100.3"}}
    p = plan(boxes(3, keeps=(QWEN,), **pair))
    worker = next(f for f in p.fetches if f.box == "spark-3")
    assert worker.sources[0].box == "spark-2" and worker.sources[0].link
    assert worker.sources[0].address == "192.168.100.2"  # the head's link address, not its LAN one
    assert worker.round == 2 and next(f for f in p.fetches if f.box == "spark-2").round == 1


def test_a_checkpoint_only_some_boxes_keep_goes_only_to_them():
    bs = boxes(3, keeps=(QWEN,))
    bs[2] = Box(name="spark-3", address="10.0.0.3", keeps=(QWEN, BGE))
    p = plan(bs)
    assert [(f.box, f.round, f.from_hub) for f in p.fetches if f.checkpoint == BGE] == [("spark-3", 0, True)]


def test_an_airgapped_box_never_downloads_and_never_falls_back_to_the_hub():
    p = plan(boxes(3, keeps=(QWEN,), **{"spark-1": {"airgapped": True}}))
    hub = [f for f in p.fetches if f.from_hub]
    assert [f.box for f in hub] == ["spark-2"]  # the first box with a route to the Hub seeds it
    gapped = next(f for f in p.fetches if f.box == "spark-1")
    assert HUB not in [s.box for s in gapped.sources]
    others = [f for f in p.fetches if f.box == "spark-3"]
    assert others[0].sources[-1].box == HUB


def test_an_airgapped_box_that_keeps_a_checkpoint_no_reachable_box_keeps_is_refused():
    bs = boxes(2, keeps=(QWEN,))
    bs[1] = Box(name="spark-2", address="10.0.0.2", keeps=(QWEN, BGE), airgapped=True)
    with pytest.raises(SettingError) as e:
        plan(bs)
    msg = str(e.value)
    assert "AIRGAPPED of spark-2" in msg and BGE in msg and "no reachable source" in msg


def test_an_airgapped_box_is_fine_when_a_box_already_holds_the_checkpoint():
    bs = [Box(name="spark-1", address="a", keeps=(BGE,), airgapped=True, holds=(BGE,)),
          Box(name="spark-2", address="b", keeps=(BGE,), airgapped=True)]
    p = plan(bs)
    assert [(f.box, [s.box for s in f.sources]) for f in p.fetches] == [("spark-2", ["spark-1"])]


def test_the_seed_box_setting():
    p = plan(boxes(3, keeps=(QWEN,)), seed="spark-3")
    assert [f.box for f in p.fetches if f.from_hub] == ["spark-3"]
    with pytest.raises(SettingError, match=r"CHECKPOINT_SEED_BOX = 'spark-9' is not valid.*spark-1, spark-2, spark-3"):
        plan(boxes(3), seed="spark-9")
    with pytest.raises(SettingError, match=r"CHECKPOINT_SEED_BOX = 'spark-2'.*not AIRGAPPED"):
        plan(boxes(3, **{"spark-2": {"airgapped": True}}), seed="spark-2")


def test_rounds_for():
    assert [rounds_for(n) for n in (1, 2, 3, 4, 5, 8, 9, 32)] == [0, 1, 2, 2, 3, 3, 4, 5]


def test_the_deploys_own_check_of_one_box_knows_only_what_that_box_holds():
    from sparkctl.fleet.fanout import reachable

    bs = [Box(name="spark-1", address="a", keeps=(QWEN, BGE), airgapped=True),
          Box(name="spark-2", address="b", keeps=(QWEN,))]
    reachable(bs[0], (QWEN,), bs)  # spark-2 reaches the Hub and keeps it
    reachable(bs[0], (), bs)  # holds everything: nothing to reach (a --limit run of an air-gapped box)
    reachable(bs[1], (BGE,), bs)  # not air-gapped: the Hub
    with pytest.raises(SettingError, match=r"AIRGAPPED of spark-1 = True is not valid.*BAAI/bge-m3@bbb"):
        reachable(bs[0], (BGE,), bs)
