"""Ask every configured box for its state (in parallel, one ssh round trip each) and turn the answers into rows.

Row fields (the --json output, schema "sparkctl.status/2"): box, service, served, model, revision, vllm_version,
active, up_since, healthy, running, waiting, kv_usage_pct, mem_available_gib, watchdog_restarts,
watchdog_gave_up, cert_expires_in_days, rollout_running; per box also "last_rollouts" (per service its result file
STATE_DIR/rollout/vllm-<service>.result.json: "file", "mtime", and "data", its JSON as the box wrote it), "probe_s"
(wall time of the round trip), "error", and "retired" (null, or the marker `retire_services.py` wrote: its transaction, when,
what it stopped; its services are down on purpose).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

from sparkctl import REPO_ROOT
from sparkctl.box import contract
from sparkctl.config.hosts import HostConn
from sparkctl.config.quantities import DAY_S, GIB
from sparkctl.config.schema import GroupData

PROBE = REPO_ROOT / "sparkctl" / "box" / "status_probe.py"
TLS_CERT_ON_BOX = "/etc/nginx/sparkctl-tls/server.pem"  # where tasks/proxy.py puts the chain (TLS_DIR)


def probe_files(cfg: GroupData) -> dict:
    """Where the probe finds each service's files on the box (the contract's layout: globs, "*" the service)."""
    every = contract.Paths("*", cfg.ENV_DIR, contract.rollout_dir(cfg.STATE_DIR))
    return {"env": every.env, "result": every.result, "watchdog": contract.watchdog_state(cfg.STATE_DIR),
            "retired": contract.retired_marker(cfg.STATE_DIR),
            "unit": contract.unit_of("{}"), "rollout_unit": contract.rollout_unit("{}"),
            "unit_running": list(contract.UNIT_RUNNING)}


def probe_config(cfg: GroupData) -> dict:
    return {"state_dir": cfg.STATE_DIR, "files": probe_files(cfg), "cert": TLS_CERT_ON_BOX,
            "address": cfg.LISTEN_ADDRESS, "timeout_s": cfg.WATCHDOG_HTTP_TIMEOUT_S}


def ask(host: HostConn, cfg: GroupData) -> dict:
    """The box's own report, or {"error": ...}; never raises for an unreachable box."""
    t0 = time.monotonic()
    argv = host.ssh_argv(f"python3 - {shlex.quote(json.dumps(probe_config(cfg)))}")
    try:
        r = subprocess.run(argv, input=PROBE.read_text(), capture_output=True, text=True,
                           timeout=cfg.STATUS_SSH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"error": f"no answer over ssh within {cfg.STATUS_SSH_TIMEOUT_S} s (STATUS_SSH_TIMEOUT_S)"}
    wall = round(time.monotonic() - t0, 3)
    if r.returncode != 0:
        return {"error": (r.stderr.strip().splitlines() or [f"ssh exited {r.returncode}"])[-1], "probe_s": wall}
    try:
        report = json.loads(r.stdout)
    except ValueError:
        return {"error": f"unreadable answer: {r.stdout[:200]!r}", "probe_s": wall}
    report["probe_s"] = wall
    return report


def ask_all(hosts: list[HostConn], cfg: GroupData) -> dict[str, dict]:
    with ThreadPoolExecutor(max_workers=max(1, len(hosts))) as pool:
        return dict(zip([h.name for h in hosts], pool.map(lambda h: ask(h, cfg), hosts)))


def rows(box: str, report: dict) -> list[dict]:
    now = report.get("now") or time.time()
    box_facts = {"mem": report.get("mem_available_bytes"), "cert": report.get("cert_expiry"), "now": now}
    dog = report.get("watchdog") or {}
    return [row(box, name, svc, dog.get(name) or {}, box_facts)
            for name, svc in sorted((report.get("services") or {}).items())]


def row(box: str, name: str, svc: dict, watchdog: dict, box_facts: dict) -> dict:
    """One service's row: its own report, its watchdog record, the box's memory and certificate."""
    unit, metrics = svc.get("unit") or {}, svc.get("metrics") or {}
    kv, mem, cert = metrics.get("kv_usage"), box_facts["mem"], box_facts["cert"]
    return {
        "box": box, "service": name, "served": svc.get("served"), "model": svc.get("model"),
        "revision": svc.get("revision"), "vllm_version": svc.get("vllm_version"),
        "active": unit.get("ActiveState"), "up_since": unit.get("ActiveEnterTimestamp") or None,
        "healthy": svc.get("health") == 200 and unit.get("ActiveState", "active") == "active",
        "running": metrics.get("running"), "waiting": metrics.get("waiting"),
        "kv_usage_pct": round(100 * kv, 1) if kv is not None else None,
        "mem_available_gib": round(mem / GIB, 1) if mem is not None else None,
        "watchdog_restarts": watchdog.get("restarts_total", 0), "watchdog_gave_up": bool(watchdog.get("gave_up")),
        "cert_expires_in_days": round((cert - box_facts["now"]) / DAY_S, 1) if cert else None,
        "rollout_running": bool(svc.get("rollout_running")),
    }


def status(hosts: list[HostConn], cfg: GroupData) -> dict:
    boxes = {}
    for name, report in ask_all(hosts, cfg).items():
        boxes[name] = {"error": report.get("error"), "probe_s": report.get("probe_s"), "retired": report.get("retired"),
                       "last_rollouts": dict(sorted((report.get("last_rollouts") or {}).items())),
                       "services": rows(name, report)}
    return {"schema": "sparkctl.status/2", "boxes": boxes}
