"""Lifecycle of the simulated Spark: boot two, reach each other and the host, reboot with state, leave nothing."""

import os
import time

import pytest

from sparkctl.sim import api, config, instance, net, util
from tests.sim.conftest import have

pytestmark = [
    pytest.mark.scenario("sim-lifecycle"),
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces, mounts, a bridge)"),
    pytest.mark.skipif(not have("debootstrap", "ip", "nsenter", "unshare", "ssh"), reason="host tools missing"),
]

PROBE = ("import socket, sys, urllib.request\n"
         "s = socket.create_connection((sys.argv[1], 22), 3); assert s.recv(4) == b'SSH-'\n"
         "r = urllib.request.urlopen('http://10.250.0.1:8090/api/agent-harnesses', timeout=3); assert r.status == 200\n"
         "print('ok')\n")

UNIT = """[Unit]
Description=lifecycle test: proves enabled services start at boot
[Service]
Type=oneshot
ExecStart=/bin/sh -c 'cat /proc/sys/kernel/random/boot_id > /run/boot-marker'
RemainAfterExit=yes
[Install]
WantedBy=multi-user.target
"""


def leftovers(pids: list[int]) -> list[str]:
    out = []
    if net.our_netns():
        out.append(f"netns {net.our_netns()}")
    if net.our_veths():
        out.append(f"veths {net.our_veths()}")
    if net.link_exists(config.BRIDGE):
        out.append(f"bridge {config.BRIDGE}")
    if (config.cgroup_root() / config.CGROUP_PARENT).exists():
        out.append("cgroup " + config.CGROUP_PARENT)
    alive = [p for p in pids if os.path.exists(f"/proc/{p}")]
    if alive:
        out.append(f"processes {alive}")
    with open("/proc/mounts") as f:
        mounts = [line for line in f if str(config.SIM_DIR) in line or " /run/netns " in line]
    if mounts:
        out.append(f"mounts {mounts}")
    if config.RUN_DIR.exists():
        out.append(f"{config.RUN_DIR} still exists")
    if api.left_running():
        out.append(f"processes naming {config.SIM_DIR}: {api.left_running()}")
    return out


@pytest.fixture
def sim_two(monkeypatch):
    monkeypatch.setattr(util, "QUIET", True)
    if api.running_names():
        pytest.skip("a simulated Spark is already running here; `python -m sparkctl sim down` first")
    try:
        yield api.up(hosts=2, flavors={"spark-2": "ubuntu"}, wheelhouse=False, models=False, lock=False)
    finally:
        api.down()


def test_boot_reach_reboot_down(sim_two):
    t0 = time.monotonic()
    assert [(h["name"], h["address"], h["flavor"]) for h in sim_two] == [
        ("spark-1", "10.250.0.11", "dgx"), ("spark-2", "10.250.0.12", "ubuntu")]
    assert api.hosts() == sim_two
    # each reaches the other (ssh banner) and the host-side hub on 10.250.0.1
    assert api.exec_in("spark-1", ["python3", "-c", PROBE, "10.250.0.12"]).stdout == "ok\n"
    assert api.exec_in("spark-2", ["python3", "-c", PROBE, "spark-1"]).stdout == "ok\n"
    # ssh, the way pyinfra comes in; systemd is up with nothing failed
    r = api.ssh("spark-1", "systemctl is-system-running; hostname; nvidia-smi --query-gpu=name --format=csv,noheader")
    assert r.returncode == 0 and r.stdout.split() == ["running", "spark-1", "NVIDIA", "GB10"], r.stderr
    assert api.exec_in("spark-2", "command -v nvidia-smi || test -e /etc/dgx-release", check=False).returncode != 0
    assert "Acquire::http::Proxy" in api.exec_in("spark-2", "cat /etc/apt/apt.conf.d/01sparkctl-sim-proxy").stdout

    # reboot: state on the overlay survives, enabled services start by themselves, uptime starts again
    api.exec_in("spark-2", "echo kept > /root/state; cat > /etc/systemd/system/marker.service; "
                           "systemctl daemon-reload; systemctl enable --now marker.service", input=UNIT)
    boot1 = api.exec_in("spark-2", "cat /run/boot-marker").stdout
    up1 = float(api.exec_in("spark-2", "cut -d' ' -f1 /proc/uptime").stdout)
    pid1 = instance.systemd_pid("spark-2")
    api.reboot("spark-2")
    assert instance.systemd_pid("spark-2") != pid1
    assert api.exec_in("spark-2", "cat /root/state").stdout == "kept\n"
    deadline = time.monotonic() + 10
    while api.exec_in("spark-2", "systemctl is-active marker.service", check=False).stdout.strip() != "active":
        assert time.monotonic() < deadline, "the enabled service did not start after the reboot"
        time.sleep(0.1)
    assert api.exec_in("spark-2", "cat /run/boot-marker").stdout != boot1
    assert float(api.exec_in("spark-2", "cut -d' ' -f1 /proc/uptime").stdout) < up1 + 5
    assert api.ssh("spark-2", "cat /root/state").stdout == "kept\n"
    assert api.is_running("spark-1")

    pids = [p for n in ("spark-1", "spark-2") for p in (instance.systemd_pid(n), instance.supervisor_pid(n)) if p]
    pids += [d["pid"] for d in api.status()["daemons"] if d["pid"]]
    api.down()
    assert leftovers(pids) == []
    assert not config.HOSTS_FILE.exists()
    print(f"lifecycle: {time.monotonic() - t0:.1f} s")

