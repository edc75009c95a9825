#!/usr/bin/env python3
"""On the box (uploaded by the deploy, run as root, stdlib only): switch a vLLM service to its staged env file.

    rollout.py status SERVICE   -> JSON {"active", "applied", "wanted", "env_differs"}
    rollout.py apply SERVICE --port P --served NAME --kind chat|embed --timeout S [--interval S] [--journal N]

`apply` first checks the staged arguments with vLLM's own parser (check_vllm_args.py beside this script), then
keeps the current env file as <env>.prev (hard link + atomic rename), moves the staged <env>.next into
place by atomic rename, resets the unit's failure counter, restarts it (stop -> start: on unified memory two
big models must never run together), and gates on readiness: /v1/models lists the served name and one tiny
real request succeeds. If the gate fails and a previous env existed, it renames .prev back, restarts, gates
again, and exits 3 saying which model it rolled back to; with nothing to roll back to it exits 2. Either way the
journal excerpt is printed. A successful gate records a stamp (sha256 of unit + env + installed vLLM version),
so a later run knows the service already runs what it should; a failed one records nothing, so the next run
tries again rather than silently leaving the box on the old configuration.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

ENV_DIR = os.environ.get("SPARKCTL_ENV_DIR", "/etc/sparkctl")
STATE_DIR = os.environ.get("SPARKCTL_STATE_DIR", "/var/lib/sparkctl")
VENV_PYTHON = os.environ.get("SPARKCTL_VENV_PYTHON", "/opt/sparkctl/venv/bin/python")
VLLM_DIST = os.environ.get("SPARKCTL_VLLM_DIST", "vllm")


def paths(service: str) -> dict:
    return {"env": f"{ENV_DIR}/vllm-{service}.env", "next": f"{ENV_DIR}/vllm-{service}.env.next",
            "prev": f"{ENV_DIR}/vllm-{service}.env.prev", "unit": f"/etc/systemd/system/vllm-{service}.service",
            "stamp": f"{STATE_DIR}/rollout/vllm-{service}.stamp", "unit_name": f"vllm-{service}.service"}


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return b""


def vllm_version() -> str:
    try:
        out = subprocess.run([VENV_PYTHON, "-c", "import importlib.metadata as m, sys; "
                              f"print(m.version({VLLM_DIST!r}))"], capture_output=True, text=True, timeout=60)
        return out.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def stamp(unit: bytes, env: bytes, version: str) -> str:
    h = hashlib.sha256()
    for part in (unit, env, version.encode()):
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()


def systemctl(*args: str, check: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run(["systemctl", *args], capture_output=True, text=True, check=check)


def unit_state(unit: str) -> dict:
    out = systemctl("show", unit, "-p", "ActiveState", "-p", "SubState", "-p", "Result", "-p", "NRestarts",
                    "-p", "MainPID").stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def status(service: str) -> dict:
    p = paths(service)
    wanted = stamp(_read(p["unit"]), _read(p["next"]), vllm_version())
    applied = _read(p["stamp"]).decode().strip()
    return {"active": unit_state(p["unit_name"]).get("ActiveState") == "active", "applied": applied,
            "wanted": wanted, "env_differs": _read(p["env"]) != _read(p["next"])}


def _atomic_replace_with_copy_of(src: str, dest: str) -> None:
    """dest := contents of src, created 0600 and renamed into place (never a half-written or wider-mode file)."""
    tmp = f"{dest}.tmp-{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(_read(src))
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, dest)


def _keep_previous(env: str, prev: str) -> None:
    if not os.path.exists(env):
        return
    tmp = f"{prev}.tmp-{os.getpid()}"
    if os.path.exists(tmp):
        os.unlink(tmp)
    os.link(env, tmp)  # same inode, same 0600 mode
    os.rename(tmp, prev)


def _http(url: str, body: dict | None, timeout: float) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status, json.loads(r.read() or b"{}")


def gate(unit: str, port: int, served: str, kind: str, timeout: float, interval: float) -> tuple[bool, str, float]:
    """Wait until the service answers for real; fail fast when systemd restarts or fails it."""
    start = time.monotonic()
    base = f"http://127.0.0.1:{port}"
    first = unit_state(unit)
    restarts0 = int(first.get("NRestarts", "0") or 0)
    last_error = "not answering yet"
    if kind == "none":  # a headless tensor-parallel worker has no API; it must simply stay up
        time.sleep(max(interval * 5, 5))
        st = unit_state(unit)
        ok = st.get("ActiveState") == "active" and int(st.get("NRestarts", "0") or 0) == restarts0
        return ok, "running" if ok else f"{unit} is {st.get('ActiveState')}", time.monotonic() - start
    while time.monotonic() - start < timeout:
        st = unit_state(unit)
        if st.get("ActiveState") == "failed":
            return False, f"{unit} failed (Result={st.get('Result')})", time.monotonic() - start
        if st.get("SubState") == "auto-restart" or int(st.get("NRestarts", "0") or 0) > restarts0:
            return False, f"{unit} exited and was restarted by systemd (NRestarts={st.get('NRestarts')})", \
                time.monotonic() - start
        try:
            _, models = _http(f"{base}/v1/models", None, 10)
            ids = [m.get("id") for m in models.get("data", [])]
            if served not in ids:
                return False, f"/v1/models lists {ids}, not {served!r}", time.monotonic() - start
            if kind == "chat":
                _, out = _http(f"{base}/v1/completions",
                               {"model": served, "prompt": "def add(a, b):", "max_tokens": 4, "temperature": 0},
                               120)
                ok = bool(out.get("choices"))
            else:
                _, out = _http(f"{base}/v1/embeddings", {"model": served, "input": ["readiness probe"]}, 120)
                ok = bool(out.get("data") and out["data"][0].get("embedding"))
            if ok:
                return True, "ready", time.monotonic() - start
            last_error = f"empty answer: {str(out)[:200]}"
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError, ValueError) as exc:
            last_error = str(exc)
        time.sleep(interval)
    return False, f"not ready after {timeout:.0f} s ({last_error})", time.monotonic() - start


def journal(unit: str, lines: int) -> str:
    return subprocess.run(["journalctl", "-u", unit, "-n", str(lines), "--no-pager", "-o", "short-iso"],
                          capture_output=True, text=True).stdout


def restart(unit: str) -> None:
    systemctl("reset-failed", unit)
    systemctl("restart", unit, check=True)


def model_of(env_path: str) -> str:
    for line in _read(env_path).decode().splitlines():
        if line.startswith("SPARKCTL_MODEL="):
            return line.split("=", 1)[1]
    return "?"


def apply(args) -> int:
    p = paths(args.service)
    unit = p["unit_name"]
    if not os.path.exists(p["next"]):
        print(f"rollout: {p['next']} does not exist; nothing staged", file=sys.stderr)
        return 2
    checker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "check_vllm_args.py")
    if os.path.exists(checker):  # vLLM's own parser, before anything is stopped
        r = subprocess.run([VENV_PYTHON, checker, p["next"]], capture_output=True, text=True)
        if r.returncode != 0:
            print(f"rollout: vLLM rejects the staged arguments of {unit}; nothing was restarted:\n{r.stderr}",
                  file=sys.stderr)
            return 5
    had_previous = os.path.exists(p["env"])
    if _read(p["env"]) != _read(p["next"]):
        _keep_previous(p["env"], p["prev"])
        _atomic_replace_with_copy_of(p["next"], p["env"])
    systemctl("daemon-reload")
    restart(unit)
    ok, why, took = gate(unit, args.port, args.served, args.kind, args.timeout, args.interval)
    if ok:
        os.makedirs(os.path.dirname(p["stamp"]), mode=0o755, exist_ok=True)
        with open(p["stamp"], "w") as f:
            f.write(stamp(_read(p["unit"]), _read(p["next"]), vllm_version()) + "\n")
        print(json.dumps({"service": args.service, "model": model_of(p["env"]), "status": "ready",
                          "load_s": round(took, 1)}))
        return 0
    failed_model = model_of(p["env"])
    print(f"rollout: {unit} serving {failed_model} is not healthy: {why}", file=sys.stderr)
    print(f"--- last {args.journal} journal lines of {unit} ---\n{journal(unit, args.journal)}", file=sys.stderr)
    if not had_previous or not os.path.exists(p["prev"]) or _read(p["prev"]) == _read(p["env"]):
        print(f"rollout: no previous configuration of {unit} to roll back to; it stays as is (restarting per "
              f"its Restart= policy until StartLimitBurst)", file=sys.stderr)
        return 2
    os.rename(p["prev"], p["env"])
    restart(unit)
    ok2, why2, took2 = gate(unit, args.port, args.served, args.kind, args.timeout, args.interval)
    back = model_of(p["env"])
    if ok2:
        print(f"rollout: ROLLED BACK {unit} to {back} (ready in {took2:.0f} s); the box serves {back} as "
              f"{args.served!r}. The staged configuration ({failed_model}) stays in {p['next']} and will be "
              f"retried by the next deploy.", file=sys.stderr)
        return 3
    print(f"rollout: rollback of {unit} to {back} ALSO FAILED: {why2}; the box has no healthy {args.served!r}.\n"
          f"{journal(unit, args.journal)}", file=sys.stderr)
    return 4


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("status")
    s.add_argument("service")
    a = sub.add_parser("apply")
    a.add_argument("service")
    a.add_argument("--port", type=int, required=True)
    a.add_argument("--served", required=True)
    a.add_argument("--kind", choices=["chat", "embed", "none"], required=True)
    a.add_argument("--timeout", type=float, default=1800)
    a.add_argument("--interval", type=float, default=2)
    a.add_argument("--journal", type=int, default=40)
    args = ap.parse_args(argv)
    if args.cmd == "status":
        print(json.dumps(status(args.service)))
        return 0
    return apply(args)


if __name__ == "__main__":
    sys.exit(main())
