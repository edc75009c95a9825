"""How every entry point reads a host's settings: group data merged as pyinfra merges it, the schema's types
(config/schema.py), every cross-field rule on them (check/rules.py), and the catalog resolved once -> HostConfig.
`plan`, `bench`, `niah`, `evals`, `status`, `sim`, `lock` and the deploy's own validation (check/validate.py) all
start here; no lock and no secrets are needed.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache

from sparkctl import REPO_ROOT
from sparkctl.check import rules
from sparkctl.config import groupdata, schema
from sparkctl.config.hosts import HostConn, configured_hosts, per_host_models
from sparkctl.config.schema import GroupData
from sparkctl.config.settings import HostConfig, with_catalog
from sparkctl.fleet.placement import pool_host_data, topology_hosts
from sparkctl.fleet.validate import validate_fleet

SHIPPED_GROUPS = ["all", "gx10"]  # the shipped group data of a real box: what the rules blame a change against


@lru_cache(maxsize=1)
def shipped() -> rules.Shipped:
    """The repository's shipped group data of a real box, read once: the rules' reference for "changed"."""
    return rules.Shipped(groupdata.load(SHIPPED_GROUPS, root=REPO_ROOT))


def typed(data: Mapping) -> GroupData:
    """A host's merged data (group data, host data, --data) with its types and every cross-field rule checked."""
    cfg = schema.validate(data)
    rules.check_settings(cfg, shipped(), schema.ssh_port(data))
    return cfg


def host_config(data: Mapping, host_name: str = "", address: str = "") -> HostConfig:
    """A host's merged data, typed and checked, with its catalog; address: what clients and ssh connect to
    (default: data's ssh_hostname, else the host name)."""
    cfg = typed(data)
    return with_catalog(cfg, host_name, address or str(data.get("ssh_hostname") or host_name))


def load(groups: list[str] | None = None, host: HostConn | None = None, overrides: Mapping | None = None
         ) -> HostConfig:
    """What a tool off the deploy path reads: group data merged as pyinfra merges it (groups < the inventory host's
    own data < overrides), checked; default groups: the configured box. A box of a FLEET_POOLS fleet reads what its
    pool gives it, as its deploy does (a bench of a Laguna pool's box asks for Laguna's served name)."""
    data = {**groupdata.load(groups), **(host.data if host else {}), **(overrides or {})}
    config = host_config(data, host.name if host else "", host.address if host else "")
    if host is None or not config.cfg.FLEET_POOLS:
        return config
    inventory = [h.name for h in configured_hosts()]
    return with_pool(data, host.name, host.address, inventory, per_host_models())[0]


def with_pool(data: dict, host_name: str, address: str, hosts: list[str] | None,
              host_models: dict[str, str] | None) -> tuple[HostConfig, list[str] | None]:
    """The host's settings and, where FLEET_POOLS places the box, what its pool gives it (coding model, served name,
    embedders; a tensor-parallel pool's topology and head) over its group data; the pools are checked first
    (sparkctl.fleet.validate_fleet), naming FLEET_POOLS. Returns them with the hosts the box's part is derived from:
    its pair in a tensor-parallel pool, else the inventory's."""
    config = host_config(data, host_name, address)
    if not config.cfg.FLEET_POOLS or not hosts or host_name not in hosts:
        return config, hosts
    fleet = validate_fleet(config.cfg, config.catalog, hosts, host_models)
    return host_config({**data, **pool_host_data(fleet, host_name)}, host_name, address), \
        topology_hosts(fleet, host_name)

