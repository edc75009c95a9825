"""Validate a host's merged data before anything touches it, and derive what the box will run.

`validate(data, host_name)` raises SettingError (naming the setting, the value and what is valid) for bad input;
it returns a Settings with the services, their checkpoints and the secrets to upload. Warnings (e.g. a proxy
timeout below the 7200 s floor) are collected, not raised.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sparkctl.config import catalog, lock, schema, topology
from sparkctl.config.catalog import CODER, EMBEDDER
from sparkctl.config.service import GIB, Service
from sparkctl.errors import SettingError

SERVED_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")


@dataclass
class Settings:
    data: dict
    host_name: str
    coder: Service
    embedders: list[Service]
    checkpoints: list[lock.LockedCheckpoint]  # every checkpoint the box keeps on disk (both coders)
    role: topology.Role = field(default_factory=lambda: topology.Role("replicas", "single"))
    api_token: str = field(repr=False, default="")
    hf_token: str = field(repr=False, default="")
    warnings: list[str] = field(default_factory=list)

    @property
    def services(self) -> list[Service]:
        """The vLLM services this box runs (a Ray tensor-parallel worker runs none: its GPU joins the head's)."""
        if self.role.name == "worker":
            return [self.coder] if self.data["TP_BACKEND"] == "native" else []
        return [self.coder, *self.embedders]


def check_timeouts(data: dict, warnings: list[str]) -> None:
    floor = data["PROXY_TIMEOUT_FLOOR_S"]
    for name in ("PROXY_READ_TIMEOUT_S", "PROXY_SEND_TIMEOUT_S", "HEALTH_REQUEST_TIMEOUT_S", "BENCH_CLIENT_TIMEOUT_S"):
        value = data[name]
        if value < floor:
            warnings.append(f"{name} = {value} s is below the {floor} s floor (PROXY_TIMEOUT_FLOOR_S): long reasoning "
                            f"generations will be cut silently, as two 10-minute timeouts once did in production")


def validate(data: dict, host_name: str = "", read_secrets: bool = True, hosts: list[str] | None = None) -> Settings:
    """Everything a deploy needs, checked; raises SettingError before any host is touched.

    hosts: the inventory's gx10 hosts in order (the topology decides this host's part from it)."""
    schema.validate(data)  # every key, type, range and cross-field rule; below, only what needs the catalog
    warnings: list[str] = []
    cat = catalog.resolve(data["CATALOG_OVERRIDES"])
    coder_key = data["CODING_MODEL"]
    coder = catalog.lookup(cat, "CODING_MODEL", coder_key, CODER)
    role = topology.role_of(data, host_name, hosts or [host_name])
    check_timeouts(data, warnings)
    served = data["CODER_SERVED_NAME"]
    kv_gib = float(data["CODER_KV_CACHE_GIB"][coder_key])

    path = lock.lock_path(data)
    lockdata = lock.load(path)
    locked = {cp.repo: lock.locked(lockdata, cp, path) for cp in lock.checkpoints_of(data)}

    def svc(name, kind, spec, served_name, port, kv, **extra):
        return Service(name=name, role=kind, model=spec, served_name=served_name, port=port,
                       kv_cache_bytes=int(round(kv * GIB)), checkpoint=locked[spec.checkpoint.repo],
                       draft=locked[spec.draft.repo] if spec.draft else None, **extra)

    coder_svc = svc("coder", CODER, coder, served, data["CODER_PORT"], kv_gib, extra_args=role.coder_args,
                    extra_env=role.env, headless=role.name == "worker")
    embedders = []
    for i, entry in enumerate(data["EMBEDDERS"]):
        spec = catalog.lookup(cat, f"EMBEDDERS[{i}].model", entry["model"], EMBEDDER)
        kv = float(entry["kv_cache_gib"])
        taken = (served, *(e.served_name for e in embedders))
        if not SERVED_NAME_RE.match(spec.served_name) or spec.served_name in taken:
            raise SettingError(f"EMBEDDERS[{i}].model", entry["model"],
                               f"a model whose served name ({spec.served_name!r}) is URL-safe and not already served "
                               f"(CODER_SERVED_NAME = {served!r})")
        embedders.append(svc(spec.served_name, EMBEDDER, spec, spec.served_name, data["EMBEDDER_PORTS"][i], kv))

    settings = Settings(data=data, host_name=host_name, coder=coder_svc, embedders=embedders,
                        checkpoints=list(locked.values()), role=role, warnings=warnings)
    if read_secrets:
        from sparkctl.config import secrets
        settings.api_token = secrets.read_api_token(data)
        settings.hf_token = secrets.read_hf_token(data)
    return settings

