"""The fleet as `python -m sparkctl plan` shows it: validated and placed, each box's memory, each pool's
capacity, the waves of a rollout and its wall-time estimate."""

from __future__ import annotations

from dataclasses import dataclass

from sparkctl.config.catalog import ModelSpec
from sparkctl.config.schema import GroupData
from sparkctl.fleet import estimate, placement, waves
from sparkctl.fleet.placement import BoxMemory, Fleet, PoolCapacity
from sparkctl.fleet.validate import validate_fleet


@dataclass(frozen=True)
class FleetPlan:
    fleet: Fleet
    memory: tuple[BoxMemory, ...]
    capacity: tuple[PoolCapacity, ...]
    waves: tuple[tuple[tuple[str, ...], ...], ...]
    estimate: estimate.RolloutEstimate
    settings: dict  # ROLLOUT_WAVES, MAX_UNAVAILABLE, MAX_FAIL_PERCENTAGE as read
    notes: tuple[str, ...]


def fleet_plan(cfg: GroupData, catalog: dict[str, ModelSpec], hosts: list[str],
               host_models: dict[str, str] | None = None) -> FleetPlan:
    """validate_fleet's placed fleet (or its refusal), with everything the plan shows of it."""
    fleet = validate_fleet(cfg, catalog, hosts, host_models)
    planned = waves.plan_waves(fleet, cfg.ROLLOUT_WAVES, cfg.MAX_UNAVAILABLE)
    notes = tuple(f"pool {p.pool.name!r} has one {'pair' if p.pool.tensor_parallel else 'box'}: it serves "
                  f"{p.pool.served_name!r} from nowhere else while it rolls out" for p in fleet.pools
                  if len(p.units) == 1 and len(fleet.units) > 1)
    return FleetPlan(fleet=fleet, memory=tuple(placement.box_memory(cfg, catalog, fleet)),
                     capacity=tuple(placement.pool_capacity(cfg, catalog, p) for p in fleet.pools),
                     waves=tuple(tuple(w) for w in planned), estimate=estimate.estimate(cfg, planned),
                     settings={"ROLLOUT_WAVES": list(cfg.ROLLOUT_WAVES), "MAX_UNAVAILABLE": cfg.MAX_UNAVAILABLE,
                               "MAX_FAIL_PERCENTAGE": cfg.MAX_FAIL_PERCENTAGE},
                     notes=notes)
