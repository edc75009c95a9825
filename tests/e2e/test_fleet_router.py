"""The simulated fleet (tests/e2e/fleet.py) behind its router: the prefix-cache hits of an agent-like workload with
`cache_aware` against `round_robin` and the router's overhead; a box retired under traffic and brought back by a
deploy; a tensor-parallel pool beside a box behind one router, and back."""

from __future__ import annotations

import json
import re
import statistics
import time

import pytest

from sparkctl import REPO_ROOT
from tests.e2e.conftest import pyinfra, record, sim_exec
from tests.e2e.fleet import BOXES, GATEWAY, Front, Traffic, fleet, serves
from tests.e2e import sessions
from tests.e2e.helpers import wait_for

# the join of spark-3 and the gateway (~360 s), two gateway deploys, a retire and back, a tensor-parallel pool and back
pytestmark = [pytest.mark.scenario("fleet"), pytest.mark.e2e_extended(cost_s=1000)]
__all__ = ["fleet"]  # the module's own fleet (a module-scoped fixture)


def _run_sessions(fleet: Front, seed: int) -> float:
    return sessions.hit_rate(fleet.spark, BOXES, lambda turn, session: fleet.base_url, seed)


def test_cache_aware_keeps_sessions_on_their_cache_and_the_router_costs_little(fleet):
    """The same agent-like workload (4 sessions x 4 turns of a growing shared prefix) with the shipped cache_aware
    policy and with round_robin (the gateway alone redeployed), the prefix-cache hit rate over the three boxes side
    by side; then one stream's tok/s through the router against straight to spark-1."""
    cache_aware = _run_sessions(fleet, seed=1)
    run = pyinfra("-y", "--limit", GATEWAY, "--data", "ROUTER_POLICY=round_robin", "inventory.py", "deploy.py")
    assert run.rc == 0, run.failure()
    try:
        round_robin = _run_sessions(fleet, seed=2)
    finally:
        run = pyinfra("-y", "--limit", GATEWAY, "inventory.py", "deploy.py")
        assert run.rc == 0, run.failure()
    record("fleet: prefix-cache hit rate, 4 agent sessions x 4 turns, cache_aware", cache_aware, "ratio")
    record("fleet: prefix-cache hit rate, the same workload, round_robin", round_robin, "ratio")
    assert cache_aware > round_robin, (cache_aware, round_robin)
    via_router, direct = _tok_per_s(fleet, fleet.base_url), _tok_per_s(fleet, fleet.box_url("spark-1"))
    record("fleet: 1 stream, 64 tokens x 6 requests, median tok/s through the router", via_router, "tok/s")
    record("fleet: the same straight to spark-1's proxy", direct, "tok/s")
    record(f"fleet: router overhead, tok/s through the router / straight = {via_router / direct:.2f}",
           via_router / direct, "ratio")


def _tok_per_s(fleet: Front, base: str, requests: int = 6, tokens: int = 64) -> float:
    rates = []
    with fleet.spark.client() as c:
        for _ in range(requests):
            t0 = time.monotonic()
            r = fleet.post(c, base, {"model": "coder", "max_tokens": tokens, "ignore_eos": True,
                                     "messages": [{"role": "user", "content": "def fib(n):"}]})
            assert r.status_code == 200, r.text
            rates.append(r.json()["usage"]["completion_tokens"] / (time.monotonic() - t0))
    return statistics.median(rates)



def _units_of(box: str, units: list[str]) -> dict[str, tuple[str, str]]:
    """{unit: (ActiveState, UnitFileState)} on a simulated box, in one systemctl call."""
    out = sim_exec(box, "systemctl show -p Id -p ActiveState -p UnitFileState " + " ".join(units))
    blocks = [dict(ln.split("=", 1) for ln in b.splitlines() if "=" in ln) for b in out.split("\n\n")]
    return {b["Id"]: (b.get("ActiveState", ""), b.get("UnitFileState", "")) for b in blocks if b.get("Id")}


def test_retire_a_box_under_traffic_then_a_deploy_brings_it_back(fleet):
    """`pyinfra inventory.py retire.py --limit spark-3` with a request every 0.5 s through the router: spark-3 leaves
    the routers while its API still serves (ROUTER_OUT_WAIT_S), drains, and its vLLM units and watchdog stop and are
    disabled: no client request fails, the other two boxes serve. A second retire changes nothing and says so. A plain
    deploy of spark-3 (still in the inventory) brings it back to serving, its retirement lifted."""
    box, data = "spark-3", fleet.spark.data
    units = sim_exec(box, "cd /etc/systemd/system && ls vllm-*.service").split() + ["sparkctl-watchdog.service"]
    assert len(units) >= 3, units  # the coder, the embedders, the watchdog
    marker = f"{data['STATE_DIR']}/retire/retired.json"
    textfile = f"{data['TEXTFILE_DIR']}/sparkctl_retired.prom"
    with Traffic(fleet) as traffic:
        run = pyinfra("-y", "--limit", box, "inventory.py", "retire.py")
        time.sleep(5)  # requests after the retire too: the routers no longer send any to spark-3
    record("fleet: retire spark-3 under traffic (out of the routers, drained, stopped)", run.seconds)
    print(f"retire spark-3: {run.seconds:.1f} s; {traffic.summary()}")
    assert run.rc == 0, run.failure()
    assert re.search(r"spark-3: out of the routers, drained \(0 in flight after [\d.]+ s\), "
                     r"coder\+\S+ stopped and disabled", run.output), run.output[-3000:]
    assert traffic.errors() == [], traffic.errors()[:5]
    assert traffic.out_on_purpose() <= 1 and traffic.taken_out_while_serving() == {}, traffic.summary()  # spark-3 alone
    assert all(state[0] in ("inactive", "failed") and state[1] == "disabled"
               for state in _units_of(box, units).values()), _units_of(box, units)
    assert set(json.loads(sim_exec(box, f"cat {marker}"))["units"]) == set(units)  # what it stopped, recorded
    assert "sparkctl_box_retired 1" in sim_exec(box, f"cat {textfile}")  # SparkServedModelDown held back for it
    assert not serves(fleet, box)  # straight to the box: the drain's 503 (its files stay until a deploy)

    again = pyinfra("-y", "--limit", box, "inventory.py", "retire.py")
    assert again.rc == 0, again.failure()
    assert "already retired (" in again.output and "nothing changed" in again.output, again.output[-3000:]
    grand = [ln for ln in again.output.splitlines() if "Grand total" in ln]
    assert grand and re.search(r"Grand total\s+\d+\s+-\s+-\s+\d+", grand[0]), grand  # ops ran, none changed

    back = pyinfra("-y", "--limit", box, "inventory.py", "deploy.py")
    record("fleet: a deploy brings the retired spark-3 back", back.seconds)
    assert back.rc == 0, back.failure()
    assert all(state == ("active", "enabled") for state in _units_of(box, units).values()), _units_of(box, units)
    assert sim_exec(box, f"test -e {marker} || test -e {textfile} || echo gone").strip() == "gone"
    assert sim_exec(box, f"ls {data['DRAIN_DIR']}").strip() == ""  # no drain, no unready file left
    wait_for(lambda: serves(fleet, box), 300, "spark-3 serving again")
    with Traffic(fleet) as traffic:  # back in the routers (their success threshold) and no request fails
        wait_for(lambda: any(codes["spark-3"] == 200 for _t, codes, _s in traffic.health.samples[-1:]), 60,
                 "spark-3's router health path passing")
        time.sleep(5)
    assert traffic.errors() == [], traffic.errors()[:5]


TP_POOLS = ('FLEET_POOLS={"pair": {"model": "qwen3.8-27b", "boxes": ["spark-1", "spark-2"], "tensor_parallel": true}, '
            '"qwen3.8-27b": ["spark-3"]}')  # one served name ("coder"): the pair's head and spark-3 behind one router


def test_a_tensor_parallel_pool_beside_a_box_behind_one_router(fleet):
    """FLEET_POOLS makes spark-1 + spark-2 a tensor-parallel pair and leaves spark-3 a box serving the same name:
    the pair rolls out as one unit (the canary) while spark-3 serves, the router reaches the head and spark-3 (never
    the worker), no request through it fails; then the plain group data (one replicas pool) puts the three back."""
    pools = ("--data", TP_POOLS)
    with Traffic(fleet) as traffic:
        run = pyinfra("-y", *pools, "inventory.py", "deploy.py", timeout=2400)
    record("fleet: spark-1 + spark-2 made a tensor-parallel pool beside spark-3 (FLEET_POOLS)", run.seconds)
    print(traffic.summary())
    assert run.rc == 0, run.failure()
    head_env = sim_exec("spark-1", "cat /etc/sparkctl/vllm-coder.env")
    worker_env = sim_exec("spark-2", "cat /etc/sparkctl/vllm-coder.env")
    for env, rank in ((head_env, "0"), (worker_env, "1")):
        assert f"--node-rank {rank}" in env and "--master-addr 10.250.0.11" in env and "--nnodes 2" in env
    # the worker's embedders (a tensor-parallel worker runs only its headless engine) were drained, stopped, disabled
    # and removed by the deploy's stale step, before the proxy and services steps
    embedders = "vllm-embed-qwen3.service vllm-embed-bge-m3.service"
    states = sim_exec("spark-2", f"systemctl is-active {embedders} || true").split()
    enabled = sim_exec("spark-2", f"systemctl is-enabled {embedders} 2>/dev/null || true").split()
    record(f"fleet: the new worker's embedder units afterwards: {' '.join(states)}",
           len([x for x in states if x == "active"]), "n")
    assert states == ["inactive", "inactive"] and not {"enabled", "enabled-runtime"} & set(enabled), (states, enabled)
    left = sim_exec("spark-2", "ls /etc/sparkctl/vllm-embed-* /etc/systemd/system/vllm-embed-* 2>/dev/null || true")
    assert left.strip() == "", left  # unit and env files, live and staged, are gone
    assert "stopped, disabled and removed (no longer configured here)" in run.output, run.output[-3000:]
    assert not sim_exec("spark-2", f"ls {fleet.spark.data['STATE_DIR']}/retire/retired.json 2>/dev/null || true")
    assert "--headless" in worker_env and "--tensor-parallel-size" not in sim_exec("spark-3",
                                                                                    "cat /etc/sparkctl/vllm-coder.env")
    boxes = json.loads((REPO_ROOT / "handoff" / "router.json").read_text())["models"]["coder"]["boxes"]
    assert boxes == ["spark-1", "spark-3"], boxes  # the worker serves no API
    assert traffic.errors() == [], traffic.errors()[:5]
    record(f"fleet: requests through the router while the pair formed: {len(traffic.errors())} of "
           f"{len(traffic.results)} failed", len(traffic.errors()), "n")
    with fleet.spark.client() as c:  # the pair's head serves through its own proxy
        r = fleet.post(c, fleet.box_url("spark-1"), {"model": "coder", "max_tokens": 4,
                                                      "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 200, r.text
    run = pyinfra("-y", "inventory.py", "deploy.py", timeout=2400)
    record("fleet: the pair back to two replicas beside spark-3 (the plain group data)", run.seconds)
    assert run.rc == 0, run.failure()
    assert "--headless" not in sim_exec("spark-2", "cat /etc/sparkctl/vllm-coder.env")
    back = sim_exec("spark-2", f"systemctl is-active {embedders} || true").split()
    assert back == ["active", "active"], back  # configured again: installed afresh by their rollouts
    assert sim_exec("spark-2", f"ls {fleet.spark.data['DRAIN_DIR']} | grep embed || true").strip() == ""
