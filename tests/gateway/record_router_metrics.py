"""Record vllm-router's /metrics for tests/fixtures/prometheus/ (the names the dashboard's and the alert rules' router
queries are checked against): the real router from PyPI (ROUTER_VERSION, tests/gateway/harness.py's cached venv)
in front of two stand-in vLLMs on loopback, through three phases so that the series that appear only on events do
appear: traffic with both boxes up (plain and streamed chat), one box dead (retries, an open circuit, a failed
request), both dead (no_available_workers errors, every worker unhealthy). The primary router's /metrics after the
last phase is written, the bridge's random port replaced by ROUTER_BRIDGE_PORT's default.

    PYTHONPATH=. .venv/bin/python tests/gateway/record_router_metrics.py   (needs nginx; about 30 s)
"""

from __future__ import annotations

import re
import tempfile
import time
import uuid
from pathlib import Path

import httpx

from sparkctl import REPO_ROOT
from sparkctl.config import groupdata
from tests.conftest import API_TOKEN
from tests.gateway import harness as h

FAULT_S = 8  # traffic while one box is dead: longer than the fast health window (tests/gateway/harness.py), s
PACE_S = 0.1  # one request every this often during the fault, s


def fixture_path(version: str) -> Path:
    return REPO_ROOT / "tests" / "fixtures" / "prometheus" / f"vllm-router-{version}-metrics.txt"


def record() -> Path:
    data = groupdata.load(["all"])
    exe, why = h.router_venv(data["ROUTER_VERSION"])
    if exe is None:
        raise SystemExit(why)
    with tempfile.TemporaryDirectory() as tmp, h.gateway(Path(tmp), exe) as gw:
        with gw.client(API_TOKEN) as c:
            for _ in range(6):
                h.chat(c, uuid.uuid4().hex)
                h.chat(c, uuid.uuid4().hex, stream=True)
            gw.boxes["box-a"].stop()
            deadline = time.monotonic() + FAULT_S
            while time.monotonic() < deadline:
                h.chat(c, uuid.uuid4().hex)
                time.sleep(PACE_S)
            gw.boxes["box-b"].stop()
            time.sleep(FAULT_S)
            for _ in range(3):
                h.chat(c, uuid.uuid4().hex)
        text = httpx.get(f"http://127.0.0.1:{gw.pool.metrics_port}/metrics", timeout=10).text
        text = re.sub(rf"127\.0\.0\.1:{gw.cfg.ROUTER_BRIDGE_PORT}/", f"127.0.0.1:{data['ROUTER_BRIDGE_PORT']}/", text)
    path = fixture_path(data["ROUTER_VERSION"])
    path.write_text(text)
    return path


if __name__ == "__main__":
    print(record())
