"""Two front doors, one service, on a simulated fleet: the pair and two gateways (`sim up --hosts 4 --gateway
spark-3,spark-4`), converged by the README's command with no edit: `sim up` gives both gateways the VIP
(sparkctl/sim/config.py GATEWAY_VIP) and the VRRP password, keepalived holds the VIP on one of them. Measured as an
operator would, with a request every 0.5 s to the VIP: the master gateway stopped (its host gone) -> how long until
requests succeed again and how many failed; the stopped gateway booted again and deployed -> it rejoins as backup
(no preemption: the VIP does not move back); a gateway rebooted -> keepalived and the bridge's firewall come back with
it; both gateways' routers restarted by a deploy -> none refused; another local user on a gateway refused at the
bridge while the routers keep routing.

At the end spark-3 and spark-4 are stopped and the pair is as the group data says.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field

import httpx
import pytest

from sparkctl import REPO_ROOT
from sparkctl.sim import config as sim_config
from tests.e2e import sessions
from tests.e2e.conftest import PAIR, PAIR_HOSTS, pyinfra, record, sim_exec
from tests.e2e.helpers import wait_for

# two gateways of its own joined fresh (48 s), a gateway rebooted, one stopped, booted and deployed again: 176 s in
# all on a kept pair, 2026-12-05
pytestmark = [pytest.mark.scenario("front-doors"), pytest.mark.e2e_extended(cost_s=240)]

GATEWAYS = ("spark-3", "spark-4")
VIP = sim_config.GATEWAY_VIP


@dataclass
class Traffic:
    """A chat request every `interval` s to the VIP: (start time, status code or error name) of each."""

    spark: object  # tests.e2e.conftest.Spark: token, CA
    base_url: str
    interval: float = 0.5
    results: list = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self):
        self._thread = threading.Thread(target=self._requests, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=120)

    def _requests(self):
        body = {"model": "coder", "messages": [{"role": "user", "content": "x"}], "max_tokens": 4}
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:  # a new connection each time: the VIP may have moved since the last one
                with self.spark.client() as c:
                    outcome = c.post(self.base_url + "/chat/completions", json=body, timeout=10,
                                     headers={"Authorization": f"Bearer {self.spark.token}"}).status_code
            except httpx.HTTPError as exc:
                outcome = type(exc).__name__
            self.results.append((t0, outcome))
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - t0)))

    def errors(self, after: float = 0.0) -> list:
        return [r for r in self.results if r[1] != 200 and r[0] >= after]

    def back_after(self, t: float) -> float | None:
        """Seconds from t until the first success that follows the last failure after t (None: never back)."""
        failed = self.errors(after=t)
        last = failed[-1][0] if failed else t
        ok = next((r[0] for r in self.results if r[0] > last and r[1] == 200), None)
        return None if ok is None else ok - t

    def summary(self) -> str:
        return f"{len(self.results)} requests to the VIP, {len(self.errors())} failed"


def holder() -> str | None:
    """The gateway that holds the VIP now (its eth0 carries it), or None."""
    from sparkctl.sim import api as sim

    for g in GATEWAYS:
        if sim.is_running(g) and f" {VIP}/" in sim_exec(g, "ip -o -4 addr show dev eth0"):
            return g
    return None


def vrrp_state(gateway: str) -> str:
    """keepalived's own view (MASTER, BACKUP, FAULT) from its journal's last state line."""
    out = sim_exec(gateway, "journalctl -u keepalived.service -o cat --no-pager | grep -E 'Entering "
                            "(MASTER|BACKUP|FAULT) STATE' | tail -1 || true")
    for state in ("MASTER", "BACKUP", "FAULT"):
        if f"Entering {state} STATE" in out:
            return state
    return ""


@pytest.fixture(scope="module")
def doors(spark_1):
    """The pair plus spark-3 and spark-4 (the gateways), converged by the README's command."""
    from sparkctl.sim import api as sim

    PAIR.as_in_the_files()
    t0 = time.monotonic()
    sim.up(hosts=4, flavors={"spark-1": "dgx", "spark-2": "ubuntu"}, gateways=list(GATEWAYS))
    record("sim up: spark-3 and spark-4 (two gateways) beside the running pair",
           time.monotonic() - t0)
    run = pyinfra("-y", "inventory.py", "deploy.py")
    record("two front doors joined: converge of 2 boxes + 2 gateways (no edit)", run.seconds)
    assert run.rc == 0, run.failure()
    doc = json.loads((REPO_ROOT / "handoff" / "router.json").read_text())
    assert doc["vip"] == VIP and [d["gateway"] for d in doc["front_doors"]] == list(GATEWAYS), doc
    assert doc["models"]["coder"]["base_url"].startswith(f"https://{VIP}:"), doc
    wait_for(holder, 30, f"a gateway holding {VIP}", interval=0.5)
    yield Traffic(spark_1, doc["models"]["coder"]["base_url"])
    t0 = time.monotonic()
    sim.stop(list(GATEWAYS))
    record("spark-3 and spark-4 stopped (sim.stop)", time.monotonic() - t0)
    PAIR.disturbed()


def _traffic(doors: Traffic) -> Traffic:
    return Traffic(doors.spark, doors.base_url)


def test_the_vip_is_held_once_and_both_front_doors_are_in_the_hand_off(doors):
    """One gateway MASTER with the VIP, the other BACKUP without it; the cluster's Service lists both as ready."""
    import yaml

    master = holder()
    backup = next(g for g in GATEWAYS if g != master)
    assert vrrp_state(master) == "MASTER" and vrrp_state(backup) == "BACKUP", (master, backup)
    assert f" {VIP}/" not in sim_exec(backup, "ip -o -4 addr show dev eth0")
    service, slice_ = yaml.safe_load_all((REPO_ROOT / "handoff" / "k8s-front-doors.yaml").read_text())
    assert service["spec"]["sessionAffinity"] == "ClientIP"
    assert [e["conditions"]["ready"] for e in slice_["endpoints"]] == [True, True]
    with _traffic(doors) as traffic:
        time.sleep(5)
    assert traffic.results and not traffic.errors(), traffic.errors()[:5]


def test_one_active_router_keeps_prefix_cache_hits_that_two_would_split(doors):
    """The agent-like workload (4 sessions x 4 turns of a growing shared prefix) through the VIP, where one
    gateway's cache_aware router sees every turn, against the same shape of workload spread over both gateways' own
    addresses turn by turn (what an outer balancer without affinity would do: two routers, two prefix trees): vLLM's
    prefix-cache hit rate over the pair, side by side. Why the VIP keeps one router active, and the cluster's Service
    pins a client to one front door (sessionAffinity: ClientIP)."""
    doc = json.loads((REPO_ROOT / "handoff" / "router.json").read_text())
    own = [door["base_urls"]["coder"] for door in doc["front_doors"]]
    one = sessions.hit_rate(doors.spark, PAIR_HOSTS, lambda turn, i: doors.base_url, seed=3)
    two = sessions.hit_rate(doors.spark, PAIR_HOSTS, lambda turn, i: own[(turn + i) % len(own)], seed=4)
    record("front doors: prefix-cache hit rate, 4 agent sessions x 4 turns, through the VIP (one router)", one, "ratio")
    record("front doors: the same workload alternating the two gateways turn by turn (two routers)", two, "ratio")
    assert one > two, (one, two)


def test_another_local_user_is_refused_at_the_bridge_while_the_routers_route(doors):
    """`nobody` on a gateway cannot open 127.0.0.1:ROUTER_BRIDGE_PORT (the nftables rule resets it); the routers'
    own user can, and the requests to the VIP keep succeeding meanwhile."""
    port = doors.spark.data["ROUTER_BRIDGE_PORT"]
    user = doors.spark.data["ROUTER_USER"]
    probe = ("python3 -c \"import socket,sys\ntry:\n socket.create_connection(('127.0.0.1', %d), timeout=3)\n"
             " print('OPEN')\nexcept OSError as e:\n print('REFUSED', type(e).__name__)\"" % port)
    with _traffic(doors) as traffic:
        for g in GATEWAYS:
            other = sim_exec(g, f"runuser -u nobody -- {probe}")
            own = sim_exec(g, f"runuser -u {user} -- {probe}")
            assert other.startswith("REFUSED ConnectionRefusedError"), (g, other)
            assert own.startswith("OPEN"), (g, own)
        time.sleep(3)
    record(f"bridge: another local user refused on both gateways; requests to the VIP meanwhile: "
           f"{len(traffic.errors())} of {len(traffic.results)} failed", len(traffic.errors()), "n")
    assert traffic.results and not traffic.errors(), traffic.errors()[:5]


def test_both_gateways_routers_restarted_by_a_deploy_refuse_nothing(doors):
    """A router setting changed (ROUTER_RETRIES): each gateway restarts its primary, then its standby; then the
    plain deploy puts them back, restarting them again. A request every 0.5 s to the VIP all along: none refused."""
    for label, args in (("ROUTER_RETRIES=4", ("--data", "ROUTER_RETRIES=4")), ("back as the files say", ())):
        limits = [a for g in GATEWAYS for a in ("--limit", g)]
        with _traffic(doors) as traffic:
            run = pyinfra("-y", *limits, *args, "inventory.py", "deploy.py")
        assert run.rc == 0, run.failure()
        assert "Restart coder's routers one at a time" in run.output
        record(f"front doors: both gateways' routers restarted ({label}): {run.seconds:.0f} s, "
               f"{len(traffic.errors())} of {len(traffic.results)} requests to the VIP failed",
               len(traffic.errors()), "n")
        assert traffic.errors() == [], traffic.errors()[:5]


def test_a_rebooted_gateway_rejoins_with_its_firewall(doors):
    """The backup rebooted: keepalived starts with it and takes BACKUP again, the bridge's firewall table is loaded
    by its oneshot unit at boot; requests to the VIP do not notice (the master never moved)."""
    from sparkctl.sim import api as sim

    master = holder()
    backup = next(g for g in GATEWAYS if g != master)
    table = doors.spark.data["BRIDGE_FIREWALL_TABLE"]
    with _traffic(doors) as traffic:
        seconds = sim.reboot(backup)
        wait_for(lambda: vrrp_state(backup) == "BACKUP", 60, f"{backup}'s keepalived BACKUP again", interval=1)
    record(f"front doors: {backup} (backup) rebooted, sshd back after {seconds:.1f} s; requests to the VIP failed: "
           f"{len(traffic.errors())} of {len(traffic.results)}", len(traffic.errors()), "n")
    assert holder() == master
    assert "skuid" in sim_exec(backup, f"nft list table inet {table}")
    assert traffic.errors() == [], traffic.errors()[:5]


def test_the_master_stopped_under_traffic_moves_the_vip_and_it_rejoins_as_backup(doors):
    """The master's host gone (sim.stop) with a request every 0.5 s: the backup takes the VIP after VRRP's master
    down interval (3 x VRRP_ADVERT_INT_S + skew); how long until requests succeed again and how many failed. Then
    the stopped gateway booted and deployed again: it rejoins as BACKUP and the VIP stays (no preemption)."""
    from sparkctl.sim import api as sim

    master = holder()
    backup = next(g for g in GATEWAYS if g != master)
    with _traffic(doors) as traffic:
        time.sleep(3)
        t_stop = time.monotonic()
        sim.stop([master])
        wait_for(lambda: holder() == backup, 60, f"{backup} holding {VIP}", interval=0.2)
        moved = time.monotonic() - t_stop
        time.sleep(10)
    back = traffic.back_after(t_stop)
    failed = traffic.errors(after=t_stop)
    record(f"front doors: master {master} stopped: the VIP on {backup} after", moved)
    record("front doors: master stopped: requests to the VIP succeed again after", back if back is not None else -1)
    record(f"front doors: master stopped: requests to the VIP failed: {len(failed)} of {len(traffic.results)} "
           f"({', '.join(sorted({str(r[1]) for r in failed}))})", len(failed), "n")
    assert back is not None and back < 30, (back, failed[:5])
    assert vrrp_state(backup) == "MASTER"

    t0 = time.monotonic()
    sim.up(hosts=4, flavors={"spark-1": "dgx", "spark-2": "ubuntu"}, gateways=list(GATEWAYS))
    with _traffic(doors) as traffic:
        run = pyinfra("-y", "--limit", master, "inventory.py", "deploy.py")
        assert run.rc == 0, run.failure()
        wait_for(lambda: vrrp_state(master) == "BACKUP", 60, f"{master} BACKUP again", interval=1)
    record(f"front doors: {master} booted and deployed again (rejoined as backup)", time.monotonic() - t0)
    assert holder() == backup  # no preemption: the VIP moved once
    assert traffic.errors() == [], traffic.errors()[:5]
