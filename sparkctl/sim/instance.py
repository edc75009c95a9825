"""One simulated Spark: seed its overlay, start it (supervisor + systemd), reach it, reboot it, stop it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

from sparkctl.errors import SparkctlError
from sparkctl.sim import config, net, standins
from sparkctl.sim.util import (
    children,
    cmdline,
    kill,
    pid_alive,
    python,
    python_env,
    read_pid,
    run,
    wait_gone,
)

CONTAINER_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

APT_PROXY_CONF = f"""\
// simulated Spark: no route out of the test host; the host runs an allow-listed proxy for the Debian mirrors
// (sparkctl/sim/aptproxy.py). The stand-in NVIDIA repository on the host itself is reached directly.
Acquire::http::Proxy "http://{config.HOST_ADDRESS}:{config.APT_PROXY_PORT}";
Acquire::http::Proxy::{config.HOST_ADDRESS} "DIRECT";
"""


def cgroup_dir(name: str) -> Path:
    return config.cgroup_root() / config.CGROUP_PARENT / name


def hosts_file_text(name: str) -> str:
    lines = ["127.0.0.1\tlocalhost", f"127.0.1.1\t{name}", "::1\tlocalhost ip6-localhost ip6-loopback",
             f"{config.HOST_ADDRESS}\tsim-host  # the control machine: apt proxy, stand-in hub and NVIDIA repo"]
    for i in range(1, config.MAX_HOSTS + 1):
        n = config.instance_name(i)
        lines.append(f"{config.address_of(n)}\t{n}")
    return "\n".join(lines) + "\n"


def _write(root: Path, rel: str, text: str | bytes, mode: int = 0o644) -> None:
    p = root / rel.lstrip("/")
    p.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, str):
        text = text.encode()
    p.write_bytes(text)
    os.chmod(p, mode)


def seed(name: str, flavor: str) -> None:
    """Write what a real box's image and network would provide into the instance's (new) upper dir."""
    inst = config.instance_dir(name)
    up = inst / "upper"
    _write(up, "/etc/machine-id", uuid.uuid4().hex + "\n", 0o444)
    _write(up, "/etc/hostname", name + "\n")
    _write(up, "/etc/hosts", hosts_file_text(name))
    (up / "root/.ssh").mkdir(parents=True, exist_ok=True)
    os.chmod(up / "root", 0o700)
    os.chmod(up / "root/.ssh", 0o700)
    _write(up, "/root/.ssh/authorized_keys", config.SSH_KEY.with_suffix(".pub").read_text(), 0o600)
    _write(up, "/etc/apt/apt.conf.d/01sparkctl-sim-proxy", APT_PROXY_CONF)
    # every flavor: the pool's admission is the GB10's (its driver's), not the OS image's
    _write(up, standins.GB10_MEMORY_PATH, standins.gb10_memory(), 0o755)
    if flavor == "dgx":  # DGX OS ships the driver and CUDA: the deploy must leave them alone
        _write(up, "/etc/dgx-release", standins.dgx_release())
        _write(up, "/usr/bin/nvidia-smi", standins.nvidia_smi(), 0o755)
        _write(up, "/usr/local/cuda-13.0/bin/nvcc", standins.nvcc(), 0o755)
        _write(up, "/usr/local/cuda-13.0/bin/ptxas", standins.ptxas(), 0o755)
        link = up / "usr/local/cuda"
        if not link.is_symlink():
            link.symlink_to("cuda-13.0")
    (inst / "seeded").write_text(flavor + "\n")


def flavor_of(name: str) -> str | None:
    try:
        return (config.instance_dir(name) / "flavor").read_text().strip()
    except FileNotFoundError:
        return None


def role_of(name: str) -> str:
    """"box" (a simulated GX10: group gx10) or "gateway" (a host of the `gateway` group only: vLLM's router)."""
    try:
        return (config.instance_dir(name) / "role").read_text().strip()
    except FileNotFoundError:
        return config.BOX_ROLE


def set_role(name: str, role: str) -> None:
    inst = config.instance_dir(name)
    inst.mkdir(parents=True, exist_ok=True)
    (inst / "role").write_text(role + "\n")


def is_airgapped(name: str) -> bool:
    """`sim up --airgapped NAME`: the box has no route to the stand-in hub (its host data AIRGAPPED = True)."""
    return (config.instance_dir(name) / "airgapped").exists()


def set_airgapped(name: str, airgapped: bool) -> None:
    marker = config.instance_dir(name) / "airgapped"
    if airgapped:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text("1\n")
    else:
        marker.unlink(missing_ok=True)


def supervisor_pid(name: str) -> int | None:
    pid = read_pid(config.instance_dir(name) / "supervisor.pid")
    if pid and "sparkctl.sim.supervisor" not in " ".join(cmdline(pid)):
        return None  # a recycled pid, not ours
    return pid


def systemd_pid(name: str) -> int | None:
    """Host PID of the instance's PID 1 (systemd once booted), or None when it is not running."""
    u = read_pid(config.instance_dir(name) / "unshare.pid")
    if not u:
        return None
    kids = children(u)
    return kids[0] if kids and pid_alive(kids[0]) else None


def is_running(name: str) -> bool:
    return supervisor_pid(name) is not None and systemd_pid(name) is not None


def ro_binds(name: str) -> list[str]:
    """The host folders bind-mounted read-only into the instance (host:instance): the wheelhouse, which stands in
    for the package index, unless the box is air-gapped (it has no route to an index)."""
    if (config.WHEELHOUSE / ".complete").exists() and not is_airgapped(name):
        return [f"{config.WHEELHOUSE}:{config.WHEELHOUSE_MOUNT}"]
    return []


def start(name: str, flavor: str) -> None:
    """Start the instance (new or with its kept overlay). Returns once its supervisor runs; see wait_ssh()."""
    if flavor not in config.FLAVORS:
        raise SparkctlError(f"flavor {flavor!r} is not valid; expected one of {', '.join(config.FLAVORS)}")
    inst = config.instance_dir(name)
    for sub in ("upper", "work", "merged"):
        (inst / sub).mkdir(parents=True, exist_ok=True)
    for stale in ("stopping", "unshare.pid"):
        (inst / stale).unlink(missing_ok=True)
    for child in (inst / "work").iterdir():
        shutil.rmtree(child, ignore_errors=True)
    if not (inst / "seeded").exists():
        seed(name, flavor)
    (inst / "flavor").write_text(flavor + "\n")
    binds = ro_binds(name)
    for b in binds:
        if any(c.isspace() for c in b):
            raise SparkctlError(f"the path {b.split(':')[0]!r} contains whitespace; move the repository")
    (inst / "ro-binds").write_text(" ".join(binds) + "\n")
    net.ensure_netns(name)
    cg = cgroup_dir(name)
    cg.mkdir(parents=True, exist_ok=True)
    log = open(inst / "supervisor.log", "ab")
    from sparkctl import REPO_ROOT

    p = subprocess.Popen([python(), "-m", "sparkctl.sim.supervisor", name], cwd=REPO_ROOT, env=python_env(),
                         stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    log.close()
    (inst / "supervisor.pid").write_text(f"{p.pid}\n")


def ssh_banner(address: str, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((address, 22), timeout=timeout) as s:
            s.settimeout(timeout)
            return s.recv(4).startswith(b"SSH-")
    except OSError:
        return False


def console_tail(name: str, n: int = 30) -> str:
    p = config.instance_dir(name) / "console.log"
    try:
        return "\n".join(p.read_text(errors="replace").splitlines()[-n:])
    except FileNotFoundError:
        return "(no console.log)"


def wait_ssh(name: str, timeout: float = 60, not_pid: int | None = None) -> float:
    """Wait until sshd answers on the instance address; returns the seconds waited."""
    t0 = time.monotonic()
    addr = config.address_of(name)
    while True:
        pid = systemd_pid(name)
        if pid and pid != not_pid and ssh_banner(addr):
            return time.monotonic() - t0
        if supervisor_pid(name) is None and time.monotonic() - t0 > 0.5:
            raise SparkctlError(f"{name} stopped while booting; its console:\n{console_tail(name)}")
        if time.monotonic() - t0 > timeout:
            raise SparkctlError(f"{name}: sshd did not answer on {addr}:22 within {timeout:.0f} s; its console:\n"
                                f"{console_tail(name)}")
        time.sleep(0.05)


def nsenter_argv(name: str, argv: list[str]) -> list[str]:
    pid = systemd_pid(name)
    if pid is None:
        raise SparkctlError(f"{name} is not running (python -m sparkctl sim up)")
    return ["nsenter", "-t", str(pid), "-m", "-u", "-i", "-n", "-p", "-C", "-T", "-r", "-w",
            "env", "-i", CONTAINER_PATH, "HOME=/root", "LANG=C.UTF-8", "TERM=dumb", "USER=root", "LOGNAME=root",
            *argv]


def exec_in(name: str, argv: list[str] | str, check: bool = True, capture: bool = True,
            timeout: float | None = None, input: str | None = None) -> subprocess.CompletedProcess:
    """Run a command inside the instance (all its namespaces and its root), as root, without ssh."""
    if isinstance(argv, str):
        argv = ["/bin/sh", "-c", argv]
    full = nsenter_argv(name, list(argv))
    p = subprocess.run(full, capture_output=capture, text=True, timeout=timeout, input=input)
    if check and p.returncode != 0:
        raise SparkctlError(f"{name}: {' '.join(argv)} failed (rc {p.returncode})"
                            + (f"\n{(p.stderr or '') + (p.stdout or '')}".rstrip() if capture else ""))
    return p


def reboot(name: str, wait: bool = True, timeout: float = 60) -> float:
    """`systemctl reboot` inside; the supervisor boots it again on the same overlay. Returns seconds to sshd."""
    old = systemd_pid(name)
    if old is None:
        raise SparkctlError(f"{name} is not running")
    t0 = time.monotonic()
    exec_in(name, ["systemctl", "reboot", "--no-block"], check=False, timeout=15)
    if not wait:
        return 0.0
    wait_gone(old, timeout)
    wait_ssh(name, timeout=max(1.0, timeout - (time.monotonic() - t0)), not_pid=old)
    return time.monotonic() - t0


def processes_in_cgroup(name: str | None = None) -> list[int]:
    """Host PIDs of every process in our cgroup subtree (one instance, or all when name is None)."""
    try:
        base = config.cgroup_root() / config.CGROUP_PARENT
    except FileNotFoundError:
        return []
    if name:
        base = base / name
    pids: list[int] = []
    if base.exists():
        for d, _, files in os.walk(base):
            if "cgroup.procs" in files:
                try:
                    pids += [int(x) for x in Path(d, "cgroup.procs").read_text().split()]
                except OSError:
                    pass
    return pids


def remove_cgroup(path: Path) -> bool:
    """rmdir a cgroup tree bottom-up; True when it is gone."""
    if not path.exists():
        return True
    for d, _, _ in sorted(os.walk(path), key=lambda t: -t[0].count("/")):
        try:
            os.rmdir(d)
        except OSError:
            pass
    return not path.exists()


def begin_stop(name: str) -> None:
    """Ask the instance to power off (non-blocking); finish_stop() waits and cleans up."""
    inst = config.instance_dir(name)
    if inst.exists():
        (inst / "stopping").write_text("1\n")
    pid = systemd_pid(name)
    if pid:
        try:
            p = exec_in(name, ["systemctl", "poweroff", "--no-block"], check=False, timeout=5)
            ok = p.returncode == 0
        except (subprocess.TimeoutExpired, SparkctlError):
            ok = False
        if not ok:
            kill(pid, signal.SIGRTMIN + 4)  # systemd: start poweroff.target


def _end(pid: int | None, grace: float, after_kill: float) -> bool:
    """Give a process `grace` seconds to exit, then SIGKILL it and wait `after_kill`; False when it was killed."""
    if not pid or wait_gone(pid, grace):
        return True
    kill(pid, signal.SIGKILL)
    wait_gone(pid, after_kill)
    return False


def _kill_leftovers(name: str) -> list[str]:
    left = processes_in_cgroup(name)
    if not left:
        return []
    for p in left:
        kill(p, signal.SIGKILL)
    for p in left:
        wait_gone(p, 2)
    return [f"{name}: {len(left)} processes left in its cgroup, SIGKILL"]


def _remove_traces(name: str, inst: Path, keep_overlay: bool) -> list[str]:
    """Remove the stopped instance's cgroup, netns, pid files and (unless kept) its overlay."""
    notes = []
    try:
        if not remove_cgroup(cgroup_dir(name)):
            notes.append(f"{name}: cgroup {cgroup_dir(name)} could not be removed")
    except FileNotFoundError:
        pass
    net.remove_netns(name)
    for f in ("supervisor.pid", "unshare.pid", "stopping"):
        (inst / f).unlink(missing_ok=True)
    if not keep_overlay and inst.exists():
        # nothing is mounted on the host side (all mounts lived in the instance's mount namespace)
        run(["rm", "-rf", "--one-file-system", inst])
    return notes


def finish_stop(name: str, timeout: float = 20, keep_overlay: bool = False) -> list[str]:
    """Wait for the poweroff (SIGKILL after timeout), then remove netns, veth, cgroup and (unless kept) the overlay.

    Returns notes on anything that needed force."""
    notes: list[str] = []
    inst = config.instance_dir(name)
    # systemd is PID 1 of a pid namespace: killing it, the kernel kills everything in it
    if not _end(systemd_pid(name), timeout, 5):
        notes.append(f"{name}: no clean poweroff within {timeout:.0f} s, SIGKILL")
    _end(read_pid(inst / "unshare.pid"), 5, 2)
    _end(supervisor_pid(name), 5, 2)
    return notes + _kill_leftovers(name) + _remove_traces(name, inst, keep_overlay)


def known_instances() -> list[str]:
    """Every instance with a run dir, a netns or a cgroup (running or not)."""
    names = set()
    if config.RUN_DIR.exists():
        names |= {p.name for p in config.RUN_DIR.iterdir() if p.is_dir()}
    names |= set(net.our_netns())
    try:
        cg = config.cgroup_root() / config.CGROUP_PARENT
        if cg.exists():
            names |= {p.name for p in cg.iterdir() if p.is_dir()}
    except FileNotFoundError:
        pass
    valid = []
    for n in names:
        try:
            config.instance_index(n)
            valid.append(n)
        except ValueError:
            pass
    return sorted(valid, key=config.instance_index)


def describe(name: str, front_doors: int = 1) -> dict:
    """An instance's entry in hosts.json; a gateway among two or more (front_doors) carries the front doors' VIP as
    its own host data (one gateway keeps no VIP: no keepalived, as a single real gateway)."""
    entry = {"name": name, "address": config.address_of(name), "ssh_port": 22, "ssh_user": "root",
             "ssh_key": str(config.SSH_KEY), "known_hosts": str(config.KNOWN_HOSTS),
             "flavor": flavor_of(name) or config.DEFAULT_FLAVOR, "role": role_of(name)}
    if entry["role"] == config.GATEWAY_ROLE and front_doors > 1:
        entry["GATEWAY_VIP"] = config.GATEWAY_VIP
    if is_airgapped(name):
        entry["AIRGAPPED"] = True  # host data: the deploy gets its checkpoints from the fleet only
    return entry


def write_hosts_file(names: list[str]) -> None:
    front_doors = sum(role_of(n) == config.GATEWAY_ROLE for n in names)
    config.HOSTS_FILE.write_text(json.dumps([describe(n, front_doors) for n in names], indent=2) + "\n")
