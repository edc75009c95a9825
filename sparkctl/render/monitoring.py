"""What the monitoring deploy (tasks/monitoring.py) writes to a box: node exporter's arguments, the box-facts
timer, the watchdog's unit and configuration (a tensor-parallel pair's part too: box/watchdog_pair.py), and the
proxy's scrape paths with their token.

Pure functions of the validated settings; rendering uses templates/ exactly as the tests do.
"""

from __future__ import annotations

import json

from sparkctl.box import contract
from sparkctl.config import schema_types
from sparkctl.config.catalog import CODER
from sparkctl.errors import SettingError
from sparkctl.render.link import peer_status_command
from sparkctl.render.units import render_template, rollout_env

BOX_PYTHON = "/usr/bin/python3"  # the box scripts are stdlib-only: the system python, not vLLM's venv
BOX_SCRIPTS = ("textfile.py", "gpu_textfile.py", "box_textfile.py", "watchdog.py", "watchdog_pair.py")
FACTS_UNIT, FACTS_TIMER = "sparkctl-box-facts.service", "sparkctl-box-facts.timer"
WATCHDOG_UNIT = "sparkctl-watchdog.service"
WATCHDOG_PLACEHOLDERS = schema_types.WATCHDOG_PLACEHOLDERS  # what box/watchdog.py fills (its PLACEHOLDERS)


def bin_dir(d: dict) -> str:
    return f"{d['SPARKCTL_HOME']}/bin"


def watchdog_config_path(d: dict) -> str:
    return f"{d['ENV_DIR']}/watchdog.json"


def api_services(services) -> list:
    """The services with an HTTP API on this box (a tensor-parallel worker's headless engine has none)."""
    return [s for s in services if not s.headless]


def scrape_targets(d: dict, services) -> list[dict]:
    """One scrape path per vLLM service (its served name) plus the node's; refused when they collide."""
    node = d["SCRAPE_NODE_PATH"]
    targets = [{"path": s.served_name, "port": s.port, "service": s.name} for s in api_services(services)]
    if any(t["path"] == node for t in targets):
        raise SettingError("SCRAPE_NODE_PATH", node, "a path segment no served model uses",
                           f"served names: {', '.join(t['path'] for t in targets)}")
    return targets + [{"path": node, "port": d["NODE_EXPORTER_PORT"], "service": "node"}]


def node_exporter_defaults(d: dict) -> str:
    return render_template("node-exporter.default.j2", d=d)


def facts_service(d: dict, cert_path: str) -> str:
    return render_template("sparkctl-box-facts.service.j2", d=d, python=BOX_PYTHON, bin_dir=bin_dir(d),
                           cert_path=cert_path)


def facts_timer(d: dict) -> str:
    return render_template("sparkctl-box-facts.timer.j2", d=d)


def watchdog_service(d: dict) -> str:
    return render_template("sparkctl-watchdog.service.j2", d=d, python=BOX_PYTHON, bin_dir=bin_dir(d),
                           config_path=watchdog_config_path(d))


def rollout_command(d: dict) -> list[str]:
    """argv prefix of the box's rollout.py with the environment telling it where this deploy keeps things (the
    deploy's own prefix, render.units.rollout_env)."""
    return ["/usr/bin/env", *rollout_env(d).split(), BOX_PYTHON, f"{bin_dir(d)}/rollout.py"]


def rollout_limits(d) -> list[str]:
    """Every option `rollout.py restart` takes from a setting (the box's contract), with this host's values: the
    same the deploy's own transaction gets."""
    return contract.setting_argv("restart", d)


# the watchdog's command settings: the placeholder one of them must contain (watchdog.py PLACEHOLDERS lists all)
COMMAND_SETTINGS = {"restart_command": ("WATCHDOG_RESTART_COMMAND", ("service", "unit")),
                    "stop_command": ("WATCHDOG_STOP_COMMAND", ("service", "unit")),
                    "rollout_active_command": ("WATCHDOG_ROLLOUT_ACTIVE_COMMAND", ("service", "unit"))}


def watchdog_config(d: dict, services, role=None, peer_address: str = "") -> str:
    """The watchdog's whole configuration (settings, not defaults in the script). role, peer_address: this box's
    part in the topology and the other box's link address (tensor-parallel: the pair is watched as one unit)."""
    cfg = {
        "interval_s": d["WATCHDOG_INTERVAL_S"], "stall_s": d["WATCHDOG_STALL_S"],
        "probe_idle_s": d["WATCHDOG_PROBE_IDLE_S"], "probe_timeout_s": d["WATCHDOG_PROBE_TIMEOUT_S"],
        "http_timeout_s": d["WATCHDOG_HTTP_TIMEOUT_S"], "max_restarts": d["WATCHDOG_MAX_RESTARTS"],
        "window_s": d["WATCHDOG_WINDOW_S"], "restart_command": d["WATCHDOG_RESTART_COMMAND"],
        "stop_command": d["WATCHDOG_STOP_COMMAND"], "rollout_active_command": d["WATCHDOG_ROLLOUT_ACTIVE_COMMAND"],
        "rollout_command": rollout_command(d), "rollout_limits": rollout_limits(d),
        "state_file": f"{d['STATE_DIR']}/watchdog/state.json",
        "textfile": f"{d['TEXTFILE_DIR']}/sparkctl_watchdog.prom",
        "services": [{"name": s.name, "unit": s.unit, "url": f"http://{d['LISTEN_ADDRESS']}:{s.port}",
                      "port": s.port, "served": s.served_name, "kind": "chat" if s.role == CODER else "embed"}
                     for s in api_services(services)],
    }
    for key in ("interval_s", "stall_s", "probe_idle_s", "probe_timeout_s", "http_timeout_s", "window_s"):
        if not isinstance(cfg[key], (int, float)) or isinstance(cfg[key], bool) or cfg[key] <= 0:
            raise SettingError(f"WATCHDOG_{key[:-2].upper()}_S", cfg[key], "a positive number of seconds")
    if not isinstance(cfg["max_restarts"], int) or cfg["max_restarts"] < 0:
        raise SettingError("WATCHDOG_MAX_RESTARTS", cfg["max_restarts"], "a whole number >= 0")
    for key, (setting, needs) in COMMAND_SETTINGS.items():
        check_command_template(setting, cfg[key], needs)
    if role is not None and role.tensor_parallel and d["TP_BACKEND"] == "native":
        watch_pair(d, cfg, services, role.name, peer_address)
    return json.dumps(cfg, indent=2, sort_keys=True) + "\n"


def pair_restart_wait(d) -> float:
    """The longest one box of a pair restart waits for the other (--peer-timeout): the head's stop, then its gate."""
    return d["SERVICE_STOP_TIMEOUT_S"] + d["HEALTH_READY_TIMEOUT_S"]


def watch_pair(d, cfg: dict, services, role: str, peer_address: str) -> None:
    """Tensor-parallel, native backend (with Ray the worker runs no vLLM service: the head's restart recreates its
    actors): the head's coder is judged with its worker and restarted with it ({peer}); the worker's watchdog
    follows the head's pair restarts."""
    status = peer_status_command(d, peer_address)
    call = d["TP_PEER_CALL_TIMEOUT_S"]
    if role == "head":
        if "{peer}" not in cfg["restart_command"]:
            raise SettingError("WATCHDOG_RESTART_COMMAND", cfg["restart_command"], "a command containing {peer} in "
                               "tensor-parallel (the pair restarts as one unit, never the head alone)")
        coder = next(s for s in services if s.role == CODER and not s.headless)
        entry = next(e for e in cfg["services"] if e["name"] == coder.name)
        entry["pair"] = {"peer_status_command": status, "call_timeout_s": call,
                         "env_file": f"{d['ENV_DIR']}/{coder.env_file}"}
        entry["peer_args"] = contract.options("restart", peer_status_cmd=status, peer_timeout=pair_restart_wait(d))
        return
    coder = next(s for s in services if s.role == CODER)
    restart = contract.argv("restart", d, service=coder.name, port=coder.port, served=coder.served_name, kind="none",
                            peer_status_cmd=status, peer_timeout=pair_restart_wait(d), reason="pair-restart",
                            wait=True)
    cfg["follow"] = {"service": coder.name, "unit": coder.unit, "peer_status_command": status,
                     "call_timeout_s": call, "restart_command": rollout_command(d) + restart}


def check_command_template(setting: str, template, needs: tuple[str, ...]) -> None:
    """The schema's check of a watchdog command setting, for a value that reaches the renderer another way."""
    problem = schema_types.template_problem(template, WATCHDOG_PLACEHOLDERS, needs) if isinstance(template, str) \
        else "not a string"
    if problem:
        raise SettingError(setting, template, schema_types.template_description(needs, WATCHDOG_PLACEHOLDERS),
                           problem)
