#!/usr/bin/env python3
"""On the box (stdlib only; imported by rollout.py): drain one served model before its vLLM stops.

The proxy's location for each served model includes DRAIN_DIR/<served>.conf* (a glob: no file, not draining).
Draining writes that file (503 + Retry-After for new requests) and reloads nginx gracefully: old workers keep
the streams they hold until those finish. Then we wait for vLLM's own vllm:num_requests_running (+ waiting) on
loopback /metrics to reach 0, up to a timeout; undraining removes the file and reloads again.

Before the drain, DRAIN_DIR/<served>.unready.conf* (included only in the router health location) fails the health
path the gateway's routers check while the API still serves, so the routers stop sending to this box before any
client meets the drain's 503; reopen() lifts both.
"""

from __future__ import annotations

import os
import time

from boxio import write_atomic
from contract import PROBE_HEADER
from readiness_gate import metric_sum, systemctl

BUSY = ("vllm:num_requests_running", "vllm:num_requests_waiting")


def drain_file(drain_dir: str, served: str) -> str:
    return os.path.join(drain_dir, f"{served}.conf")


def _reload_nginx() -> tuple[bool, str]:
    r = systemctl("reload", "nginx.service")
    return r.returncode == 0, (r.stderr or r.stdout).strip()


KEY_CHARS = set("0123456789abcdef")


def drain_on(drain_dir: str, served: str, retry_after: int, why: str = "a deploy",
             except_key: str = "") -> tuple[bool, str]:
    """New requests for `served` get 503 + Retry-After; returns (nginx reloaded, why not). except_key (hex): a
    request carrying PROBE_HEADER with exactly that value still passes (the acceptance probe of a waiting
    candidate); the file is then created root-only, as the key must never be readable by others."""
    os.makedirs(drain_dir, mode=0o755, exist_ok=True)
    body = (f"add_header Retry-After {int(retry_after)} always;\n"
            f"return 503 \"{served} is restarting for {why}; retry in {int(retry_after)} s\\n\";\n")
    if except_key:
        if not set(except_key) <= KEY_CHARS:
            raise ValueError("the drain exemption key must be hex")
        var = "$http_" + PROBE_HEADER.lower().replace("-", "_")
        body = f"if ({var} != \"{except_key}\") {{\n" + "".join(f"    {x}\n" for x in body.splitlines()) + "}\n"
    # the temporary name is hidden: the proxy's include glob (<served>.conf*) never matches it
    write_atomic(drain_file(drain_dir, served), body, 0o600 if except_key else 0o644)
    return _reload_nginx()


def drain_off(drain_dir: str, served: str) -> tuple[bool, str]:
    try:
        os.unlink(drain_file(drain_dir, served))
    except FileNotFoundError:
        return True, ""
    return _reload_nginx()


def unready_file(drain_dir: str, served: str) -> str:
    return os.path.join(drain_dir, f"{served}.unready.conf")


def unready_on(drain_dir: str, served: str, reload: bool = True) -> tuple[bool, str]:
    """Fail `served`'s router health path alone (its API keeps serving): the gateway's routers take the box out of
    rotation after their health window. Returns (nginx reloaded, why not); reload=False: the caller's next reload
    (a drain written at once) takes it in."""
    os.makedirs(drain_dir, mode=0o755, exist_ok=True)
    body = f"return 503 \"{served} is leaving the routers for a restart\\n\";\n"
    write_atomic(unready_file(drain_dir, served), body, 0o644)
    return _reload_nginx() if reload else (True, "")


def reopen(drain_dir: str, served: str, reload: bool = False) -> tuple[bool, str]:
    """Lift the drain and the router health failure together (one reload; none when neither is there, unless
    `reload`: a resumed run, whose files may be gone while nginx never reloaded without them): the API serves again
    and the routers take the box back after their success threshold."""
    removed = reload
    for path in (drain_file(drain_dir, served), unready_file(drain_dir, served)):
        try:
            os.unlink(path)
            removed = True
        except FileNotFoundError:
            pass
    return _reload_nginx() if removed else (True, "")


def wait_idle(port: int, timeout: float, interval: float, say) -> tuple[bool, float, float]:
    """Wait until vLLM runs and queues no request; returns (idle, seconds waited, requests still busy)."""
    start, last_said, busy = time.monotonic(), -1.0, 0.0
    while True:
        value = metric_sum(port, BUSY)
        waited = time.monotonic() - start
        if value is None:  # not answering: nothing in flight can finish either
            return True, waited, 0.0
        busy = value
        if busy <= 0:
            return True, waited, 0.0
        if waited >= timeout:
            return False, waited, busy
        if last_said < 0 or waited - last_said >= max(interval * 5, 10):
            say(f"draining: {busy:.0f} request(s) still running or queued, waited {waited:.0f} s "
                f"of {timeout:.0f} s")
            last_said = waited
        time.sleep(interval)
