"""Services: one root-only env file and one systemd unit per vLLM server; restart only what changed.

Both are only staged here, as <ENV_DIR>/<env>.next and <ENV_DIR>/<unit>.next (outside systemd's search path):
the box-side transaction (sparkctl/box/rollout.py, a transient systemd unit) snapshots what they replace,
drains the served model at the proxy, installs them, restarts, gates on a real request, and commits or restores
exactly that snapshot. A flip therefore changes only the coder's staged env file, and only the coder restarts.
Rollouts go one box at a time (`_serial`): the next box is touched only after the previous one passed its gate.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from io import StringIO

from pyinfra import host, inventory
from pyinfra.api import StringCommand, deploy, operation
from pyinfra.api.command import QuoteString
from pyinfra.operations import files, systemd

from sparkctl.check import rules
from sparkctl.check.load import host_config
from sparkctl.config.catalog import CODER
from sparkctl.config.schema import GroupData
from sparkctl.config.settings import Settings, derive
from sparkctl.render import box_files, ray
from sparkctl.render import units as svcs
from sparkctl.render.link import peer_status_command
from sparkctl.errors import SettingError
from sparkctl.render.units import apply_verdict_args, rollout_env, rollout_values
from tasks.common import ready_target
from tasks.facts import RunningOomGuard, VenvsInUse
from tasks.rollout import LEDGER, RolloutLedger, rollout, rollout_join


def rollout_settings(cfg: GroupData) -> dict:
    """What the box's rollout transaction is told: every setting its arguments come from (contract.SETTINGS; the
    settings schema validated each value before this), and where its script is."""
    return dict(script=f"{cfg.SPARKCTL_HOME}/bin/rollout.py",
                settings=rollout_values(cfg),
                interval=cfg.HEALTH_POLL_INTERVAL_S, env_prefix=rollout_env(cfg))


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


def tp_coders(settings: Settings) -> list[tuple]:
    """Tensor-parallel (native): both boxes' coder service and settings, head first, each derived from that host's
    own data (its own deploy's preflight runs the whole check; the Ray backend's worker runs no vLLM service: [])."""
    role = settings.role
    if not role.tensor_parallel or settings.cfg.TP_BACKEND != "native":
        return []
    names = [h.name for h in inventory.get_group("gx10")]
    out = []
    for name in sorted(names, key=lambda n: n != role.head):
        other = settings if name == settings.host_name else \
            derive(host_config(inventory.get_host(name).data.dict(), name), names)
        out.append((other.coder, other.cfg))
    return out


def peer_args(settings: Settings) -> dict:
    """A tensor-parallel worker's rollout follows its head's: how it reads the head's status, how long it waits
    (rollout.py's --peer-* facts, by contract dest). The wait covers the head's drain and its gate, its rollback's
    gate, and its acceptance verdict."""
    cfg = settings.cfg
    wait = cfg.DRAIN_TIMEOUT_S + 2 * cfg.HEALTH_READY_TIMEOUT_S + \
        (cfg.ACCEPTANCE_VERDICT_TIMEOUT_S if cfg.ACCEPTANCE_ENABLED else 0)
    return {"peer_status_cmd": peer_status_command(cfg, settings.role.head_address), "peer_timeout": wait}


@dataclass
class Rollouts:
    """What the services step hands on in deploy.py: the ledger its rollouts fill while they execute (for the
    health step's report), and this box's started worker transactions (for tp_worker_result)."""

    ledger: RolloutLedger
    worker_starts: dict[str, object] = field(default_factory=dict)  # service -> the op that started its transaction


@deploy("Tensor-parallel unit")
def tp_worker_result(settings: Settings, worker_starts: dict[str, object]) -> None:
    """One op on both boxes, after the head's rollout and its verdict: the worker's transaction has by then kept
    or undone its candidate with the head's; the worker waits for that result (the head's op is a no-op)."""
    if not settings.role.tensor_parallel or settings.cfg.TP_BACKEND != "native":
        return
    cfg, name = settings.cfg, settings.coder.name
    started = worker_starts.get(name)
    extra = {"_if": started.did_change} if started is not None else {}
    rollout_join(name=f"Tensor-parallel: the worker's vllm-{name} ends with the head's result", service=name,
                 script=f"{cfg.SPARKCTL_HOME}/bin/rollout.py", interval=cfg.HEALTH_POLL_INTERVAL_S,
                 env_prefix=rollout_env(cfg), follow=started is not None, **extra)


def stage(cfg: GroupData, service_list: list) -> None:
    """Each service's unit and env file, staged beside the live ones for the rollout to install."""
    for svc in service_list:
        files.put(name=f"Stage unit {svc.unit} (installed by the rollout)", src=StringIO(svcs.render_unit(svc, cfg)),
                  dest=f"{cfg.ENV_DIR}/{svc.unit}.next", user="root", group="root", mode="0644",
                  _temp_dir=cfg.ENV_DIR)
        files.put(name=f"Stage env file {svc.env_file} (root-only)", src=StringIO(svcs.render_env(svc, cfg)),
                  dest=f"{cfg.ENV_DIR}/{svc.env_file}.next", user="root", group="root", mode="0600",
                  _temp_dir=cfg.ENV_DIR)


def with_tp_unit(settings: Settings, service_list: list) -> list:
    """Tensor-parallel (native): head and worker are one unit, the same id in both coders' env files."""
    pair = tp_coders(settings)
    if not pair:
        return service_list
    unit_id = svcs.tp_unit_id(pair)
    return [svcs.with_tp_unit(s, unit_id) if s.name == settings.coder.name else s for s in service_list]


def prune(cfg: GroupData) -> None:
    keep = cfg.VLLM_VENVS_KEEP
    prune_venvs(name=f"Prune vLLM venvs (keep {keep} and every one a unit or rollout snapshot names)",
                root=f"{cfg.SPARKCTL_HOME}/venvs", keep=keep, referenced_by=venv_users(cfg))


def venv_users(cfg: GroupData) -> list[str]:
    """Every unit file that may run a venv: the vLLM units (live, staged, in a rollout snapshot) and the Ray units
    (their actors run vLLM from the coder's venv; a Ray worker runs no vLLM unit at all)."""
    return ["/etc/systemd/system/vllm-*.service", f"{cfg.ENV_DIR}/vllm-*.service.next",
            f"{cfg.STATE_DIR}/rollout/vllm-*.txn/unit", f"/etc/systemd/system/{ray.UNIT_GLOB}"]


@deploy("vLLM services")
def services(settings: Settings, judge, service_list: list | None = None) -> Rollouts:
    """judge(settings, service, handoff): the acceptance step's judge of a coder waiting for its verdict
    (tasks/acceptance.judge_waiting), run inside that coder's rollout op."""
    cfg = settings.cfg
    service_list = with_tp_unit(settings, service_list if service_list is not None else settings.services)
    common = rollout_settings(cfg)
    stage(cfg, service_list)
    names = tuple(s.name for s in service_list)
    worker_rollouts = {}
    for svc in service_list:  # tensor-parallel: the worker's transaction starts first and waits for the head's
        if svc.headless:
            worker_rollouts[svc.name] = rollout(
                name=f"Start the rollout of {svc.unit} (tensor-parallel worker, {svc.model.key}; follows the head)",
                service=svc.name, services=names, port=svc.port, served=svc.served_name, kind="none",
                peer=peer_args(settings), wait=False, **common)
    for svc in service_list:
        if svc.headless:
            continue
        kind = "chat" if svc.role == CODER else "embed"
        # one box at a time: a served model is never down on every box at once
        handoff = ready_target(cfg, svc.served_name) if settings.role.serves_api else None
        verdict_args = apply_verdict_args(cfg, svc)  # the coder waits for its acceptance verdict, judged in this op
        rollout(name=f"Roll out {svc.unit} ({svc.model.key})", service=svc.name, services=names,
                port=svc.port, served=svc.served_name, kind=kind, handoff=handoff, _serial=True,
                verdict_args=verdict_args, on_awaiting=judge(settings, svc, handoff) if verdict_args else None,
                **common)
    for svc in service_list:  # after the rollout installed the unit
        systemd.service(name=f"Enable {svc.unit} at boot", service=svc.unit, running=None, enabled=True)
    prune(cfg)
    return Rollouts(LEDGER, worker_rollouts)


@operation()
def prune_venvs(root: str, keep: int, referenced_by: list[str]):
    """Remove vLLM venvs under `root` beyond the newest `keep` that no unit (live, staged or in a rollout
    snapshot) names in its ExecStart."""
    found = host.get_fact(VenvsInUse, root=root, unit_globs=referenced_by)
    used = {u.split("/bin/")[0] for u in found["used"]}
    extra = [v for v in found["venvs"][keep:] if f"{root}/{v}" not in used]
    if not extra:
        host.noop(f"{len(found['venvs'])} venv(s) under {root}, none to prune")
        return
    yield StringCommand("rm -rf", *[QuoteString(f"{root}/{v}") for v in extra])


def systemd_bytes(setting: str, value) -> int:
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
    adj, want_min = int(oom_score_adj), systemd_bytes(memory_min_setting, memory_min)
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
