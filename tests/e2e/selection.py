"""Which extended end-to-end scenarios a CI run adds to the core set (no pytest, no simulated Spark: a fast test
drives it).

The extended scenarios are dealt into shares that each fit the budget (every scenario carries its measured cost),
and a run takes the share of its landing: the number of first-parent commits up to HEAD, so a rerun of the same
commit runs the same share, and with K shares every scenario runs once in every K landings on the main branch. A
scenario costlier than the budget alone would never fit CI's run: only `make test-extended` would run it, every
summary would name it, and a fast test refuses one (tests/test_e2e_selection.py): split it or make it lighter.

A scenario is a test function marked `@pytest.mark.e2e_extended(cost_s=...)`, or a whole module whose `pytestmark`
holds that marker (its tests share one costly fixture, so they run together or not at all): "file::*".
"""

from __future__ import annotations

import ast
import math
import subprocess
from dataclasses import dataclass
from pathlib import Path


def marked_costs(folder: Path) -> dict[str, float]:
    """Every extended scenario in folder's test files, "file::function", with the cost its marker carries (read from
    the source, so a run of one file deals the same shares as the whole set)."""
    costs = {}
    for path in sorted(folder.glob("test_*.py")):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in node.targets):
                for call in ast.walk(node.value):
                    if _extended(call):
                        costs[f"{path.name}::{WHOLE_MODULE}"] = _cost(call)
        for node in ast.walk(tree):
            for dec in getattr(node, "decorator_list", []):
                if _extended(dec):
                    costs[f"{path.name}::{node.name}"] = _cost(dec)
    return costs


WHOLE_MODULE = "*"  # the scenario name of a module marked as a whole


def _extended(node) -> bool:
    return isinstance(node, ast.Call) and ast.unparse(node.func) == "pytest.mark.e2e_extended"


def _cost(call: ast.Call) -> float:
    return float({k.arg: ast.literal_eval(k.value) for k in call.keywords}.get("cost_s", 0))


def too_costly(costs: dict[str, float], budget_s: float) -> list[str]:
    """The scenarios costlier than the budget alone: never in CI's run (make test-extended runs them)."""
    return sorted(n for n, c in costs.items() if c > budget_s)


def deal(costs: dict[str, float], budget_s: float) -> list[list[str]]:
    """The scenarios that fit the budget in as few shares as fit it, each share's cost as even as the longest-first
    deal makes it (those costlier than the budget alone are left out: too_costly). Deterministic: ties go by name."""
    costs = {n: c for n, c in costs.items() if c <= budget_s}
    if not costs:
        return []
    order = sorted(costs, key=lambda n: (-costs[n], n))
    for k in range(max(1, math.ceil(sum(costs.values()) / budget_s)), len(order) + 1):
        shares: list[list[str]] = [[] for _ in range(k)]
        loads = [0.0] * k
        for name in order:
            i = min(range(k), key=lambda j: (loads[j], j))
            shares[i].append(name)
            loads[i] += costs[name]
        if all(load <= budget_s for load in loads):
            return shares
    return [[n] for n in order]


@dataclass(frozen=True)
class Landing:
    """Where a commit stands: its number among the main branch's landings, and how that number was found."""

    number: int
    commit: str
    how: str


def landing(repo: Path) -> Landing:
    """HEAD's landing: its count of first-parent commits (one per landing on the main branch). A shallow clone has
    not the history to count: its commit's hash stands in (still the same share for a rerun, not a rotation)."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True,
                              timeout=30).stdout.strip()
    try:
        commit = git("rev-parse", "HEAD")
        if git("rev-parse", "--is-shallow-repository") == "true":
            return Landing(int(commit, 16), commit, f"the hash of {commit[:12]} (a shallow clone: no history to count)")
        count = int(git("rev-list", "--count", "--first-parent", "HEAD"))
        return Landing(count, commit, f"landing {count} (first-parent commits up to {commit[:12]})")
    except (OSError, subprocess.SubprocessError, ValueError):
        return Landing(0, "", "no git repository: the first share")


@dataclass(frozen=True)
class Pick:
    names: list[str]  # the extended scenarios this run adds to the core set
    share: int  # which share, 0-based ...
    shares: int  # ... of how many
    landing: Landing
    left_out: list[str] = ()  # costlier than the budget alone: make test-extended only
    share_costs: tuple[float, ...] = ()  # every share's measured cost, in share order

    def summary(self, costs: dict[str, float], budget_s: float) -> str:
        cost = sum(costs[n] for n in self.names)
        alone = "".join(f"; {n} ({costs[n]:.0f} s) is costlier than the budget alone: only make test-extended runs it"
                        for n in self.left_out)
        return (f"extended e2e scenarios: share {self.share + 1} of {self.shares}, chosen by {self.landing.how}: "
                f"{cost:.0f} s of measured cost within a budget of {budget_s:.0f} s; each extended scenario runs in "
                f"one landing of every {self.shares} (make test-extended runs them all); the shares cost "
                f"{', '.join(f'{c:.0f}' for c in self.share_costs)} s{alone}")


def pick(costs: dict[str, float], budget_s: float, at: Landing) -> Pick:
    """The share of the extended scenarios that the run at this landing adds to the core set."""
    shares, left_out = deal(costs, budget_s), too_costly(costs, budget_s)
    if not shares:
        return Pick([], 0, 0, at, left_out)
    share = at.number % len(shares)
    return Pick(sorted(shares[share]), share, len(shares), at, left_out,
                tuple(sum(costs[n] for n in s) for s in shares))
