"""The simulated fleet (tests/e2e/fleet.py: the pair, spark-3 and the gateway spark-4, joined with no edit) measured
as an operator of a fleet would: the no-op converge of 1, 2 and 3 boxes; the same flip in waves, a canary then two
boxes at once, with a request every 0.5 s through the router and every box's router health path sampled beside it;
a canary that fails acceptance stops the fleet."""

from __future__ import annotations

import re
import resource

import pytest

from sparkctl.lock.refresh import refresh_lock
from tests.e2e.conftest import GROUPS, broken_candidate_overrides, pyinfra, record, sim_exec
from tests.e2e.fleet import (BOXES, GATEWAY, LAGUNA, UNIT, WAVES, Traffic, assert_served_throughout, fleet, flip,
                             serves)
from tests.e2e.helpers import main_pids, wait_for

# the join of spark-3 and the gateway (~360 s), four no-op converges, two flips in waves and a failing canary
pytestmark = [pytest.mark.scenario("fleet"), pytest.mark.e2e_extended(cost_s=1100)]
__all__ = ["fleet"]  # the module's own fleet (a module-scoped fixture)


def test_one_url_reaches_the_pool_and_the_second_converge_changes_nothing(fleet):
    """Clients use the router's URL alone; a no-op converge of 1, 2 and 3 boxes (and the gateway) is a no-op."""
    with fleet.spark.client() as c:
        r = fleet.post(c, fleet.base_url, {"model": "coder", "messages": [{"role": "user", "content": "x"}],
                                           "max_tokens": 4})
    assert r.status_code == 200, r.text
    seconds = {}
    for hosts in (BOXES[:1], BOXES[:2], BOXES, None):
        args = [a for h in hosts for a in ("--limit", h)] if hosts else []  # pyinfra: one --limit per host
        control0, boxes0 = _control_cpu(), _instance_cpu()
        run = pyinfra("-y", *args, "inventory.py", "deploy.py")
        control, boxes = _control_cpu() - control0, {h: v - boxes0[h] for h, v in _instance_cpu().items()}
        assert run.rc == 0, run.failure()
        reached = {ln.split("]")[0].split("[")[-1] for ln in run.output.splitlines() if ln.strip().endswith("Connected")}
        assert reached == set(hosts or (*BOXES, GATEWAY)), reached  # the hosts it was asked for, each connected
        grand = [ln for ln in run.output.splitlines() if "Grand total" in ln]
        assert grand and re.search(r"Grand total\s+\d+\s+-\s+-\s+\d+", grand[0]), grand  # ops ran, none changed
        n = len(reached)
        seconds[n] = run.seconds
        record(f"fleet no-op converge, {n} host{'s' if n > 1 else ''}{' (3 boxes + gateway)' if n == 4 else ''}",
               run.seconds)
        # where the time goes on 2 shared cores: the control side's CPU and each simulated host's own (its sshd,
        # the facts' commands, and the idle engines every host runs), all on the same 2 cores
        record(f"fleet no-op converge, {n} host(s): control side CPU", control, "cpu-s")
        record(f"fleet no-op converge, {n} host(s): the targeted hosts' CPU "
               f"({', '.join(f'{h} {boxes[h]:.1f}' for h in sorted(reached))})", sum(boxes[h] for h in reached),
               "cpu-s")
        record(f"fleet no-op converge, {n} host(s): the other hosts' CPU meanwhile",
               sum(v for h, v in boxes.items() if h not in reached), "cpu-s")
    ratio = seconds[3] / seconds[1]
    record(f"fleet no-op converge ratio 3 boxes / 1 box = {ratio:.2f}x (goal 1.2x)", ratio, "x")
    # The 1.2x goal is reported, not asserted: on 2 cores the control side's own CPU per host (~3.5 s here; the same
    # without any box, scripts/fleet_control_cost.py) makes a no-op linear in hosts (2.13x measured). A deploy that
    # ran its hosts one after another would be 3x and more (each box's own remote time on top).
    assert ratio < 2.6


def _control_cpu() -> float:
    """CPU seconds (user + system) of this process's finished children: the pyinfra runs."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _instance_cpu() -> dict[str, float]:
    """CPU seconds each simulated host's cgroup has used (cgroup v2 cpu.stat usage_usec)."""
    from sparkctl.sim.instance import cgroup_dir

    out = {}
    for name in (*BOXES, GATEWAY):
        stat = dict(line.split() for line in (cgroup_dir(name) / "cpu.stat").read_text().splitlines())
        out[name] = int(stat["usage_usec"]) / 1e6
    return out


def test_the_flip_in_waves_takes_at_most_max_unavailable(fleet):
    """Qwen -> Laguna -> Qwen in waves (a canary, then two boxes at once: MAX_UNAVAILABLE=2), a request every 0.5 s
    through the router all along: none fails, at most two boxes are out on purpose at once, and no serving box's
    health path fails the routers' threshold."""
    runs = [("fleet flip to laguna in waves (1, then 2)", flip(fleet, "fleet flip to laguna in waves (1, then 2)",
                                                               *LAGUNA, *WAVES)),
            ("fleet flip back to qwen in waves (1, then 2)", flip(fleet, "fleet flip back to qwen in waves (1, then 2)",
                                                                  *WAVES))]
    for what, traffic in runs:
        assert_served_throughout(what, traffic, limit=2)
    assert max(t.out_on_purpose() for _, t in runs) == 2  # the second wave really took two boxes at once
    total = sum(len(t.errors()) for _, t in runs)
    record(f"fleet flips in waves: requests through the router, failed: {total} of "
           f"{sum(len(t.results) for _, t in runs)}", total, "n")


def test_a_failing_canary_stops_the_fleet(fleet):
    """The canary's candidate cannot load: it rolls itself back, and the other boxes are not touched (unit files and
    processes as they were), the deploy fails naming them."""
    units = {b: sim_exec(b, f"sha256sum {UNIT}") for b in BOXES[1:]}
    pids = {b: main_pids(b) for b in BOXES[1:]}
    try:
        with Traffic(fleet) as traffic:
            run = pyinfra("-y", *LAGUNA, "--data", broken_candidate_overrides(),
                          "--data", "ROLLOUT_RETRY_FAILED=True",  # a kept fleet remembers it failed: try it again
                          *WAVES, "inventory.py", "deploy.py")
        record("fleet: a canary that fails (rolled back, the others untouched)", run.seconds)
    finally:
        refresh_lock(GROUPS)
    print(traffic.summary())
    assert run.rc != 0
    assert "not rolled out: spark-2, spark-3" in run.output, run.failure()
    assert {b: sim_exec(b, f"sha256sum {UNIT}") for b in BOXES[1:]} == units
    assert {b: main_pids(b) for b in BOXES[1:]} == pids
    assert traffic.errors() == [], traffic.errors()[:5]
    wait_for(lambda: serves(fleet, "spark-1"), 120, "spark-1 serving its previous coder again")


