"""Services: one root-only env file and one systemd unit per vLLM server; restart only what changed.

Both are only staged here, as <ENV_DIR>/<env>.next and <ENV_DIR>/<unit>.next (outside systemd's search path):
the box-side transaction (sparkctl/box/rollout.py, a transient systemd unit) snapshots what they replace,
drains the served model at the proxy, installs them, restarts, gates on a real request, and commits or restores
exactly that snapshot. A flip therefore changes only the coder's staged env file, and only the coder restarts.
Rollouts go one box at a time (`_serial`): the next box is touched only after the previous one passed its gate.
"""

from __future__ import annotations

from io import StringIO

from pyinfra.api import deploy
from pyinfra.operations import files, systemd

from sparkctl.config.catalog import CODER
from sparkctl.config.settings import Settings
from sparkctl.render import units as svcs
from tasks.handoff import ready_target
from tasks.ops import prune_venvs, rollout, running_oom_guard


def rollout_env(d: dict) -> str:
    """Environment prefix telling rollout.py where this deploy keeps things (settings, not hard-coded paths)."""
    return f"SPARKCTL_ENV_DIR={d['ENV_DIR']} SPARKCTL_STATE_DIR={d['STATE_DIR']} SPARKCTL_DRAIN_DIR={d['DRAIN_DIR']}"


def rollout_settings(d: dict) -> dict:
    """What the box's rollout transaction is told (the settings schema validated every value before this)."""
    return dict(script=f"{d['SPARKCTL_HOME']}/bin/rollout.py", timeout=d["HEALTH_READY_TIMEOUT_S"],
                interval=d["HEALTH_POLL_INTERVAL_S"], journal_lines=d["HEALTH_JOURNAL_LINES"],
                drain_timeout=d["DRAIN_TIMEOUT_S"], retry_after=d["DRAIN_RETRY_AFTER_S"],
                keep_failed=d["ROLLOUT_FAILED_KEEP"], retry_failed=d["ROLLOUT_RETRY_FAILED"],
                gate_max_tokens=d["ROLLOUT_GATE_MAX_TOKENS"], gate_request_timeout=d["ROLLOUT_GATE_REQUEST_TIMEOUT_S"],
                worker_settle=d["ROLLOUT_WORKER_SETTLE_S"], env_prefix=rollout_env(d))


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
    from tasks.acceptance import apply_verdict_args  # here: tasks.acceptance imports this module

    d = settings.data
    service_list = service_list if service_list is not None else settings.services
    common = rollout_settings(d)
    for svc in service_list:
        files.put(name=f"Stage unit {svc.unit} (installed by the rollout)", src=StringIO(svcs.render_unit(svc, d)),
                  dest=f"{d['ENV_DIR']}/{svc.unit}.next", user="root", group="root", mode="0644",
                  _temp_dir=d["ENV_DIR"])
        files.put(name=f"Stage env file {svc.env_file} (root-only)", src=StringIO(svcs.render_env(svc, d)),
                  dest=f"{d['ENV_DIR']}/{svc.env_file}.next", user="root", group="root", mode="0600",
                  _temp_dir=d["ENV_DIR"])
    names = tuple(s.name for s in service_list)
    for svc in service_list:  # tensor-parallel: the headless worker (re)starts before the head
        if svc.headless:
            rollout(name=f"Roll out {svc.unit} (tensor-parallel worker, {svc.model.key})", service=svc.name,
                    services=names, port=svc.port, served=svc.served_name, kind="none", **common)
    for svc in service_list:
        if svc.headless:
            continue
        kind = "chat" if svc.role == CODER else "embed"
        # one box at a time: a served model is never down on every box at once
        handoff = ready_target(d, svc.served_name) if settings.role.serves_api else None
        rollout(name=f"Roll out {svc.unit} ({svc.model.key})", service=svc.name, services=names,
                port=svc.port, served=svc.served_name, kind=kind, handoff=handoff, _serial=True,
                verdict_args=apply_verdict_args(d, svc), **common)  # the coder waits for its acceptance verdict
    for svc in service_list:  # after the rollout installed the unit
        systemd.service(name=f"Enable {svc.unit} at boot", service=svc.unit, running=None, enabled=True)
    keep = d["VLLM_VENVS_KEEP"]
    prune_venvs(name=f"Prune vLLM venvs (keep {keep} and every one a unit or rollout snapshot names)",
                root=f"{d['SPARKCTL_HOME']}/venvs", keep=keep,
                referenced_by=["/etc/systemd/system/vllm-*.service", f"{d['ENV_DIR']}/vllm-*.service.next",
                               f"{d['STATE_DIR']}/rollout/vllm-*.txn/unit"])
