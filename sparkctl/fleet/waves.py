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

A first install (a box whose service was never committed and does not run: it serves nothing yet) takes no
capacity away, as Kubernetes counts no new replica against maxUnavailable: it waits for no wave (it joins the first,
beyond its batch size) and MAX_UNAVAILABLE counts only a pool's serving units. It is judged as any box of the first
wave (its failure counts against MAX_FAIL_PERCENTAGE there), and reaches the routers only once committed (the box's
transaction fails its router health path from its first phase to its commit).
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


def plan_waves(fleet: Fleet, waves: list, max_unavailable: int | str, with_work: set[str] | None = None,
               first_installs: frozenset[str] | set[str] = frozenset()) -> list[list[Unit]]:
    """The ordered waves (lists of units) of a rollout over the fleet's units, or only over those with a box in
    with_work (batch sizes count the whole fleet). first_installs: boxes whose service was never committed and
    does not run; a unit all of whose boxes are one serves nothing yet, so it takes no capacity away: it joins the
    first wave beyond its batch size and uses none of its pool's MAX_UNAVAILABLE, which counts the pool's serving
    units only. A pool whose one serving unit rolls out while new units join it waits for them: it goes from the
    second wave on, so the pool keeps a box serving as a pool of two would."""
    pending = [u for u in fleet.units if with_work is None or set(u) & with_work]
    new = {u for u in fleet.units if set(u) <= set(first_installs)}
    joining = [u for u in pending if u in new]
    limits = {p.pool.name: _serving_limits(p.units, new, joining, max_unavailable) for p in fleet.pools}
    out = _waves_of([u for u in pending if u not in new], waves, fleet, limits)
    return _beside_the_first(out, joining)


def _beside_the_first(waves: list[list[Unit]], joining: list[Unit]) -> list[list[Unit]]:
    """The waves with the joining units added to the first (which may have been left empty for them)."""
    if joining:
        waves = [(waves[0] if waves else []) + joining, *waves[1:]]
    return [w for w in waves if w]


def _serving_limits(units: tuple[Unit, ...], new: set[Unit], joining: list[Unit], max_unavailable: int | str
                    ) -> tuple[int, int]:
    """(units of the pool the first wave may take, units each later wave may take), of its serving units."""
    serving = [u for u in units if u not in new]
    limit = pool_limit(max_unavailable, len(serving))
    alone = len(serving) == 1 and any(u in units for u in joining)
    return (0 if alone else limit), limit


def _waves_of(pending: list[Unit], waves: list, fleet: Fleet, limits: dict[str, tuple[int, int]]
              ) -> list[list[Unit]]:
    """Units in order into waves of ROLLOUT_WAVES' sizes (of the fleet's units), no more of a pool in one than its
    limit."""
    total = len(fleet.units)
    pool_of = {u: p.pool.name for p in fleet.pools for u in p.units}
    out: list[list[Unit]] = []
    while pending:
        size = resolve(waves[min(len(out), len(waves) - 1)], total)
        wave: list[Unit] = []
        used: Counter = Counter()
        for unit in pending:
            if len(wave) == size:
                break
            if used[pool_of[unit]] < limits[pool_of[unit]][min(len(out), 1)]:
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

    def plan(self, with_work: set[str], first_installs: set[str] = frozenset()) -> list[list[Unit]]:
        """The waves over the units with a box in with_work, first installs beside the first (plan_waves)."""
        return plan_waves(self.fleet, list(self.sizes), self.max_unavailable, with_work, first_installs)


def rollout_waves(cfg: GroupData, hosts: list[str]) -> FleetWaves:
    """What the deploy's rollouts need of the fleet, for the inventory's gx10 hosts in order."""
    return FleetWaves(place(from_settings(cfg, hosts), hosts), tuple(cfg.ROLLOUT_WAVES), cfg.MAX_UNAVAILABLE)
