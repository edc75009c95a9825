"""The router's metrics the dashboard and the alert rules name, from the real router now (not only from the recording
in tests/fixtures/prometheus/): tests/gateway/record_router_metrics.py's scenario against the vllm-router of
ROUTER_VERSION, on loopback (stand-in vLLMs), and what the rules rely on: every box reads unhealthy once both died."""

from __future__ import annotations

import shutil

import pytest
from prometheus_client.parser import text_string_to_metric_families

from sparkctl.check.load import host_config
from sparkctl.render import dashboard, prometheus_rules
from tests.conftest import typed
from tests.gateway import harness as h
from tests.gateway.record_router_metrics import exercise
from tests.render.test_monitoring_handoff import ENDPOINTS, metric_names

pytestmark = pytest.mark.skipif(not shutil.which("nginx"), reason="nginx not installed (apt-get install nginx-light)")


def test_the_live_router_exports_every_router_metric_the_dashboard_and_rules_name(gx10_data, tmp_path):
    exe, why = h.router_venv(gx10_data["ROUTER_VERSION"])
    if exe is None:
        pytest.skip(why)
    text, _bridge = exercise(tmp_path, exe)
    samples = [s for fam in text_string_to_metric_families(text) for s in fam.samples]
    rules = prometheus_rules.rules(ENDPOINTS, host_config(gx10_data))["groups"][0]["rules"]
    exprs = dashboard.expressions(typed(gx10_data), routers=True) + [r["expr"] for r in rules]
    named = {n for e in exprs for n in metric_names(e) if n.startswith("vllm_router_")}
    assert len(named) >= 8
    assert named <= {s.name for s in samples}, named - {s.name for s in samples}
    health = {s.labels["worker"].split("/")[-2]: s.value for s in samples if s.name == "vllm_router_worker_health"}
    assert health == {box: 0.0 for box in h.BOXES}  # SparkFrontDoorDown's condition, as the router reports it
