"""Python API of the simulated Spark (tests use it; cli.py is a thin layer over it).

    up(hosts=1, flavors=None) -> list[dict]    boot spark-1..N (idempotent) with host daemons, hub, lock
    down()                                     stop everything, remove overlays, leave only caches
    hosts() -> list[dict]                      running instances, as written to .sim/hosts.json
    is_running(name) -> bool
    exec_in(name, argv|str, check=True)        run inside the instance via nsenter (no ssh)
    ssh(name, cmd)                             run over ssh, like the deploy does
    reboot(name, wait=True)                    `systemctl reboot` inside; state survives
    hub_throttle(bytes_per_s | None)           slow the stand-in hub's file bodies (None: full speed)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

from sparkctl.errors import SparkctlError
from sparkctl.sim import config, daemons, hostdeps, instance, net, nvidia_repo, rootfs
from sparkctl.sim import models as _models
from sparkctl.sim import wheelhouse as _wheelhouse
from sparkctl.sim.util import cmdline, kill, processes_naming, run, say, state_lock, step, wait_gone

LOCK_GROUPS = ["all", "gx10", "sim"]


def _flavor_map(names: list[str], flavors) -> dict[str, str]:
    """flavors: None (dgx everywhere), one flavor for all, a list by position, or {name: flavor}."""
    if flavors is None or isinstance(flavors, str):
        out = {n: flavors or config.DEFAULT_FLAVOR for n in names}
    elif isinstance(flavors, dict):
        unknown = set(flavors) - set(names)
        if unknown:
            raise SparkctlError(f"flavor given for {', '.join(sorted(unknown))}, which this `up` does not start "
                                f"(hosts: {', '.join(names)})")
        out = {n: flavors.get(n, config.DEFAULT_FLAVOR) for n in names}
    else:
        flavors = list(flavors)
        out = {n: (flavors[i] if i < len(flavors) else config.DEFAULT_FLAVOR) for i, n in enumerate(names)}
    for n, f in out.items():
        if f not in config.FLAVORS:
            raise SparkctlError(f"flavor of {n} = {f!r} is not valid; expected one of {', '.join(config.FLAVORS)}")
    return out


def _ensure_ssh_key() -> None:
    if not config.SSH_KEY.exists():
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "sparkctl-sim", "-f", config.SSH_KEY])


def _write_known_hosts(names: list[str]) -> None:
    keys = rootfs.host_public_keys()
    lines = [f"{config.address_of(n)} {k}" for n in names for k in keys]
    config.KNOWN_HOSTS.write_text("".join(line + "\n" for line in lines))


def running_names() -> list[str]:
    return [n for n in instance.known_instances() if instance.is_running(n)]


def sim_settings():
    """The simulated Spark's settings (group data all, gx10, sim), validated: the stand-in hub's HF_ENDPOINT, the
    lock file and the secrets folder `up` writes to."""
    from sparkctl.check.load import load

    return load(LOCK_GROUPS)


def refresh_lock() -> str:
    """Write the simulated lock file from the stand-in hub."""
    from sparkctl.lock.refresh import refresh_lock as _refresh

    endpoint = sim_settings().cfg.HF_ENDPOINT
    saved = {k: os.environ.get(k) for k in ("NO_PROXY", "no_proxy")}
    no_proxy = [p for p in (saved["NO_PROXY"] or saved["no_proxy"] or "").split(",") if p]
    os.environ["NO_PROXY"] = os.environ["no_proxy"] = ",".join(no_proxy + [config.HOST_ADDRESS])
    try:  # the stand-in hub is on the bridge: never through a CI proxy
        path = _refresh(LOCK_GROUPS, endpoint=endpoint)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return f"wrote {path}"


def up(hosts: int = 1, flavors=None, *, wheelhouse: bool = True, models: bool = True, lock: bool = True,
       boot_timeout: float = 60, gateways=(), airgapped=()) -> list[dict]:
    """Boot spark-1..spark-N (already-running ones are left alone) with everything they need; returns hosts().

    flavors: None (dgx everywhere), one flavor for all, a list by position, or {name: flavor}. wheelhouse=False,
    models=False and lock=False skip preparing what a test does not need (vLLM installs, hub content, lock).
    gateways: the instances that are the `gateway` group's hosts alone (vLLM's router in front of the others), not
    boxes. airgapped: the boxes cut off the stand-in hub by a firewall on their veth (net.set_airgap), AIRGAPPED
    in their host data; every other instance this `up` boots has the route (a rerun without one lifts its cut)."""
    with state_lock():
        return _up(hosts, flavors, wheelhouse=wheelhouse, models=models, lock=lock, boot_timeout=boot_timeout,
                   gateways=tuple(gateways), airgapped=tuple(airgapped))


def _roles(names: list[str], running: list[str], gateways: tuple[str, ...]) -> dict[str, str]:
    """Each instance's role; refused before anything starts: a gateway this `up` does not boot, all of them
    gateways, or a running instance's role changed (its disk holds what the other role installed)."""
    unknown = sorted(set(gateways) - set(names))
    if unknown:
        raise SparkctlError(f"--gateway {', '.join(unknown)} is not valid; expected one of {', '.join(names)} "
                            f"(the instances this `up` boots)")
    roles = {n: config.GATEWAY_ROLE if n in gateways else config.BOX_ROLE for n in names}
    if config.BOX_ROLE not in roles.values():
        raise SparkctlError(f"--gateway {', '.join(gateways)} leaves no box: a gateway routes to simulated GX10s; "
                            f"boot more --hosts than --gateway names")
    for n in names:
        if n in running and instance.role_of(n) != roles[n]:
            raise SparkctlError(f"{n} is running as a {instance.role_of(n)}, not a {roles[n]}; run "
                                "`python -m sparkctl sim down` first to change roles")
    return roles


def _up(hosts: int, flavors, *, wheelhouse: bool, models: bool, lock: bool, boot_timeout: float,
        gateways: tuple[str, ...] = (), airgapped: tuple[str, ...] = ()) -> list[dict]:
    if not 1 <= hosts <= config.MAX_HOSTS:
        raise SparkctlError(f"--hosts = {hosts} is not valid; expected 1 to {config.MAX_HOSTS}")
    t_all = time.monotonic()
    hostdeps.check()
    names = [config.instance_name(i) for i in range(1, hosts + 1)]
    wanted = _flavor_map(names, flavors)
    running = running_names()
    for n in names:
        if n in running and (instance.flavor_of(n) or config.DEFAULT_FLAVOR) != wanted[n]:
            raise SparkctlError(f"{n} is running with flavor {instance.flavor_of(n)}, not {wanted[n]}; "
                                "run `python -m sparkctl sim down` first to change flavors")
    roles = _roles(names, running, gateways)
    _known(names, "--airgapped", airgapped)
    config.SIM_DIR.mkdir(parents=True, exist_ok=True)
    config.LOG_DIR.mkdir(parents=True, exist_ok=True)
    _ensure_ssh_key()
    _host_side(running, wheelhouse=wheelhouse, models=models)
    for n, role in roles.items():
        instance.set_role(n, role)
    _airgap_markers(names, running, airgapped)
    _start_instances(names, running, wanted, boot_timeout)
    _airgap(names, airgapped)
    all_running = running_names()
    extra = [n for n in all_running if n not in names]
    if extra:
        say(f"note: {', '.join(extra)} also running (beyond --hosts {hosts}); listed in {config.HOSTS_FILE}")
    _write_known_hosts(all_running)
    instance.write_hosts_file(all_running)
    _secrets_and_lock(lock=lock and models, front_doors=sum(r == config.GATEWAY_ROLE for r in roles.values()))
    say(f"sim up: done in {time.monotonic() - t_all:.2f} s; hosts in {config.HOSTS_FILE}")
    return hosts_()


def _known(names: list[str], option: str, given) -> None:
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise SparkctlError(f"{option} {', '.join(unknown)} is not valid; expected one of {', '.join(names)} "
                            f"(the instances this `up` boots)")


def _airgap_markers(names: list[str], running: list[str], airgapped) -> None:
    """Each instance of this `up` marked air-gapped or not before it boots: an air-gapped one boots without the
    stand-in package index (the wheelhouse's bind mount). A running instance keeps what it booted with: changing it
    is refused, naming the instance (stop it first: `sim down`, or api.stop)."""
    for n in names:
        if n in running and instance.is_airgapped(n) != (n in airgapped):
            was = "air-gapped" if instance.is_airgapped(n) else "not air-gapped"
            raise SparkctlError(f"--airgapped: {n} is running {was}, and an instance keeps the network and mounts "
                                f"it booted with; run `python -m sparkctl sim down` first to boot it "
                                f"{'with' if n in airgapped else 'without'} --airgapped {n}")
        instance.set_airgapped(n, n in airgapped)


def _airgap(names: list[str], airgapped) -> None:
    """Each instance of this `up` cut off the stand-in hub or not, as asked (net.set_airgap; its host data)."""
    for n in names:
        net.set_airgap(n, n in airgapped)
        if n in airgapped:
            say(f"{n}: air-gapped: its veth drops what it sends to the stand-in hub, and it has no wheelhouse mount "
                f"(AIRGAPPED in its host data)")


def _host_side(running: list[str], *, wheelhouse: bool, models: bool) -> None:
    """What the instances need from the host: rootfs, wheelhouse, hub repos, NVIDIA repo, bridge, daemons."""
    with step("rootfs") as d:
        d.append(rootfs.ensure(instances_running=bool(running)))
    if wheelhouse:
        with step("wheelhouse") as d:
            d.append(_wheelhouse.ensure())
    if models:
        with step("stand-in hub repos") as d:
            shas = _models.publish()
            d.append(f"{len(shas)} repos")
    with step("stand-in NVIDIA repository") as d:
        d.append(nvidia_repo.build())
    with step(f"bridge {config.BRIDGE} {config.HOST_ADDRESS}/{config.PREFIX_LEN}") as d:
        d.append("created" if net.ensure_bridge() else "present")
    for name in daemons.DAEMONS:
        with step(f"daemon {name}") as d:
            d.append(daemons.start(name))


def _start_instances(names: list[str], running: list[str], wanted: dict[str, str], boot_timeout: float) -> None:
    to_start = [n for n in names if n not in running]
    for n in names:
        if n in running:
            say(f"{n}: already running ({config.address_of(n)}, {instance.flavor_of(n)}), left alone")
    if not to_start:
        return
    t0 = time.monotonic()
    for n in to_start:
        instance.start(n, wanted[n])
    with ThreadPoolExecutor(max_workers=len(to_start)) as pool:
        waits = dict(zip(to_start, pool.map(lambda n: instance.wait_ssh(n, boot_timeout), to_start)))
    for n in to_start:
        say(f"{n}: booted, sshd on {config.address_of(n)}:22 after {waits[n]:.2f} s ({wanted[n]})")
    say(f"instances: {len(to_start)} started in {time.monotonic() - t0:.2f} s")


def _secrets_and_lock(lock: bool, front_doors: int = 0) -> None:
    """The tokens the deploy reads (random, 0600, created once), VRRP's password when two or more gateways share
    the VIP, and, with the hub's repos, the simulated lock."""
    from sparkctl.config.secrets import ensure_api_token, ensure_scrape_token, ensure_vrrp_password

    cfg = sim_settings().cfg
    say(f"api token: {ensure_api_token(cfg)}")
    say(f"scrape token: {ensure_scrape_token(cfg)}")  # what the proxy's scrape paths take
    if front_doors > 1:
        say(f"VRRP password of the front doors (VIP {config.GATEWAY_VIP}): {ensure_vrrp_password(cfg)}")
    if lock:
        with step("lock file") as d:
            d.append(refresh_lock())


def down(keep_overlays: bool = False, purge_cache: bool = False) -> list[str]:
    """Stop instances (clean poweroff, SIGKILL fallback), daemons, netns, veths, bridge, cgroups.

    Overlays are removed (a fresh `up` gives bare hosts) unless keep_overlays; purge_cache also removes the
    cached rootfs, wheelhouse, hub repos, NVIDIA repo and downloads. Returns notes on anything forced."""
    with state_lock():
        return _down(keep_overlays, purge_cache)


def _down(keep_overlays: bool, purge_cache: bool) -> list[str]:
    t0 = time.monotonic()
    notes = _stop_instances(keep_overlays) + _remove_cgroup()
    for name in daemons.DAEMONS:
        if daemons.stop(name):
            say(f"daemon {name}: stopped")
    nvidia_repo.stop_agent(config.NVIDIA_GNUPG_DIR)
    notes += _kill_left_running()
    net.remove_airgaps()
    for n in net.our_netns():
        net.remove_netns(n)
    for v in net.our_veths():
        run(["ip", "link", "del", v], check=False)
    net.remove_bridge()
    net.release_netns_dir()
    config.HOSTS_FILE.unlink(missing_ok=True)
    config.HUB_THROTTLE_FILE.unlink(missing_ok=True)
    moved = _models.reset_to_canonical()
    if moved:
        say(f"hub: main reset to the published commit in {', '.join(moved)}")
    if not keep_overlays and config.RUN_DIR.exists():
        shutil.rmtree(config.RUN_DIR)
    if purge_cache:
        for p in (config.ROOTFS, config.WHEELHOUSE, config.HUB_DIR, config.NVIDIA_REPO_DIR, config.DOWNLOADS,
                  config.NVIDIA_GNUPG_DIR):
            shutil.rmtree(p, ignore_errors=True)
        say("caches removed (rootfs, wheelhouse, hub, NVIDIA repo, downloads)")
    for n in notes:
        say(f"note: {n}")
    say(f"sim down: done in {time.monotonic() - t0:.2f} s")
    return notes


def stop(names) -> list[str]:
    """Stop these instances alone (a box retired from the fleet, or a simulated host that dies), removing their
    overlays; the others keep running and .sim/hosts.json lists only them. Returns notes on anything forced."""
    names = list(names)
    with state_lock():
        unknown = sorted(set(names) - set(instance.known_instances()))
        if unknown:
            raise SparkctlError(f"cannot stop {', '.join(unknown)}: not a simulated instance; expected one of "
                                f"{', '.join(instance.known_instances()) or 'none (nothing is booted)'}")
        for n in names:
            instance.begin_stop(n)
        notes = [note for n in names for note in instance.finish_stop(n)]
        for n in names:
            net.set_airgap(n, False)
            instance.set_airgapped(n, False)
        running = running_names()
        _write_known_hosts(running)
        instance.write_hosts_file(running)
    say(f"instances: {', '.join(names)} stopped; running: {', '.join(running) or 'none'}")
    return notes


def left_running() -> list[int]:
    """Processes still naming the simulated Spark's state directory (a gpg agent of its signing key, say)."""
    return processes_naming(config.SIM_DIR)


def _kill_left_running() -> list[str]:
    """Whatever still runs from the sim's state once its instances and daemons are stopped: TERM, then KILL."""
    left = {p: " ".join(cmdline(p))[:120] for p in left_running()}
    for p in left:
        kill(p)
    notes = []
    for p, what in left.items():
        if not wait_gone(p, 5):
            kill(p, 9)
            notes.append(f"pid {p} ({what}) still ran from {config.SIM_DIR}, SIGKILL")
    return notes


def _stop_instances(keep_overlays: bool) -> list[str]:
    """Every known instance stopped (in parallel: removing a big overlay is I/O-bound); notes on anything forced."""
    notes: list[str] = []
    names = instance.known_instances()
    for n in names:
        instance.begin_stop(n)
    if names:
        with ThreadPoolExecutor(max_workers=len(names)) as pool:
            for n in pool.map(lambda n: instance.finish_stop(n, keep_overlay=keep_overlays), names):
                notes += n
        say(f"instances: {', '.join(names)} stopped")
    return notes


def _remove_cgroup() -> list[str]:
    notes = []
    for p in instance.processes_in_cgroup():
        notes.append(f"pid {p} left in {config.CGROUP_PARENT} cgroup, SIGKILL")
        kill(p, 9)
    try:
        parent = config.cgroup_root() / config.CGROUP_PARENT
        if not instance.remove_cgroup(parent):
            notes.append(f"cgroup {parent} could not be removed")
    except FileNotFoundError:
        pass
    return notes


def hosts_() -> list[dict]:
    return [instance.describe(n) for n in running_names()]


hosts = hosts_


def is_running(name: str) -> bool:
    return instance.is_running(name)


def exec_in(name: str, argv, check: bool = True, **kw) -> subprocess.CompletedProcess:
    return instance.exec_in(name, argv, check=check, **kw)


def ssh_argv(name: str, cmd: str | None = None) -> list[str]:
    from sparkctl.config.hosts import HostConn

    d = instance.describe(name)
    conn = HostConn(name=name, address=d["address"], ssh_user=d["ssh_user"], ssh_port=d["ssh_port"],
                    ssh_key=d["ssh_key"], known_hosts=d["known_hosts"], simulated=True)
    return conn.ssh_argv(cmd)


def ssh(name: str, cmd: str, check: bool = False, timeout: float | None = None) -> subprocess.CompletedProcess:
    """Run `cmd` on the instance over ssh (the way pyinfra reaches it); output captured as text."""
    if not is_running(name):
        raise SparkctlError(f"{name} is not running (python -m sparkctl sim up)")
    p = subprocess.run(ssh_argv(name, cmd), capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise SparkctlError(f"ssh {name} {cmd!r} failed (rc {p.returncode}): {p.stderr.strip()}")
    return p


def reboot(name: str, wait: bool = True, timeout: float = 60) -> float:
    return instance.reboot(name, wait=wait, timeout=timeout)


def hub_throttle(bytes_per_s: float | None) -> None:
    """Slow every file body the stand-in hub sends to bytes_per_s (None or 0: full speed). Takes effect within
    0.2 s, also for downloads in flight."""
    if bytes_per_s:
        config.SIM_DIR.mkdir(parents=True, exist_ok=True)
        config.HUB_THROTTLE_FILE.write_text(f"{float(bytes_per_s)}\n")
    else:
        config.HUB_THROTTLE_FILE.unlink(missing_ok=True)


def status() -> dict:
    insts = []
    for n in instance.known_instances():
        running = instance.is_running(n)
        insts.append({**instance.describe(n), "running": running, "systemd_pid": instance.systemd_pid(n),
                      "sshd": running and instance.ssh_banner(config.address_of(n))})
    return {"instances": insts, "daemons": daemons.status(), "bridge": net.link_exists(config.BRIDGE),
            "rootfs": rootfs.is_baked(), "wheelhouse": _wheelhouse.is_ready()}
