"""The waves a coder rollout takes over the fleet, computed before anything runs.

Batch sizes (ROLLOUT_WAVES) have Ansible's `serial:` meaning: wave i takes ROLLOUT_WAVES[i] units, the last entry
repeated until every unit is done; a number is that many units, a percentage is of the whole fleet's units, rounded
down and at least one (Ansible's pct_to_int). A unit is a box, or a tensor-parallel pair (its two boxes roll out as
one). The default [1, "25%", "100%"]: one canary, then a quarter of the fleet, then the rest.

MAX_UNAVAILABLE bounds each pool within a wave: a number of units, or a percentage of the pool's units (rounded
down), at least one and never the whole pool (a pool of two never loses both); a pool of one unit has no other box
to serve while it rolls out, as before. Units are taken in inventory order; one whose pool already has its
MAX_UNAVAILABLE in the wave waits for the next wave, so a wave may be smaller than its batch size and the list may
grow (its last size repeats). Each wave finishes (every box judged) before the next starts (sparkctl.fleet.wave_gate).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from sparkctl.config.schema import GroupData
from sparkctl.fleet.placement import Fleet, place
from sparkctl.fleet.pools import from_settings

Unit = tuple[str, ...]


def resolve(size: int | str, total: int) -> int:
    """A batch size as a number of units out of total: 3 -> 3; "25%" of 10 -> 2; "1%" of 10 -> 1."""
    if isinstance(size, str):
        return int(int(size.rstrip("%")) / 100 * total) or 1
    return size


def batch_sizes(waves: list, total: int) -> list[int]:
    """ROLLOUT_WAVES as the units each wave takes until total are done (no pool limit)."""
    sizes, done = [], 0
    while done < total:
        size = min(resolve(waves[min(len(sizes), len(waves) - 1)], total), total - done)
        sizes.append(size)
        done += size
    return sizes


def pool_limit(max_unavailable: int | str, pool_units: int) -> int:
    """Units of a pool a wave may take: MAX_UNAVAILABLE of it, at least one, never all of a pool of two or more."""
    limit = max(1, resolve(max_unavailable, pool_units))
    return min(limit, pool_units - 1) if pool_units > 1 else 1


def plan_waves(fleet: Fleet, waves: list, max_unavailable: int | str, with_work: set[str] | None = None
               ) -> list[list[Unit]]:
    """The ordered waves (lists of units) of a rollout over the fleet's units, or only over those with a box in
    with_work (sizes and limits still count the whole fleet and the whole pool)."""
    total = len(fleet.units)
    pool_of = {u: p.pool.name for p in fleet.pools for u in p.units}
    limits = {p.pool.name: pool_limit(max_unavailable, len(p.units)) for p in fleet.pools}
    pending = [u for u in fleet.units if with_work is None or set(u) & with_work]
    out: list[list[Unit]] = []
    while pending:
        size = resolve(waves[min(len(out), len(waves) - 1)], total)
        wave: list[Unit] = []
        used: Counter = Counter()
        for unit in pending:
            if len(wave) == size:
                break
            if used[pool_of[unit]] < limits[pool_of[unit]]:
                wave.append(unit)
                used[pool_of[unit]] += 1
        pending = [u for u in pending if u not in wave]
        out.append(wave)
    return out


def wave_boxes(waves: list[list[Unit]]) -> list[list[str]]:
    """The waves as lists of box names."""
    return [[b for unit in wave for b in unit] for wave in waves]


@dataclass(frozen=True)
class FleetWaves:
    """How a deploy's rollouts take the fleet: ROLLOUT_WAVES and MAX_UNAVAILABLE over its placed units."""

    fleet: Fleet  # the inventory's gx10 hosts in order, FLEET_POOLS placed (or today's topology read as pools)
    sizes: tuple  # ROLLOUT_WAVES
    max_unavailable: int | str  # MAX_UNAVAILABLE

    def plan(self, with_work: set[str]) -> list[list[Unit]]:
        """The waves over the units with a box in with_work (plan_waves)."""
        return plan_waves(self.fleet, list(self.sizes), self.max_unavailable, with_work)


def rollout_waves(cfg: GroupData, hosts: list[str]) -> FleetWaves:
    """What the deploy's rollouts need of the fleet, for the inventory's gx10 hosts in order."""
    return FleetWaves(place(from_settings(cfg, hosts), hosts), tuple(cfg.ROLLOUT_WAVES), cfg.MAX_UNAVAILABLE)
