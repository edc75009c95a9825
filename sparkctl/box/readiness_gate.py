#!/usr/bin/env python3
"""On the box (stdlib only; imported by rollout.py): systemd calls and the readiness gate of a vLLM service.

Every call captures its output and never raises on a non-zero exit: a rollout must be able to roll back whatever
systemctl said, and it runs detached (no terminal, no pipe to the deploy).
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request


def run(*argv: str, timeout: float | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return subprocess.CompletedProcess(list(argv), 127, "", f"{argv[0]}: {exc}")


def systemctl(*args: str) -> subprocess.CompletedProcess:
    return run("systemctl", *args)


def show(*units: str) -> dict[str, dict]:
    """`systemctl show` of several units in ONE call: {unit: {property: value}}."""
    props = ("Id", "ActiveState", "SubState", "Result", "NRestarts", "MainPID", "InvocationID")
    out = systemctl("show", *[a for p in props for a in ("-p", p)], *units).stdout
    states, current = {}, {}
    for block in out.split("\n\n"):
        current = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        if current.get("Id"):
            states[current["Id"]] = current
    return {u: states.get(u, {}) for u in units}


def unit_state(unit: str) -> dict:
    return show(unit)[unit]


def restart(unit: str) -> tuple[bool, str]:
    """stop -> start (on unified memory two big models must never run together); failures are returned."""
    systemctl("reset-failed", unit)
    r = systemctl("restart", unit)
    return r.returncode == 0, (r.stderr or r.stdout).strip()


def journal(unit: str, lines: int) -> str:
    return run("journalctl", "-u", unit, "-n", str(lines), "--no-pager", "-o", "short-iso", timeout=60).stdout


def journal_cursor(unit: str) -> str:
    """The cursor of the unit's newest journal entry ("" when it has none): it changes whenever the engine logs a line,
    the progress a cold start is judged by."""
    out = run("journalctl", "-u", unit, "-n", "1", "--no-pager", "-o", "json", timeout=60).stdout
    try:
        return json.loads(out.strip().splitlines()[-1]).get("__CURSOR", "") if out.strip() else ""
    except (ValueError, AttributeError):
        return ""


class Progress:
    """A cold start's progress: when the engine's journal last had a new line (monotonic seconds)."""

    def __init__(self, unit: str):
        self.unit, self.cursor, self.at = unit, journal_cursor(unit), time.monotonic()

    def silent_for(self) -> float:
        cursor = journal_cursor(self.unit)
        if cursor != self.cursor:
            self.cursor, self.at = cursor, time.monotonic()
        return time.monotonic() - self.at


def deadline_of(a, cold: bool) -> float:
    """The gate's deadline: a warm start's HEALTH_READY_TIMEOUT_S, a cold one's HEALTH_COLD_READY_TIMEOUT_S (never
    shorter than the warm one)."""
    return max(a.timeout, a.cold_timeout) if cold else a.timeout


def wedged(a, cold: bool, elapsed: float, progress: Progress) -> str:
    """Why a start past the warm deadline is judged wedged ("" while it may go on): a cold start goes on past
    HEALTH_READY_TIMEOUT_S only while its journal advances within HEALTH_STALL_S."""
    if not cold:
        return ""
    silent = progress.silent_for()  # read at every poll: the silence is measured from the last new line
    if elapsed < a.timeout or silent < a.stall:
        return ""
    return (f"wedged after {elapsed:.1f} s: a cold start past the warm deadline ({a.timeout:.0f} s, "
            f"HEALTH_READY_TIMEOUT_S) whose journal had no new line for {silent:.0f} s (HEALTH_STALL_S {a.stall:.0f} s)")


def http_json(url: str, body: dict | None, timeout: float) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status, json.loads(r.read() or b"{}")


def metric_sum(port: int, names: tuple[str, ...], timeout: float = 10) -> float | None:
    """Sum of every sample of the named vLLM gauges on loopback /metrics (None when it does not answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as r:
            text = r.read().decode("utf-8", "replace")
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError, ValueError):
        return None
    total = 0.0
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in names:
            try:
                total += float(line.rsplit(" ", 1)[1])
            except ValueError:
                pass
    return total


def _restarts(st: dict) -> int:
    try:
        return int(st.get("NRestarts") or 0)
    except ValueError:
        return 0


def gate(unit: str, a, cold: bool = False) -> tuple[bool, str, float]:
    """Wait until the service answers for real; fail fast when systemd restarts or fails it. a: the run's
    arguments (port, served, kind, timeout, cold_timeout, stall, interval, gate_max_tokens, gate_request_timeout,
    worker_settle). cold: its build and model never started ready on this box (empty JIT caches): it may take
    until the cold deadline as long as its journal advances (deadline_of, wedged)."""
    start = time.monotonic()
    deadline, progress = deadline_of(a, cold), Progress(unit) if cold else None
    restarts0 = _restarts(unit_state(unit))
    if a.kind == "none":  # a headless tensor-parallel worker has no API; it must simply stay up
        time.sleep(a.worker_settle)
        st = unit_state(unit)
        ok = st.get("ActiveState") == "active" and _restarts(st) == restarts0
        return ok, "running" if ok else f"{unit} is {st.get('ActiveState')}", time.monotonic() - start
    last_error = "not answering yet"
    while time.monotonic() - start < deadline:
        why = wedged(a, cold, time.monotonic() - start, progress)
        if why:
            return False, f"{why} ({last_error})", time.monotonic() - start
        st = unit_state(unit)
        if st.get("ActiveState") == "failed":
            return False, f"{unit} failed (Result={st.get('Result')})", time.monotonic() - start
        if st.get("SubState") == "auto-restart" or _restarts(st) > restarts0:
            return False, f"{unit} exited while starting (systemd: {st.get('SubState')}, NRestarts=" \
                f"{st.get('NRestarts')})", time.monotonic() - start
        try:
            ids = served_ids(a.port)
            if a.served not in ids:
                return False, f"/v1/models lists {ids}, not {a.served!r}", time.monotonic() - start
            ok, last_error = real_request(a)
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError, ValueError) as exc:
            ok, last_error = False, str(exc)
        if ok:
            return True, "ready", time.monotonic() - start
        time.sleep(a.interval)
    setting = "HEALTH_COLD_READY_TIMEOUT_S: a cold start" if cold else "HEALTH_READY_TIMEOUT_S"
    return False, f"not ready after {deadline:.0f} s ({setting}; {last_error})", time.monotonic() - start


def served_ids(port: int) -> list:
    """The model ids /v1/models lists on loopback (raises when it does not answer)."""
    _, models = http_json(f"http://127.0.0.1:{port}/v1/models", None, 10)
    return [m.get("id") for m in models.get("data", [])]


def real_request(a) -> tuple[bool, str]:
    """One real completion (chat) or embedding (embed) on loopback: (it answered, why not); raises when it does
    not answer at all."""
    base = f"http://127.0.0.1:{a.port}"
    if a.kind == "chat":
        _, out = http_json(f"{base}/v1/completions", {"model": a.served, "prompt": "def add(a, b):",
                                                      "max_tokens": a.gate_max_tokens, "temperature": 0},
                           a.gate_request_timeout)
        return bool(out.get("choices")), f"empty answer: {str(out)[:200]}"
    _, out = http_json(f"{base}/v1/embeddings", {"model": a.served, "input": ["readiness probe"]},
                       a.gate_request_timeout)
    return bool(out.get("data") and out["data"][0].get("embedding")), f"empty answer: {str(out)[:200]}"


def restart_and_gate(unit: str, label: str, a, say, cold: bool = False) -> tuple[bool, str, float, float]:
    """Restart `unit` and gate it (a: the run's arguments, as gate() reads them; cold: as gate() reads it); say what
    happened. Returns (ready, why not, seconds to ready after the restart, seconds the restart took)."""
    t_restart = time.monotonic()
    restarted, err = restart(unit)
    restart_s = time.monotonic() - t_restart
    cold_note = (f" (a cold start: up to {deadline_of(a, True):.0f} s while its journal advances, HEALTH_COLD_READY_"
                 f"TIMEOUT_S)" if cold and a.kind != "none" else "")
    say(f"restarted {label} in {restart_s:.1f} s; gating on a real request{cold_note}" if restarted else
        f"systemctl restart {unit} failed: {err}")
    if not restarted:
        return False, f"systemctl restart failed: {err}", 0.0, restart_s
    ok, why, took = gate(unit, a, cold)
    return ok, why, took, restart_s
