"""What the monitoring deploy (tasks/monitoring.py) writes to a box: node exporter's arguments, the box-facts
timer, the watchdog's unit and configuration (a tensor-parallel pair's part too: box/watchdog_pair.py), and the
proxy's scrape paths with their token.

Pure functions of the typed settings (`cfg`, sparkctl.config.schema.GroupData: every value already checked);
rendering uses templates/ exactly as the tests do.
"""

from __future__ import annotations

import json
import shlex

from sparkctl.box import contract
from sparkctl.config import box_paths
from sparkctl.config.catalog import CODER
from sparkctl.config.schema import GroupData
from sparkctl.render.link import native_pair, peer_facts
from sparkctl.render.units import gate_kind, render_template, rollout_env, rollout_values

BOX_PYTHON = "/usr/bin/python3"  # the box scripts are stdlib-only: the system python, not vLLM's venv
BOX_SCRIPTS = ("textfile.py", "gpu_textfile.py", "box_textfile.py", "watchdog.py", "watchdog_pair.py")
FACTS_UNIT, FACTS_TIMER = "sparkctl-box-facts.service", "sparkctl-box-facts.timer"
WATCHDOG_UNIT = "sparkctl-watchdog.service"


def bin_dir(cfg: GroupData) -> str:
    return box_paths.bin_dir(cfg.SPARKCTL_HOME)


def watchdog_config_path(cfg: GroupData) -> str:
    return f"{cfg.ENV_DIR}/watchdog.json"


def api_services(services) -> list:
    """The services with an HTTP API on this box (a tensor-parallel worker's headless engine has none)."""
    return [s for s in services if not s.headless]


def scrape_targets(cfg: GroupData, services) -> list[dict]:
    """One scrape path per vLLM service (its served name) plus the node's (apart: check/rules.py scrape_node_path)."""
    targets = [{"path": s.served_name, "port": s.port, "service": s.name} for s in api_services(services)]
    return targets + [{"path": cfg.SCRAPE_NODE_PATH, "port": cfg.NODE_EXPORTER_PORT, "service": "node"}]


def prometheus_job(name: str, groups: list[dict], cfg: GroupData, ca_bundle: bool) -> dict:
    """A scrape job of the hand-off (the boxes', the routers'): HTTPS with the scrape token, and the generated CA
    when there is one (an operator's certificate uses the system's trust)."""
    job = {"job_name": name, "scheme": "https", "scrape_interval": f"{cfg.PROMETHEUS_SCRAPE_INTERVAL_S}s",
           "scrape_timeout": f"{cfg.PROMETHEUS_SCRAPE_TIMEOUT_S}s",
           "authorization": {"type": "Bearer", "credentials_file": cfg.PROMETHEUS_TOKEN_FILE},
           "static_configs": groups}
    if ca_bundle:
        job["tls_config"] = {"ca_file": cfg.PROMETHEUS_CA_FILE}
    return job


def node_exporter_defaults(cfg: GroupData) -> str:
    return render_template("node-exporter.default.j2", d=cfg)


def facts_service(cfg: GroupData, cert_path: str) -> str:
    return render_template("sparkctl-box-facts.service.j2", d=cfg, python=BOX_PYTHON, bin_dir=bin_dir(cfg),
                           cert_path=cert_path, rollout_dir=contract.rollout_dir(cfg.STATE_DIR),
                           limits=shlex.join(contract.facts_argv({a.setting: getattr(cfg, a.setting)
                                                                  for a in contract.FACTS_ARGS})))


def facts_timer(cfg: GroupData) -> str:
    return render_template("sparkctl-box-facts.timer.j2", d=cfg)


def watchdog_service(cfg: GroupData) -> str:
    return render_template("sparkctl-watchdog.service.j2", d=cfg, python=BOX_PYTHON, bin_dir=bin_dir(cfg),
                           config_path=watchdog_config_path(cfg))


def rollout_command(cfg: GroupData) -> list[str]:
    """argv prefix of the box's rollout.py with the environment telling it where this deploy keeps things (the
    deploy's own prefix, render.units.rollout_env)."""
    return ["/usr/bin/env", *shlex.split(rollout_env(cfg)), BOX_PYTHON, box_paths.rollout_script(cfg.SPARKCTL_HOME)]


def rollout_limits(cfg: GroupData) -> list[str]:
    """Every option `rollout.py restart` takes from a setting (the box's contract), with this host's values: the
    same the deploy's own transaction gets."""
    return contract.setting_argv("restart", rollout_values(cfg))


def watchdog_config(cfg: GroupData, services, role=None, peer_address: str = "") -> str:
    """The watchdog's whole configuration (settings, not defaults in the script); the schema checked every value,
    the command templates' placeholders included ({peer} in a tensor-parallel pair's restart: check/rules.py).
    role, peer_address: this box's part in the topology and the other box's link address (tensor-parallel: the pair
    is watched as one unit)."""
    doc = {
        "interval_s": cfg.WATCHDOG_INTERVAL_S, "stall_s": cfg.WATCHDOG_STALL_S,
        "probe_idle_s": cfg.WATCHDOG_PROBE_IDLE_S, "probe_timeout_s": cfg.WATCHDOG_PROBE_TIMEOUT_S,
        "http_timeout_s": cfg.WATCHDOG_HTTP_TIMEOUT_S, "max_restarts": cfg.WATCHDOG_MAX_RESTARTS,
        "window_s": cfg.WATCHDOG_WINDOW_S, "restart_command": cfg.WATCHDOG_RESTART_COMMAND,
        "stop_command": cfg.WATCHDOG_STOP_COMMAND, "rollout_active_command": cfg.WATCHDOG_ROLLOUT_ACTIVE_COMMAND,
        "rollout_command": rollout_command(cfg), "rollout_limits": rollout_limits(cfg),
        "state_file": contract.watchdog_state(cfg.STATE_DIR),
        "textfile": f"{cfg.TEXTFILE_DIR}/sparkctl_watchdog.prom",
        "services": [{"name": s.name, "unit": s.unit, "url": f"http://{cfg.LISTEN_ADDRESS}:{s.port}",
                      "port": s.port, "served": s.served_name, "kind": gate_kind(s)}
                     for s in api_services(services)],
    }
    if role is not None and native_pair(cfg, role):
        watch_pair(cfg, doc, services, role.name, peer_address)
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def watch_pair(cfg: GroupData, doc: dict, services, role: str, peer_address: str) -> None:
    """Tensor-parallel, native backend (with Ray the worker runs no vLLM service: the head's restart recreates its
    actors): the head's coder is judged with its worker and restarted with it ({peer}); the worker's watchdog
    follows the head's pair restarts."""
    peer = peer_facts(cfg, peer_address, "restart")
    status, call = peer["peer_status_cmd"], cfg.TP_PEER_CALL_TIMEOUT_S
    if role == "head":
        coder = next(s for s in services if s.role == CODER and not s.headless)
        entry = next(e for e in doc["services"] if e["name"] == coder.name)
        entry["pair"] = {"peer_status_command": status, "call_timeout_s": call,
                         "env_file": f"{cfg.ENV_DIR}/{coder.env_file}"}
        entry["peer_args"] = contract.options("restart", **peer)
        return
    coder = next(s for s in services if s.role == CODER)
    restart = contract.argv("restart", rollout_values(cfg), service=coder.name, port=coder.port,
                            served=coder.served_name, kind="none", reason="pair-restart", wait=True, **peer)
    doc["follow"] = {"service": coder.name, "unit": coder.unit, "peer_status_command": status,
                     "call_timeout_s": call, "restart_command": rollout_command(cfg) + restart}
