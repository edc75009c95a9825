"""What the control machine needs before `sim up`: root, namespaces, and a few Debian tools."""

from __future__ import annotations

import os
import shutil

from sparkctl.errors import SparkctlError
from sparkctl.sim.config import PACKAGE_DIR, cgroup_root

# tool -> Debian package that provides it (host-packages.txt lists the packages for CI's apt-get install)
TOOLS = {
    "debootstrap": "debootstrap",
    "ip": "iproute2",
    "dpkg-deb": "dpkg",
    "apt-ftparchive": "apt-utils",
    "gpg": "gnupg",
    "ssh-keygen": "openssh-client",
    "ssh": "openssh-client",
    "git": "git",
    "nsenter": "util-linux",
    "unshare": "util-linux",
    "mount": "mount",
}
HOST_PACKAGES_FILE = PACKAGE_DIR / "host-packages.txt"


def host_packages() -> list[str]:
    return [line.strip() for line in HOST_PACKAGES_FILE.read_text().splitlines()
            if line.strip() and not line.startswith("#")]


def missing_tools(path: str | None = None) -> dict[str, str]:
    """tool -> package, for every required tool not on `path` (default: PATH plus the sbin dirs, where root's tools live)."""
    if path is None:
        path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/local/sbin", "/usr/sbin", "/sbin"])
    search = path
    return {tool: pkg for tool, pkg in TOOLS.items() if shutil.which(tool, path=search) is None}


def check() -> None:
    """Refuse clearly when the simulated Spark cannot run on this machine."""
    if os.geteuid() != 0:
        raise SparkctlError("the simulated Spark needs root (namespaces, mounts, a bridge); run `sim up` as root")
    missing = missing_tools()
    if missing:
        lines = [f"  {tool:15} (Debian package {pkg})" for tool, pkg in missing.items()]
        pkgs = " ".join(sorted(set(missing.values())))
        raise SparkctlError("the simulated Spark needs tools this machine lacks:\n" + "\n".join(lines)
                            + f"\ninstall them with: apt-get install -y {pkgs}"
                            + f"\n(the full list is {HOST_PACKAGES_FILE})")
    try:
        cgroup_root()
    except FileNotFoundError:
        raise SparkctlError("no cgroup v2 hierarchy on this machine (looked at /sys/fs/cgroup/unified and "
                            "/sys/fs/cgroup); systemd in the test hosts needs one") from None
