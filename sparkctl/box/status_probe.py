#!/usr/bin/env python3
"""On the box (stdlib only; `sparkctl status` pipes it to `python3 -` over one ssh session): what the box says
about itself, as one JSON object on stdout.

    python3 - '{"state_dir": ..., "files": {...}, "cert": ..., "timeout_s": 1.0}' < status_probe.py

It runs alone (piped, so it reads a box of any deploy's age), so where the box keeps each service's files comes in
its argument, generated from the box boundary's contract (sparkctl/status/fleet.py probe_config): "files" holds the
globs of every service's env file and result file, the watchdog's state file, the unit names ("{}": the service)
and the rollout unit's running states.

Per vLLM env file (ENV_DIR/vllm-*.env): served name, port, model key and locked revision as deployed; the unit's
state and start time and whether a rollout or restart of it runs (its transient unit sparkctl-rollout-<service>;
one `systemctl show` for all); /health, /version and the /metrics gauges on loopback. And: MemAvailable, each
service's last rollout result (STATE_DIR/rollout/vllm-<service>.result.json, its JSON as it is), the watchdog's
state, the proxy certificate's expiry. Nothing here changes the box.

Only result files are read under STATE_DIR/rollout/: an open transaction's state (vllm-<service>.txn/) may hold the
acceptance probe's key, and failure records hold journal excerpts; neither is what status reports.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shlex
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request

GAUGES = {"vllm:num_requests_running": "running", "vllm:num_requests_waiting": "waiting",
          "vllm:kv_cache_usage_perc": "kv_usage"}


def service_of(path: str, pattern: str) -> str:
    """The service whose file `path` is, found by the glob `pattern` (its one "*" is the service)."""
    head, tail = pattern.split("*", 1)
    return path[len(head):len(path) - len(tail)]


def unescape(raw: str) -> str:
    """A double-quoted EnvironmentFile value as systemd reads it."""
    if len(raw) >= 2 and raw[0] == raw[-1] == '"':
        return re.sub(r'\\(["\\`$])', r"\1", raw[1:-1])
    return raw


def env_file(path: str) -> dict:
    values = {}
    with open(path) as f:
        for line in f:
            if "=" in line and not line.startswith("#"):
                key, value = line.rstrip("\n").split("=", 1)
                values[key] = value
    args = shlex.split(unescape(values.get("VLLM_ARGS", '""')))
    flag = lambda name: args[args.index(name) + 1] if name in args[:-1] else None  # noqa: E731
    return {"model": values.get("SPARKCTL_MODEL"), "revision": values.get("SPARKCTL_REVISION"),
            "served": flag("--served-model-name"), "port": flag("--port"), "headless": "--headless" in args}


def get(url: str, timeout: float) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, ""
    except (OSError, ValueError):
        return 0, ""


def gauges(text: str) -> dict:
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})?\s+(\S+)", line)
        if m and m.group(1) in GAUGES:
            key = GAUGES[m.group(1)]
            out[key] = out.get(key, 0.0) + float(m.group(2)) if key != "kv_usage" else \
                max(out.get(key, 0.0), float(m.group(2)))
    return out


def units(names: list[str]) -> dict[str, dict]:
    if not names:
        return {}
    r = subprocess.run(["systemctl", "show", "-p", "Id,ActiveState,SubState,ActiveEnterTimestamp,NRestarts",
                        *names], capture_output=True, text=True)
    out, current = {}, {}
    for line in r.stdout.splitlines() + [""]:
        if not line.strip():
            if current.get("Id"):
                out[current["Id"]] = current
            current = {}
        elif "=" in line:
            k, v = line.split("=", 1)
            current[k] = v
    return out


def mem_available() -> int | None:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return None


def read_json(path: str):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as exc:
        return {"unreadable": str(exc)}


def last_rollouts(state_dir: str, pattern: str) -> dict:
    """service -> its last rollout result (rollout_txn.py's vllm-<service>.result.json, one per service, rewritten
    by each transaction or restart; pattern: their glob): the file, when it was written, its JSON as it is."""
    out = {}
    for path in sorted(glob.glob(pattern)):
        service = service_of(path, pattern)
        out[service] = {"file": os.path.relpath(path, state_dir), "mtime": os.stat(path).st_mtime,
                        "data": read_json(path)}
    return out


def probe_service(svc: dict, cfg: dict) -> None:
    """/health, /version and the /metrics gauges of one service on loopback (a headless worker has no API)."""
    if not svc.get("port") or svc.get("headless"):
        return
    timeout = cfg.get("timeout_s", 1.0)
    base = f"http://{cfg.get('address', '127.0.0.1')}:{svc['port']}"
    svc["health"] = get(f"{base}/health", timeout)[0]
    code, text = get(f"{base}/version", timeout)
    svc["vllm_version"] = json.loads(text).get("version") if code == 200 and text.startswith("{") else None
    code, text = get(f"{base}/metrics", timeout)
    svc["metrics"] = gauges(text) if code == 200 else {}


def main(cfg: dict) -> dict:
    t0 = time.monotonic()
    files = cfg["files"]
    services = {}
    for path in sorted(glob.glob(files["env"])):
        name = service_of(path, files["env"])
        try:
            services[name] = env_file(path)
        except (OSError, ValueError) as exc:
            services[name] = {"error": str(exc)}
    unit, rollout_unit = files["unit"].format, files["rollout_unit"].format
    states = units([u for n in services for u in (unit(n), rollout_unit(n))])
    for name, svc in services.items():
        svc["unit"] = states.get(unit(name), {})
        svc["rollout_running"] = states.get(rollout_unit(name), {}).get("ActiveState") in files["unit_running"]
        probe_service(svc, cfg)
    watchdog = read_json(files["watchdog"]) if os.path.exists(files["watchdog"]) else None
    retired = read_json(files["retired"]) if os.path.exists(files["retired"]) else None
    try:
        cert_expiry = ssl.cert_time_to_seconds(ssl._ssl._test_decode_cert(cfg["cert"])["notAfter"])
    except (OSError, ssl.SSLError, KeyError, ValueError):
        cert_expiry = None
    return {"schema": "sparkctl.status.box/2", "now": time.time(), "services": services,
            "mem_available_bytes": mem_available(), "last_rollouts": last_rollouts(cfg["state_dir"], files["result"]),
            "watchdog": watchdog, "retired": retired, "cert_expiry": cert_expiry, "probe_s": round(time.monotonic() - t0, 3)}


if __name__ == "__main__":
    json.dump(main(json.loads(sys.argv[1])), sys.stdout)
    sys.stdout.write("\n")
