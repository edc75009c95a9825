"""Where each pool's boxes are, what each box holds in memory, and what capacity each pool serves.

The placement rule (deterministic, so a plan and a deploy of the same data agree):
  1. every pool's named boxes are its own, in the order the pool lists them;
  2. then each counted pool, in FLEET_POOLS order, takes the next free boxes in inventory order (GX10_HOSTS, or the
     simulated Sparks in .sim/hosts.json).
A tensor-parallel pool's boxes pair up in that order, the first of each pair its head. Every inventory box is in
exactly one pool; anything else is refused (sparkctl.fleet.validate).

Memory per box: sparkctl.capacity's arithmetic (usable - OS reserve - embedders - coder resident - KV budget
>= 0), with the box's own embedders: none where its pool says `"embedders": False`, and none on a pair's worker.
Capacity per pool: concurrent max-context requests of one engine (measured where production measured it, else
the planner's estimate) times its engines (a box, or a pair); the catalog's published decode tok/s per box times
its boxes, with their source (a pair was never measured: its roofline estimate instead).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sparkctl.capacity import planner
from sparkctl.config.catalog import CODER, ModelSpec, lookup
from sparkctl.config.schema import GroupData
from sparkctl.errors import SettingError
from sparkctl.fleet.pools import Pool, Pools


@dataclass(frozen=True)
class PlacedPool:
    pool: Pool
    boxes: tuple[str, ...]

    @property
    def units(self) -> tuple[tuple[str, ...], ...]:
        """What rolls out as one: a box, or a tensor-parallel pair (head first)."""
        if self.pool.tensor_parallel:
            return tuple(self.boxes[i:i + 2] for i in range(0, len(self.boxes), 2))
        return tuple((b,) for b in self.boxes)


@dataclass(frozen=True)
class Fleet:
    topology: str  # SPARK_TOPOLOGY, or "pools" (FLEET_POOLS)
    hosts: tuple[str, ...]  # the inventory's gx10 hosts, in order
    pools: tuple[PlacedPool, ...]

    def pool_of(self, box: str) -> PlacedPool:
        for placed in self.pools:
            if box in placed.boxes:
                return placed
        raise KeyError(box)

    def unit_of(self, box: str) -> tuple[str, ...]:
        """What the box rolls out with: itself, or its tensor-parallel pair (head first)."""
        return next(u for u in self.pool_of(box).units if box in u)

    @property
    def units(self) -> tuple[tuple[str, ...], ...]:
        """Every unit, in inventory order of its first box."""
        order = {h: i for i, h in enumerate(self.hosts)}
        return tuple(sorted((u for p in self.pools for u in p.units), key=lambda u: order.get(u[0], len(order))))

    def host_settings(self, box: str) -> dict:
        """What the box's own host data must say for its pool (the deploy's per-host data): its coding model and the
        name it is served under; "embedders": False means the box runs none (EMBEDDERS and EMBEDDER_PORTS both
        empty, as the schema pairs them)."""
        pool = self.pool_of(box).pool
        return {"CODING_MODEL": pool.model, "CODER_SERVED_NAME": pool.served_name,
                "embedders": pool.embedders and self.role(box) != "worker"}

    def role(self, box: str) -> str:
        """The box's part, as sparkctl.config.topology names it: single, replica, split, head or worker."""
        placed = self.pool_of(box)
        if placed.pool.tensor_parallel:
            return "head" if self.unit_of(box)[0] == box else "worker"
        if len(self.hosts) < 2:
            return "single"
        several_models = len({p.pool.model for p in self.pools}) > 1
        split = self.topology == "split" or (self.topology == "pools" and several_models)
        return "split" if split else "replica"


def place(pools: Pools, hosts: list[str]) -> Fleet:
    """The placement rule of this module's docstring; a pool short of boxes, a box named twice or not in the
    inventory, or a box left without a pool is refused naming the pool's setting."""
    taken: dict[str, str] = {}
    boxes: dict[str, list[str]] = {}
    for pool in pools.pools:
        boxes[pool.name] = []
        for box in pool.named:
            _take(pool, box, hosts, taken)
            boxes[pool.name].append(box)
    free = [h for h in hosts if h not in taken]
    for pool in pools.pools:
        if pool.named:
            continue
        if pool.count > len(free):
            raise SettingError(pool.setting, pool.count, f"at most {len(free)} boxes: the inventory has "
                               f"{len(hosts)} ({', '.join(hosts)}), {len(taken)} already in other pools",
                               "Add boxes to GX10_HOSTS or count fewer")
        boxes[pool.name], free = free[:pool.count], free[pool.count:]
        taken.update({b: pool.name for b in boxes[pool.name]})
    if free and pools.explicit:
        raise SettingError("FLEET_POOLS", _pools_text(pools), f"pools covering every inventory box; "
                           f"{', '.join(free)} {'is' if len(free) == 1 else 'are'} in none",
                           "Name or count it in a pool, or remove it from GX10_HOSTS")
    return Fleet(pools.topology, tuple(hosts), tuple(PlacedPool(p, tuple(boxes[p.name])) for p in pools.pools))


def _take(pool: Pool, box: str, hosts: list[str], taken: dict[str, str]) -> None:
    if box not in hosts:
        raise SettingError(pool.setting, box, hosts, "A pool names inventory hosts (GX10_HOSTS)")
    if box in taken:
        raise SettingError(pool.setting, box, f"a box in no other pool: {box} is already in pool {taken[box]!r}",
                           "A box serves one coding model: take it out of one of them")
    taken[box] = pool.name


def _pools_text(pools: Pools) -> dict:
    return {p.name: list(p.named) if p.named else p.count for p in pools.pools}


# --- memory per box ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BoxMemory:
    box: str
    pool: str
    model: str
    role: str  # "box", "head" or "worker"
    usable_gib: float
    os_reserve_gib: float
    embedders_gib: float
    resident_gib: float
    kv_gib: float
    kv_setting: str
    headroom_gib: float
    fits: bool
    largest_kv_gib: float  # the largest KV budget that fits beside the rest

    @property
    def arithmetic(self) -> str:
        return (f"{self.usable_gib:.1f} usable - {self.os_reserve_gib:.1f} OS reserve - {self.embedders_gib:.1f} "
                f"embedders - {self.resident_gib:.1f} {self.model} resident - {self.kv_gib:.1f} KV = "
                f"{self.headroom_gib:.1f} GiB headroom")


def _box_memory(box: str, placed: PlacedPool, part: str, plan: planner.ModelPlan) -> BoxMemory:
    return BoxMemory(box=box, pool=placed.pool.name, model=plan.name, role=part, usable_gib=plan.box.usable_gib,
                     os_reserve_gib=plan.box.os_reserve_gib, embedders_gib=plan.box.embedders_gib,
                     resident_gib=plan.resident_gib, kv_gib=plan.kv_gib, kv_setting=plan.kv_setting,
                     headroom_gib=plan.headroom_gib, fits=plan.fits, largest_kv_gib=max(0.0, plan.free_gib))


def _engine_plan(cfg: GroupData, catalog: dict[str, ModelSpec], pool: Pool, embedders: bool) -> planner.ModelPlan:
    """One engine of the pool on a box with (or without) the embedders: a box, or one box of a pair."""
    box = planner.box_from_data(cfg, catalog)
    if not embedders:
        box = replace(box, embedders=())
    lookup(catalog, f"{pool.setting}.model", pool.model, CODER)
    if pool.model not in cfg.CODER_KV_CACHE_GIB:
        raise SettingError(f"CODER_KV_CACHE_GIB[{pool.model!r}]", None,
                           f"a KV budget in GiB for the coding model of {pool.setting}")
    sparks, topology = (2, "tensor-parallel") if pool.tensor_parallel else (1, "replicas")
    return planner.plan_model(cfg, catalog, pool.model, box=box, sparks=sparks, topology=topology)


def box_memory(cfg: GroupData, catalog: dict[str, ModelSpec], fleet: Fleet) -> list[BoxMemory]:
    """Each box's memory, in inventory order."""
    out = {}
    for placed in fleet.pools:
        if not placed.boxes:
            continue
        with_embedders = _engine_plan(cfg, catalog, placed.pool, placed.pool.embedders)
        for unit in placed.units:
            if not placed.pool.tensor_parallel:
                out[unit[0]] = _box_memory(unit[0], placed, "box", with_embedders)
                continue
            out[unit[0]] = _box_memory(unit[0], placed, "head", with_embedders)
            worker = _engine_plan(cfg, catalog, placed.pool, False)
            out.update({b: _box_memory(b, placed, "worker", worker) for b in unit[1:]})
    return [out[h] for h in fleet.hosts if h in out]


# --- capacity per pool ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PoolCapacity:
    pool: str
    model: str
    served_name: str
    boxes: int
    engines: int  # vLLM engines: a box each, or a pair each
    max_context: int
    concurrent_requests: float | None  # max-context requests in flight at once, all engines
    concurrent_source: str  # "measured" | "estimate" | "unknown", with where from
    decode_tokens_per_s: dict[int, float]  # {streams per box: aggregate decode tok/s, all boxes}: published x boxes
    decode_source: str
    roofline_tokens_per_s: float | None  # one engine, one stream (an upper bound)


def _published(spec: ModelSpec) -> tuple[dict[int, float], str]:
    """The catalog's published decode figures for this checkpoint (a stand-in under the same key inherits none)."""
    m = spec.memory
    if not m.published_decode_tokens_per_s or m.measured_on not in ("", spec.checkpoint.repo):
        return {}, "none published for this checkpoint"
    return dict(m.published_decode_tokens_per_s), m.published_source


def pool_capacity(cfg: GroupData, catalog: dict[str, ModelSpec], placed: PlacedPool) -> PoolCapacity:
    pool = placed.pool
    plan = _engine_plan(cfg, catalog, pool, pool.embedders)
    engines = len(placed.units)
    per_engine = plan.concurrent_requests  # the plan's one engine (sparks=1, or one pair)
    concurrent_source = plan.provenance.get("kv", "unknown")  # "measured: <source>" or "estimate from ..."
    if pool.tensor_parallel:
        decode, decode_source = {}, ("a tensor-parallel pair was never measured; the roofline is an upper bound "
                                     "that leaves out the all-reduce over the link")
    else:
        published, source = _published(catalog[pool.model])
        decode = {s: v * engines for s, v in published.items()}
        decode_source = f"published per box x {engines}: {source}" if published else source
    return PoolCapacity(pool=pool.name, model=pool.model, served_name=pool.served_name, boxes=len(placed.boxes),
                        engines=engines, max_context=plan.max_context,
                        concurrent_requests=None if per_engine is None else per_engine * engines,
                        concurrent_source=concurrent_source, decode_tokens_per_s=decode, decode_source=decode_source,
                        roofline_tokens_per_s=plan.roofline_tokens_per_s)


def pool_host_data(fleet: Fleet, box: str) -> dict:
    """The settings a box's pool gives it, over its group data (FLEET_POOLS only; today's topologies set nothing):
    its coding model, the name that model is served under, and no embedders where its pool runs none; a box of a
    tensor-parallel pool is its pair's head or worker exactly as SPARK_TOPOLOGY = "tensor-parallel" makes it, with
    TP_HEAD the pair's first box (sparkctl.config.topology reads the pair from topology_hosts)."""
    wanted = fleet.host_settings(box)
    data = {"CODING_MODEL": wanted["CODING_MODEL"], "CODER_SERVED_NAME": wanted["CODER_SERVED_NAME"]}
    if not wanted["embedders"]:
        data.update(EMBEDDERS=[], EMBEDDER_PORTS=[])
    if fleet.pool_of(box).pool.tensor_parallel:
        data.update(SPARK_TOPOLOGY="tensor-parallel", TP_HEAD=fleet.unit_of(box)[0])
    return data


def topology_hosts(fleet: Fleet, box: str) -> list[str]:
    """The hosts a box's part is derived from (sparkctl.config.topology.role_of): its pair when its pool is
    tensor-parallel (head first), else the whole inventory."""
    if fleet.pool_of(box).pool.tensor_parallel:
        return list(fleet.unit_of(box))
    return list(fleet.hosts)
