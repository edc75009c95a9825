"""The front door, live on loopback: the real nginx (two box proxies from the project's own template, the gateway's
front and bridge), the real vllm-router from PyPI, stand-ins for vLLM only (tests/standins/vllm_openai.py).

What it shows: the bearer is checked at the front and never reaches a box from a client (the bridge adds the boxes'
token); both boxes serve; a box whose health path fails first (the `unready` hook) leaves the router's rotation with
no client error, and its drain that follows is never seen; a box that dies is out within the health window (with
`round_robin` the router's retries absorb every error; with `cache_aware` a retry goes back to the same box, so
requests inside the window can fail: counted and bounded here); the front answers 503 + Retry-After
only when both its routers are down (the deploy restarts the primary, then the standby: no request refused);
the router's /metrics parse with prometheus_client's parser.
"""

from __future__ import annotations

import threading
import time
import uuid

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import API_TOKEN, SCRAPE_TOKEN
from tests.gateway import harness as h
from tests.gateway.harness import chat
from tests.standins.vllm_openai import completions

pytestmark = pytest.mark.skipif(not __import__("shutil").which("nginx"),
                                reason="nginx not installed (apt-get install nginx-light)")

PACE_S = 0.1  # one client request every this often during a fault


@pytest.fixture(scope="session")
def router_exe():
    from sparkctl.config import groupdata

    exe, why = h.router_venv(groupdata.load(["all"])["ROUTER_VERSION"])
    if exe is None:
        pytest.skip(why)
    return exe


@pytest.fixture(scope="module")
def gw(router_exe, tmp_path_factory):
    with h.gateway(tmp_path_factory.mktemp("gw"), router_exe) as g:
        yield g


def health_window(cfg) -> float:
    """How long the router may keep sending to a box whose health fails: its failures in a row, each up to an
    interval plus a timeout apart."""
    return cfg.ROUTER_HEALTH_FAILURE_THRESHOLD * (cfg.ROUTER_HEALTH_INTERVAL_S + cfg.ROUTER_HEALTH_TIMEOUT_S)


def workers(gw) -> dict[str, bool]:
    """box -> healthy, as the router says (its admin API on loopback; the front never publishes it)."""
    doc = httpx.get(f"http://127.0.0.1:{gw.pool.port}/workers", timeout=5).json()
    return {w["url"].rstrip("/").split("/")[-2]: w["is_healthy"] for w in doc["workers"]}


def wait_healthy(gw, box: str, healthy: bool, timeout: float) -> float:
    t0 = time.monotonic()
    h.wait_for(f"{box} healthy={healthy} in the router", lambda: workers(gw)[box] is healthy, timeout)
    return time.monotonic() - t0


def traffic(gw, seconds: float) -> list[tuple[float, int, str]]:
    """Requests at PACE_S for `seconds`: (time since start, status, box or error text)."""
    out = []
    t0 = time.monotonic()
    with gw.client(API_TOKEN) as c:
        while time.monotonic() - t0 < seconds:
            r = chat(c, f"{uuid.uuid4().hex} write a function")
            out.append((time.monotonic() - t0, r.status_code,
                        r.json().get("x_box") if r.status_code == 200 else r.text[:80]))
            time.sleep(PACE_S)
    return out


def test_the_bearer_is_checked_at_the_front_and_the_boxes_token_comes_from_the_bridge(gw):
    with gw.client(API_TOKEN) as c:
        r = chat(c)
        assert r.status_code == 200 and r.json()["x_box"] in h.BOXES
        assert c.get("/coder/v1/models").json()["data"][0]["id"] == h.SERVED
        # the router's admin routes are not published; nor is anything else
        assert [c.get(p).status_code for p in ("/coder/workers", "/coder/get_loads", "/workers", "/coder/")] == \
            [404] * 4
        assert c.post("/coder/add_worker?url=http://evil").status_code == 404
    for token in (None, "wrong", SCRAPE_TOKEN):
        with gw.client(token) as c:
            r = chat(c)
            assert r.status_code == 401 and r.headers["WWW-Authenticate"] == 'Bearer realm="sparkctl"'
    # what reached the boxes' vLLM carried no token (the box proxy strips the bridge's after checking it)
    seen = [hd for b in gw.boxes.values() for hd in b.standin.headers_seen]
    assert seen and not any("authorization" in hd for hd in seen)


def test_a_stream_flows_through_front_router_and_bridge(gw):
    with gw.client(API_TOKEN) as c, c.stream("POST", "/coder/v1/chat/completions", json={
            "model": h.SERVED, "stream": True, "messages": [{"role": "user", "content": "hi"}]}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        events = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert len(events) == 6 and events[-1] == "data: [DONE]"


def test_both_boxes_get_traffic(gw):
    before = {n: completions(b.standin) for n, b in gw.boxes.items()}
    results = []

    def one():
        with gw.client(API_TOKEN) as c:
            results.append(chat(c, f"{uuid.uuid4().hex} " * 30, stream=True).status_code)

    threads = [threading.Thread(target=one) for _ in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    got = {n: completions(b.standin) - before[n] for n, b in gw.boxes.items()}
    assert results == [200] * 24
    assert all(v > 0 for v in got.values()), got


def test_a_box_whose_health_fails_first_leaves_rotation_and_its_drain_is_never_seen(gw):
    """The hook a rollout uses: <served>.unready.conf fails only the health path; once the router has taken the
    box out, the drain's 503 reaches nobody."""
    box = gw.boxes["box-b"]
    unready = box.drain_dir / f"{h.SERVED}.unready.conf"
    try:
        unready.write_text("return 503 \"leaving the routers' rotation\\n\";\n")
        box.reload()
        took = wait_healthy(gw, "box-b", False, health_window(gw.cfg) + 5)
        box.drain(True)
        seen = traffic(gw, 2.0)
        assert {s for _t, s, _w in seen} == {200} and {w for *_x, w in seen} == {"box-a"}, seen
    finally:
        unready.unlink(missing_ok=True)
        box.drain(False)
    back = wait_healthy(gw, "box-b", True, 10)
    print(f"\nunready -> out of rotation in {took:.1f} s (window {health_window(gw.cfg)} s); back in {back:.1f} s")


def test_a_dead_box_is_out_within_the_health_window(gw):
    """cache_aware: a retry goes back to the box the policy chose, so a request inside the window may fail."""
    box = gw.boxes["box-a"]
    box.stop()
    try:
        seen = traffic(gw, health_window(gw.cfg) + 3)
        assert workers(gw)["box-a"] is False
        late = [x for x in seen if x[0] > health_window(gw.cfg) + 1]
        assert late and all(s == 200 for _t, s, _w in late), late
        errors = [x for x in seen if x[1] != 200]
        assert all(t <= health_window(gw.cfg) + 1 for t, *_ in errors), errors
        print(f"\ncache_aware, box killed: {len(errors)} of {len(seen)} requests failed, all within "
              f"{max((t for t, *_ in errors), default=0):.1f} s")
    finally:
        box.start()
        wait_healthy(gw, "box-a", True, 15)


def test_with_round_robin_the_retries_absorb_a_dead_box(router_exe, tmp_path):
    with h.gateway(tmp_path, router_exe, ROUTER_POLICY="round_robin") as g:
        g.boxes["box-a"].stop()
        seen = traffic(g, health_window(g.cfg) + 2)
        assert [x for x in seen if x[1] != 200] == [] and workers(g)["box-a"] is False
        assert {w for *_x, w in seen} == {"box-b"}


def test_the_routers_metrics_parse(gw):
    with gw.client(SCRAPE_TOKEN) as c:
        r = c.get(f"/{gw.cfg.ROUTER_SCRAPE_PATH}/{h.SERVED}/metrics")
        assert r.status_code == 200
        assert c.get("/coder/v1/models").status_code == 401  # the scrape token opens nothing else
    with gw.client(API_TOKEN) as c:
        assert c.get(f"/{gw.cfg.ROUTER_SCRAPE_PATH}/{h.SERVED}/metrics").status_code == 401
    families = {f.name: f for f in text_string_to_metric_families(r.text)}
    processed = families["vllm_router_processed_requests"]
    boxes = {s.labels["worker"].rstrip("/").split("/")[-2] for s in processed.samples}
    assert boxes == set(h.BOXES)


def steady_client(gw, seen: list, stop: threading.Event) -> threading.Thread:
    """A client sending a request every PACE_S until `stop`: (time, status, Retry-After) into `seen`."""
    def run():
        t0 = time.monotonic()
        with gw.client(API_TOKEN) as c:
            while not stop.is_set():
                r = chat(c, uuid.uuid4().hex)
                seen.append((time.monotonic() - t0, r.status_code, r.headers.get("Retry-After", "")))
                time.sleep(PACE_S)
    t = threading.Thread(target=run)
    t.start()
    return t


def test_restarting_the_primary_then_the_standby_loses_no_request(gw):
    """What the deploy does after an upgrade or a changed unit: restart the primary (nginx sends to the standby
    while it is down), wait until it listens, then the standby."""
    stop, seen = threading.Event(), []
    t = steady_client(gw, seen, stop)
    t0 = time.monotonic()
    try:
        for standby in (False, True):
            time.sleep(0.5)
            gw.stop_router(standby)
            gw.start_router(standby)
            gw.wait_listening(standby)
        h.wait_until_routed(gw)
        took = time.monotonic() - t0
        time.sleep(0.5)
    finally:
        stop.set()
        t.join(timeout=30)
    assert len(seen) > 10 and [x for x in seen if x[1] != 200] == []
    print(f"\nprimary then standby restarted in {took:.1f} s: {len(seen)} requests, none refused")


def test_with_both_routers_down_the_front_answers_a_retryable_503(gw):
    """Both stopped (never done by the deploy): OpenAI-style clients retry the front's 503 + Retry-After."""
    for standby in (False, True):
        gw.stop_router(standby)
    try:
        with gw.client(API_TOKEN) as c:
            r = chat(c)
        assert r.status_code == 503 and r.headers["Retry-After"] == str(gw.cfg.ROUTER_RESTART_RETRY_AFTER_S)
    finally:
        for standby in (False, True):
            gw.start_router(standby)
        for standby in (False, True):
            gw.wait_listening(standby)
        h.wait_until_routed(gw)


def test_a_router_restarted_while_a_box_is_down_serves_and_takes_the_box_back(gw):
    """The router waits for one healthy box, not all (a restart during a box's rollout is no outage), and keeps
    checking the others. It starts with every box marked healthy: the dead one leaves within the health window."""
    box = gw.boxes["box-b"]
    box.stop()
    try:
        for standby in (False, True):
            gw.stop_router(standby)
        t0 = time.monotonic()
        gw.start_router()
        h.wait_until_routed(gw)
        gw.start_router(standby=True)
        gw.wait_listening(standby=True)
        served = time.monotonic() - t0
        out = wait_healthy(gw, "box-b", False, health_window(gw.cfg) + 5)
        print(f"\nrouter restarted with box-b down: serving after {served:.1f} s, box-b out {out:.1f} s later")
    finally:
        box.start()
    wait_healthy(gw, "box-b", True, health_window(gw.cfg) + 10)


def test_a_stream_in_flight_when_the_primary_stops_ends_complete(gw, monkeypatch):
    """SIGTERM: vllm-router stops listening and finishes what it holds (within the unit's TimeoutStopSec)."""
    from tests.standins import vllm_openai

    monkeypatch.setattr(vllm_openai, "CHUNK_GAP_S", 0.5)  # a 2.5 s stream
    got: list[str] = []
    outcome: list[str] = []

    def stream():
        try:
            with gw.client(API_TOKEN) as c, c.stream("POST", "/coder/v1/chat/completions", json={
                    "model": h.SERVED, "stream": True, "messages": [{"role": "user", "content": "long"}]}) as r:
                got.extend(line for line in r.iter_lines() if line.startswith("data: "))
            outcome.append("complete" if got and got[-1] == "data: [DONE]" else f"cut after {len(got)} events")
        except httpx.HTTPError as exc:
            outcome.append(f"cut after {len(got)} events: {type(exc).__name__}")

    gw.wait_listening(standby=True)
    t = threading.Thread(target=stream)
    t.start()
    time.sleep(1.0)
    t0 = time.monotonic()
    stopper = threading.Thread(target=gw.stop_router)
    stopper.start()
    time.sleep(0.3)
    with gw.client(API_TOKEN) as c:  # a new request while the primary drains: the standby takes it
        during = chat(c).status_code
    stopper.join(timeout=60)
    stopped = time.monotonic() - t0
    t.join(timeout=30)
    gw.start_router()
    gw.wait_listening()
    print(f"\nprimary SIGTERM during a stream: it exited in {stopped:.1f} s, once the stream ended ({outcome[0]}); "
          f""
          f"a new request meanwhile: {during}")
    assert outcome == ["complete"] and during == 200
