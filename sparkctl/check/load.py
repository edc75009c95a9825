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
from sparkctl.config.hosts import HostConn
from sparkctl.config.schema import GroupData
from sparkctl.config.settings import HostConfig, with_catalog

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
    own data < overrides), checked; default groups: the configured box."""
    data = {**groupdata.load(groups), **(host.data if host else {}), **(overrides or {})}
    return host_config(data, host.name if host else "", host.address if host else "")
