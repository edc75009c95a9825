"""A simulated fleet: the pair plus a third box and a gateway host (`sim up --hosts 4 --gateway spark-4`), joined by
rerunning the README's command with no edit (the replicas topology is one pool of every box), then measured as an
operator of a fleet would: the no-op converge of 1, 2 and 3 boxes; the same flip in waves and one box at a time with
a request every 0.5 s through the router, a coder killed mid-wave in one of them; a canary that fails acceptance; the
prefix-cache hits of an agent-like workload with `cache_aware` against `round_robin`; the router's overhead.

The extra boxes serve what the pair serves (coder and both embedders): 3 x 3 tiny engines fit 24 GiB. At the end
spark-3 and spark-4 are stopped (`sim.stop`: a box retired, its host gone) and the pair is as the group data says.
"""

from __future__ import annotations

import json
import random
import re
import resource
import statistics
import threading
import time
from dataclasses import dataclass, field

import httpx
import pytest

from sparkctl import REPO_ROOT
from sparkctl.lock.refresh import refresh_lock
from tests.e2e.conftest import (GROUPS, PAIR, broken_candidate_overrides, pyinfra, pyinfra_popen, record,
                                sim_exec)
from tests.e2e.helpers import main_pids, wait_for

# its own hosts, converges and five flips: ~40 min here, costlier than CI's whole extended budget (make test-extended)
pytestmark = [pytest.mark.scenario("fleet"), pytest.mark.e2e_extended(cost_s=2400)]

BOXES = ("spark-1", "spark-2", "spark-3")
GATEWAY = "spark-4"
WAVES = ("--data", 'ROLLOUT_WAVES=[1, "100%"]', "--data", "MAX_UNAVAILABLE=2")  # canary, then the other two at once
UNIT = "/etc/systemd/system/vllm-coder.service"


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


BOX_ADDRESS: dict[str, str] = {}


@dataclass
class Traffic:
    """A request every `interval` s through the router and, beside it, each box's router health path: how many
    client requests failed, and the most boxes of the pool out of service (health path not 200) at one time."""

    front: Front
    interval: float = 0.5
    results: list = field(default_factory=list)  # (t, status or error)
    down: list = field(default_factory=list)  # (t, boxes not serving)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self):
        self._threads = [threading.Thread(target=self._requests, daemon=True),
                         threading.Thread(target=self._health, daemon=True)]
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        for t in self._threads:
            t.join(timeout=120)

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

    def _health(self):
        port, token = self.front.spark.data["PROXY_PORT"], self.front.spark.token
        with self.front.spark.client() as c:
            while not self._stop.is_set():
                t0, out = time.monotonic(), []
                for box in BOXES:
                    try:
                        r = c.get(f"https://{BOX_ADDRESS[box]}:{port}/coder/health", timeout=5,
                                  headers={"Authorization": f"Bearer {token}"})
                        ok = r.status_code == 200
                    except httpx.HTTPError:
                        ok = False
                    if not ok:
                        out.append(box)
                self.down.append((t0, out))
                self._stop.wait(max(0.0, self.interval - (time.monotonic() - t0)))

    def errors(self) -> list:
        return [r for r in self.results if r[1] != 200]

    def most_down(self) -> int:
        return max((len(d) for _, d in self.down), default=0)

    def summary(self) -> str:
        return (f"{len(self.results)} requests through the router, {len(self.errors())} failed; at most "
                f"{self.most_down()} of {len(BOXES)} boxes out of service in {len(self.down)} samples")


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
    doc = json.loads((REPO_ROOT / "handoff" / "router.json").read_text())
    front = Front(spark_1, doc["models"]["coder"]["base_url"])
    yield front
    t0 = time.monotonic()
    sim.stop(["spark-3", GATEWAY])  # the box retired and the gateway gone: the pair alone again
    record("spark-3 and spark-4 stopped (sim.stop)", time.monotonic() - t0)
    PAIR.disturbed()  # the group data's pair, converged again by whoever needs it next


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


def _flip(fleet: Front, label: str, *args: str) -> Traffic:
    with Traffic(fleet) as traffic:
        run = pyinfra("-y", *args, "inventory.py", "deploy.py")
    record(label, run.seconds)
    print(f"{label}: {run.seconds:.1f} s; {traffic.summary()}")
    assert run.rc == 0, run.failure()
    return traffic


def test_the_same_flip_in_waves_and_one_box_at_a_time(fleet):
    """Qwen -> Laguna -> Qwen in waves (a canary, then two boxes at once: MAX_UNAVAILABLE=2), then the same flips one
    box at a time (the defaults for a pool of 3), a request every 0.5 s through the router all along. In the third,
    spark-3's serving coder is SIGKILLed the moment spark-2's wave begins (one box out for its rollout, one dead):
    the router takes spark-3 out within its health window, systemd restarts it, and its own wave rolls it out."""
    laguna = ("--data", "CODING_MODEL=laguna-s-2.1")
    runs = [("to laguna in waves", _flip(fleet, "fleet flip to laguna in waves (1, then 2)", *laguna, *WAVES), 2),
            ("back in waves", _flip(fleet, "fleet flip back to qwen in waves (1, then 2)", *WAVES), 2)]
    killed = _flip_killing_a_box(fleet, laguna)
    runs += [("back one at a time", _flip(fleet, "fleet flip back to qwen one box at a time (plain deploy)"), 1)]
    for what, traffic, limit in runs:
        assert traffic.errors() == [], (what, traffic.errors()[:5])
        assert traffic.most_down() <= limit, (what, [d for d in traffic.down if len(d[1]) > limit][:5])
    assert killed.most_down() < len(BOXES)  # a rollout and a dead box: never the whole pool
    total = sum(len(t.errors()) for _, t, _ in runs)
    record(f"fleet flips without a fault: requests through the router, failed: {total} of "
           f"{sum(len(t.results) for _, t, _ in runs)}", total, "n")


def _flip_killing_a_box(fleet: Front, laguna: tuple[str, ...]) -> Traffic:
    """The flip to Laguna one box at a time; SIGKILL spark-3's coder as spark-2 leaves the routers (its wave)."""
    label = "fleet flip to laguna one box at a time (spark-3's coder SIGKILLed in wave 2)"
    unready = f"{fleet.spark.data['DRAIN_DIR']}/coder.unready.conf"
    with Traffic(fleet) as traffic:
        t0 = time.monotonic()
        proc = pyinfra_popen(*laguna)
        wait_for(lambda: proc.poll() is not None or sim_exec("spark-2", f"test -e {unready} && echo y || true").strip(),
                 1800, "spark-2's wave (its router health path failing)", interval=0.5)
        sim_exec("spark-3", "systemctl kill -s KILL vllm-coder.service")
        killed = time.monotonic()
        output, _ = proc.communicate(timeout=2400)
        seconds = time.monotonic() - t0
    record(label, seconds)
    out = next((t for t, d in traffic.down if t > killed and "spark-3" in d), None)
    print(f"{label}: {seconds:.1f} s; {traffic.summary()}")
    assert proc.returncode == 0, output[-6000:]  # a serving box that died is no failed rollout: its wave rolls it out
    assert out is not None and out - killed < 5, out  # the health path fails at once (the router's window: 4 s)
    failed = traffic.errors()
    record(f"fleet: requests through the router while spark-2 rolled out and spark-3's coder was killed: "
           f"{len(failed)} of {len(traffic.results)} failed", len(failed), "n")
    assert len(failed) <= 2, failed  # only requests the dead engine held, or sent before the router saw it
    assert all(b in output for b in ("wave 2 of 3 (spark-2)", "wave 3 of 3 (spark-3)")), output[-3000:]
    return traffic


def test_a_failing_canary_stops_the_fleet(fleet):
    """The canary's candidate cannot load: it rolls itself back, and the other boxes are not touched (unit files and
    processes as they were), the deploy fails naming them."""
    units = {b: sim_exec(b, f"sha256sum {UNIT}") for b in BOXES[1:]}
    pids = {b: main_pids(b) for b in BOXES[1:]}
    try:
        with Traffic(fleet) as traffic:
            run = pyinfra("-y", "--data", "CODING_MODEL=laguna-s-2.1", "--data", broken_candidate_overrides(),
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
    wait_for(lambda: _serves(fleet, "spark-1"), 120, "spark-1 serving its previous coder again")


def _serves(fleet: Front, box: str) -> bool:
    try:
        with fleet.spark.client() as c:
            return fleet.post(c, fleet.box_url(box), {"model": "coder", "max_tokens": 2,
                                                      "messages": [{"role": "user", "content": "x"}]}).status_code == 200
    except httpx.HTTPError:
        return False


WORDS = ("the of and to in is that for it as with was on be by at this from or an are not have but which one all "
         "their were can there been if more when will would who so no out up into do than time about them some could "
         "other then its two these may like first any new our over such after most also made many before must "
         "through back years where much your way well down should because each just those people how too little "
         "state good very make world still own see men work long get here between both life being under never day "
         "same another know while last might us great old year off come since against go came right used take three"
         ).split()  # common English words: about one token each, so a session's length in tokens is known


def _agent_sessions(seed: int, sessions: int = 4, turns: int = 4, first: int = 600, step: int = 150) -> list:
    """Sessions re-sending a growing shared prefix (an agent's conversation): `first` words of context, `step` more
    a turn (600 to 1,050 words: about 1,800 to 3,200 tokens of the stand-in coder's 4,096, measured with its
    /tokenize), each session its own words (the seed makes two runs the same shape with different text)."""
    rng = random.Random(seed)
    out = []
    for _ in range(sessions):
        mine = [rng.choice(WORDS) for _ in range(first + (turns - 1) * step)]
        out.append([" ".join(mine[:first + t * step]) for t in range(turns)])
    return out


def _prefix_hits(fleet: Front) -> tuple[float, float]:
    """vLLM's prefix-cache hits and queries (tokens), summed over the coders of the three boxes (loopback)."""
    hits = queries = 0.0
    for box in BOXES:
        text = sim_exec(box, f"curl -s http://127.0.0.1:{fleet.spark.data['CODER_PORT']}/metrics")
        for line in text.splitlines():
            if line.startswith("vllm:prefix_cache_hits_total"):
                hits += float(line.split()[-1])
            elif line.startswith("vllm:prefix_cache_queries_total"):
                queries += float(line.split()[-1])
    return hits, queries


def _run_sessions(fleet: Front, seed: int) -> float:
    h0, q0 = _prefix_hits(fleet)
    with fleet.spark.client() as c:
        for turn in range(4):
            for session in _agent_sessions(seed):
                r = fleet.post(c, fleet.base_url, {"model": "coder", "max_tokens": 2,
                                                   "messages": [{"role": "user", "content": session[turn]}]})
                assert r.status_code == 200, r.text
    h1, q1 = _prefix_hits(fleet)
    return (h1 - h0) / max(1.0, q1 - q0)


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
    assert traffic.most_down() <= 1  # spark-3 alone; the pool still serves
    assert all(state[0] in ("inactive", "failed") and state[1] == "disabled"
               for state in _units_of(box, units).values()), _units_of(box, units)
    assert set(json.loads(sim_exec(box, f"cat {marker}"))["units"]) == set(units)  # what it stopped, recorded
    assert "sparkctl_box_retired 1" in sim_exec(box, f"cat {textfile}")  # SparkServedModelDown held back for it
    assert not _serves(fleet, box)  # straight to the box: the drain's 503 (its files stay until a deploy)

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
    wait_for(lambda: _serves(fleet, box), 300, "spark-3 serving again")
    with Traffic(fleet) as traffic:  # back in the routers (their success threshold) and no request fails
        wait_for(lambda: any(t > 0 and "spark-3" not in d for t, d in traffic.down[-1:]), 60,
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
