"""One simulated Spark's supervisor: starts its namespaces + systemd, and starts them again on `systemctl reboot`.

Run detached by instance.start() as `python -m sparkctl.sim.supervisor NAME`. `systemctl reboot` inside a PID
namespace makes the kernel kill its PID 1 with SIGHUP; anything else (poweroff = SIGINT, SIGKILL, a boot failure)
ends the supervisor. The overlay upper dir survives a reboot, so the instance keeps its state.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from sparkctl.sim import config
from sparkctl.sim.util import python_env

REBOOT_CODES = (-signal.SIGHUP, 128 + signal.SIGHUP)


def boot_argv(name: str) -> list[str]:
    with open("/proc/uptime") as f:
        uptime = int(float(f.read().split()[0]))
    return [
        "nsenter", f"--net=/run/netns/{config.netns_of(name)}", "--",
        "unshare", "--pid", "--fork", "--kill-child", "--mount", "--propagation", "private", "--uts", "--ipc",
        # a time namespace whose boot clock starts near 0: /proc/uptime drops on every reboot, as on a real box
        "--time", f"--boottime={-(uptime - 1)}",
        "/bin/sh", str(config.BOOT_SCRIPT),
    ]


def main(name: str) -> int:
    inst = config.instance_dir(name)
    env = python_env()
    env.update({
        "SIM_ROOTFS": str(config.ROOTFS),
        "SIM_INSTANCE": str(inst),
        "SIM_CGROUP": str(config.cgroup_root() / config.CGROUP_PARENT / name),
        "SIM_RO_BINDS": (inst / "ro-binds").read_text().strip() if (inst / "ro-binds").exists() else "",
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    })
    signal.signal(signal.SIGTERM, lambda *_: None)  # stopping is instance.stop()'s job: poweroff, then we exit
    boots = 0
    with open(inst / "console.log", "ab", buffering=0) as console:
        while True:
            boots += 1
            console.write(f"[supervisor] boot {boots} at {time.strftime('%H:%M:%S')}\n".encode())
            p = subprocess.Popen(boot_argv(name), stdin=subprocess.DEVNULL, stdout=console, stderr=console, env=env)
            (inst / "unshare.pid").write_text(f"{p.pid}\n")
            rc = p.wait()
            console.write(f"[supervisor] namespaces ended rc={rc}\n".encode())
            if rc not in REBOOT_CODES or (inst / "stopping").exists():
                break
            # the overlay's workdir must be empty-ish for the next mount; the upper dir (state) stays
            for child in (inst / "work").iterdir():
                subprocess.run(["rm", "-rf", str(child)])
    (inst / "unshare.pid").unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
