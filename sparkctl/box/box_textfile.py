#!/usr/bin/env python3
"""On the box (uploaded by the deploy, run by sparkctl-box-facts.timer, stdlib only): facts the alerts need that
no exporter has.

    box_textfile.py --out FILE.prom --model-store /srv/models --cert /etc/nginx/sparkctl-tls/server.pem
                    --rollout-dir /var/lib/sparkctl/rollout --env-dir /etc/sparkctl
                    --ready-timeout S --drain-timeout S    (contract.FACTS_ARGS, as the deploy renders them)

- the model store's free space (statvfs of the path itself: it need not be its own mount point);
- the TLS certificate's expiry (the proxy's certificate, read with the standard library's own decoder);
- each service's last rollout result: vllm-<service>.result.json (its `outcome`, one of contract.py's OUTCOMES);
- whether a rollout or a restart of each service runs now, and until when it may (the alerts hold back
  "model down" for that served model meanwhile, and fire when it outlasts that deadline). What the box has:
  the transient unit sparkctl-rollout-<service>.service active (a deploy's transaction or the watchdog's
  restart), or the transaction's recorded state (vllm-<service>.txn/state.json with a phase: one that a reboot
  interrupted is still in progress until the next deploy resumes it). The served name comes from the service's
  env file (live, else staged), as the proxy's scrape path uses it.
"""

from __future__ import annotations

import argparse
import calendar
import glob
import json
import os
import re
import shlex
import ssl
import subprocess
import sys
import time
from typing import NamedTuple

try:
    from sparkctl.box import contract
    from sparkctl.box.boxio import write_atomic
    from sparkctl.box.textfile import TEXTFILE_MODE, Exposition
except ImportError:  # on the box: the scripts sit side by side
    import contract
    from boxio import write_atomic
    from textfile import TEXTFILE_MODE, Exposition



def store_facts(exp: Exposition, path: str) -> None:
    try:
        st = os.statvfs(path)
    except OSError as exc:
        print(f"box_textfile: model store {path}: {exc}", file=sys.stderr)
        return
    exp.add("sparkctl_model_store_free_bytes", "gauge", "space left for downloads under the model store, bytes",
            st.f_bavail * st.f_frsize, {"path": path})
    exp.add("sparkctl_model_store_size_bytes", "gauge", "size of the model store's filesystem, bytes",
            st.f_blocks * st.f_frsize, {"path": path})


def cert_facts(exp: Exposition, path: str) -> None:
    try:
        not_after = ssl._ssl._test_decode_cert(path)["notAfter"]  # the stdlib's own X.509 decoder (CPython)
        expiry = ssl.cert_time_to_seconds(not_after)
    except (OSError, ssl.SSLError, KeyError, ValueError) as exc:
        print(f"box_textfile: certificate {path}: {exc}", file=sys.stderr)
        return
    exp.add("sparkctl_tls_cert_expiry_timestamp_seconds", "gauge",
            "when the proxy's TLS certificate expires, unix time", expiry, {"path": path})


def every(env_dir: str, rollout_dir: str) -> contract.Paths:
    """The glob of every service's files (contract.Paths of service "*")."""
    return contract.Paths("*", env_dir, rollout_dir)


def rollout_results(directory: str) -> list[tuple[str, str, dict]]:
    """(service, path, parsed JSON) of each service's last rollout result: rollout_txn.py writes
    vllm-<service>.result.json when a transaction finishes (its open state and failure records live elsewhere)."""
    out = []
    pattern = every("", directory).result
    for path in sorted(glob.glob(pattern)):
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("outcome"), str):
            out.append((contract.service_of(path, pattern), path, data))
    return out


def rollout_facts(exp: Exposition, directory: str) -> None:
    for service, path, data in rollout_results(directory):
        outcome = data["outcome"]
        labels = {"unit": contract.unit_of(service), "result": outcome}
        exp.add("sparkctl_rollout_last_ok", "gauge", "1 when the last rollout of the service served its candidate "
                "(ready, unchanged, restarted), 0 when it failed, was refused or rolled back",
                int(outcome in contract.SUCCEEDED), labels)
        exp.add("sparkctl_rollout_last_timestamp_seconds", "gauge", "when the last rollout result was written, unix "
                "time", round(os.stat(path).st_mtime, 3), {"unit": labels["unit"]})


def served_of(path: str) -> str:
    """--served-model-name of an env file's VLLM_ARGS, read as systemd reads the double-quoted value ("": none)."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return ""
    raw = next((line.split("=", 1)[1] for line in lines if line.startswith("VLLM_ARGS=")), "")
    if len(raw) >= 2 and raw[0] == raw[-1] == '"':
        raw = re.sub(r'\\(["\\`$])', r"\1", raw[1:-1])
    try:
        args = shlex.split(raw)
    except ValueError:
        return ""
    return args[args.index("--served-model-name") + 1] if "--served-model-name" in args[:-1] else ""


def services(env_dir: str, rollout_dir: str) -> dict[str, str]:
    """service -> served name: every service with a live or staged env file (the live one names it: that is the
    scrape path the proxy has now), or an open transaction."""
    out: dict[str, str] = {}
    files = every(env_dir, rollout_dir)
    for pattern in (files.env, files.env_next):
        for path in sorted(glob.glob(pattern)):
            name = contract.service_of(path, pattern)
            out[name] = out.get(name) or served_of(path)
    for path in sorted(glob.glob(files.txn)):
        out.setdefault(contract.service_of(path, files.txn), "")
    return out


def running_rollouts(names) -> dict[str, float | None]:
    """service -> when its transient rollout unit became active (unix time; None: systemd gave no time), for each
    whose unit runs now (one `systemctl show` for all)."""
    units = {contract.rollout_unit(n): n for n in names}
    if not units:
        return {}
    try:
        r = subprocess.run(["systemctl", "show", "-p", "Id,ActiveState,ActiveEnterTimestampMonotonic", *units],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        print(f"box_textfile: systemctl show: {exc}", file=sys.stderr)
        return {}
    to_unix = time.time() - time.monotonic()  # systemd's monotonic timestamps are CLOCK_MONOTONIC, in µs
    out: dict[str, float | None] = {}
    for block in r.stdout.split("\n\n"):
        props = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        if props.get("Id") in units and props.get("ActiveState") in contract.UNIT_RUNNING:
            mono = int(props.get("ActiveEnterTimestampMonotonic") or 0)
            out[units[props["Id"]]] = to_unix + mono / 1e6 if mono > 0 else None
    return out


class Limits(NamedTuple):
    """What a rollout may take on this box: the settings its transactions and restarts are given."""
    env_dir: str  # ENV_DIR: the services' env files (served names)
    ready_s: float  # HEALTH_COLD_READY_TIMEOUT_S: a (re)started service's load and gate (a cold start's, the longest)
    drain_s: float  # DRAIN_TIMEOUT_S: the wait for running requests before a restart


def txn_state(rollout_dir: str, service: str) -> dict:
    """The transaction's recorded state (root-only: it may hold the acceptance probe's key, which never leaves
    this function's caller)."""
    try:
        with open(contract.Paths(service, "", rollout_dir).state) as f:
            state = json.load(f)
    except (OSError, ValueError):
        return {}
    return state if isinstance(state, dict) else {}


def started_at(state: dict) -> float | None:
    try:
        return float(calendar.timegm(time.strptime(str(state["started"]), "%Y-%m-%dT%H:%M:%SZ")))
    except (KeyError, ValueError):
        return None


def deadline(start: float, state: dict, limits: Limits) -> float:
    """When a rollout that began at `start` should be over: its drain wait and its load; past its recorded verdict
    deadline when it waits for one; and once it rolls back, another drain and load for the previous
    configuration."""
    end = start + limits.drain_s + limits.ready_s
    if state.get("verdict_deadline"):
        end = max(end, float(state["verdict_deadline"]))
    if state.get("phase") == contract.ROLLING_BACK or (state.get("verdict") or {}).get("decision") == "rollback":
        end += limits.drain_s + limits.ready_s
    return end


def progress_facts(exp: Exposition, rollout_dir: str, limits: Limits, running: dict | None = None) -> None:
    """running: service -> start of its running rollout unit (None: ask systemd)."""
    names = services(limits.env_dir, rollout_dir)
    running = running_rollouts(names) if running is None else running
    for service, served in sorted(names.items()):
        state = txn_state(rollout_dir, service)
        labels = {"served": served, "unit": contract.unit_of(service)}
        in_progress = service in running or bool(state.get("phase"))
        exp.add("sparkctl_rollout_in_progress", "gauge", "1 while a rollout or a restart of the service runs "
                "(its transient unit sparkctl-rollout-<service> is active, or its transaction is open), else 0",
                int(in_progress), labels)
        if in_progress:
            start = running.get(service) or started_at(state) or time.time()
            exp.add("sparkctl_rollout_deadline_timestamp_seconds", "gauge", "when the running rollout should be "
                    "over (its start plus the drain and ready timeouts, its verdict wait, its rollback), unix time",
                    round(deadline(start, state, limits), 3), labels)


def collect(model_store: str, cert: str, rollout_dir: str, limits: Limits | None = None,
            running: dict | None = None) -> Exposition:
    """limits: the env dir and timeouts the rollout progress facts need (the command line always gives them)."""
    exp = Exposition()
    store_facts(exp, model_store)
    cert_facts(exp, cert)
    rollout_facts(exp, rollout_dir)
    if limits is not None:
        progress_facts(exp, rollout_dir, limits, running)
    exp.add("sparkctl_box_facts_timestamp_seconds", "gauge", "when these facts were read, unix time",
            round(time.time(), 3))
    return exp


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--model-store", required=True)
    p.add_argument("--cert", required=True)
    p.add_argument("--rollout-dir", required=True)
    p.add_argument("--env-dir", required=True, help="ENV_DIR: the services' env files")
    for a in contract.FACTS_ARGS:  # the deploy renders the same flags from the same table (contract.facts_argv)
        p.add_argument(a.flag, dest=a.dest, type=a.type, required=True, help=f"{a.help}; from {a.setting}")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    limits = Limits(args.env_dir, args.ready_timeout, args.drain_timeout)
    write_atomic(args.out, collect(args.model_store, args.cert, args.rollout_dir, limits).text(), TEXTFILE_MODE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
