"""The Grafana dashboard of the hand-off (the boxes' monitoring): vLLM's own panels (overview, KV cache, speculative decoding,
on the metric names of vLLM's dashboards in examples/observability/dashboards/grafana/) plus what GB10 needs:
unified memory (MemAvailable, page cache, PSI), per-process GPU memory, GPU facts, the CX7 fabric counters,
the watchdog; and, when the hand-off has a gateway, the front door (vLLM's router). Every metric it names is checked
against real scrapes in tests/render/test_monitoring_handoff.py and tests/render/test_router_dashboard.py.
"""

from __future__ import annotations

from sparkctl.config.schema import GroupData
from sparkctl.render.router import scrape_job_name

RATE = "[$__rate_interval]"
SEL = 'job="{job}", box=~"$box"'
VSEL = 'job="{job}", box=~"$box", model_name=~"$model_name"'


def _q(expr: str, job: str) -> str:
    return expr.replace("$V", "{" + VSEL.format(job=job) + "}").replace("$N", "{" + SEL.format(job=job) + "}")


def _quantile(name: str, pct: float) -> tuple[str, str]:
    return (f"histogram_quantile({pct}, sum by (le, box, model_name) (rate({name}_bucket$V{RATE})))",
            f"p{int(pct * 100)} {{{{box}}}}/{{{{model_name}}}}")


def _vllm_overview() -> tuple:
    q, rate = _quantile, RATE
    return ("vLLM overview", [
        ("Token throughput", "tps", [
            (f"sum by (box, model_name) (rate(vllm:prompt_tokens_total$V{rate}))", "prompt {{box}}/{{model_name}}"),
            (f"sum by (box, model_name) (rate(vllm:generation_tokens_total$V{rate}))",
             "generation {{box}}/{{model_name}}")]),
        ("Requests running / waiting", "short", [
            ("sum by (box, model_name) (vllm:num_requests_running$V)", "running {{box}}/{{model_name}}"),
            ("sum by (box, model_name) (vllm:num_requests_waiting$V)", "waiting {{box}}/{{model_name}}")]),
        ("Time to first token", "s", [q("vllm:time_to_first_token_seconds", 0.5),
                                      q("vllm:time_to_first_token_seconds", 0.99)]),
        ("Inter-token latency", "s", [q("vllm:inter_token_latency_seconds", 0.5),
                                      q("vllm:inter_token_latency_seconds", 0.99)]),
        ("End-to-end request latency", "s", [q("vllm:e2e_request_latency_seconds", 0.5),
                                             q("vllm:e2e_request_latency_seconds", 0.99)]),
        ("Queue time", "s", [q("vllm:request_queue_time_seconds", 0.99)]),
        ("Finished requests by reason", "reqps", [
            (f"sum by (box, model_name, finished_reason) (rate(vllm:request_success_total$V{rate}))",
             "{{finished_reason}} {{box}}/{{model_name}}")]),
    ])


def _kv_cache() -> tuple:
    rate = RATE
    return ("KV cache", [
        ("KV cache usage", "percentunit", [("vllm:kv_cache_usage_perc$V", "{{box}}/{{model_name}}")]),
        ("Prefix cache hit rate", "percentunit", [
            (f"sum by (box, model_name) (rate(vllm:prefix_cache_hits_total$V{rate})) / "
             f"(sum by (box, model_name) (rate(vllm:prefix_cache_queries_total$V{rate})) > 0)",
             "{{box}}/{{model_name}}")]),
        ("Preemptions", "short", [
            (f"sum by (box, model_name) (rate(vllm:num_preemptions_total$V{rate}))", "{{box}}/{{model_name}}")]),
    ])


def _speculative() -> tuple:
    rate = RATE
    return ("Speculative decoding", [
        ("Draft acceptance rate", "percentunit", [
            (f"sum by (box, model_name) (rate(vllm:spec_decode_num_accepted_tokens_total$V{rate})) / "
             f"(sum by (box, model_name) (rate(vllm:spec_decode_num_draft_tokens_total$V{rate})) > 0)",
             "{{box}}/{{model_name}}")]),
        ("Mean acceptance length", "short", [
            (f"1 + sum by (box, model_name) (rate(vllm:spec_decode_num_accepted_tokens_total$V{rate})) / "
             f"(sum by (box, model_name) (rate(vllm:spec_decode_num_drafts_total$V{rate})) > 0)",
             "{{box}}/{{model_name}}")]),
        ("Acceptance by draft position", "percentunit", [
            (f"sum by (box, model_name, position) (rate(vllm:spec_decode_num_accepted_tokens_per_pos_total$V"
             f"{rate})) / on (box, model_name) group_left () (sum by (box, model_name) "
             f"(rate(vllm:spec_decode_num_drafts_total$V{rate})) > 0)",
             "pos {{position}} {{box}}/{{model_name}}")]),
    ])


def _unified_memory() -> tuple:
    rate = RATE
    return ("GB10 unified memory and GPU", [
        ("MemAvailable (the honest free memory on unified memory)", "bytes", [
            ("node_memory_MemAvailable_bytes$N", "available {{box}}"),
            ("node_memory_MemTotal_bytes$N", "total {{box}}")]),
        ("Page cache (reads as 'used' to CUDA's free figure)", "bytes", [
            ("node_memory_Cached_bytes$N + node_memory_Buffers_bytes$N", "cache {{box}}"),
            ("node_memory_MemFree_bytes$N", "free {{box}}")]),
        ("Memory pressure (PSI: share of time stalled)", "percentunit", [
            (f"rate(node_pressure_memory_waiting_seconds_total$N{rate})", "some {{box}}"),
            (f"rate(node_pressure_memory_stalled_seconds_total$N{rate})", "full {{box}}")]),
        ("GPU memory per process", "bytes", [
            ("sum by (box, unit, process) (sparkctl_gpu_process_memory_bytes$N)", "{{box}} {{unit}} {{process}}")]),
        ("GPU utilization", "percentunit", [("sparkctl_gpu_utilization_ratio$N", "{{box}}")]),
        ("GPU temperature / power", "short", [("sparkctl_gpu_temperature_celsius$N", "°C {{box}}"),
                                              ("sparkctl_gpu_power_watts$N", "W {{box}}")]),
        ("SM clock", "hertz", [("sparkctl_gpu_sm_clock_hertz$N", "{{box}}"),
                               ("sparkctl_gpu_sm_clock_max_hertz$N", "max {{box}}")]),
    ])


def _box_row(cfg: GroupData) -> tuple:
    fabric = "|".join(cfg.CX7_INTERFACES) or "none"  # interface names: no regex metacharacters
    sel, rate = SEL.format(job=cfg.PROMETHEUS_JOB_NAME), RATE
    return ("Box: fabric, store, watchdog", [
        ("CX7 fabric throughput (tensor-parallel link)", "Bps", [
            (f'rate(node_network_receive_bytes_total{{{sel}, device=~"{fabric}"}}{rate})', "rx {{box}} {{device}}"),
            (f'rate(node_network_transmit_bytes_total{{{sel}, device=~"{fabric}"}}{rate})', "tx {{box}} {{device}}")]),
        ("CX7 fabric errors and drops", "pps", [
            (f'rate(node_network_receive_errs_total{{{sel}, device=~"{fabric}"}}{rate}) + '
             f'rate(node_network_receive_drop_total{{{sel}, device=~"{fabric}"}}{rate})', "rx {{box}} {{device}}"),
            (f'rate(node_network_transmit_errs_total{{{sel}, device=~"{fabric}"}}{rate})', "tx {{box}} {{device}}")]),
        ("Model store free", "bytes", [("sparkctl_model_store_free_bytes$N", "{{box}}")]),
        ("Watchdog restarts (window) / gave up", "short", [
            ("sparkctl_watchdog_restarts_in_window$N", "restarts {{box}} {{unit}}"),
            ("sparkctl_watchdog_gave_up$N", "gave up {{box}} {{unit}}")]),
    ])


# vllm-router 0.1.17's metrics, as its real binary exports them (recorded from it against stand-in vLLMs by
# tests/gateway/record_router_metrics.py into tests/fixtures/prometheus/vllm-router-0.1.17-metrics.txt; meanings from
# the binary's HELP texts and what the recordings showed):
#   vllm_router_requests_total{route}                    requests answered: a failed one is not in it (recorded: 13
#                                                        answered, 3 failed, those in request_errors_total)
#   vllm_router_request_errors_total{route, error_type}  failed requests (e.g. no_available_workers)
#   vllm_router_processed_requests_total{worker}         attempts sent to each worker (box), retries included
#   vllm_router_cb_outcomes_total{worker, outcome}       each attempt's success / failure, per box
#   vllm_router_retries_total{route}, vllm_router_retries_exhausted_total{route}
#   vllm_router_generate_duration_seconds (histogram, no labels)  chat/completions answered; a stream's ends at its
#                                                        first byte (recorded: 6 streams of >= 0.1 s, sum 0.08 s)
#   vllm_router_worker_health{worker}                    1 healthy, 0 not (the router's health checks)
#   vllm_router_cb_state{worker}                         0 closed, 1 open, 2 half-open
#   vllm_router_running_requests{worker}                 requests in flight per box (cache_aware, the shipped
#                                                        policy, exports it; round_robin did not)
# The scrape job (router.scrape_job) adds service=<served>, router=primary|standby, gateway=<host>. A worker is
# http://127.0.0.1:<bridge>/<box>/<served> (router.worker_url): its first path segment is the box.
WORKER_BOX = 'label_replace({}, "box", "$1", "worker", "https?://[^/]+/([^/]+)/.*")'


def _front_door(cfg: GroupData) -> tuple:
    """The routers' row: one served model's router pair per `service`, filtered like the vLLM rows ($model_name is
    vLLM's served name, the routers' `service`; $box matches the worker URL's box segment)."""
    rsel = f'job="{scrape_job_name(cfg)}", service=~"$model_name"'
    wsel = f'{rsel}, worker=~"https?://[^/]+/($box)/.*"'
    rate = RATE
    per_box = lambda expr: "sum by (service, box) (" + WORKER_BOX.format(expr) + ")"  # noqa: E731
    latency = lambda pct: (  # noqa: E731
        f"histogram_quantile({pct}, sum by (le, service) (rate(vllm_router_generate_duration_seconds_bucket{{{rsel}}}"
        f"{rate})))", f"p{int(pct * 100)} {{{{service}}}}")
    return ("Front door: vLLM's router", [
        ("Requests answered per served model", "reqps", [
            (f"sum by (service, router) (rate(vllm_router_requests_total{{{rsel}}}{rate}))",
             "{{service}} ({{router}})")]),
        ("Attempts per box", "reqps", [
            (per_box(f"rate(vllm_router_processed_requests_total{{{wsel}}}{rate})"), "{{service}} -> {{box}}")]),
        ("Errors, retries, failed attempts", "reqps", [
            (f"sum by (service, error_type) (rate(vllm_router_request_errors_total{{{rsel}}}{rate}))",
             "error {{error_type}} {{service}}"),
            (f"sum by (service) (rate(vllm_router_retries_total{{{rsel}}}{rate}))", "retry {{service}}"),
            (f"sum by (service) (rate(vllm_router_retries_exhausted_total{{{rsel}}}{rate}))",
             "retries exhausted {{service}}"),
            (per_box(f'rate(vllm_router_cb_outcomes_total{{{wsel}, outcome="failure"}}{rate})'),
             "failed attempt {{service}} -> {{box}}")]),
        ("Router latency (a stream's: to its first byte)", "s", [latency(0.5), latency(0.95)]),
        ("Boxes healthy behind each router", "short", [
            (f"sum by (service, router) (vllm_router_worker_health{{{wsel}}})", "healthy {{service}} ({{router}})"),
            (f"count by (service, router) (vllm_router_worker_health{{{wsel}}})", "boxes {{service}} ({{router}})")]),
        ("Circuit breaker per box (0 closed, 1 open, 2 half-open)", "short", [
            (WORKER_BOX.format(f"vllm_router_cb_state{{{wsel}}}"), "{{service}} -> {{box}} ({{router}})")]),
        ("Requests in flight per box", "short", [
            (per_box(f"vllm_router_running_requests{{{wsel}}}"), "{{service}} -> {{box}}")]),
    ])


def panels_spec(cfg: GroupData, routers: bool = False) -> list[tuple]:
    """(row title, [(panel title, unit, [(expr, legend)])]) in the order shown. $V / $N: the vLLM / node selector.
    routers: the hand-off has a gateway (router.json), so the front door's row too."""
    rows = [_vllm_overview(), _kv_cache(), _speculative(), _unified_memory(), _box_row(cfg)]
    return rows + [_front_door(cfg)] if routers else rows


def expressions(cfg: GroupData, routers: bool = False) -> list[str]:
    """Every PromQL expression of the dashboard, selectors filled in (what the tests parse)."""
    job = cfg.PROMETHEUS_JOB_NAME
    return [_q(expr, job) for _row, panels in panels_spec(cfg, routers) for _t, _u, targets in panels
            for expr, _l in targets]


def dashboard(cfg: GroupData, routers: bool = False) -> dict:
    job = cfg.PROMETHEUS_JOB_NAME
    ds = {"type": "prometheus", "uid": "${datasource}"}
    panels, y, pid = [], 0, 1
    for row, specs in panels_spec(cfg, routers):
        panels.append({"type": "row", "title": row, "collapsed": False, "id": pid,
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}, "panels": []})
        pid, y = pid + 1, y + 1
        for i, (title, unit, targets) in enumerate(specs):
            panels.append({
                "type": "timeseries", "title": title, "id": pid, "datasource": ds,
                "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": y + 8 * (i // 2)},
                "fieldConfig": {"defaults": {"unit": unit, "custom": {"fillOpacity": 10, "showPoints": "never"}},
                                "overrides": []},
                "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                            "tooltip": {"mode": "multi", "sort": "desc"}},
                "targets": [{"expr": _q(expr, job), "legendFormat": legend, "refId": chr(ord("A") + k),
                             "datasource": ds} for k, (expr, legend) in enumerate(targets)],
            })
            pid += 1
        y += 8 * ((len(specs) + 1) // 2)
    var = lambda name, query: {"name": name, "type": "query", "datasource": ds, "query": query,  # noqa: E731
                               "refresh": 2, "includeAll": True, "multi": True, "current": {}, "allValue": ".*"}
    return {
        "title": "sparkctl: GX10 boxes (vLLM + GB10)", "uid": "sparkctl-gx10", "schemaVersion": 39, "version": 1,
        "editable": True, "graphTooltip": 1, "tags": ["vllm", "sparkctl", "gb10"], "time": {"from": "now-6h",
                                                                                             "to": "now"},
        "templating": {"list": [
            {"name": "datasource", "type": "datasource", "query": "prometheus", "current": {}},
            var("box", f'label_values(up{{job="{job}"}}, box)'),
            var("model_name", f'label_values(vllm:num_requests_running{{job="{job}", box=~"$box"}}, model_name)'),
        ]},
        "panels": panels,
    }
