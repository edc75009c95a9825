"""The two boxes of a tensor-parallel pair talking over the CX7 link (pure; tasks/link.py installs the keys): one key
copies checkpoints from the head (forced read-only rrsync), one lets each box read the other's `rollout.py status`
(forced read-only command, accepted only from the other box's link address). The worker's transaction reads its
head's; the head's watchdog and restart read the worker's; the worker's watchdog reads the head's. And the link probe
before a pair's swap (probe_argv, judge_pair): the rollout measures the link across both boxes with
sparkctl/box/link_probe.py, as `rehearse` does, and refuses below LINK_MIN_BUSBW_GBPS before it stops anything."""

from __future__ import annotations

import shlex

from sparkctl.config import box_paths, topology
from sparkctl.config.schema import GroupData
from sparkctl.render.units import rollout_env, vllm_venv

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


LINK_PROBE = "link_probe.py"  # sparkctl/box/link_probe.py, installed under SPARKCTL_HOME/bin by the vLLM step


def probe_wait(cfg: GroupData) -> float:
    """The longest one rank of the link probe may take, s (REHEARSE_LINK_TIMEOUT_S: `timeout` kills it after)."""
    return float(cfg.REHEARSE_LINK_TIMEOUT_S)


def probe_argv(cfg: GroupData, box: str, pair: tuple[str, ...]) -> list[str]:
    """This box's rank of the link probe (head first, rank 0), as `rehearse` runs it: the coder venv's python with
    the pair's NCCL/Gloo environment (topology.distributed_env), the rendezvous on the head's CX7 address at
    REHEARSE_LINK_PORT (not TP_MASTER_PORT: the pair's engines may hold it), LINK_PROBE_* for what it moves, bounded by
    REHEARSE_LINK_TIMEOUT_S."""
    head = pair[0]
    env = {k: v for k, v in topology.distributed_env(cfg, box, head).items() if not k.startswith("RAY_")}
    wait = f"{probe_wait(cfg):g}"
    return ["timeout", wait, "env", *[f"{k}={v}" for k, v in sorted(env.items())], f"{vllm_venv(cfg)}/bin/python",
            f"{box_paths.bin_dir(cfg.SPARKCTL_HOME)}/{LINK_PROBE}", "--rank", str(pair.index(box)),
            "--world", str(len(pair)), "--master", topology.cx7_address(cfg, head), "--port",
            str(cfg.REHEARSE_LINK_PORT), "--bytes", str(cfg.LINK_PROBE_BYTES), "--iters", str(cfg.LINK_PROBE_ITERS),
            "--backend", cfg.LINK_PROBE_BACKEND, "--timeout-s", wait]


def judge_pair(results: dict[str, dict], pair: tuple[str, ...], floor_gbps: float) -> tuple[bool, str]:
    """Both ranks' results (link_probe.py's JSON line, by box) against LINK_MIN_BUSBW_GBPS (0: no floor): (the link
    may carry the pair, why in words, each rank's measured figure and the setting named). A rank that failed or gave
    no result fails it: the pair's engines would meet the same link."""
    ok, parts = True, []
    for box in pair:
        r = results.get(box)
        if not r or "busbw_gbps" not in r:
            ok = False
            parts.append(f"{box}: the probe failed ({(r or {}).get('error', 'no result')})")
            continue
        busbw = float(r["busbw_gbps"])
        below = 0 < floor_gbps and busbw < floor_gbps
        ok = ok and not below
        parts.append(f"{box}: busbw {busbw:.2f} GB/s{' (below the floor)' if below else ''}")
    against = f"LINK_MIN_BUSBW_GBPS = {floor_gbps:g} GB/s" if floor_gbps > 0 else "no floor (LINK_MIN_BUSBW_GBPS = 0)"
    first = next((results[b] for b in pair if results.get(b) and "bytes" in results[b]), None)
    how = f"; an all-reduce of {first['bytes']:,} bytes x {first['iters']} ({first['backend']})" if first else ""
    return ok, f"{'; '.join(parts)}, against {against}{how}"
