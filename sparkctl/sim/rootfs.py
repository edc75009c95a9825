"""The pristine rootfs every instance starts from: debootstrapped once (~1 min), then only ever read."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from sparkctl.errors import SparkctlError
from sparkctl.sim import config
from sparkctl.sim.util import run, say, step

# bump when customize() changes: a cached rootfs with an older stamp is re-customized (no new debootstrap)
ROOTFS_VERSION = "2"
STAMP = "etc/sparkctl-sim-rootfs"

SOURCES = f"""\
# simulated Spark: Debian {config.SUITE}, reached through the host's apt proxy (see apt.conf.d/01sparkctl-sim-proxy)
deb {config.DEBIAN_MIRROR} {config.SUITE} main
deb {config.DEBIAN_MIRROR} {config.SUITE}-updates main
deb http://deb.debian.org/debian-security {config.SUITE}-security main
"""

SSHD_DROPIN = """\
# simulated Spark: root logs in with the key in .sim/id_ed25519 (seeded per instance), never with a password
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
"""

# no console exists in a test host (and none may touch the VM's console); apt's timers would grab the dpkg lock
# at boot (Persistent=true, no stamp yet) in the middle of a deploy
MASKED_UNITS = ["getty.target", "console-getty.service", "getty@.service", "serial-getty@.service",
                "container-getty@.service", "apt-daily.timer", "apt-daily-upgrade.timer"]


def is_baked(root: Path = config.ROOTFS) -> bool:
    return (root / "lib/systemd/systemd").exists() and (root / STAMP).exists()


def stamp_current(root: Path = config.ROOTFS) -> bool:
    try:
        return (root / STAMP).read_text().strip() == ROOTFS_VERSION
    except FileNotFoundError:
        return False


def customize(root: Path) -> None:
    """Idempotent changes on top of debootstrap's result (only while no instance uses the rootfs)."""
    (root / "etc/apt/sources.list").write_text(SOURCES)
    d = root / "etc/ssh/sshd_config.d"
    d.mkdir(parents=True, exist_ok=True)
    (d / "sparkctl-sim.conf").write_text(SSHD_DROPIN)
    for unit in MASKED_UNITS:
        link = root / "etc/systemd/system" / unit
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to("/dev/null")
    resolv = root / "etc/resolv.conf"
    if resolv.is_symlink() or resolv.exists():
        resolv.unlink()
    resolv.write_text("# simulated Spark: no DNS (no route out); peers are in /etc/hosts, apt goes through a proxy\n")
    (root / "etc/hostname").write_text("spark\n")
    # each instance gets its own /etc/machine-id in its upper dir; the rootfs one would be shared by every clone
    (root / "etc/machine-id").write_text("")
    dbus_id = root / "var/lib/dbus/machine-id"  # debootstrap's own id would be shared by every clone too
    if dbus_id.parent.is_dir() and not dbus_id.is_symlink():
        dbus_id.unlink(missing_ok=True)
        dbus_id.symlink_to("/etc/machine-id")
    (root / STAMP).write_text(ROOTFS_VERSION + "\n")


def _refresh(root: Path, instances_running: bool) -> str:
    """A baked rootfs: kept when its stamp is current, re-customized when not (unless instances use it)."""
    if stamp_current(root):
        return "cached"
    if instances_running:
        say(f"rootfs: {root} is from an older sparkctl (stamp != {ROOTFS_VERSION}); "
            "instances are running, so it is left as is until `sim down`")
        return "cached (stale stamp)"
    customize(root)
    return "re-customized"


def _debootstrap(target: Path) -> None:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    p = run(["debootstrap", "--variant=minbase", "--include=" + ",".join(config.ROOTFS_PACKAGES),
             config.SUITE, target, config.DEBIAN_MIRROR], check=False, env=env)
    if p.returncode != 0:
        log = target / "debootstrap/debootstrap.log"
        tail = log.read_text()[-3000:] if log.exists() else (p.stderr or p.stdout)[-3000:]
        raise SparkctlError(f"debootstrap failed (rc {p.returncode}):\n{tail}")


def ensure(force: bool = False, instances_running: bool = False) -> str:
    """Bake the rootfs if needed; returns what was done ("cached", "re-customized", "baked")."""
    root = config.ROOTFS
    if is_baked(root) and not force:
        return _refresh(root, instances_running)
    if instances_running:
        raise SparkctlError(f"cannot rebuild {root} while instances use it; run `python -m sparkctl sim down` first")
    partial = root.with_name(root.name + ".partial")  # renamed to root only once complete
    for leftover in (partial, root):
        if leftover.exists():
            shutil.rmtree(leftover)
    partial.parent.mkdir(parents=True, exist_ok=True)
    with step(f"rootfs: debootstrap {config.SUITE} (once)"):
        _debootstrap(partial)
    if not (partial / "etc/ssh/ssh_host_ed25519_key.pub").exists():
        run(["chroot", partial, "ssh-keygen", "-A"])
    customize(partial)
    partial.rename(root)
    return "baked"


def host_public_keys(root: Path = config.ROOTFS) -> list[str]:
    """The instances' ssh host keys (every instance of this rootfs has the same ones)."""
    keys = []
    for p in sorted((root / "etc/ssh").glob("ssh_host_*_key.pub")):
        parts = p.read_text().split()
        keys.append(f"{parts[0]} {parts[1]}")
    return keys
