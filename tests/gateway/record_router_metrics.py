"""Record vllm-router's /metrics for tests/fixtures/prometheus/ (the names the dashboard's and the alert rules' router
queries are checked against): the real router from PyPI (ROUTER_VERSION, tests/gateway/harness.py's cached venv)
in front of two stand-in vLLMs on loopback, with the shipped settings (ROUTER_POLICY: cache_aware, the only one of
the policies tried that exports vllm_router_running_requests), driven so that the series that appear only on events
do appear, whichever box the policy picks: traffic with both boxes up (plain and streamed chat); both boxes dead
before the router's health checks notice (every attempt fails: failed attempts, retries, retries exhausted); both
marked unhealthy (no_available_workers errors). The primary router's /metrics after the last phase is written, the
bridge's random port replaced by ROUTER_BRIDGE_PORT's default.

    PYTHONPATH=. .venv/bin/python tests/gateway/record_router_metrics.py   (needs nginx; about 20 s)
"""

from __future__ import annotations

import re
import tempfile
import uuid
from pathlib import Path

import httpx

from sparkctl import REPO_ROOT
from sparkctl.config import groupdata
from tests.conftest import API_TOKEN
from tests.gateway import harness as h

FAILING_REQUESTS = 2  # requests right after both boxes died, before the health checks mark them out


def fixture_path(version: str) -> Path:
    return REPO_ROOT / "tests" / "fixtures" / "prometheus" / f"vllm-router-{version}-metrics.txt"


def healthy(gw: h.Gateway) -> dict[str, bool]:
    """box -> healthy, as the primary router says (its admin API on loopback)."""
    doc = httpx.get(f"http://127.0.0.1:{gw.pool.port}/workers", timeout=5).json()
    return {w["url"].rstrip("/").split("/")[-2]: w["is_healthy"] for w in doc["workers"]}


def exercise(tmp: Path, exe: Path) -> tuple[str, int]:
    """The primary router's /metrics after the phases above, and the bridge port its worker URLs carry."""
    with h.gateway(tmp, exe) as gw, gw.client(API_TOKEN) as c:
        for _ in range(6):
            h.chat(c, uuid.uuid4().hex)
            h.chat(c, uuid.uuid4().hex, stream=True)
        for box in gw.boxes.values():
            box.stop()
        for _ in range(FAILING_REQUESTS):
            assert h.chat(c, uuid.uuid4().hex).status_code >= 500
        h.wait_for("both boxes out of rotation", lambda: not any(healthy(gw).values()))
        assert h.chat(c, uuid.uuid4().hex).status_code == 503
        text = httpx.get(f"http://127.0.0.1:{gw.pool.metrics_port}/metrics", timeout=10).text
        return text, gw.cfg.ROUTER_BRIDGE_PORT


def record() -> Path:
    data = groupdata.load(["all"])
    exe, why = h.router_venv(data["ROUTER_VERSION"])
    if exe is None:
        raise SystemExit(why)
    with tempfile.TemporaryDirectory() as tmp:
        text, bridge = exercise(Path(tmp), exe)
    path = fixture_path(data["ROUTER_VERSION"])
    path.write_text(re.sub(rf"127\.0\.0\.1:{bridge}/", f"127.0.0.1:{data['ROUTER_BRIDGE_PORT']}/", text))
    return path


if __name__ == "__main__":
    print(record())
