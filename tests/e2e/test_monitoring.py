"""Monitoring on the converged simulated Spark: the scrape paths and their token, node exporter on
loopback with the GPU stand-in's facts, a busy coder never restarted, a SIGSTOPped engine core restarted by
the watchdog. Each test starts from the pair as the group data says (`converged_spark`); the wedge test also
needs a watchdog restart left to spend (`watchdog_restart_left`)."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest

from sparkctl.config import secrets
from tests.conftest import typed
from tests.e2e.conftest import PAIR, record, sim_exec
from tests.e2e.helpers import chat_ok, invocation, wait_for

pytestmark = pytest.mark.scenario("monitoring")

HOST = "spark-1"


def scrape(spark, path: str, token: str | None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with spark.client() as c:
        return c.get(f"https://{spark.host.address}:{spark.data['PROXY_PORT']}/{path}", headers=headers)


def watchdog_restarts(spark, unit: str) -> float:
    text = scrape(spark, f"{spark.data['SCRAPE_NODE_PATH']}/metrics", secrets.read_scrape_token(typed(spark.data))).text
    lines = [x for x in text.splitlines() if x.startswith("sparkctl_watchdog_restarts_total{") and unit in x]
    return float(lines[0].rsplit(" ", 1)[1]) if lines else 0.0


def test_scrape_paths_open_only_with_the_scrape_token(converged_spark):
    sp, d = converged_spark, converged_spark.data
    scrape_token = secrets.read_scrape_token(typed(d))
    for served in ("coder", "embed-qwen3", "embed-bge-m3"):
        r = scrape(sp, f"{served}/metrics", scrape_token)
        assert r.status_code == 200 and "vllm:num_requests_running" in r.text, served
        assert scrape(sp, f"{served}/metrics", sp.token).status_code == 401  # the API token does not open metrics
        assert scrape(sp, f"{served}/metrics", None).status_code == 401
        assert scrape(sp, f"{served}/v1/models", scrape_token).status_code == 401  # nor the scrape token the API
    node = f"{d['SCRAPE_NODE_PATH']}/metrics"
    assert scrape(sp, node, sp.token).status_code == 401
    # the box-facts timer has run at least once: the GB10 stand-in's facts are in node exporter's scrape

    def node_text() -> str:
        text = scrape(sp, node, scrape_token).text
        return text if "sparkctl_gpu_facts_ok 1" in text else ""

    text = wait_for(node_text, 3 * d["BOX_FACTS_INTERVAL_S"] + 30, "the GPU facts in the node scrape")
    for name in ("node_memory_MemAvailable_bytes", "node_pressure_memory_stalled_seconds_total",
                 "sparkctl_model_store_free_bytes", "sparkctl_tls_cert_expiry_timestamp_seconds",
                 "sparkctl_watchdog_gave_up"):
        assert name in text, name
    listening = sim_exec(HOST, "ss -Hltn")
    assert f"127.0.0.1:{d['NODE_EXPORTER_PORT']} " in listening
    assert f"0.0.0.0:{d['NODE_EXPORTER_PORT']} " not in listening and f"*:{d['NODE_EXPORTER_PORT']} " not in listening


# a full-load window longer than WATCHDOG_STALL_S (~3 min here); tests/box/test_watchdog.py drives the real Watchdog
# through it
@pytest.mark.e2e_extended(cost_s=180)
def test_coder_under_full_bench_load_is_never_restarted(converged_spark):
    sp, d = converged_spark, converged_spark.data
    before, restarts = invocation(HOST), watchdog_restarts(sp, "vllm-coder.service")
    stop = time.monotonic() + d["WATCHDOG_STALL_S"] + 3 * d["WATCHDOG_INTERVAL_S"]
    failures = []

    def stream():
        while time.monotonic() < stop:
            if not chat_ok(sp, max_tokens=d["BENCH_MAX_TOKENS"]):
                failures.append(time.monotonic())

    threads = [threading.Thread(target=stream) for _ in range(max(d["BENCH_STREAMS"]))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, f"{len(failures)} requests failed under load"
    assert invocation(HOST) == before
    time.sleep(d["WATCHDOG_INTERVAL_S"] + d["BOX_FACTS_INTERVAL_S"])
    assert watchdog_restarts(sp, "vllm-coder.service") == restarts


def engine_core_pid() -> str:
    """The coder's engine-core process (its API server keeps answering /health while it is stopped)."""
    cgroup = sim_exec(HOST, "systemctl show -P ControlGroup vllm-coder.service").strip()
    pids = sim_exec(HOST, f"cat /sys/fs/cgroup{cgroup}/cgroup.procs").split()
    for pid in pids:
        cmdline = sim_exec(HOST, f"tr '\\0' ' ' < /proc/{pid}/cmdline || true")
        if "EngineCore" in cmdline:
            return pid
    raise AssertionError("no VLLM::EngineCore process in vllm-coder.service: the wedge test needs the engine in "
                         "its own process (VLLM_ENABLE_V1_MULTIPROCESSING must not be 0 for the coder)")


@pytest.fixture
def watchdog_restart_left(converged_spark):
    """The watchdog may still restart the coder: it allows WATCHDOG_MAX_RESTARTS per WATCHDOG_WINDOW_S, and a pair
    kept with SPARKCTL_E2E_REUSE remembers the restarts earlier runs of the wedge test spent."""
    d = converged_spark.data
    state = json.loads(sim_exec(HOST, f"cat {d['STATE_DIR']}/watchdog/state.json 2>/dev/null || echo '{{}}'"))
    now = float(sim_exec(HOST, "date +%s"))  # the watchdog's clock: the box's wall clock
    recent = [t for t in state.get("coder", {}).get("restarts", []) if now - t < d["WATCHDOG_WINDOW_S"]]
    assert len(recent) < d["WATCHDOG_MAX_RESTARTS"], (
        f"the watchdog already restarted the coder {len(recent)} times within WATCHDOG_WINDOW_S = "
        f"{d['WATCHDOG_WINDOW_S']} s on this pair (WATCHDOG_MAX_RESTARTS = {d['WATCHDOG_MAX_RESTARTS']}): it would "
        "give up instead; boot a fresh pair (python -m sparkctl sim down) to run the wedge test again")
    return converged_spark


def test_sigstopped_engine_core_is_restarted_by_the_watchdog(watchdog_restart_left):
    sp, d = watchdog_restart_left, watchdog_restart_left.data
    assert chat_ok(sp)
    before, restarts = invocation(HOST), watchdog_restarts(sp, "vllm-coder.service")
    pid = engine_core_pid()
    t0 = time.monotonic()
    PAIR.disturbed(HOST)
    sim_exec(HOST, f"kill -STOP {pid}")
    health = sim_exec(HOST, f"curl -s -o /dev/null -w '%{{http_code}}' http://127.0.0.1:{d['CODER_PORT']}/health")
    assert health == "200"  # the wedge the watchdog exists for: alive, healthy, producing nothing
    # idle engine: found by the 1-token probe; then systemd stops it (SIGKILL after TimeoutStopSec at worst)
    detection = d["WATCHDOG_PROBE_IDLE_S"] + d["WATCHDOG_PROBE_TIMEOUT_S"] + 2 * d["WATCHDOG_INTERVAL_S"]
    wait_for(lambda: invocation(HOST) != before, detection + d["SERVICE_STOP_TIMEOUT_S"],
             "the watchdog to restart the coder")
    detected = time.monotonic() - t0
    wait_for(lambda: chat_ok(sp), d["HEALTH_READY_TIMEOUT_S"], "the coder to serve again",
             interval=2.0)
    serving = time.monotonic() - t0
    record("SIGSTOP of the coder's engine core until the watchdog restarted it", detected)
    record("SIGSTOP of the coder's engine core until it serves again", serving)
    journal = sim_exec(HOST, "journalctl -u sparkctl-watchdog.service --no-pager -o cat | tail -n 20")
    assert "vllm-coder.service: WEDGED" in journal, journal
    wait_for(lambda: watchdog_restarts(sp, "vllm-coder.service") == restarts + 1,
             d["WATCHDOG_INTERVAL_S"] + 30, "sparkctl_watchdog_restarts_total to count it")
    state = json.loads(sim_exec(HOST, f"cat {d['STATE_DIR']}/watchdog/state.json"))
    assert state["coder"]["restarts_total"] >= 1 and not state["coder"]["gave_up"]
