"""What the simulated fleet's scenarios share: the pair plus spark-3 (a box serving what they serve: coder and both
embedders, 3 x 3 tiny engines fit 24 GiB) and spark-4 (the gateway), joined by rerunning the README's command with no
edit (the replicas topology is one pool of every box); the one URL clients use; traffic through it with each box's
router health path sampled beside it.

Each scenario module that imports `fleet` joins a fleet of its own (a module-scoped fixture) and stops spark-3 and
spark-4 at its end (`sim.stop`: a box retired, its host gone), so the modules are independent shares of CI's
rotation (tests/e2e/selection.py) and any one of them runs alone."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field

import httpx
import pytest

from sparkctl import REPO_ROOT
from tests.e2e.conftest import PAIR, pyinfra, record
from tests.e2e.helpers import HealthSampler, main_pids

BOXES = ("spark-1", "spark-2", "spark-3")
GATEWAY = "spark-4"
WAVES = ("--data", 'ROLLOUT_WAVES=[1, "100%"]', "--data", "MAX_UNAVAILABLE=2")  # canary, then the other two at once
LAGUNA = ("--data", "CODING_MODEL=laguna-s-2.1")
UNIT = "/etc/systemd/system/vllm-coder.service"
BOX_ADDRESS: dict[str, str] = {}


@dataclass
class Front:
    """The one URL clients use (router.json in the hand-off) and how to reach each box straight."""

    spark: object  # tests.e2e.conftest.Spark: token, CA, settings
    base_url: str

    def post(self, client: httpx.Client, base: str, body: dict, timeout: float = 60) -> httpx.Response:
        return client.post(base + "/chat/completions", json=body, timeout=timeout,
                           headers={"Authorization": f"Bearer {self.spark.token}"})

    def box_url(self, box: str) -> str:
        return f"https://{BOX_ADDRESS[box]}:{self.spark.data['PROXY_PORT']}/coder/v1"


@dataclass
class Traffic:
    """A request every `interval` s through the router and, beside it, each box's router health path with the
    routers' own timeout (HealthSampler): how many client requests failed, how many boxes were out on purpose (their
    drain or unready file) at one time, and any box whose health path failed while nobody took it out."""

    front: Front
    interval: float = 0.5
    results: list = field(default_factory=list)  # (t, status or error)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self):
        self.health = HealthSampler(self.front.spark, {b: BOX_ADDRESS[b] for b in BOXES}, self.interval).__enter__()
        self._thread = threading.Thread(target=self._requests, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=120)
        self.health.__exit__()

    def _requests(self):
        body = {"model": "coder", "messages": [{"role": "user", "content": "x"}], "max_tokens": 4}
        with self.front.spark.client() as c:
            while not self._stop.is_set():
                t0 = time.monotonic()
                try:
                    outcome = self.front.post(c, self.front.base_url, body).status_code
                except httpx.HTTPError as exc:
                    outcome = type(exc).__name__
                self.results.append((t0, outcome))
                self._stop.wait(max(0.0, self.interval - (time.monotonic() - t0)))

    def errors(self) -> list:
        return [r for r in self.results if r[1] != 200]

    def out_on_purpose(self) -> int:
        return self.health.most_out_on_purpose()

    def taken_out_while_serving(self, spare: tuple[str, ...] = ()) -> dict[str, int]:
        return self.health.failing_while_serving(self.front.spark.data["ROUTER_HEALTH_FAILURE_THRESHOLD"], spare)

    def summary(self) -> str:
        return f"{len(self.results)} requests through the router, {len(self.errors())} failed; {self.health.summary()}"


@pytest.fixture(scope="module")
def fleet(spark_1):
    """The pair plus spark-3 (a box) and spark-4 (the gateway), converged by the README's command with no edit."""
    from sparkctl.sim import api as sim

    PAIR.as_in_the_files()  # the pair as the group data says (an earlier scenario may have left it otherwise)
    before = {h: main_pids(h) for h in BOXES[:2]}
    t0 = time.monotonic()
    sim.up(hosts=4, flavors={"spark-1": "dgx", "spark-2": "ubuntu"}, gateways=[GATEWAY])
    record("sim up: spark-3 (a box) and spark-4 (a gateway) beside the running pair", time.monotonic() - t0)
    BOX_ADDRESS.update({h["name"]: h["address"] for h in sim.hosts_()})
    run = pyinfra("-y", "inventory.py", "deploy.py")
    record("a third box and a gateway joined: converge of 3 boxes + 1 gateway (no edit)", run.seconds)
    assert run.rc == 0, run.failure()
    assert {h: main_pids(h) for h in BOXES[:2]} == before  # the pair restarted nothing
    assert "vllm-coder: a first install (it serves nothing yet): no wait for a wave" in run.output, run.output[-3000:]
    doc = json.loads((REPO_ROOT / "handoff" / "router.json").read_text())
    front = Front(spark_1, doc["models"]["coder"]["base_url"])
    yield front
    t0 = time.monotonic()
    sim.stop(["spark-3", GATEWAY])  # the box retired and the gateway gone: the pair alone again
    record("spark-3 and spark-4 stopped (sim.stop)", time.monotonic() - t0)
    PAIR.disturbed()  # the group data's pair, converged again by whoever needs it next


def flip(fleet: Front, label: str, *args: str) -> Traffic:
    """A deploy with args (a flip), a request every 0.5 s through the router all along; fails if the deploy did."""
    with Traffic(fleet) as traffic:
        run = pyinfra("-y", *args, "inventory.py", "deploy.py")
    record(label, run.seconds)
    print(f"{label}: {run.seconds:.1f} s; {traffic.summary()}")
    assert run.rc == 0, run.failure()
    return traffic


def assert_served_throughout(what: str, traffic: Traffic, limit: int) -> None:
    """No client request failed, at most `limit` boxes out on purpose at once (MAX_UNAVAILABLE), and no serving
    box's health path failed the routers' threshold in a row (a busy box is never taken out)."""
    assert traffic.errors() == [], (what, traffic.errors()[:5])
    assert traffic.out_on_purpose() <= limit, (what, traffic.summary())
    assert traffic.taken_out_while_serving() == {}, (what, traffic.summary())
    record(f"{what}: the slowest router health answer", traffic.health.slowest())


def serves(fleet: Front, box: str) -> bool:
    try:
        with fleet.spark.client() as c:
            return fleet.post(c, fleet.box_url(box), {"model": "coder", "max_tokens": 2,
                                                      "messages": [{"role": "user", "content": "x"}]}).status_code == 200
    except httpx.HTTPError:
        return False
