"""A host's settings, validated and typed once, and what the box will run.

Two layers, both built only through the check layer (sparkctl/check/load.py: `load` and `host_config`, what every
entry point reads; sparkctl/check/validate.py: the deploy's whole validation):

HostConfig  what every tool reads: the typed settings (`cfg`, a frozen schema.GroupData), the catalog resolved once
            with CATALOG_MODELS and CATALOG_OVERRIDES (and what the lock recorded of each checkpoint's own files,
            when it has them), the host's name and the address clients and ssh connect to. It needs no lock and no
            secrets, so `python -m sparkctl plan` works for a real GX10's data anywhere.
Settings    what the deploy derives on top (`derive`): the services, every checkpoint at its locked commit, the
            host's part in the topology, the secrets to upload, and warnings (a proxy timeout below the 7200 s
            floor) that are collected, not raised.

Bad input raises SettingError naming the setting, the value and what is valid.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sparkctl.config import catalog, lock, schema, topology
from sparkctl.config.catalog import CODER, EMBEDDER, ModelSpec
from sparkctl.config.quantities import GIB
from sparkctl.config.service import Service
from sparkctl.errors import SettingError

SERVED_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")


@dataclass(frozen=True, kw_only=True)
class HostConfig:
    cfg: schema.GroupData
    catalog: dict[str, ModelSpec]  # CATALOG_OVERRIDES applied
    host_name: str = ""
    address: str = ""  # what clients and ssh connect to (ssh_hostname, else the host name)

    @property
    def coding_model(self) -> ModelSpec:
        return self.catalog[self.cfg.CODING_MODEL]


@dataclass(frozen=True, kw_only=True)
class Settings(HostConfig):
    coder: Service
    embedders: list[Service]
    checkpoints: list[lock.LockedCheckpoint]  # every checkpoint the box keeps on disk (settings.kept_models)
    role: topology.Role = field(default_factory=lambda: topology.Role("replicas", "single"))
    api_token: str = field(repr=False, default="")
    hf_token: str = field(repr=False, default="")
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # what the offline validators checked and skipped (sparkctl/check/render.py)

    @property
    def services(self) -> list[Service]:
        """The vLLM services this box runs (a Ray tensor-parallel worker runs none: its GPU joins the head's)."""
        if self.role.name == "worker":
            return [self.coder] if self.cfg.TP_BACKEND == "native" else []
        return [self.coder, *self.embedders]


# --- the catalog of a host's typed settings ---------------------------------------------------------------------------


def with_catalog(cfg: schema.GroupData, host_name: str, address: str) -> HostConfig:
    """The catalog (built-in entries, CATALOG_MODELS, CATALOG_OVERRIDES), with what the lock recorded of each
    checkpoint's own files when the lock has them."""
    resolved = lock.with_facts(catalog.resolve(cfg.CATALOG_OVERRIDES, cfg.CATALOG_MODELS), cfg)
    return HostConfig(cfg=cfg, catalog=resolved, host_name=host_name, address=address)


# --- what the deploy derives -----------------------------------------------------------------------------------------


def timeout_warnings(cfg: schema.GroupData) -> tuple[str, ...]:
    floor = cfg.PROXY_TIMEOUT_FLOOR_S
    return tuple(f"{name} = {value} s is below the {floor} s floor (PROXY_TIMEOUT_FLOOR_S): long reasoning "
                 f"generations will be cut silently, as two 10-minute timeouts once did in production"
                 for name in ("PROXY_READ_TIMEOUT_S", "PROXY_SEND_TIMEOUT_S", "HEALTH_REQUEST_TIMEOUT_S",
                              "BENCH_CLIENT_TIMEOUT_S")
                 if (value := getattr(cfg, name)) < floor)


def kept_models(config: HostConfig) -> list[ModelSpec]:
    """The models a box keeps on disk: every coding model with a KV budget in CODER_KV_CACHE_GIB (the ones a flip
    may select, so flipping back downloads nothing; CODING_MODEL always has one) and the EMBEDDERS. A catalog
    entry without a budget is planned, never downloaded."""
    cfg = config.cfg
    coders = [config.catalog[k] for k in cfg.CODER_KV_CACHE_GIB]
    return coders + [config.catalog[e.model] for e in cfg.EMBEDDERS]


def locked_checkpoints(config: HostConfig) -> dict[str, lock.LockedCheckpoint]:
    """Every checkpoint the box keeps at its locked commit (a SettingError names a missing or stale lock entry)."""
    path = lock.lock_path(config.cfg)
    lockdata = lock.load(path)
    return {cp.repo: lock.locked(lockdata, cp, path) for cp in lock.checkpoints_of(kept_models(config))}


def derive(config: HostConfig, hosts: list[str] | None = None) -> Settings:
    """The services this host runs and their locked checkpoints (no secrets read: check/validate.py adds them).

    hosts: the inventory's gx10 hosts in order (the topology decides this host's part from it)."""
    cfg = config.cfg
    role = topology.role_of(cfg, config.host_name, hosts or [config.host_name])
    locked = locked_checkpoints(config)
    coder = _service(locked, "coder", CODER, config.coding_model, cfg.CODER_SERVED_NAME, cfg.CODER_PORT,
                     cfg.CODER_KV_CACHE_GIB[cfg.CODING_MODEL], extra_args=role.coder_args, extra_env=role.env,
                     headless=role.name == "worker", tensor_parallel=role.tensor_parallel)
    return Settings(cfg=cfg, catalog=config.catalog, host_name=config.host_name, address=config.address,
                    coder=coder, embedders=_embedders(config, locked), checkpoints=list(locked.values()), role=role,
                    warnings=timeout_warnings(cfg))


def _service(locked: dict, name: str, kind: str, spec: ModelSpec, served_name: str, port: int, kv_gib: float,
             **extra) -> Service:
    return Service(name=name, role=kind, model=spec, served_name=served_name, port=port,
                   kv_cache_bytes=int(round(kv_gib * GIB)), checkpoint=locked[spec.checkpoint.repo],
                   draft=locked[spec.draft.repo] if spec.draft else None, **extra)


def _embedders(config: HostConfig, locked: dict) -> list[Service]:
    cfg, out = config.cfg, []
    for i, entry in enumerate(cfg.EMBEDDERS):
        spec = catalog.lookup(config.catalog, f"EMBEDDERS[{i}].model", entry.model, EMBEDDER)
        taken = (cfg.CODER_SERVED_NAME, *(e.served_name for e in out))
        if not SERVED_NAME_RE.match(spec.served_name) or spec.served_name in taken:
            raise SettingError(f"EMBEDDERS[{i}].model", entry.model,
                               f"a model whose served name ({spec.served_name!r}) is URL-safe and not already served "
                               f"(CODER_SERVED_NAME = {cfg.CODER_SERVED_NAME!r})")
        out.append(_service(locked, spec.served_name, EMBEDDER, spec, spec.served_name, cfg.EMBEDDER_PORTS[i],
                            entry.kv_cache_gib))
    return out
