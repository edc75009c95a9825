"""The front door's row of the hand-off dashboard (sparkctl/render/dashboard.py): it names only what the real
vllm-router exports (tests/fixtures/prometheus/vllm-router-<ROUTER_VERSION>-metrics.txt, recorded from the router by
tests/gateway/record_router_metrics.py), it shows up once a gateway recorded router.json (the gateway step rewrites
the dashboard after the boxes' step wrote it), and its per-box queries give the box of each worker, evaluated by the
real promtool over the recorded series."""

from __future__ import annotations

import json

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from sparkctl.check.load import host_config
from sparkctl.render import dashboard, prometheus_rules, router
from tests.conftest import typed
from tests.render.test_monitoring_handoff import (ENDPOINTS, grafana_to_promql, metric_names, needs_promtool,
                                                  promtool, router_metrics_fixture, scrape_names)

ROW = "Front door: vLLM's router"


def router_exprs(cfg) -> list[str]:
    return [e for e in dashboard.expressions(cfg, routers=True) if e not in dashboard.expressions(cfg)]


def test_every_router_panel_names_a_metric_the_real_router_exports(gx10_data):
    cfg = typed(gx10_data)
    exported = scrape_names(router_metrics_fixture(cfg.ROUTER_VERSION).read_text())
    named = {n for e in router_exprs(cfg) for n in metric_names(e)}
    assert named and named <= exported, named - exported
    assert {"vllm_router_requests_total", "vllm_router_processed_requests_total", "vllm_router_worker_health",
            "vllm_router_cb_state", "vllm_router_request_errors_total", "vllm_router_retries_total",
            "vllm_router_generate_duration_seconds_bucket"} <= named
    assert all(f'job="{router.scrape_job_name(cfg)}"' in e for e in router_exprs(cfg))  # the routers' own job
    wrong = router_exprs(cfg)[0].replace("vllm_router_requests_total", "vllm_router_http_requests_total")
    assert not metric_names(wrong) <= exported  # the check is real: a name the router lacks is caught


def panel_titles(board: dict) -> list[str]:
    return [p["title"] for p in board["panels"]]


def test_the_row_appears_once_a_gateway_recorded_its_part(gx10_data, tmp_path):
    config = host_config(gx10_data)
    paths = prometheus_rules.write_handoff(tmp_path, ENDPOINTS, config)  # the boxes' step: no gateway yet
    assert ROW not in panel_titles(json.loads(paths[2].read_text()))
    assert "Attempts per box" not in panel_titles(json.loads(paths[2].read_text()))

    class Svc:
        served_name, role, headless = "coder", "coder", False
    pools = router.pools(config.cfg, [("spark-1", "10.0.0.5", 443, [Svc()])])
    (tmp_path / router.ROUTER_HANDOFF).write_text(json.dumps(router.handoff(config.cfg, "gw-1", "10.0.0.9", pools,
                                                                            None)))
    prometheus_rules.write_scrape(tmp_path, ENDPOINTS, config.cfg)  # the gateway step, after the boxes' one
    board = json.loads(paths[2].read_text())
    titles = panel_titles(board)
    assert ROW in titles and titles.index(ROW) > titles.index("Box: fabric, store, watchdog")
    assert {"Attempts per box", "Boxes healthy behind each router"} <= set(titles)
    assert [j["job_name"] for j in yaml.safe_load(paths[0].read_text())] == ["sparkctl", "sparkctl-router"]
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    again = prometheus_rules.write_handoff(tmp_path, ENDPOINTS, config)  # the next boxes' step keeps the row
    assert ROW in panel_titles(json.loads(again[2].read_text()))


def recorded_series(cfg) -> list[dict]:
    """The recording's worker series as the routers' scrape job labels them (primary router of `coder`)."""
    text = router_metrics_fixture(cfg.ROUTER_VERSION).read_text()
    extra = {"job": router.scrape_job_name(cfg), "gateway": "gw-1", "service": "coder", "router": "primary",
             "instance": "10.0.0.9:443"}
    out = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if "worker" in s.labels:
                labels = ", ".join(f'{k}="{v}"' for k, v in {**s.labels, **extra}.items())
                out.append({"series": f"{s.name}{{{labels}}}", "values": f"{s.value:g}x10"})
    return out


def panel_expr(cfg, title: str, box: str = ".*") -> str:
    spec = dict((t, targets) for _row, panels in dashboard.panels_spec(cfg, routers=True) for t, _u, targets in panels)
    expr = spec[title][0][0]
    return grafana_to_promql(expr.replace("$box", box))


def recorded_value(cfg, name: str, box: str) -> float:
    text = router_metrics_fixture(cfg.ROUTER_VERSION).read_text()
    return next(s.value for fam in text_string_to_metric_families(text) for s in fam.samples
                if s.name == name and f"/{box}/" in s.labels.get("worker", ""))


@needs_promtool
def test_the_per_box_queries_name_each_box_and_filter_by_it(gx10_data, tmp_path):
    cfg = typed(gx10_data)
    base = {"job": router.scrape_job_name(cfg), "service": "coder", "router": "primary"}
    cases = [
        (panel_expr(cfg, "Circuit breaker per box (0 closed, 1 open, 2 half-open)", "box-a"),
         [{"labels": 'vllm_router_cb_state{' + ", ".join(f'{k}="{v}"' for k, v in {
             **base, "gateway": "gw-1", "instance": "10.0.0.9:443", "box": "box-a",
             "worker": f"http://127.0.0.1:{cfg.ROUTER_BRIDGE_PORT}/box-a/coder"}.items()) + "}",
           "value": recorded_value(cfg, "vllm_router_cb_state", "box-a")}]),
        (panel_expr(cfg, "Boxes healthy behind each router"),
         [{"labels": '{service="coder", router="primary"}', "value": 0}]),
    ]
    tests = [{"interval": "1m", "input_series": recorded_series(cfg), "promql_expr_test": [
        {"expr": expr, "eval_time": "5m", "exp_samples": samples} for expr, samples in cases]}]
    (tmp_path / "empty.yml").write_text("groups: []\n")
    (tmp_path / "t.yml").write_text(yaml.safe_dump({"rule_files": ["empty.yml"], "tests": tests}, width=1000))
    r = promtool("test", "rules", "t.yml", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    # the per-box traffic: both boxes, by name
    per_box = panel_expr(cfg, "Attempts per box").replace("rate(", "increase(")
    tests[0]["promql_expr_test"] = [{"expr": per_box, "eval_time": "5m", "exp_samples": [
        {"labels": '{service="coder", box="box-a"}', "value": 0}, {"labels": '{service="coder", box="box-b"}',
                                                                   "value": 0}]}]
    (tmp_path / "t.yml").write_text(yaml.safe_dump({"rule_files": ["empty.yml"], "tests": tests}, width=1000))
    r = promtool("test", "rules", "t.yml", cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("title", ["Attempts per box", "Circuit breaker per box (0 closed, 1 open, 2 half-open)"])
def test_per_box_panels_legend_the_box(gx10_data, title):
    spec = {t: targets for _r, panels in dashboard.panels_spec(typed(gx10_data), routers=True) for t, _u, targets
            in panels}
    assert all("{{box}}" in legend for _e, legend in spec[title])
