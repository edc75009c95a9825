"""Whether boxes may be retired (sparkctl/fleet/retirable.py): a pair is never split, no served model is left on no box
(the hand-off's not-ready boxes count as gone) unless RETIRE_LAST_OF_POOL says so."""

from __future__ import annotations

from sparkctl.fleet.placement import place
from sparkctl.fleet.pools import Pool, Pools
from sparkctl.fleet.retirable import check_retire

HOSTS = ["s1", "s2", "s3", "s4", "s5"]
# qwen on s1+s2 (with the embedder), laguna on s3 alone (no embedders), a tensor-parallel pair s4+s5
FLEET = place(Pools("pools", (Pool("qwen", "qwen3.8-27b", "coder", named=("s1", "s2")),
                              Pool("laguna", "laguna-s-2.1", "laguna", named=("s3",), embedders=False,
                                   setting="FLEET_POOLS['laguna']"),
                              Pool("big", "qwen3.8-27b", "big", named=("s4", "s5"), tensor_parallel=True))), HOSTS)
SERVED = {"s1": ("coder", "embed"), "s2": ("coder", "embed"), "s3": ("laguna",), "s4": ("big", "embed"), "s5": ()}


def check(*retiring: str, ready=None, allow=False):
    return check_retire(FLEET, list(retiring), SERVED, ready, allow)


def test_one_box_of_a_pool_of_two_may_go():
    result = check("s1")
    assert result.refusals == ()
    assert result.notes == ("no gateway hand-off yet: every other box that serves a model is taken to serve it",)


def test_the_last_box_of_a_pool_is_refused_naming_the_pool_and_the_setting_that_allows_it():
    (refusal,) = check("s3").refusals
    assert refusal.startswith("retiring s3 leaves no box serving 'laguna': pool 'laguna' (FLEET_POOLS['laguna']) "
                              "has no other box serving it")
    assert refusal.endswith("--data RETIRE_LAST_OF_POOL=True")


def test_every_box_of_a_pool_at_once_is_refused_and_an_embedder_counts_too():
    refusals = check("s1", "s2").refusals
    assert len(refusals) == 1 and "retiring s1, s2 leaves no box serving 'coder'" in refusals[0]  # s4 embeds
    refusals = check("s1", "s2", "s4", "s5").refusals  # coder, embed, big
    assert len(refusals) == 3
    assert "retiring s1, s2, s4 leaves no box serving 'embed': the inventory has no other box serving it" in refusals[1]


def test_a_box_the_hand_off_records_not_ready_serves_nothing():
    ready = {"coder": {"s1"}, "embed": {"s1", "s2", "s4"}}  # s2 retired before, or in a rollout now
    (refusal,) = check("s1", ready=ready).refusals
    assert "s2 is recorded not ready for it in the gateway hand-off (retired, or in a rollout)" in refusal
    assert check("s2", ready=ready).refusals == ()  # s1 is ready


def test_the_setting_lets_the_last_box_go_and_says_so():
    result = check("s3", allow=True)
    assert result.refusals == ()
    assert "s3: the last box serving 'laguna', retired on purpose (RETIRE_LAST_OF_POOL=True)" in result.notes


def test_half_a_tensor_parallel_pair_is_refused_whole_pair_is_not_split():
    (refusal,) = check("s5").refusals
    assert refusal == ("s4 and s5 are one tensor-parallel engine (pool 'big'): retiring one stops the other; retire "
                       "both at once (--limit s4 --limit s5)")
    assert len(check("s4").refusals) == 2  # split, and the last box serving 'big'
    assert check("s4", "s5", allow=True).refusals == ()
