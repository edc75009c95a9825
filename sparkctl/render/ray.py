"""Tensor-parallel over Ray (TP_BACKEND = "ray"): the ray-head unit on the head, ray-worker on the worker, and the
drop-in that binds the head's coder to its Ray head.

Pure functions of the validated settings, like units.py; tasks/link.py only uploads what these render. Ray runs
from the coder's versioned venv (units.vllm_venv, whose hash includes Ray in this configuration): Ray starts every
actor with its own python, and the actors holding the head's model import vLLM from it, so a venv change is a Ray
unit change.

A Ray restart ends every actor of the running vLLM (without an external store Ray keeps nothing of them across a
head restart), so the head's coder unit Requires= and is After= its Ray head: restarting Ray (its unit changed)
stops vLLM first, cleanly, then Ray, starts Ray, then vLLM. A flip or a watchdog restart of the coder leaves Ray alone.
"""

from __future__ import annotations

import shlex

from sparkctl.config.schema import GroupData
from sparkctl.config.service import Service
from sparkctl.config.topology import Role
from sparkctl.render import units

HEAD_UNIT = "ray-head.service"
WORKER_UNIT = "ray-worker.service"
UNIT_GLOB = "ray-*.service"  # both, for what reads every Ray unit (the venv pruning)
COORDINATION_DROPIN = "sparkctl-ray.conf"  # in vllm-<coder>.service.d/ on the head


def runs_ray(role: Role, cfg: GroupData) -> bool:
    return role.tensor_parallel and units.ray_requirement(cfg) is not None


def unit_name(role: Role) -> str:
    return HEAD_UNIT if role.name == "head" else WORKER_UNIT


def temp_dir(cfg: GroupData) -> str:
    """Ray's sockets, session logs and spilled objects (cleared at every start of its unit)."""
    return f"{cfg.STATE_DIR}/ray"


def ray_bin(cfg: GroupData) -> str:
    return f"{units.vllm_venv(cfg)}/bin/ray"


def environment(coder: Service, cfg: GroupData) -> dict[str, str]:
    """The coder's environment (caches, offline hub, NCCL/Gloo on the link): Ray's actors are the head's vLLM
    workers. Not its TMPDIR (the coder's own runtime directory) nor RAY_ADDRESS (`ray start` gets it as an argument)."""
    env = units.service_environment(coder, cfg)
    for key in ("TMPDIR", "RAY_ADDRESS"):
        env.pop(key, None)
    return env


def start_args(role: Role, cfg: GroupData) -> list[str]:
    """`ray start` in the foreground (systemd supervises it) on this box's CX7 address."""
    args = ["start", "--block", f"--node-ip-address={role.address}", f"--temp-dir={temp_dir(cfg)}",
            "--disable-usage-stats"]
    if role.name == "head":
        return [*args, "--head", f"--port={cfg.RAY_PORT}", f"--include-dashboard={str(cfg.RAY_DASHBOARD).lower()}"]
    return [*args, f"--address={role.head_address}:{cfg.RAY_PORT}"]


def render_unit(role: Role, coder: Service, cfg: GroupData) -> str:
    return units.render_template("ray.service.j2", d=cfg, head=role.name == "head", address=role.address,
                                 env=environment(coder, cfg), temp_dir=temp_dir(cfg), ray_bin=ray_bin(cfg),
                                 args=shlex.join(start_args(role, cfg)), devices_unit=units.DEVICES_UNIT)


def coder_dropin_path(coder: Service) -> str:
    return f"/etc/systemd/system/{coder.unit}.d/{COORDINATION_DROPIN}"


def render_coder_dropin() -> str:
    """The head's coder runs on its Ray head: started after it, restarted (and stopped) with it."""
    return ("# rendered by sparkctl (sparkctl/render/ray.py): tensor-parallel over Ray; vLLM's ranks live in Ray's\n"
            "# actors, which a Ray restart ends, so vLLM stops before Ray and starts after it\n"
            f"[Unit]\nRequires={HEAD_UNIT}\nAfter={HEAD_UNIT}\n")
