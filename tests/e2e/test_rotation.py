"""Rotating the secrets without a refused request, on a simulated fleet: the pair and two gateways sharing the VIP
(`sim up --hosts 4 --gateway spark-3,spark-4`), converged by the README's command. A chat request every 0.5 s to the
VIP all along, with the old API token, then the new one once the window is deployed. The operator's steps
(docs/operating.md "Rotating a secret"): `secrets rotate` for the API token, the scrape token and VRRP's password,
deploy, switch the client, `secrets finish`, deploy. Measured: 0 refused from the first step to the last; then the
old API and scrape tokens answer 401 at every box, every gateway and the VIP, and both gateways' keepalived carry the
new password with the VIP held once.

At the end spark-3 and spark-4 are stopped and the pair is as the group data says (with the new tokens).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

import httpx
import pytest

from sparkctl import REPO_ROOT
from sparkctl.config import groupdata, hosts, rotation, secrets
from sparkctl.sim import config as sim_config
from tests.conftest import typed
from tests.e2e.conftest import GROUPS, PAIR, pyinfra, record, sim_exec
from tests.e2e.helpers import wait_for
from tests.e2e.test_front_doors import GATEWAYS, holder, vrrp_state

# the two gateways joined fresh (176 s), the window deployed (57 s) and closed (47 s), the checks, the gateways
# stopped (44 s): 393 s in all on a converged pair, beside other work on the machine, 2026-12-06
pytestmark = [pytest.mark.scenario("rotation"), pytest.mark.e2e_extended(cost_s=400)]

SECRETS = ("api_token", "scrape_token", "vrrp_password")
VIP = sim_config.GATEWAY_VIP
SWITCHED_S = 5  # how long the client sends the new token before the window closes, s


@dataclass
class Traffic:
    """A chat request every `interval` s to the VIP with `token` (changed mid-way): (start, token, status)."""

    spark: object  # tests.e2e.conftest.Spark: CA
    base_url: str
    token: str
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
            t0, token = time.monotonic(), self.token
            try:
                with self.spark.client() as c:
                    outcome = c.post(self.base_url + "/chat/completions", json=body, timeout=10,
                                     headers={"Authorization": f"Bearer {token}"}).status_code
            except httpx.HTTPError as exc:
                outcome = type(exc).__name__
            self.results.append((t0, token, outcome))
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - t0)))

    def failed(self, after: float = 0.0) -> list:
        return [r for r in self.results if r[2] != 200 and r[0] >= after]


def _cli(*args: str) -> str:
    """`python -m sparkctl secrets ...` as the operator runs it (the simulated Spark's group data)."""
    r = subprocess.run([sys.executable, "-m", "sparkctl", "secrets", *args, "--groups", ",".join(GROUPS)],
                       cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def _cfg():
    return typed(groupdata.load(GROUPS))


def _doors() -> dict[str, str]:
    """Every place a client or Prometheus may knock: each box's proxy, each gateway's front, the VIP (their URL
    base, without the path)."""
    d = groupdata.load(GROUPS)
    out = {h.name: f"https://{h.address}:{d['PROXY_PORT']}" for h in hosts.sim_hosts()}
    out.update({h.name: f"https://{h.address}:{d['GATEWAY_FRONT_PORT']}" for h in hosts.sim_gateway_hosts()})
    out["VIP"] = f"https://{VIP}:{d['GATEWAY_FRONT_PORT']}"
    return out


def _statuses(spark, token: str, scrape: bool = False) -> dict[str, int]:
    """Each door's answer to `token` on an API route (or, scrape=True, on its scrape path)."""
    d = groupdata.load(GROUPS)
    out = {}
    with spark.client() as c:
        for name, base in _doors().items():
            box = name.startswith("spark-") and name not in GATEWAYS
            path = ((f"/{d['SCRAPE_NODE_PATH']}/metrics" if box else f"/{d['ROUTER_SCRAPE_PATH']}/coder/metrics")
                    if scrape else "/coder/v1/models")
            out[name] = c.get(base + path, headers={"Authorization": f"Bearer {token}"}).status_code
    return out


@pytest.fixture(scope="module")
def fleet(spark_1):
    """The pair plus spark-3 and spark-4 (the gateways), converged; a window an aborted run left open is finished
    first (the converge then deploys it)."""
    from sparkctl.sim import api as sim

    PAIR.as_in_the_files()
    for name in SECRETS:
        if rotation.is_open(_cfg(), name):
            rotation.finish_window(_cfg(), name)
    t0 = time.monotonic()
    sim.up(hosts=4, flavors={"spark-1": "dgx", "spark-2": "ubuntu"}, gateways=list(GATEWAYS))
    record("rotation: sim up of spark-3 and spark-4 (two gateways) beside the running pair", time.monotonic() - t0)
    run = pyinfra("-y", "inventory.py", "deploy.py")
    record("rotation: converge of 2 boxes + 2 gateways before the rotation", run.seconds)
    assert run.rc == 0, run.failure()
    spark_1.token = secrets.read_api_token(_cfg())
    wait_for(holder, 30, f"a gateway holding {VIP}", interval=0.5)
    yield spark_1
    spark_1.token = secrets.read_api_token(_cfg())  # what every later client sends
    t0 = time.monotonic()
    sim.stop(list(GATEWAYS))
    record("rotation: spark-3 and spark-4 stopped (sim.stop)", time.monotonic() - t0)
    PAIR.disturbed()


def test_a_rotation_refuses_no_request_and_then_the_old_token_nowhere_opens(fleet):
    spark = fleet
    old_api, old_scrape = secrets.read_api_token(_cfg()), secrets.read_scrape_token(_cfg())
    traffic = Traffic(spark, f"{_doors()['VIP']}/coder/v1", old_api)
    with traffic:
        time.sleep(2)
        for name in SECRETS:
            _cli("rotate", name)
        cfg = _cfg()
        new_api = secrets.read_api_tokens(cfg).next
        new_scrape = secrets.read_scrape_tokens(cfg, secrets.read_api_tokens(cfg)).next
        new_vrrp = secrets.next_path(secrets.vrrp_password_path(cfg)).read_text().strip()
        opened = pyinfra("-y", "inventory.py", "deploy.py")
        assert opened.rc == 0, opened.failure()
        assert "Every box accepts the new API token (rotation window)" in opened.output
        record(f"rotation: the window deployed (2 boxes + 2 gateways): {opened.seconds:.0f} s, "
               f"{len(traffic.failed())} of {len(traffic.results)} requests to the VIP failed",
               len(traffic.failed()), "n")
        window = {"old api": _statuses(spark, old_api), "new api": _statuses(spark, new_api),
                  "old scrape": _statuses(spark, old_scrape, scrape=True),
                  "new scrape": _statuses(spark, new_scrape, scrape=True)}
        traffic.token = new_api  # the clients switch
        time.sleep(SWITCHED_S)
        for name in SECRETS:
            _cli("finish", name)
        t_close = time.monotonic()
        closed = pyinfra("-y", "inventory.py", "deploy.py")
        assert closed.rc == 0, closed.failure()
        time.sleep(2)
    record(f"rotation: the window closed (2 boxes + 2 gateways, VRRP's password on both): {closed.seconds:.0f} s, "
           f"{len(traffic.failed(after=t_close))} of {len([r for r in traffic.results if r[0] >= t_close])} "
           f"requests to the VIP failed", len(traffic.failed(after=t_close)), "n")
    record(f"rotation: requests to the VIP from rotate to finish's deploy: {len(traffic.results)} "
           f"({sum(1 for r in traffic.results if r[1] == new_api)} with the new token), refused or failed",
           len(traffic.failed()), "n")
    assert traffic.failed() == [], traffic.failed()[:5]
    doors = list(_doors())
    assert window == {"old api": dict.fromkeys(doors, 200), "new api": dict.fromkeys(doors, 200),
                      "old scrape": dict.fromkeys(doors, 200), "new scrape": dict.fromkeys(doors, 200)}, window
    after = {"old api": _statuses(spark, old_api), "new api": _statuses(spark, new_api),
             "old scrape": _statuses(spark, old_scrape, scrape=True)}
    assert after == {"old api": dict.fromkeys(doors, 401), "new api": dict.fromkeys(doors, 200),
                     "old scrape": dict.fromkeys(doors, 401)}, after
    conf = groupdata.load(GROUPS)["KEEPALIVED_CONF"]
    for g in GATEWAYS:  # both peers took the new password; one of them holds the VIP
        assert f"auth_pass {new_vrrp}" in sim_exec(g, f"cat {conf}"), g
    master = holder()
    assert master and {vrrp_state(g) for g in GATEWAYS} == {"MASTER", "BACKUP"}, (master, GATEWAYS)
