"""The host-side daemons on the bridge address: apt proxy (3142), stand-in hub (8090), stand-in NVIDIA repo (8091).

Each runs detached as `python -m ...`, with its pid in .sim/<name>.pid and its log in .sim/logs/<name>.log.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time

from sparkctl import REPO_ROOT
from sparkctl.errors import SparkctlError
from sparkctl.sim import config
from sparkctl.sim.util import cmdline, kill, python, python_env, read_pid, wait_gone

DAEMONS = {  # name -> (module argv, port)
    "apt-proxy": (["sparkctl.sim.aptproxy"], config.APT_PROXY_PORT),
    "hub": (["sparkctl.sim.hub"], config.HUB_PORT),
    "nvidia-repo": (["sparkctl.sim.nvidia_repo", "serve"], config.NVIDIA_REPO_PORT),
}


def pid_file(name: str):
    return config.SIM_DIR / f"{name}.pid"


def log_file(name: str):
    return config.LOG_DIR / f"{name}.log"


def pid_of(name: str) -> int | None:
    pid = read_pid(pid_file(name))
    if pid and DAEMONS[name][0][0] not in cmdline(pid):
        return None  # a recycled pid, not ours
    return pid


def port_open(port: int, host: str = config.HOST_ADDRESS, timeout: float = 0.3) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def start(name: str, timeout: float = 15) -> str:
    """Start one daemon unless it runs; returns "running" or "started"."""
    if pid_of(name):
        return "running"
    module, port = DAEMONS[name]
    if port_open(port):
        raise SparkctlError(f"{config.HOST_ADDRESS}:{port} is taken by a process that is not this repository's "
                            f"{name} (pid file {pid_file(name)}); stop it, or run `sim down` from its checkout")
    config.LOG_DIR.mkdir(parents=True, exist_ok=True)
    with open(log_file(name), "ab") as log:
        p = subprocess.Popen([python(), "-m", *module], cwd=REPO_ROOT, env=python_env(), stdin=subprocess.DEVNULL,
                             stdout=log, stderr=log, start_new_session=True)
    pid_file(name).write_text(f"{p.pid}\n")
    deadline = time.monotonic() + timeout
    while not port_open(port):
        if p.poll() is not None:
            tail = log_file(name).read_text(errors="replace")[-2000:]
            raise SparkctlError(f"{name} exited (rc {p.returncode}) at start; {log_file(name)}:\n{tail}")
        if time.monotonic() > deadline:
            raise SparkctlError(f"{name} did not listen on {config.HOST_ADDRESS}:{port} within {timeout:.0f} s")
        time.sleep(0.05)
    return "started"


def stop(name: str) -> bool:
    """Stop one daemon by its pid file; True when one was running."""
    pid = pid_of(name)
    if pid:
        kill(pid, signal.SIGTERM)
        if not wait_gone(pid, 5):
            kill(pid, signal.SIGKILL)
            wait_gone(pid, 2)
    pid_file(name).unlink(missing_ok=True)
    return bool(pid)


def status() -> list[dict]:
    return [{"name": n, "pid": pid_of(n), "address": f"{config.HOST_ADDRESS}:{port}",
             "listening": port_open(port), "log": str(log_file(n))} for n, (_, port) in DAEMONS.items()]
