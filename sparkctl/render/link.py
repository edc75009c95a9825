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


def peer_status_forced_command(cfg: GroupData) -> str:
    """The forced command of the peer key in a box's authorized_keys: its own read-only status of PEER_SERVICE."""
    script = shlex.quote(box_paths.rollout_script(cfg.SPARKCTL_HOME))
    return f"{rollout_env(cfg)} python3 {script} status {PEER_SERVICE}"
