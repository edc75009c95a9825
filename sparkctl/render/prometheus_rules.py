"""The cluster's Prometheus side of the hand-off (the boxes' monitoring): a scrape job for every box and the alert rules.

prometheus-scrape.yml  one `scrape_configs` entry (paste it under scrape_configs:): per box one target group per
                       served model (/<served>/metrics) and one for the node (/node/metrics), labelled box= and
                       service=; the scrape token from `authorization.credentials_file`, the CA from tls_config.
prometheus-rules.yml   a rule file (add it to rule_files:): the alerts docs/operating.md "Monitoring" explains.
Both come from endpoints.json (sparkctl/render/gateway.py) and the settings (a HostConfig: the typed settings and
its catalog); both pass `promtool check`.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from sparkctl.config.quantities import DAY_S, GIB
from sparkctl.config.schema import GroupData
from sparkctl.config.settings import HostConfig
from sparkctl.render import dashboard, router
from sparkctl.render.monitoring import prometheus_job
from sparkctl.render.gateway import HANDOFF_MODE, write_atomic


def boxes(endpoints: dict) -> dict[str, dict]:
    """box -> {"address", "port", "served": {served name: model key}} from the hand-off's endpoints."""
    out: dict[str, dict] = {}
    for served, items in endpoints["models"].items():
        for e in items:
            box = out.setdefault(e["box"], {"address": e["address"], "port": e["port"], "served": {}})
            box["served"][served] = e["model"]
    return dict(sorted(out.items()))


def scrape_job(endpoints: dict, cfg: GroupData) -> dict:
    groups = []
    for box, info in boxes(endpoints).items():
        target = f"{info['address']}:{info['port']}"
        for path in [*sorted(info["served"]), cfg.SCRAPE_NODE_PATH]:
            groups.append({"targets": [target], "labels": {"__metrics_path__": f"/{path}/metrics", "box": box,
                                                           "service": path}})
    return prometheus_job(cfg.PROMETHEUS_JOB_NAME, groups, cfg, bool(endpoints.get("ca_bundle")))


def _alert(name: str, expr: str, for_s: int, severity: str, summary: str, action: str) -> dict:
    rule = {"alert": name, "expr": expr}
    if for_s:
        rule["for"] = f"{for_s}s"
    rule["labels"] = {"severity": severity}
    rule["annotations"] = {"summary": summary, "action": action}
    return rule


def spec_acceptance_alerts(endpoints: dict, config: HostConfig) -> list[dict]:
    """One per (box, served model) with speculative decoding: mean acceptance length far below the catalog's."""
    cat, cfg = config.catalog, config.cfg
    job, window = cfg.PROMETHEUS_JOB_NAME, f"{cfg.ALERT_SPEC_ACCEPTANCE_WINDOW_S}s"
    rules = []
    for box, info in boxes(endpoints).items():
        for served, key in sorted(info["served"].items()):
            spec = cat.get(key)
            if spec is None or not spec.speculative or spec.memory.tokens_per_step <= 1.0:
                continue
            floor = round(cfg.ALERT_SPEC_ACCEPTANCE_FRACTION * spec.memory.tokens_per_step, 3)
            sel = f'{{job="{job}", box="{box}", model_name="{served}"}}'
            expr = (f"1 + sum(rate(vllm:spec_decode_num_accepted_tokens_total{sel}[{window}]))"
                    f" / sum(rate(vllm:spec_decode_num_drafts_total{sel}[{window}])) < {floor}")
            rules.append(_alert(
                "SparkSpecAcceptanceLow", expr, cfg.ALERT_FOR_S, "warning",
                f"{box}/{served} ({key}): mean acceptance length {{{{ $value | printf \"%.2f\" }}}} < {floor} "
                f"(catalog expects {spec.memory.tokens_per_step} tokens per step)",
                "Decode runs far slower than planned: check the draft checkpoint's locked revision "
                "(models.lock.json) and the speculative config in the catalog, then redeploy."))
            rules[-1]["labels"].update({"box": box, "model": key})
    return rules


def in_rollout(j: str) -> str:
    """The served models a rollout or restart is changing now, as `up` labels them: the box facts' in-progress
    series (scraped on the node path, so its own service label is the node's) with service := its served name."""
    return f'label_replace(sparkctl_rollout_in_progress{{{j}}} == 1, "service", "$1", "served", "(.+)")'


def retired(j: str) -> str:
    """The boxes retired on purpose (retire.py): their textfile's sparkctl_box_retired, scraped on the node path."""
    return f"sparkctl_box_retired{{{j}}} == 1"


def rollout_alerts(j: str, cfg: GroupData) -> list[dict]:
    """A planned change is quiet while it runs and loud when it ends badly or runs too long; a retired box is quiet
    until a deploy brings it back (its node metrics still page)."""
    return [
        _alert("SparkServedModelDown",
               f'up{{{j}, service!="{cfg.SCRAPE_NODE_PATH}"}} == 0 unless on(job, box, service) {in_rollout(j)}'
               f" unless on(job, box) {retired(j)}",
               cfg.ALERT_MODEL_DOWN_FOR_S, "critical",
               "{{ $labels.box }}: served model {{ $labels.service }} does not answer its scrape",
               "Run `python -m sparkctl status`; then `journalctl -u vllm-<service>.service` on the box."),
        _alert("SparkRolloutOverdue", f"sparkctl_rollout_deadline_timestamp_seconds{{{j}}} < time()",
               cfg.ALERT_MODEL_DOWN_FOR_S, "critical",
               "{{ $labels.box }}: the rollout or restart of {{ $labels.unit }} (served as {{ $labels.served }}) "
               "is still running past its deadline; SparkServedModelDown is held back for it meanwhile",
               "On the box: `rollout.py status <service>` and `journalctl -u sparkctl-rollout-<service>`; "
               "`python -m sparkctl status`. A transaction a reboot interrupted is resumed by the next deploy."),
        _alert("SparkRolloutFailed", f"sparkctl_rollout_last_ok{{{j}}} == 0", 0, "warning",
               "{{ $labels.box }}: the last rollout of {{ $labels.unit }} ended {{ $labels.result }}",
               "Read the deploy's output and `python -m sparkctl status`; fix the candidate, rerun the deploy."),
    ]


def router_alerts(j: str, cfg: GroupData) -> list[dict]:
    """The front door (vLLM's router on the gateway, its own scrape job; metric names: sparkctl/render/dashboard.py).
    Rendered whatever the inventory: without a gateway there is no router series and they never fire."""
    jr = f'job="{router.scrape_job_name(cfg)}"'
    no_path = (f"(max by (job, gateway, service) (vllm_router_worker_health{{{jr}}}) == 0"
               f" or max by (job, gateway, service) (up{{{jr}}}) == 0)")
    return [
        _alert("SparkFrontDoorDown", f"{no_path} unless on(service) {in_rollout(j)}",
               cfg.ALERT_FRONT_DOOR_DOWN_FOR_S, "critical",
               "{{ $labels.gateway }}: served model {{ $labels.service }} has no healthy box behind its routers "
               "(or no router answers): its URL answers 503",
               "`python -m sparkctl status`: a box down pages on its own (SparkServedModelDown); boxes up but "
               "unhealthy to the router: on the gateway, the bridge (nginx error log: CA, token) and "
               "`journalctl -u sparkctl-router-{{ $labels.service }}`."),
        _alert("SparkRouterDown", f"up{{{jr}}} == 0", cfg.ALERT_MODEL_DOWN_FOR_S, "warning",
               "{{ $labels.gateway }}: the {{ $labels.router }} router of {{ $labels.service }} does not answer its "
               "scrape (the front uses the other one meanwhile)",
               "On the gateway: `systemctl status sparkctl-router-{{ $labels.service }}` (the standby's unit ends "
               "in -standby) and its journal; rerun the deploy to restore it."),
    ]


def rules(endpoints: dict, config: HostConfig) -> dict:
    cfg = config.cfg
    j = f'job="{cfg.PROMETHEUS_JOB_NAME}"'
    alerts = [
        _alert("SparkNodeMetricsDown", f'up{{{j}, service="{cfg.SCRAPE_NODE_PATH}"}} == 0',
               cfg.ALERT_MODEL_DOWN_FOR_S, "critical",
               "{{ $labels.box }}: node metrics do not answer (box, proxy or node exporter down)",
               "Can you ssh to the box? `systemctl status nginx prometheus-node-exporter`."),
        _alert("SparkEngineRestartedByWatchdog", f"increase(sparkctl_watchdog_restarts_total{{{j}}}[1h]) > 0", 0,
               "warning", "{{ $labels.box }}: the watchdog restarted wedged {{ $labels.unit }} in the last hour",
               "The engine stopped producing tokens while /health said 200: read the unit's journal around the "
               "restart; repeated restarts end in SparkWatchdogGaveUp."),
        _alert("SparkWatchdogGaveUp", f"sparkctl_watchdog_gave_up{{{j}}} == 1", 0, "critical",
               "{{ $labels.box }}: {{ $labels.unit }} wedged again after the allowed restarts; left down",
               "A human must look: `journalctl -u sparkctl-watchdog -u {{ $labels.unit }}`; fix, then "
               "`systemctl start {{ $labels.unit }}` (or rerun the deploy)."),
        _alert("SparkKVCacheFull", f"vllm:kv_cache_usage_perc{{{j}}} > {cfg.ALERT_KV_USAGE_RATIO}",
               cfg.ALERT_KV_USAGE_FOR_S, "warning",
               "{{ $labels.box }}/{{ $labels.model_name }}: KV cache {{ $value | humanizePercentage }} full",
               "Requests will queue or be preempted: add capacity (a second box) or raise the KV budget."),
        _alert("SparkRequestsWaiting", f"vllm:num_requests_waiting{{{j}}} > 0", cfg.ALERT_WAITING_FOR_S,
               "warning", "{{ $labels.box }}/{{ $labels.model_name }}: {{ $value }} requests waiting",
               "The box is saturated: let the gateway spread load to another box, or add one."),
        _alert("SparkMemAvailableLow",
               f"node_memory_MemAvailable_bytes{{{j}}} < {int(cfg.ALERT_MEM_AVAILABLE_FLOOR_GIB * GIB)}",
               cfg.ALERT_MEM_AVAILABLE_FOR_S, "critical",
               "{{ $labels.box }}: MemAvailable {{ $value | humanize1024 }}B (unified memory: GPU and CPU share it)",
               "earlyoom will kill vLLM next: look for a runaway process, lower a KV budget."),
        _alert("SparkCertificateExpiring",
               f"sparkctl_tls_cert_expiry_timestamp_seconds{{{j}}} - time() < {cfg.ALERT_CERT_EXPIRY_DAYS * DAY_S}",
               0, "warning",
               "{{ $labels.box }}: the proxy's TLS certificate expires in {{ $value | humanizeDuration }}",
               "Renew it (TLS_CERT_FILE / TLS_KEY_FILE, or delete the generated one in secrets/pki) and redeploy."),
        _alert("SparkModelStoreLow",
               f"sparkctl_model_store_free_bytes{{{j}}} < {int(cfg.DISK_HEADROOM_GIB * GIB)}", cfg.ALERT_FOR_S,
               "warning", "{{ $labels.box }}: {{ $value | humanize1024 }}B free under the model store",
               "Below the download headroom: the next flip's download would be refused. Remove unused snapshots."),
    ]
    return {"groups": [{"name": "sparkctl",
                        "rules": rollout_alerts(j, cfg) + alerts + spec_acceptance_alerts(endpoints, config)
                        + router_alerts(j, cfg)}]}


def scrape_configs(out_dir: Path, endpoints: dict, cfg: GroupData) -> list[dict]:
    """The boxes' job, and the gateway routers' job when a gateway recorded its part (router.json) in out_dir."""
    jobs = [scrape_job(endpoints, cfg)] if "models" in endpoints else []  # (none yet: the gateway came first)
    doc = out_dir / router.ROUTER_HANDOFF
    if doc.exists():
        jobs.append(router.scrape_job(json.loads(doc.read_text()), cfg))
    return jobs


def has_routers(out_dir: Path) -> bool:
    return (out_dir / router.ROUTER_HANDOFF).exists()


def dashboard_text(out_dir: Path, cfg: GroupData) -> str:
    return json.dumps(dashboard.dashboard(cfg, routers=has_routers(out_dir)), indent=1) + "\n"


def write_scrape(out_dir: Path, endpoints: dict, cfg: GroupData) -> Path:
    """The files the gateway's part changes (the gateway step, after it recorded router.json; the boxes' step ran
    before it): prometheus-scrape.yml with the routers' job and the dashboard with their row, each replaced
    atomically. Returns the scrape file's path. (The rules carry the router alerts whatever the inventory.)"""
    path = out_dir / HANDOFF_FILES[0]
    write_atomic(str(path), yaml.safe_dump(scrape_configs(out_dir, endpoints, cfg), sort_keys=False), HANDOFF_MODE)
    write_atomic(str(out_dir / HANDOFF_FILES[2]), dashboard_text(out_dir, cfg), HANDOFF_MODE)
    return path


HANDOFF_FILES = ("prometheus-scrape.yml", "prometheus-rules.yml", "grafana-dashboard.json")


def write_handoff(out_dir: Path, endpoints: dict, config: HostConfig) -> list[Path]:
    """The monitoring part of the gateway hand-off, beside endpoints.json (each file replaced atomically)."""
    texts = [yaml.safe_dump(scrape_configs(out_dir, endpoints, config.cfg), sort_keys=False),
             yaml.safe_dump(rules(endpoints, config), sort_keys=False, width=1000),
             dashboard_text(out_dir, config.cfg)]
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in zip(HANDOFF_FILES, texts):
        path = out_dir / name
        write_atomic(str(path), text, HANDOFF_MODE)
        paths.append(path)
    return paths
