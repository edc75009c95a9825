"""The Grafana dashboard of the hand-off (the boxes' monitoring): vLLM's own panels (overview, KV cache, speculative decoding,
on the metric names of vLLM's dashboards in examples/observability/dashboards/grafana/) plus what GB10 needs:
unified memory (MemAvailable, page cache, PSI), per-process GPU memory, GPU facts, the CX7 fabric counters,
the watchdog. Every metric it names is checked against real scrapes in tests/test_monitoring_handoff.py.
"""

from __future__ import annotations

from sparkctl.config.schema import GroupData

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


def panels_spec(cfg: GroupData) -> list[tuple]:
    """(row title, [(panel title, unit, [(expr, legend)])]) in the order shown. $V / $N: the vLLM / node selector."""
    return [_vllm_overview(), _kv_cache(), _speculative(), _unified_memory(), _box_row(cfg)]


def expressions(cfg: GroupData) -> list[str]:
    """Every PromQL expression of the dashboard, selectors filled in (what the tests parse)."""
    job = cfg.PROMETHEUS_JOB_NAME
    return [_q(expr, job) for _row, panels in panels_spec(cfg) for _t, _u, targets in panels for expr, _l in targets]


def dashboard(cfg: GroupData) -> dict:
    job = cfg.PROMETHEUS_JOB_NAME
    ds = {"type": "prometheus", "uid": "${datasource}"}
    panels, y, pid = [], 0, 1
    for row, specs in panels_spec(cfg):
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
