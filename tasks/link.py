"""Two Sparks in tensor-parallel: the CX7 link (netplan), Ray units when TP_BACKEND is "ray", and the ssh keys the
boxes use over the link (sparkctl/render/link.py): the worker copies checkpoints from the head (forced read-only
rrsync), and each box reads the other's rollout status (forced `rollout.py status coder`, only from the other box's
link address): the worker's transaction follows the head's, the head's watchdog judges the pair as one unit.
Nothing happens here for replicas or split, except ray_retire (after the services): Ray units a configuration no
longer runs are stopped and removed."""

from __future__ import annotations

import shlex
from io import StringIO

from pyinfra import host
from pyinfra.api import StringCommand, deploy, operation
from pyinfra.api.command import QuoteString
from pyinfra.facts.files import File
from pyinfra.operations import files, server, systemd
from pyinfra.operations.util import any_changed

from sparkctl.config import pki
from sparkctl.config.secrets import secrets_dir
from sparkctl.config.schema import GroupData
from sparkctl.config.settings import Settings
from sparkctl.render import box_files, ray
from sparkctl.render import units as svcs
from sparkctl.render.link import PEER_KEY, SYNC_KEY, peer_status_forced_command
from sparkctl.render.units import pip_args
from tasks.facts import DistVersion


def sync_key(cfg: GroupData) -> tuple[str, str]:
    path, public = pki.ensure_ssh_keypair(secrets_dir(cfg) / cfg.CHECKPOINT_SYNC_KEY, "sparkctl-cx7-sync")
    return str(path), public


def peer_key(cfg: GroupData) -> tuple[str, str]:
    path, public = pki.ensure_ssh_keypair(secrets_dir(cfg) / cfg.TP_PEER_KEY, "sparkctl-cx7-peer")
    return str(path), public


def link_sources(cfg: GroupData, hosts: list[str]) -> str:
    """from= of an authorized_keys line: every link address of the given hosts."""
    return ",".join(a.split("/")[0] for h in hosts for a in cfg.CX7_ADDRESSES[h])


def peer_status_key(cfg: GroupData, role, peer_path: str, peer_public: str) -> str:
    """Each box may read the other's rollout status, nothing else, only from the other box's link address: the
    worker's rollout follows the head's, the head's watchdog judges the pair as one unit. Returns the from= sources."""
    other = "head" if role.name == "worker" else "worker"
    files.put(name=f"Key to read the {other}'s rollout status (root-only)", src=peer_path, dest=PEER_KEY,
              user="root", group="root", mode="0600")
    source = link_sources(cfg, [h for h in role.pair if h != host.name])
    files.line(name=f"Let the {other} read this box's rollout status over the link (read-only)",
               path="/root/.ssh/authorized_keys", line="sparkctl-cx7-peer",
               replace=f'restrict,from="{source}",command="{peer_status_forced_command(cfg)}" {peer_public}')
    return source


@deploy("Two-Spark link")
def link(settings: Settings) -> None:
    cfg, role = settings.cfg, settings.role
    if not role.tensor_parallel:
        return
    if cfg.CX7_MANAGE_NETPLAN:
        plan = files.put(name="CX7 link addresses (netplan)", dest=cfg.CX7_NETPLAN_FILE, user="root", group="root",
                         mode="0600", src=StringIO(box_files.netplan(cfg, host.name)))
        server.shell(name="Apply netplan (the CX7 link changed)", commands=["netplan apply"], _if=plan.did_change)
    key_path, public = sync_key(cfg)
    peer_path, peer_public = peer_key(cfg)
    files.directory(name="Create /root/.ssh", path="/root/.ssh", user="root", group="root", mode="0700")
    source = peer_status_key(cfg, role, peer_path, peer_public)
    if role.name == "worker":
        files.put(name="Checkpoint copy key (worker, root-only)", src=key_path, dest=SYNC_KEY, user="root",
                  group="root", mode="0600")
    else:  # read-only rsync of the model store, only from the worker's CX7 address
        files.line(name="Let the worker copy checkpoints over the link (read-only rrsync)",
                   path="/root/.ssh/authorized_keys", line="sparkctl-cx7-sync",
                   replace=f'restrict,from="{source}",command="rrsync -ro {shlex.quote(cfg.MODEL_STORE + "/hub")}" '
                           f'{public}')
    ray_cluster(settings)


def ray_cluster(settings: Settings) -> None:
    """TP_BACKEND = "ray": Ray into the coder's new venv, the box's Ray unit (the worker's `ray start` waits for the
    head's to answer), and on the head the drop-in that restarts its coder with Ray (sparkctl/render/ray.py: why)."""
    cfg, role = settings.cfg, settings.role
    if not ray.runs_ray(role, cfg):
        return
    venv = svcs.vllm_venv(cfg)
    pip_dist(name=f"Install ray {cfg.RAY_VERSION} into {venv}", venv=venv, dist="ray", version=cfg.RAY_VERSION,
             requirement=svcs.ray_requirement(cfg), pip_args=pip_args(cfg))
    ray_unit(settings, dropin=ray.coder_dropin_path(settings.coder) if role.name == "head" else None)


def ray_unit(settings: Settings, dropin: str | None) -> None:
    """Install the Ray unit and (head) the coder's drop-in; restart Ray only when its unit changed (systemd then
    restarts the head's coder with it: stopped before Ray, started after it)."""
    role = settings.role
    name = ray.unit_name(role)
    changed = [files.put(name=f"Unit {name}", dest=f"/etc/systemd/system/{name}", user="root", group="root",
                         mode="0644", src=StringIO(ray.render_unit(role, settings.coder, settings.cfg)))]
    if dropin:
        changed.append(files.put(name=f"{settings.coder.unit} starts after {name}, restarts with it (drop-in)",
                                 dest=dropin, user="root", group="root", mode="0644",
                                 src=StringIO(ray.render_coder_dropin())))
    systemd.daemon_reload(name=f"Reload systemd ({name} changed)", _if=any_changed(*changed))
    systemd.service(name=f"Restart {name} (its unit changed)", service=name, running=True, restarted=True,
                    enabled=True, _if=changed[0].did_change)
    systemd.service(name=f"{name} enabled and running", service=name, running=True, enabled=True)


@deploy("Ray cluster retired")
def ray_retire(settings: Settings) -> None:
    """After the services: a box whose configuration no longer runs Ray stops and removes its Ray units (its coder,
    already rolled out without Ray, first loses the drop-in binding it to the Ray head)."""
    if ray.runs_ray(settings.role, settings.cfg):
        return
    dropin = ray.coder_dropin_path(settings.coder)
    units = [f"/etc/systemd/system/{name}" for name in (ray.HEAD_UNIT, ray.WORKER_UNIT)]
    present = [p for p in [dropin, *units] if host.get_fact(File, path=p)]
    if not present:
        return
    if dropin in present:
        files.file(name=f"Unbind {settings.coder.unit} from the Ray head", path=dropin, present=False)
        systemd.daemon_reload(name="Reload systemd (coder drop-in removed)")
    for path in units:
        if path in present:
            name = path.rsplit("/", 1)[1]
            systemd.service(name=f"Stop and disable {name}", service=name, running=False, enabled=False)
            files.file(name=f"Remove {name}", path=path, present=False)
    systemd.daemon_reload(name="Reload systemd (Ray units removed)")


def _base(version: str | None) -> str:
    return (version or "").split("+", 1)[0]


@operation()
def pip_dist(venv: str, dist: str, version: str, requirement: str, pip_args: list[str] | None = None):
    """Install `requirement` into `venv` unless distribution `dist` is already at `version` (local tags ignored).

    pyinfra's own pip.packages cannot see local versions such as 0.32.0+cu130 in `pip freeze`, so it would
    reinstall vLLM on every run.
    """
    python = f"{venv}/bin/python"
    have = host.get_fact(DistVersion, python=python, dist=dist)
    if _base(have) == version:
        host.noop(f"{dist} {have} is installed in {venv}")
        return
    yield StringCommand(QuoteString(python), "-m pip install --no-input --progress-bar off",
                        *[QuoteString(a) for a in (pip_args or [])], QuoteString(requirement))
    after = "import importlib.metadata as m; v = m.version(%r); assert v.split('+')[0] == %r, v" % (dist, version)
    yield StringCommand(QuoteString(python), "-c", QuoteString(after))
