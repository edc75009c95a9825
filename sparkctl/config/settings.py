"""Validate a host's merged data before anything touches it, and derive what the box will run.

`validate(data, host_name)` raises SettingError (naming the setting, the value and what is valid) for bad input;
it returns a Settings with the services, their checkpoints and the secrets to upload. Warnings (e.g. a proxy
timeout below the 7200 s floor) are collected, not raised.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from sparkctl import REPO_ROOT
from sparkctl.config import catalog, lock, topology
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


def _port(setting: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise SettingError(setting, value, "an integer TCP port from 1 to 65535")
    return value


def _positive(setting: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise SettingError(setting, value, "a number greater than 0")
    return float(value)


def check_ports(data: dict) -> None:
    ports = {"CODER_PORT": _port("CODER_PORT", data["CODER_PORT"]),
             "PROXY_PORT": _port("PROXY_PORT", data["PROXY_PORT"])}
    embedder_ports = data["EMBEDDER_PORTS"]
    if not isinstance(embedder_ports, (list, tuple)):
        raise SettingError("EMBEDDER_PORTS", embedder_ports, "a list of TCP ports, one per EMBEDDERS entry")
    for i, p in enumerate(embedder_ports):
        ports[f"EMBEDDER_PORTS[{i}]"] = _port(f"EMBEDDER_PORTS[{i}]", p)
    seen: dict[int, str] = {}
    for name, p in ports.items():
        if p in seen:
            raise SettingError(name, p, f"a port not already used by {seen[p]}")
        seen[p] = name


def check_timeouts(data: dict, warnings: list[str]) -> None:
    floor = data["PROXY_TIMEOUT_FLOOR_S"]
    for name in ("PROXY_READ_TIMEOUT_S", "PROXY_SEND_TIMEOUT_S", "HEALTH_REQUEST_TIMEOUT_S", "BENCH_CLIENT_TIMEOUT_S"):
        value = data.get(name)
        if value is None:
            continue
        _positive(name, value)
        if value < floor:
            warnings.append(f"{name} = {value} s is below the {floor} s floor (PROXY_TIMEOUT_FLOOR_S): long reasoning "
                            f"generations will be cut silently, as two 10-minute timeouts once did in production")


def check_tls(data: dict) -> None:
    cert, key = data.get("TLS_CERT_FILE", ""), data.get("TLS_KEY_FILE", "")
    if bool(cert) != bool(key):
        raise SettingError("TLS_CERT_FILE/TLS_KEY_FILE", (cert, key), "both set, or both empty to generate a local CA")
    for name, path in (("TLS_CERT_FILE", cert), ("TLS_KEY_FILE", key)):
        if path and not os.access(Path(path) if Path(path).is_absolute() else REPO_ROOT / path, os.R_OK):
            raise SettingError(name, path, "a readable PEM file on the control machine")


def _embedder_entries(data: dict) -> list[dict]:
    entries = data["EMBEDDERS"]
    if not isinstance(entries, (list, tuple)) or not all(isinstance(e, dict) and "model" in e for e in entries):
        raise SettingError("EMBEDDERS", entries, 'a list of {"model": <catalog key>, "kv_cache_gib": <GiB>}')
    if len(entries) != len(data["EMBEDDER_PORTS"]):
        raise SettingError("EMBEDDER_PORTS", data["EMBEDDER_PORTS"], f"{len(entries)} ports, one per EMBEDDERS entry")
    return list(entries)


def validate(data: dict, host_name: str = "", read_secrets: bool = True, hosts: list[str] | None = None) -> Settings:
    """Everything a deploy needs, checked; raises SettingError before any host is touched.

    hosts: the inventory's gx10 hosts in order (the topology decides this host's part from it)."""
    warnings: list[str] = []
    cat = catalog.resolve(data.get("CATALOG_OVERRIDES"))
    coder_key = data["CODING_MODEL"]
    coder = catalog.lookup(cat, "CODING_MODEL", coder_key, CODER)
    role = topology.role_of(data, host_name, hosts or [host_name])
    check_ports(data)
    check_timeouts(data, warnings)
    check_tls(data)
    served = data["CODER_SERVED_NAME"]
    if not isinstance(served, str) or not SERVED_NAME_RE.match(served):
        raise SettingError("CODER_SERVED_NAME", served, "a lower-case name usable as a URL path segment")
    kv_table = data["CODER_KV_CACHE_GIB"]
    if not isinstance(kv_table, dict) or coder_key not in kv_table:
        raise SettingError(f"CODER_KV_CACHE_GIB[{coder_key!r}]", None, "a KV budget in GiB for the selected model")
    kv_gib = _positive(f"CODER_KV_CACHE_GIB[{coder_key!r}]", kv_table[coder_key])

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
    for i, entry in enumerate(_embedder_entries(data)):
        spec = catalog.lookup(cat, f"EMBEDDERS[{i}].model", entry["model"], EMBEDDER)
        kv = _positive(f"EMBEDDERS[{i}].kv_cache_gib", entry.get("kv_cache_gib"))
        if not SERVED_NAME_RE.match(spec.served_name) or spec.served_name == served:
            raise SettingError(f"EMBEDDERS[{i}] served name", spec.served_name, "a unique URL-safe name")
        embedders.append(svc(spec.served_name, EMBEDDER, spec, spec.served_name, data["EMBEDDER_PORTS"][i], kv))

    settings = Settings(data=data, host_name=host_name, coder=coder_svc, embedders=embedders,
                        checkpoints=list(locked.values()), role=role, warnings=warnings)
    if read_secrets:
        from sparkctl.config import secrets
        settings.api_token = secrets.read_api_token(data)
        settings.hf_token = secrets.read_hf_token(data)
    return settings

