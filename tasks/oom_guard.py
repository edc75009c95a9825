"""OOM guard: unified memory must not let a runaway model wedge the box. earlyoom kills vLLM first and never sshd;
sshd gets a memory floor and a low OOM score, applied to the running daemon too (no restart: a failed sshd start
would leave the box without logins)."""

from __future__ import annotations

import re
from io import StringIO

from pyinfra import host
from pyinfra.api import StringCommand, deploy, operation
from pyinfra.api.command import QuoteString
from pyinfra.operations import files, systemd

from sparkctl.check import rules
from sparkctl.config.settings import Settings
from sparkctl.errors import SettingError
from sparkctl.render import box_files
from tasks.facts import RunningOomGuard


@deploy("OOM guard")
def oom_guard(settings: Settings) -> None:
    """Unified memory: a runaway model must not wedge the box. cgroup MemoryMax does not bound CUDA allocations
    on GB10, so earlyoom watches MemAvailable and kills vLLM first; sshd keeps a memory floor."""
    cfg = settings.cfg
    earlyoom = files.put(name="Configure earlyoom (kill vLLM first, never sshd)",
                         src=StringIO(box_files.earlyoom(cfg)), dest=box_files.EARLYOOM_DEFAULTS,
                         user="root", group="root", mode="0644")
    systemd.service(name="earlyoom enabled and running", service="earlyoom.service", running=True, enabled=True)
    systemd.service(name="Restart earlyoom (its config changed)", service="earlyoom.service", restarted=True,
                    _if=earlyoom.did_change)
    drop = files.put(name="Give sshd a memory floor", src=StringIO(box_files.sshd_dropin(cfg)),
                     dest=box_files.SSHD_DROPIN, user="root", group="root", mode="0644")
    systemd.daemon_reload(name="Reload systemd (sshd drop-in changed)", _if=drop.did_change)
    running_oom_guard(name="Apply the sshd OOM score and memory floor to the running sshd (no restart)",
                      unit="ssh.service", oom_score_adj=cfg.SSHD_OOM_SCORE_ADJUST, memory_min=cfg.SSHD_MEMORY_MIN,
                      memory_min_setting="SSHD_MEMORY_MIN")


def size_setting_bytes(setting: str, value) -> int:
    """A systemd size (MemoryMin=64M) in bytes, as systemd parses it; refuse the forms we cannot compare."""
    text = str(value)
    if not re.fullmatch(r"[1-9][0-9]*[KMGT]?", text):
        raise SettingError(setting, value, "a size in bytes with an optional K, M, G or T suffix, e.g. '64M'")
    return rules.systemd_bytes(text)


@operation()
def running_oom_guard(unit: str, oom_score_adj: int, memory_min: str, memory_min_setting: str):
    """Give the running daemon of `unit` the OOMScoreAdjust=/MemoryMin= its drop-in sets, without a restart.

    systemd applies OOMScoreAdjust= only when it starts a process, so a drop-in added to a running sshd would wait
    for the next sshd start. Restarting sshd would apply it, but a restart whose new sshd fails to start leaves
    the box without logins; so write /proc/<pid>/oom_score_adj of the listener (later connections inherit it)
    and, best effort, of its per-connection children, and set MemoryMin on the unit's cgroup for this boot
    (`systemctl set-property --runtime`; the drop-in carries both across restarts and reboots). A score already
    lower (better protected) than the setting is left alone.
    """
    adj, want_min = int(oom_score_adj), size_setting_bytes(memory_min_setting, memory_min)
    now = host.get_fact(RunningOomGuard, unit=unit)
    if not now["pid"]:
        host.noop(f"{unit} is not running: its drop-in applies when it starts")
        return
    score_ok = now["adj"] is not None and now["adj"] <= adj
    if not score_ok and not now["can_lower"]:
        host.noop(f"running {unit} keeps oom_score_adj {now['adj']}: root here lacks CAP_SYS_RESOURCE (a container), "
                  f"so no OOM score can be lowered; systemd ignores OOMScoreAdjust= there as well")
        score_ok = True
    floor_ok = now["memory_min"] is None or now["memory_min"] == want_min
    if score_ok and floor_ok:
        floor = "no memory controller here" if now["memory_min"] is None else f"memory.min {want_min}"
        host.noop(f"running {unit} (pid {now['pid']}) has oom_score_adj {now['adj']} ({floor})")
        return
    if not score_ok:
        main = str(int(now["pid"]))
        yield StringCommand(f"for p in {main} $(pgrep -P {main}); do echo {adj} > /proc/$p/oom_score_adj",
                            f'2>/dev/null || true; done; test "$(cat /proc/{main}/oom_score_adj)" = {adj}')
    if not floor_ok:
        yield StringCommand("systemctl set-property --runtime", QuoteString(unit),
                            QuoteString(f"MemoryMin={memory_min}"))
