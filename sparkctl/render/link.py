"""The two boxes of a tensor-parallel pair talking over the CX7 link (pure; tasks/link.py installs the keys): one key
copies checkpoints from the head (forced read-only rrsync), one lets each box read the other's `rollout.py status`
(forced read-only command, accepted only from the other box's link address). The worker's transaction reads its
head's; the head's watchdog and restart read the worker's; the worker's watchdog reads the head's."""

from __future__ import annotations

import shlex

from sparkctl.config import box_paths
from sparkctl.config.schema import GroupData
from sparkctl.render.units import rollout_env

SYNC_KEY = "/root/.ssh/sparkctl-cx7-sync"  # on the worker: the key it copies checkpoints with
SYNC_KNOWN_HOSTS = "/root/.ssh/sparkctl-cx7-known_hosts"
PEER_KEY = "/root/.ssh/sparkctl-cx7-peer"  # on both boxes: the key each reads the other's rollout status with
PEER_SERVICE = "coder"  # the one service the two boxes run as one unit (a box may be asked about no other)


def link_ssh(cfg: GroupData, key: str) -> list[str]:
    """ssh over the link as the boxes run it (checkpoint copy, the other box's rollout status)."""
    return ["ssh", "-i", key, "-o", f"UserKnownHostsFile={SYNC_KNOWN_HOSTS}",
            *[arg for opt in cfg.CHECKPOINT_SYNC_SSH_OPTIONS for arg in ("-o", opt)]]


def peer_status_command(cfg: GroupData, address: str) -> str:
    """What a box runs to read the other's `rollout.py status` (the other box forces the command)."""
    return shlex.join([*link_ssh(cfg, PEER_KEY), f"{cfg.CHECKPOINT_SYNC_USER}@{address}", "rollout-status"])


def native_pair(cfg: GroupData, role) -> bool:
    """This box is one of a tensor-parallel pair that runs as one unit: the native backend (with Ray the worker runs
    no vLLM service of its own: the head's actors run there)."""
    return role.tensor_parallel and cfg.TP_BACKEND == "native"


def gate_wait(cfg: GroupData) -> float:
    """The longest one gate of the box may take, s: a cold start's (its build and model never ready on the box before:
    HEALTH_COLD_READY_TIMEOUT_S, never shorter than a warm start's HEALTH_READY_TIMEOUT_S; readiness_gate.py)."""
    return max(cfg.HEALTH_READY_TIMEOUT_S, cfg.HEALTH_COLD_READY_TIMEOUT_S)


def worker_wait(cfg: GroupData) -> float:
    """How long a tensor-parallel worker's transaction waits for its head at each step, s (`apply --peer-timeout`):
    the head's drain and its gate, its rollback's gate, and its acceptance verdict (each gate may be a cold start)."""
    verdict = cfg.ACCEPTANCE_VERDICT_TIMEOUT_S if cfg.ACCEPTANCE_ENABLED else 0
    return cfg.DRAIN_TIMEOUT_S + 2 * gate_wait(cfg) + verdict


def pair_restart_wait(cfg: GroupData) -> float:
    """The longest one box of a pair restart waits for the other, s (`restart --peer-timeout`): the other's stop,
    then its gate (which may be a cold start)."""
    return cfg.SERVICE_STOP_TIMEOUT_S + gate_wait(cfg)


def peer_facts(cfg: GroupData, address: str, command: str) -> dict:
    """rollout.py's --peer-* facts (contract dests) of one box of a native pair whose other box is at `address`:
    how it reads the other's status and how long it waits for it, in `command` ("apply": the worker's transaction
    follows its head's; "restart": a pair restart)."""
    wait = worker_wait(cfg) if command == "apply" else pair_restart_wait(cfg)
    return {"peer_status_cmd": peer_status_command(cfg, address), "peer_timeout": wait}


def peer_status_forced_command(cfg: GroupData) -> str:
    """The forced command of the peer key in a box's authorized_keys: its own read-only status of PEER_SERVICE."""
    script = shlex.quote(box_paths.rollout_script(cfg.SPARKCTL_HOME))
    return f"{rollout_env(cfg)} python3 {script} status {PEER_SERVICE}"
