"""Which boxes the deploy targets, and how to reach them: shared by inventory.py and the probes.

Real boxes come from the environment (GX10_HOSTS=spark-1,spark-2 plus GX10_SSH_USER / GX10_SSH_KEY /
GX10_SSH_PORT); with none set, the simulated Spark(s) listed in .sim/hosts.json by `sparkctl sim up`.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path

from sparkctl import REPO_ROOT
from sparkctl.errors import SparkctlError

SIM_HOSTS_FILE = REPO_ROOT / ".sim" / "hosts.json"


class NoDelaySocket:
    """The TCP socket pyinfra's ssh connection runs over, opened on first use with TCP_NODELAY.

    paramiko sets no socket options, so every small request (a channel open, then its exec) waits behind the
    server's delayed ACK: about 40 ms per command on Linux, whatever the network. A no-op deploy issues ~130
    short commands (one per fact), so that stall was most of its run time. Handed to paramiko through pyinfra's
    own `ssh_paramiko_connect_kwargs` host data; opened lazily so that reading the inventory connects to nothing.
    """

    def __init__(self, address: str, port: int, connect_timeout_s: float):
        self._target, self._timeout, self._sock = (address, port), connect_timeout_s, None

    def __getattr__(self, name):  # paramiko's Transport calls settimeout/send/recv/close on it
        if self._sock is None:
            self._sock = socket.create_connection(self._target, timeout=self._timeout)
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        return getattr(self._sock, name)

    def __deepcopy__(self, memo):  # pyinfra copies host data; a copy must open its own connection
        return NoDelaySocket(*self._target, self._timeout)


@dataclass(frozen=True)
class HostConn:
    name: str  # inventory name
    address: str  # what ssh and the TLS clients connect to
    ssh_user: str = "root"
    ssh_port: int = 22
    ssh_key: str = ""  # private key path on the control machine; empty: ssh-agent / ~/.ssh defaults
    known_hosts: str = ""  # known_hosts file; empty: the user's own
    simulated: bool = False
    data: dict = field(default_factory=dict)  # extra host data (e.g. flavor, CODING_MODEL in split topology)

    def ssh_argv(self, command: str | None = None) -> list[str]:
        argv = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-p", str(self.ssh_port)]
        if self.ssh_key:
            argv += ["-i", self.ssh_key, "-o", "IdentitiesOnly=yes"]
        if self.known_hosts:
            argv += ["-o", f"UserKnownHostsFile={self.known_hosts}", "-o", "StrictHostKeyChecking=accept-new"]
        argv.append(f"{self.ssh_user}@{self.address}")
        if command is not None:
            argv.append(command)
        return argv

    def pyinfra_data(self, connect_timeout_s: float = 10) -> dict:
        data = {"ssh_hostname": self.address, "ssh_user": self.ssh_user, "ssh_port": self.ssh_port,
                "ssh_paramiko_connect_kwargs": {"sock": NoDelaySocket(self.address, self.ssh_port,
                                                                      connect_timeout_s)}}
        if self.ssh_key:
            data["ssh_key"] = self.ssh_key
        if self.known_hosts:
            data["ssh_known_hosts_file"] = self.known_hosts
            data["ssh_strict_host_key_checking"] = "accept-new"
        data.update(self.data)
        return data


def real_hosts(env: dict | None = None) -> list[HostConn]:
    env = os.environ if env is None else env
    names = [h.strip() for h in env.get("GX10_HOSTS", "").split(",") if h.strip()]
    port = env.get("GX10_SSH_PORT", "22")
    if not port.isdigit():
        raise SparkctlError(f"GX10_SSH_PORT = {port!r} is not valid; expected a TCP port number")
    return [HostConn(name=n, address=n, ssh_user=env.get("GX10_SSH_USER", "root"), ssh_port=int(port),
                     ssh_key=env.get("GX10_SSH_KEY", ""), known_hosts=env.get("GX10_KNOWN_HOSTS", ""))
            for n in names]


def gateway_hosts(env: dict | None = None) -> list[HostConn]:
    """GATEWAY_HOSTS=<host>[,...]: the `gateway` group (vLLM's router as the front door), reached with the same
    GX10_SSH_* settings as the boxes; a box may be one too."""
    env = os.environ if env is None else env
    names = [h.strip() for h in env.get("GATEWAY_HOSTS", "").split(",") if h.strip()]
    return real_hosts({**env, "GX10_HOSTS": ",".join(names)})


SIM_GATEWAY_ROLE = "gateway"  # `sim up --gateway NAME`: that instance is a `gateway` host, not a box


def sim_hosts(path: Path = SIM_HOSTS_FILE) -> list[HostConn]:
    """The running simulated boxes (group gx10): every instance but those booted as gateways."""
    return [h for h, role in _sim_instances(path) if role != SIM_GATEWAY_ROLE]


def sim_gateway_hosts(path: Path = SIM_HOSTS_FILE) -> list[HostConn]:
    """The running simulated instances booted as the `gateway` group's hosts (`sim up --gateway NAME`)."""
    return [h for h, role in _sim_instances(path) if role == SIM_GATEWAY_ROLE]


def _sim_instances(path: Path) -> list[tuple[HostConn, str]]:
    if not path.exists():
        return []
    hosts = []
    for h in json.loads(path.read_text()):
        extra = {k: v for k, v in h.items()
                 if k not in ("name", "address", "ssh_user", "ssh_port", "ssh_key", "known_hosts", "role")}
        conn = HostConn(name=h["name"], address=h["address"], ssh_user=h.get("ssh_user", "root"),
                        ssh_port=int(h.get("ssh_port", 22)), ssh_key=h.get("ssh_key", ""),
                        known_hosts=h.get("known_hosts", ""), simulated=True, data=extra)
        hosts.append((conn, h.get("role", "")))
    return hosts


def per_host_models(env: dict | None = None) -> dict[str, str]:
    """SPARK_CODING_MODELS="spark-1=laguna-s-2.1,spark-2=qwen3.8-27b": each box's CODING_MODEL (split topology)."""
    env = os.environ if env is None else env
    out = {}
    for item in filter(None, (x.strip() for x in env.get("SPARK_CODING_MODELS", "").split(","))):
        name, sep, model = item.partition("=")
        if not sep or not name or not model:
            raise SparkctlError(f"SPARK_CODING_MODELS item {item!r} is not valid; expected HOST=MODEL")
        out[name.strip()] = model.strip()
    return out


def airgapped(env: dict | None = None) -> list[str]:
    """SPARK_AIRGAPPED="spark-3,spark-4": the boxes whose AIRGAPPED host data is True (no route to the Hub or the
    package index: they get checkpoints and wheels from the fleet)."""
    env = os.environ if env is None else env
    return [n.strip() for n in env.get("SPARK_AIRGAPPED", "").split(",") if n.strip()]


def with_models(hosts: list[HostConn], env: dict | None = None) -> list[HostConn]:
    """The hosts with each box's own host data from the environment: CODING_MODEL (SPARK_CODING_MODELS) and
    AIRGAPPED (SPARK_AIRGAPPED)."""
    models, gapped = per_host_models(env), airgapped(env)
    names = {h.name for h in hosts}
    for setting, given in (("SPARK_CODING_MODELS", models), ("SPARK_AIRGAPPED", gapped)):
        unknown = sorted(set(given) - names)
        if unknown and hosts:
            raise SparkctlError(f"{setting} names {unknown}, not in the inventory "
                                f"({', '.join(h.name for h in hosts)})")
    out = []
    for h in hosts:
        own = {**({"CODING_MODEL": models[h.name]} if h.name in models else {}),
               **({"AIRGAPPED": True} if h.name in gapped else {})}
        out.append(HostConn(**{**h.__dict__, "data": {**h.data, **own}}) if own else h)
    return out


def configured_hosts() -> list[HostConn]:
    """Real boxes if GX10_HOSTS is set, else the running simulated Sparks (possibly none)."""
    return with_models(real_hosts() or sim_hosts())


def find(name: str | None = None) -> HostConn:
    hosts = configured_hosts()
    if not hosts:
        raise SparkctlError("no host configured: set GX10_HOSTS=<box>[,<box>] or run `python -m sparkctl sim up`")
    if name is None:
        return hosts[0]
    for h in hosts:
        if h.name == name:
            return h
    raise SparkctlError(f"host {name!r} is not configured; expected one of {', '.join(h.name for h in hosts)}")
