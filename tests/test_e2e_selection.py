"""Which extended e2e scenarios a CI run adds to the core set (tests/e2e/selection.py), without a simulated Spark:
every share fits the budget, every scenario is in exactly one share, a commit always picks the same share, and
consecutive landings go round every share, so no scenario waits more than a few landings."""

from __future__ import annotations

import subprocess

import pytest

from sparkctl import REPO_ROOT
from tests.e2e import selection
from tests.e2e.conftest import EXTENDED_BUDGET_S


def marked_costs() -> dict[str, float]:
    return selection.marked_costs(REPO_ROOT / "tests" / "e2e")


def landing(n: int) -> selection.Landing:
    return selection.Landing(n, "f" * 40, f"landing {n}")


def test_every_extended_scenario_says_what_it_costs():
    costs = marked_costs()
    assert len(costs) >= 12 and all(isinstance(c, (int, float)) and c > 0 for c in costs.values())


def test_the_shares_fit_the_budget_and_hold_every_scenario_once():
    costs = marked_costs()
    shares = selection.deal(costs, EXTENDED_BUDGET_S)
    alone = selection.too_costly(costs, EXTENDED_BUDGET_S)
    assert sorted(n for share in shares for n in share) == sorted(set(costs) - set(alone))
    assert all(sum(costs[n] for n in share) <= EXTENDED_BUDGET_S for share in shares)
    assert alone == []  # every scenario rides in CI's rotation: none is costlier than the budget alone (#34)
    assert {"test_fleet_waves.py::*", "test_fleet_one_at_a_time.py::*", "test_fleet_router.py::*"} <= set(costs)
    assert len(shares) <= 7  # with today's costs and budget: none waits more than 6 landings
    assert len(shares) == len(selection.deal(costs, EXTENDED_BUDGET_S - 1))  # as few as fit: no slack share


def test_consecutive_landings_run_every_scenario_and_a_rerun_runs_the_same():
    costs = marked_costs()
    k = len(selection.deal(costs, EXTENDED_BUDGET_S))
    for start in (0, 41, 977):
        ran = [selection.pick(costs, EXTENDED_BUDGET_S, landing(start + i)).names for i in range(k)]
        fits = set(costs) - set(selection.too_costly(costs, EXTENDED_BUDGET_S))
        assert sorted(n for names in ran for n in names) == sorted(fits)  # k landings in a row: each exactly once
    assert selection.pick(costs, EXTENDED_BUDGET_S, landing(42)) == selection.pick(costs, EXTENDED_BUDGET_S,
                                                                                    landing(42))


def test_a_scenario_costlier_than_the_budget_is_left_to_make_test_extended_and_said_so():
    costs = {"big": 1000, "a": 300, "b": 300, "c": 200}
    shares = selection.deal(costs, 500)
    assert sorted(n for s in shares for n in s) == ["a", "b", "c"] and selection.too_costly(costs, 500) == ["big"]
    chosen = selection.pick(costs, 500, landing(1))
    assert "big" not in chosen.names and chosen.left_out == ["big"]
    assert "big (1000 s) is costlier than the budget alone: only make test-extended runs it" in chosen.summary(
        costs, 500)
    assert selection.deal({}, 500) == [] and selection.pick({}, 500, landing(3)).names == []


def test_a_module_marked_as_a_whole_is_one_scenario(tmp_path):
    (tmp_path / "test_whole.py").write_text("import pytest\npytestmark = [pytest.mark.scenario('x'), "
                                            "pytest.mark.e2e_extended(cost_s=1800)]\ndef test_a(): pass\n"
                                            "def test_b(): pass\n")
    assert selection.marked_costs(tmp_path) == {"test_whole.py::*": 1800.0}


def test_the_landing_is_the_first_parent_count_of_this_checkout(tmp_path):
    here = selection.landing(REPO_ROOT)
    head = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    assert here.commit == head.stdout.strip() and here.number > 0
    assert selection.landing(tmp_path).how == "no git repository: the first share"


def test_the_summary_says_which_share_and_why():
    costs = {"a.py::x": 100.0, "b.py::y": 100.0}
    chosen = selection.pick(costs, 100, landing(7))
    assert chosen.names == ["b.py::y"] and (chosen.share, chosen.shares) == (1, 2)
    assert chosen.summary(costs, 100).startswith("extended e2e scenarios: share 2 of 2, chosen by landing 7: 100 s")
    assert "the shares cost 100, 100 s" in chosen.summary(costs, 100)  # what every share costs, not only this one
