"""Services: one root-only env file and one systemd unit per vLLM server; restart only what changed.

Both are only staged here, as <ENV_DIR>/<env>.next and <ENV_DIR>/<unit>.next (outside systemd's search path):
the box-side transaction (sparkctl/box/rollout.py, a transient systemd unit) snapshots what they replace,
drains the served model at the proxy, installs them, restarts, gates on a real request, and commits or restores
exactly that snapshot. A flip therefore changes only the coder's staged env file, and only the coder restarts.
Rollouts go in waves over the fleet (ROLLOUT_WAVES, MAX_UNAVAILABLE, MAX_FAIL_PERCENTAGE; tasks/rollout.py): a canary
first, then batches, never more of a pool at once than MAX_UNAVAILABLE (a pair: one box at a time), each wave
judged before the next is touched, and no further box after a wave spends its failure budget; a first install
(it serves nothing yet) waits for no wave.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from io import StringIO

from pyinfra import host, inventory
from pyinfra.api import StringCommand, deploy, operation
from pyinfra.api.command import QuoteString
from pyinfra.operations import files, systemd

from sparkctl.box import contract
from sparkctl.check.validate import derive_host
from sparkctl.config import box_paths
from sparkctl.config.schema import GroupData
from sparkctl.config.hosts import per_host_models
from sparkctl.config.settings import Settings
from sparkctl.render import ray
from sparkctl.render import units as svcs
from sparkctl.render.link import native_pair, peer_facts
from sparkctl.render.units import apply_verdict_args, gate_kind, rollout_env, rollout_values
from sparkctl.errors import Refused
from sparkctl.fleet.waves import rollout_waves
from tasks.common import ready_target
from tasks.facts import VenvsInUse
from tasks.rollout import (BoxScript, Judging, RolloutLedger, Target, WavePlan, link_before_swap, link_check, rollout,
                           rollout_start)


def box_script(cfg: GroupData, services: tuple[str, ...]) -> BoxScript:
    """How every rollout op of this box calls its script: where it is, and every setting its arguments come from
    (contract.SETTINGS; the schema validated each value before this)."""
    return BoxScript(script=box_paths.rollout_script(cfg.SPARKCTL_HOME), env_prefix=rollout_env(cfg),
                     setting_values=rollout_values(cfg), interval=cfg.HEALTH_POLL_INTERVAL_S, services=services)


def target(svc) -> Target:
    return Target(service=svc.name, port=svc.port, served=svc.served_name, kind=gate_kind(svc))


def tp_coders(settings: Settings) -> list[tuple]:
    """Tensor-parallel (native): both boxes' coder service and settings, head first, each derived from that host's
    own data and pool (its own deploy's preflight runs the whole check; the Ray backend's worker runs no vLLM
    service: [])."""
    role = settings.role
    if not native_pair(settings.cfg, role):
        return []
    names = [h.name for h in inventory.get_group("gx10")]
    out = []
    for name in role.pair:
        other = settings if name == settings.host_name else \
            derive_host(inventory.get_host(name).data.dict(), name, names, per_host_models())
        out.append((other.coder, other.cfg))
    return out


@dataclass
class Rollouts:
    """What the services step hands on in deploy.py: the run's ledger it was given, which its rollouts fill while
    they execute (for the health step's report and tp_worker_result), and this box's started worker transactions
    (for tp_worker_result)."""

    ledger: RolloutLedger
    worker_starts: dict[str, object] = field(default_factory=dict)  # service -> the op that started its transaction


def stage(cfg: GroupData, service_list: list) -> None:
    """Each service's unit and env file, staged beside the live ones for the rollout to install."""
    for svc in service_list:
        staged = contract.Paths(svc.name, cfg.ENV_DIR, contract.rollout_dir(cfg.STATE_DIR))
        files.put(name=f"Stage unit {svc.unit} (installed by the rollout)", src=StringIO(svcs.render_unit(svc, cfg)),
                  dest=staged.unit_next, user="root", group="root", mode="0644", _temp_dir=cfg.ENV_DIR)
        files.put(name=f"Stage env file {svc.env_file} (root-only)", src=StringIO(svcs.render_env(svc, cfg)),
                  dest=staged.env_next, user="root", group="root", mode="0600", _temp_dir=cfg.ENV_DIR)


def join_tp_unit(settings: Settings, service_list: list) -> list:
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
    every = contract.Paths("*", cfg.ENV_DIR, contract.rollout_dir(cfg.STATE_DIR))
    return [every.unit, every.unit_next, every.snapshot["unit"], f"{contract.UNIT_DIR}/{ray.UNIT_GLOB}"]


@deploy("vLLM services")
def services(settings: Settings, judge, ledger: RolloutLedger, service_list: list | None = None) -> Rollouts:
    """judge(settings, service, handoff): the acceptance step's judge of a coder waiting for its verdict
    (tasks/acceptance.judge_waiting), run inside that coder's rollout op; ledger: this deploy run's
    (tasks/rollout.run_ledger), which every rollout op fills while it executes."""
    cfg = settings.cfg
    service_list = join_tp_unit(settings, service_list if service_list is not None else settings.services)
    box = box_script(cfg, tuple(s.name for s in service_list))
    stage(cfg, service_list)
    plan_waves(settings, ledger, [s.name for s in service_list if not s.headless])
    if native_pair(cfg, settings.role):  # both boxes at once, before either box's transaction starts
        link_before_swap(name=f"Judge the pair's link before its swap ({', '.join(settings.role.pair)}, "
                              f"LINK_MIN_BUSBW_GBPS)", box=box,
                         check=link_check(cfg, settings.role, settings.host_name, settings.coder.name), ledger=ledger)
    worker_rollouts = {}
    for svc in service_list:  # tensor-parallel: the worker's transaction starts first and waits for the head's
        if svc.headless:
            worker_rollouts[svc.name] = rollout_start(
                name=f"Start the rollout of {svc.unit} (tensor-parallel worker, {svc.model.key}; follows the head)",
                box=box, target=target(svc), ledger=ledger, peer=peer_facts(cfg, settings.role.head_address, "apply"))
    for svc in service_list:
        if not svc.headless:  # in waves (tasks/rollout.py): a served model is never down on its whole pool at once
            roll_out(settings, judge, ledger, box, svc)
    for svc in service_list:  # after the rollout installed the unit
        systemd.service(name=f"Enable {svc.unit} at boot", service=svc.unit, running=None, enabled=True)
    prune(cfg)
    return Rollouts(ledger, worker_rollouts)


def roll_out(settings: Settings, judge, ledger: RolloutLedger, box: BoxScript, svc) -> None:
    """One service's rollout op; a coder waits for its acceptance verdict, judged within the op."""
    handoff = ready_target(settings.cfg, svc.served_name) if settings.role.serves_api else None
    verdict_args = apply_verdict_args(settings.cfg, svc)
    judging = Judging(verdict_args, judge(settings, svc, handoff)) if verdict_args else None
    rollout(name=f"Roll out {svc.unit} ({svc.model.key})", box=box, target=target(svc), ledger=ledger,
            handoff=handoff, judging=judging)


def plan_waves(settings: Settings, ledger: RolloutLedger, services: list[str]) -> None:
    """Prepare time, every box: how this run's rollouts take the fleet (built once, from the first box's settings:
    the wave settings are group data), and that this box's greenlet will check in at each service's gate. Every
    box of a wave waits in its own greenlet, so pyinfra must run them all at once."""
    cfg = settings.cfg
    if ledger.plan is None:
        hosts = [h.name for h in inventory.get_group("gx10")]
        ledger.plan = WavePlan(rollout_waves(cfg, hosts), cfg.MAX_FAIL_PERCENTAGE, cfg.HEALTH_POLL_INTERVAL_S)
    boxes = len(list(inventory.get_active_hosts()))
    if host.state.pool.size < boxes:
        raise Refused(f"pyinfra runs {host.state.pool.size} hosts at once (--parallel) but {boxes} are in this "
                      f"deploy: a rollout in waves (ROLLOUT_WAVES) keeps every box's greenlet waiting for its wave; "
                      f"drop --parallel or raise it to at least {boxes}")
    for name in services:
        ledger.expected.setdefault(name, set()).add(settings.host_name)


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
