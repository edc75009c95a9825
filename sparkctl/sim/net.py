"""The simulated network: a Linux bridge on the host (10.250.0.1/24) and one netns + veth per instance.

No routing, NAT or iptables change is made on the host: instances reach each other and the host-side daemons on
10.250.0.1 over the bridge, and nothing else (apt goes through the allow-listed proxy). An AIRGAPPED instance
(`sim up --airgapped NAME`) also gets an nft table of its own on its veth's ingress (what the box sends): it drops
the box's connections to the stand-in hub (config.AIRGAP_BLOCKED_PORTS), as a box with no route to the Hub.
"""

from __future__ import annotations

import os
from pathlib import Path

from sparkctl.sim import config
from sparkctl.sim.util import run

NETNS_RUN = Path("/run/netns")


def link_exists(name: str) -> bool:
    return Path(f"/sys/class/net/{name}").exists()


def netns_exists(name: str) -> bool:
    return (NETNS_RUN / config.netns_of(name)).exists()


def our_netns() -> list[str]:
    """Instance names that have a netns (ours are named sparkctl-spark-N)."""
    try:
        entries = os.listdir(NETNS_RUN)
    except FileNotFoundError:
        return []
    return sorted(e[len(config.NETNS_PREFIX):] for e in entries if e.startswith(config.NETNS_PREFIX + "spark-"))


def our_veths() -> list[str]:
    try:
        names = os.listdir("/sys/class/net")
    except FileNotFoundError:
        return []
    return sorted(n for n in names if n.startswith(config.VETH_PREFIX) and n[len(config.VETH_PREFIX):].isdigit())


def ensure_bridge() -> bool:
    """Create and address the bridge if missing; True when it was created."""
    created = False
    br = config.BRIDGE
    if not link_exists(br):
        run(["ip", "link", "add", br, "type", "bridge"])
        created = True
    addr = f"{config.HOST_ADDRESS}/{config.PREFIX_LEN}"
    out = run(["ip", "-o", "-4", "addr", "show", "dev", br]).stdout
    if f" {addr} " not in out:
        run(["ip", "addr", "add", addr, "dev", br])
    run(["ip", "link", "set", br, "up"])
    return created


def remove_bridge() -> None:
    if link_exists(config.BRIDGE):
        run(["ip", "link", "del", config.BRIDGE])


def ensure_netns(name: str) -> None:
    """netns sparkctl-NAME with eth0 = the instance address, veth peer attached to the bridge. No default route."""
    ns, veth, addr = config.netns_of(name), config.veth_of(name), config.address_of(name)
    if not netns_exists(name):
        run(["ip", "netns", "add", ns])
    inside = ["ip", "-n", ns]
    have_eth0 = run(inside + ["link", "show", "eth0"], check=False).returncode == 0
    if not have_eth0:
        if link_exists(veth):  # stale host end from a crashed run
            run(["ip", "link", "del", veth], check=False)
        run(["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns])
    run(["ip", "link", "set", veth, "master", config.BRIDGE])
    run(["ip", "link", "set", veth, "up"])
    out = run(inside + ["-o", "-4", "addr", "show", "dev", "eth0"]).stdout
    if f" {addr}/{config.PREFIX_LEN} " not in out:
        run(inside + ["addr", "add", f"{addr}/{config.PREFIX_LEN}", "dev", "eth0"])
    run(inside + ["link", "set", "lo", "up"])
    run(inside + ["link", "set", "eth0", "up"])


def remove_netns(name: str) -> None:
    """Delete the netns (its eth0 and so the veth pair go with it) and any stale host end."""
    if netns_exists(name):
        run(["ip", "netns", "del", config.netns_of(name)], check=False)
    veth = config.veth_of(name)
    if link_exists(veth):
        run(["ip", "link", "del", veth], check=False)


def release_netns_dir() -> None:
    """`ip netns add` leaves /run/netns bind-mounted on itself; undo that once no netns at all is left."""
    try:
        if os.listdir(NETNS_RUN):
            return
    except FileNotFoundError:
        return
    with open("/proc/self/mountinfo") as f:
        mounted = sum(1 for line in f if line.split()[4] == str(NETNS_RUN))
    for _ in range(mounted):
        run(["umount", NETNS_RUN], check=False)
    try:
        NETNS_RUN.rmdir()
    except OSError:
        pass


def airgap_table(name: str) -> str:
    return f"{config.AIRGAP_TABLE_PREFIX}{config.FIRST_HOST_OCTET + config.instance_index(name) - 1}"


def airgap_rules(name: str) -> str:
    """The nft table that cuts an instance off the stand-in hub: on its veth's ingress, dropped before the host."""
    ports = ", ".join(str(p) for p in config.AIRGAP_BLOCKED_PORTS)
    return (f"table netdev {airgap_table(name)} {{\n"
            f"  chain ingress {{\n"
            f"    type filter hook ingress device \"{config.veth_of(name)}\" priority 0; policy accept;\n"
            f"    ip daddr {config.HOST_ADDRESS} tcp dport {{ {ports} }} counter drop\n"
            f"  }}\n}}\n")


def our_airgap_tables() -> list[str]:
    out = run(["nft", "list", "tables", "netdev"], check=False).stdout or ""
    return [line.split()[-1] for line in out.splitlines() if line.split()[-1:] and
            line.split()[-1].startswith(config.AIRGAP_TABLE_PREFIX)]


def set_airgap(name: str, airgapped: bool) -> None:
    """Cut the instance off the stand-in hub (airgapped) or lift that; idempotent."""
    table = airgap_table(name)
    if table in our_airgap_tables():
        run(["nft", "delete", "table", "netdev", table])
    if airgapped:
        run(["nft", "-f", "-"], input=airgap_rules(name))


def remove_airgaps() -> None:
    for table in our_airgap_tables():
        run(["nft", "delete", "table", "netdev", table], check=False)
