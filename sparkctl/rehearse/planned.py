"""What the capacity planner planned for each service of a box, and which services (units) the box runs: the
figures the rehearsal sets beside the box's own readings.

The coder's resident + KV per box is the deploy's own preflight plan (capacity `check_fits`: per box of a
tensor-parallel pair, half the weights and the whole runtime); each embedder's resident + KV is the box's
(capacity box.py), on a box that serves the API (a tensor-parallel worker runs the coder's rank only).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sparkctl.box import contract
from sparkctl.capacity import planner
from sparkctl.config import catalog, groupdata, hosts, topology
from sparkctl.config.settings import HostConfig
from sparkctl.config.topology import Role


@dataclass(frozen=True)
class BoxPlan:
    config: HostConfig  # the box's typed settings and catalog
    role: Role  # its part in the topology (single, replica, split, head, worker)
    part: list[str]  # the hosts its part is derived from (its pair in tensor-parallel)
    services: dict[str, dict]  # service -> {"resident_gib", "kv_gib", "footprint_gib", "resident_source"}
    kv_tokens: int | None  # the plan's KV tokens of the coder (what the health table shows as planned)
    production_kv_tokens: int | None  # what production's vLLM logged for this budget (the write-up), if any
    roofline_tokens_per_s: float | None  # the planner's single-stream decode roofline
    models: dict = field(default_factory=dict)  # service -> its catalog entry (catalog.ModelSpec)

    @property
    def units(self) -> dict[str, str]:
        """service -> its systemd unit; a worker of a Ray pair runs no vLLM unit of its own."""
        if self.role.name == "worker" and self.config.cfg.TP_BACKEND == "ray":
            return {}
        return {name: contract.unit_of(name) for name in self.services}

    @property
    def headless(self) -> set[str]:
        return {"coder"} if self.role.name == "worker" else set()


def box_part(groups: list[str] | None, host: hosts.HostConn, inventory: list[str]) -> tuple[HostConfig, list[str]]:
    """The host's settings as `load` reads them (its pool's, in a fleet) and the hosts its part is derived from."""
    from sparkctl.check.load import with_pool

    data = {**groupdata.load(groups), **host.data}
    config, part = with_pool(data, host.name, host.address, inventory, hosts.per_host_models())
    return config, list(part or [host.name])


def plan_box(groups: list[str] | None, host: hosts.HostConn, inventory: list[str]) -> BoxPlan:
    """The box's plan; PlanError (a SparkctlError) when the configuration does not fit, as the preflight refuses it."""
    config, part = box_part(groups, host, inventory)
    cfg = config.cfg
    role = topology.role_of(cfg, host.name, part)
    plan = planner.check_fits(cfg, config.catalog, cfg.CODING_MODEL)
    services = {"coder": {"resident_gib": plan.resident_gib, "kv_gib": plan.kv_gib,
                          "footprint_gib": plan.footprint_gib, "resident_source": plan.resident_source}}
    models = {"coder": catalog.lookup(config.catalog, "CODING_MODEL", cfg.CODING_MODEL, catalog.CODER)}
    if role.serves_api:
        for entry, use in zip(cfg.EMBEDDERS, plan.box.embedders):
            spec = catalog.lookup(config.catalog, "EMBEDDERS", entry.model, catalog.EMBEDDER)
            services[spec.served_name] = {"resident_gib": use.resident_gib, "kv_gib": use.kv_gib,
                                          "footprint_gib": use.total_gib, "resident_source": use.resident_source}
            models[spec.served_name] = spec
    return BoxPlan(config=config, role=role, part=part, services=services,
                   kv_tokens=plan.capacity.tokens if plan.capacity else None,
                   production_kv_tokens=plan.kv_tokens_measured, roofline_tokens_per_s=plan.roofline_tokens_per_s,
                   models=models)
