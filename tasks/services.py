"""Services: one root-only env file and one systemd unit per vLLM server; restart only what changed.

The env file is staged as <env>.next; rollout.py swaps it in by atomic rename (keeping the previous one as
<env>.prev), restarts the unit and gates on readiness, rolling back if the new configuration does not come up.
A flip therefore changes only the coder's staged env file, and only the coder restarts.
"""

from __future__ import annotations

from io import StringIO

from pyinfra.api import deploy
from pyinfra.operations import files, systemd
from pyinfra.operations.util import any_changed

from sparkctl.config.catalog import CODER
from sparkctl.config.settings import Settings
from sparkctl.render import units as svcs
from tasks.ops import rollout, running_oom_guard


def rollout_env(d: dict) -> str:
    """Environment prefix telling rollout.py where this deploy keeps things (settings, not hard-coded paths)."""
    return (f"SPARKCTL_ENV_DIR={d['ENV_DIR']} SPARKCTL_STATE_DIR={d['STATE_DIR']} "
            f"SPARKCTL_VENV_PYTHON={d['SPARKCTL_HOME']}/venv/bin/python SPARKCTL_VLLM_DIST={d['VLLM_DIST']}")


@deploy("OOM guard")
def oom_guard(settings: Settings) -> None:
    """Unified memory: a runaway model must not wedge the box. cgroup MemoryMax does not bound CUDA allocations
    on GB10, so earlyoom watches MemAvailable and kills vLLM first; sshd keeps a memory floor."""
    d = settings.data
    cfg = files.put(name="Configure earlyoom (kill vLLM first, never sshd)",
                    src=StringIO(svcs.render_template("earlyoom.j2", d=d)), dest="/etc/default/earlyoom",
                    user="root", group="root", mode="0644")
    systemd.service(name="earlyoom enabled and running", service="earlyoom.service", running=True, enabled=True)
    systemd.service(name="Restart earlyoom (its config changed)", service="earlyoom.service", restarted=True,
                    _if=cfg.did_change)
    drop = files.put(name="Give sshd a memory floor", src=StringIO(svcs.render_template("sshd-memory.conf.j2", d=d)),
                     dest="/etc/systemd/system/ssh.service.d/sparkctl-memory.conf", user="root", group="root",
                     mode="0644")
    systemd.daemon_reload(name="Reload systemd (sshd drop-in changed)", _if=drop.did_change)
    running_oom_guard(name="Apply the sshd OOM score and memory floor to the running sshd (no restart)",
                      unit="ssh.service", oom_score_adj=d["SSHD_OOM_SCORE_ADJUST"], memory_min=d["SSHD_MEMORY_MIN"],
                      memory_min_setting="SSHD_MEMORY_MIN")


@deploy("vLLM services")
def services(settings: Settings, service_list: list | None = None) -> None:
    d = settings.data
    service_list = service_list if service_list is not None else settings.services
    units = []
    for svc in service_list:
        units.append(files.put(name=f"Unit {svc.unit}", src=StringIO(svcs.render_unit(svc, d)),
                               dest=f"/etc/systemd/system/{svc.unit}", user="root", group="root", mode="0644"))
        files.put(name=f"Stage env file {svc.env_file} (root-only)", src=StringIO(svcs.render_env(svc, d)),
                  dest=f"{d['ENV_DIR']}/{svc.env_file}.next", user="root", group="root", mode="0600",
                  _temp_dir=d["ENV_DIR"])
    if units:
        systemd.daemon_reload(name="Reload systemd (a unit file changed)", _if=any_changed(*units))
    for svc in service_list:
        systemd.service(name=f"Enable {svc.unit} at boot", service=svc.unit, running=None, enabled=True)
    common = dict(script=f"{d['SPARKCTL_HOME']}/bin/rollout.py", timeout=d["HEALTH_READY_TIMEOUT_S"],
                  interval=d["HEALTH_POLL_INTERVAL_S"], journal_lines=d["HEALTH_JOURNAL_LINES"],
                  env_prefix=rollout_env(d))
    for svc in service_list:  # tensor-parallel: the headless worker (re)starts before the head
        if svc.headless:
            rollout(name=f"Roll out {svc.unit} (tensor-parallel worker, {svc.model.key})", service=svc.name,
                    port=svc.port, served=svc.served_name, kind="none", **common)
    for svc in service_list:
        if svc.headless:
            continue
        kind = "chat" if svc.role == CODER else "embed"
        rollout(name=f"Roll out {svc.unit} ({svc.model.key})", service=svc.name,
                port=svc.port, served=svc.served_name, kind=kind, **common)
