"""Ask every configured box for its state (in parallel, one ssh round trip each) and turn the answers into rows.

Row fields (the --json output, schema "sparkctl.status/2"): box, service, served, model, revision, vllm_version,
active, up_since, healthy, running, waiting, kv_usage_pct, mem_available_gib, watchdog_restarts,
watchdog_gave_up, cert_expires_in_days, rollout_running; per box also "last_rollouts" (per service its result file
STATE_DIR/rollout/vllm-<service>.result.json: "file", "mtime", and "data", its JSON as the box wrote it), "probe_s"
(wall time of the round trip) and "error".
"""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

from sparkctl import REPO_ROOT
from sparkctl.config.hosts import HostConn

PROBE = REPO_ROOT / "sparkctl" / "box" / "status_probe.py"
TLS_CERT_ON_BOX = "/etc/nginx/sparkctl-tls/server.pem"  # where tasks/proxy.py puts the chain (TLS_DIR)
GIB = 2**30


def probe_config(d: dict) -> dict:
    return {"env_dir": d["ENV_DIR"], "state_dir": d["STATE_DIR"], "cert": TLS_CERT_ON_BOX,
            "address": d["LISTEN_ADDRESS"], "timeout_s": d["WATCHDOG_HTTP_TIMEOUT_S"]}


def ask(host: HostConn, d: dict) -> dict:
    """The box's own report, or {"error": ...}; never raises for an unreachable box."""
    t0 = time.monotonic()
    argv = host.ssh_argv(f"python3 - {shlex.quote(json.dumps(probe_config(d)))}")
    try:
        r = subprocess.run(argv, input=PROBE.read_text(), capture_output=True, text=True,
                           timeout=d["STATUS_SSH_TIMEOUT_S"])
    except subprocess.TimeoutExpired:
        return {"error": f"no answer over ssh within {d['STATUS_SSH_TIMEOUT_S']} s (STATUS_SSH_TIMEOUT_S)"}
    wall = round(time.monotonic() - t0, 3)
    if r.returncode != 0:
        return {"error": (r.stderr.strip().splitlines() or [f"ssh exited {r.returncode}"])[-1], "probe_s": wall}
    try:
        report = json.loads(r.stdout)
    except ValueError:
        return {"error": f"unreadable answer: {r.stdout[:200]!r}", "probe_s": wall}
    report["probe_s"] = wall
    return report


def ask_all(hosts: list[HostConn], d: dict) -> dict[str, dict]:
    with ThreadPoolExecutor(max_workers=max(1, len(hosts))) as pool:
        return dict(zip([h.name for h in hosts], pool.map(lambda h: ask(h, d), hosts)))


def rows(box: str, report: dict) -> list[dict]:
    now = report.get("now") or time.time()
    mem = report.get("mem_available_bytes")
    cert = report.get("cert_expiry")
    dog = report.get("watchdog") or {}
    out = []
    for name, svc in sorted((report.get("services") or {}).items()):
        unit, metrics, rec = svc.get("unit") or {}, svc.get("metrics") or {}, dog.get(name) or {}
        kv = metrics.get("kv_usage")
        out.append({
            "box": box, "service": name, "served": svc.get("served"), "model": svc.get("model"),
            "revision": svc.get("revision"), "vllm_version": svc.get("vllm_version"),
            "active": unit.get("ActiveState"), "up_since": unit.get("ActiveEnterTimestamp") or None,
            "healthy": svc.get("health") == 200 and unit.get("ActiveState", "active") == "active",
            "running": metrics.get("running"), "waiting": metrics.get("waiting"),
            "kv_usage_pct": round(100 * kv, 1) if kv is not None else None,
            "mem_available_gib": round(mem / GIB, 1) if mem is not None else None,
            "watchdog_restarts": rec.get("restarts_total", 0), "watchdog_gave_up": bool(rec.get("gave_up")),
            "cert_expires_in_days": round((cert - now) / 86400, 1) if cert else None,
            "rollout_running": bool(svc.get("rollout_running")),
        })
    return out


def status(hosts: list[HostConn], d: dict) -> dict:
    boxes = {}
    for name, report in ask_all(hosts, d).items():
        boxes[name] = {"error": report.get("error"), "probe_s": report.get("probe_s"),
                       "last_rollouts": dict(sorted((report.get("last_rollouts") or {}).items())),
                       "services": rows(name, report)}
    return {"schema": "sparkctl.status/2", "boxes": boxes}
