"""Two Sparks in tensor-parallel: the CX7 link (netplan), Ray units when TP_BACKEND is "ray", and the ssh keys the
boxes use over the link (sparkctl/render/link.py): the worker copies checkpoints from the head (forced read-only
rrsync), and each box reads the other's rollout status (forced `rollout.py status coder`, only from the other box's
link address): the worker's transaction follows the head's, the head's watchdog judges the pair as one unit.
Nothing happens here for replicas or split."""

from __future__ import annotations

from io import StringIO

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import files, server, systemd

from sparkctl.config import pki
from sparkctl.config.secrets import secrets_dir
from sparkctl.config.settings import Settings
from sparkctl.render import units as svcs
from sparkctl.render.link import (PEER_KEY, PEER_SERVICE, SYNC_KEY, SYNC_KNOWN_HOSTS, link_ssh,  # noqa: F401
                                  peer_status_command, peer_status_forced_command)
from tasks.ops import pip_dist
from tasks.vllm import pip_args


def sync_key(d: dict) -> tuple[str, str]:
    path, public = pki.ensure_ssh_keypair(secrets_dir(d) / d["CHECKPOINT_SYNC_KEY"], "sparkctl-cx7-sync")
    return str(path), public


def peer_key(d: dict) -> tuple[str, str]:
    path, public = pki.ensure_ssh_keypair(secrets_dir(d) / d["TP_PEER_KEY"], "sparkctl-cx7-peer")
    return str(path), public


def link_sources(d: dict, hosts: list[str]) -> str:
    """from= of an authorized_keys line: every link address of the given hosts."""
    return ",".join(a.split("/")[0] for h in hosts for addrs in [d["CX7_ADDRESSES"][h]]
                    for a in ([addrs] if isinstance(addrs, str) else addrs))


@deploy("Two-Spark link")
def link(settings: Settings) -> None:
    d, role = settings.data, settings.role
    if not role.tensor_parallel:
        return
    if d["CX7_MANAGE_NETPLAN"]:
        addresses = d["CX7_ADDRESSES"][host.name]
        plan = files.put(name="CX7 link addresses (netplan)", dest=d["CX7_NETPLAN_FILE"], user="root", group="root",
                         mode="0600", src=StringIO(svcs.render_template("netplan-cx7.yaml.j2", d=d,
                                                                        addresses=addresses)))
        server.shell(name="Apply netplan (the CX7 link changed)", commands=["netplan apply"], _if=plan.did_change)
    key_path, public = sync_key(d)
    peer_path, peer_public = peer_key(d)
    files.directory(name="Create /root/.ssh", path="/root/.ssh", user="root", group="root", mode="0700")
    other = "head" if role.name == "worker" else "worker"
    files.put(name=f"Key to read the {other}'s rollout status (root-only)", src=peer_path, dest=PEER_KEY,
              user="root", group="root", mode="0600")
    # each box may read the other's rollout status, nothing else, only from the other box's link address: the
    # worker's rollout follows the head's, the head's watchdog judges the pair as one unit
    source = link_sources(d, [role.head] if role.name == "worker" else
                          [h for h in d["CX7_ADDRESSES"] if h != host.name])
    files.line(name=f"Let the {other} read this box's rollout status over the link (read-only)",
               path="/root/.ssh/authorized_keys", line="sparkctl-cx7-peer",
               replace=f'restrict,from="{source}",command="{peer_status_forced_command(d)}" {peer_public}')
    if role.name == "worker":
        files.put(name="Checkpoint copy key (worker, root-only)", src=key_path, dest=SYNC_KEY, user="root",
                  group="root", mode="0600")
    else:  # read-only rsync of the model store, only from the worker's CX7 address
        files.line(name="Let the worker copy checkpoints over the link (read-only rrsync)",
                   path="/root/.ssh/authorized_keys", line="sparkctl-cx7-sync",
                   replace=f'restrict,from="{source}",command="rrsync -ro {d["MODEL_STORE"]}/hub" {public}')
    if d["TP_BACKEND"] == "ray":
        venv = svcs.vllm_venv(d)
        pip_dist(name=f"Install ray {d['RAY_VERSION']} into the venv", venv=venv, dist="ray",
                 version=d["RAY_VERSION"], requirement=f"ray[default]=={d['RAY_VERSION']}", pip_args=pip_args(d))
        unit_name = "ray-head.service" if role.name == "head" else "ray-worker.service"
        unit = files.put(name=f"Unit {unit_name}", dest=f"/etc/systemd/system/{unit_name}", user="root",
                         group="root", mode="0644",
                         src=StringIO(svcs.render_template("ray.service.j2", d=d, head=role.name == "head",
                                                           address=role.address, head_address=role.head_address,
                                                           env={k: v for k, v in role.env.items()
                                                                if not k.startswith("RAY_memory")})))
        systemd.daemon_reload(name="Reload systemd (Ray unit changed)", _if=unit.did_change)
        systemd.service(name=f"{unit_name} enabled and running", service=unit_name, running=True, enabled=True)
        systemd.service(name=f"Restart {unit_name} (its unit changed)", service=unit_name, restarted=True,
                        _if=unit.did_change)
