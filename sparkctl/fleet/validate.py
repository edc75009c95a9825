"""The fleet's refusals, before any host is touched: each raises SettingError naming the setting, the value and
what is valid. `validate_fleet` runs them all and returns the placed fleet; the check layer calls it once per run
with the inventory's gx10 hosts in order.

Refused: GX10_HOSTS naming one box twice; two boxes with one CX7 address; a failure budget outside 0-100;
SPARK_TOPOLOGY other than replicas beside FLEET_POOLS; a pool with embedders (the default) while EMBEDDERS = [];
an empty pool; a pool naming an unknown model, or one
without a KV budget; a tensor-parallel pool of an odd number of boxes; pools serving different models under one
served name, or under an embedder's; a box in two pools, one not in the inventory, a pool short of boxes, a box in
no pool (sparkctl.fleet.placement); a replicas pool whose boxes would serve different coding models under one
served name (a box's own CODING_MODEL); ROLLOUT_WAVES not starting with the canary (1), shrinking, or not ending at
the whole fleet; a MAX_UNAVAILABLE that could take a whole pool of two or more down; a placement whose memory does
not fit a box.
"""

from __future__ import annotations

import math

from sparkctl.capacity import plan, planner
from sparkctl.config.catalog import CODER, ModelSpec, lookup
from sparkctl.config.schema import GroupData
from sparkctl.errors import SettingError
from sparkctl.fleet import placement, pools, waves
from sparkctl.fleet.placement import Fleet


def validate_fleet(cfg: GroupData, catalog: dict[str, ModelSpec], hosts: list[str],
                   host_models: dict[str, str] | None = None) -> Fleet:
    """Every refusal of this module's docstring, in that order; the placed fleet when none applies.

    hosts: the inventory's gx10 hosts in order; host_models: each box's CODING_MODEL where its own host data sets
    one (SPARK_CODING_MODELS, inventory data)."""
    host_models = host_models or {}
    unique_hosts(hosts)
    unique_cx7_addresses(cfg, hosts)
    fail_percentage(cfg.MAX_FAIL_PERCENTAGE)
    one_source_of_pools(cfg)
    pool_embedders(cfg)
    configured = pools.from_settings(cfg, hosts, host_models)
    for pool in configured.pools:
        pool_shape(cfg, catalog, pool, configured.explicit)
    served_names(cfg, catalog, configured)
    fleet = placement.place(configured, hosts)
    one_model_per_pool(fleet, host_models)
    rollout_waves(cfg.ROLLOUT_WAVES, len(fleet.units))
    max_unavailable(cfg.MAX_UNAVAILABLE, fleet)
    memory_fits(cfg, catalog, fleet)
    return fleet


def pool_embedders(cfg: GroupData) -> None:
    """A pool runs the EMBEDDERS on its boxes unless it says "embedders": False (the default is True): with
    EMBEDDERS = [] such a pool would be planned, and its boxes routed, for embedders that do not exist."""
    if cfg.EMBEDDERS:
        return
    for name, entry in cfg.FLEET_POOLS.items():
        if entry.embedders:
            raise SettingError(f"FLEET_POOLS[{name!r}]", entry.model_dump(exclude_defaults=True) or entry.count,
                               'a pool with "embedders": False while EMBEDDERS = [] (or at least one embedder in '
                               "EMBEDDERS)", f'A pool runs the EMBEDDERS on its boxes unless it says "embedders": '
                               f"False; none are listed, so {name}'s boxes would be planned and routed for embedders "
                               "that do not exist")


def unique_hosts(hosts: list[str]) -> None:
    seen = set()
    for host in hosts:
        if host in seen:
            raise SettingError("GX10_HOSTS", ",".join(hosts), "each box once",
                               f"{host} is listed twice (with tensor-parallel both entries would become the head)")
        seen.add(host)


def unique_cx7_addresses(cfg: GroupData, hosts: list[str]) -> None:
    owner: dict[str, str] = {}
    for host in hosts:
        for i, cidr in enumerate(cfg.CX7_ADDRESSES.get(host, [])):
            address = cidr.split("/")[0]
            if address in owner and owner[address] != host:
                raise SettingError(f"CX7_ADDRESSES[{host!r}][{i}]", cidr,
                                   f"an address no other box has: {address} is {owner[address]}'s")
            owner[address] = host


def fail_percentage(value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 100:
        raise SettingError("MAX_FAIL_PERCENTAGE", value, "a percentage from 0 to 100")


def one_source_of_pools(cfg: GroupData) -> None:
    """FLEET_POOLS says each box's part; a topology other than the default beside it would say another."""
    if cfg.FLEET_POOLS and cfg.SPARK_TOPOLOGY != "replicas":
        raise SettingError("SPARK_TOPOLOGY", cfg.SPARK_TOPOLOGY, '"replicas" (the default) while FLEET_POOLS is set',
                           'The pools say what each box serves: a pool per model, "tensor_parallel": True for pairs')


def _model_setting(pool: pools.Pool, explicit: bool) -> str:
    return f"{pool.setting}.model" if explicit else "CODING_MODEL"


def pool_shape(cfg: GroupData, catalog: dict[str, ModelSpec], pool: pools.Pool, explicit: bool) -> None:
    """Not empty, an even number of boxes when tensor-parallel, a known coding model with a KV budget."""
    value = list(pool.named) if pool.named else pool.count
    if pool.size == 0:
        raise SettingError(pool.setting, value, "at least one box: a number >= 1 or a non-empty list of host names")
    if pool.tensor_parallel and pool.size % 2:
        raise SettingError(pool.setting, value, "an even number of boxes: a tensor-parallel pool is made of pairs")
    lookup(catalog, _model_setting(pool, explicit), pool.model, CODER)
    if pool.model not in cfg.CODER_KV_CACHE_GIB:
        raise SettingError(f"CODER_KV_CACHE_GIB[{pool.model!r}]", None,
                           f"a KV budget in GiB for the coding model of {pool.setting}")


def served_names(cfg: GroupData, catalog: dict[str, ModelSpec], configured: pools.Pools) -> None:
    """One served name, one model (the router routes by it), and never an embedder's name. Today's split keeps
    both boxes under CODER_SERVED_NAME, told apart by model in the gateway hand-off."""
    embedders = {catalog[e.model].served_name for e in cfg.EMBEDDERS if e.model in catalog}
    model_of: dict[str, pools.Pool] = {}
    for pool in configured.pools:
        if pool.served_name in embedders:
            raise SettingError(f"{pool.setting}.served_name", pool.served_name,
                               f"a name no embedder serves ({', '.join(sorted(embedders))})")
        other = model_of.setdefault(pool.served_name, pool)
        if configured.explicit and other.model != pool.model:
            raise SettingError(f"{pool.setting}.served_name", pool.served_name,
                               f"a served name not already serving {other.model} ({other.setting})",
                               "Clients and the router choose a pool by served name: one name, one model")


def one_model_per_pool(fleet: Fleet, host_models: dict[str, str]) -> None:
    """A box's own CODING_MODEL (its host data) is its pool's model: a replicas pool never serves two models
    under one served name."""
    if fleet.topology == "split":
        return
    for placed in fleet.pools:
        for box in placed.boxes:
            own = host_models.get(box)
            if own is not None and own != placed.pool.model:
                where = "the replicas pool's" if fleet.topology != pools.POOLS_TOPOLOGY else f"{placed.pool.setting}'s"
                raise SettingError(f"CODING_MODEL of {box}", own,
                                   f"{placed.pool.model}, {where} model: under one served name "
                                   f"({placed.pool.served_name!r}) every box serves the same coding model",
                                   "For a model of its own, give the box its own pool (FLEET_POOLS) or set "
                                   "SPARK_TOPOLOGY = \"split\"")


def rollout_waves(value: list, units: int) -> None:
    """The first wave is the canary (1), sizes never shrink (as resolved for this fleet), the last is all of it."""
    if not value or value[0] != 1 or isinstance(value[0], bool):
        raise SettingError("ROLLOUT_WAVES", value, 'a list starting with 1, the canary, such as [1, "25%", "100%"]')
    sizes = [waves.resolve(v, units) for v in value]
    for i in range(1, len(sizes)):
        if sizes[i] < sizes[i - 1]:
            raise SettingError(f"ROLLOUT_WAVES[{i}]", value[i],
                               f"a batch no smaller than ROLLOUT_WAVES[{i - 1}] = {value[i - 1]!r} ({sizes[i - 1]} of "
                               f"this fleet's {units} units; a tensor-parallel pair is one)")
    if sizes[-1] < units:
        raise SettingError(f"ROLLOUT_WAVES[{len(value) - 1}]", value[-1],
                           f'"100%" (or at least {units}): the last wave reaches the whole fleet')


def max_unavailable(value, fleet: Fleet) -> None:
    for placed in fleet.pools:
        size = len(placed.units)
        if size > 1 and waves.resolve(value, size) >= size:
            raise SettingError("MAX_UNAVAILABLE", value,
                               f"fewer than the {size} units of pool {placed.pool.name!r} (a number below {size}, or "
                               f"a percentage below 100%)", "A rollout must never take a whole pool down")


def memory_fits(cfg: GroupData, catalog: dict[str, ModelSpec], fleet: Fleet) -> None:
    for box in placement.box_memory(cfg, catalog, fleet):
        if box.fits:
            continue
        pool = fleet.pool_of(box.box).pool
        where = planner.plan_model(cfg, catalog, pool.model).placement
        # what vLLM's start-up admission leaves (each start needs its plan + VLLM_ADMISSION_MARGIN_GIB free beside what
        # the starting service holds itself, VLLM_STARTING_ENGINE_GIB; its utilization rounded up), rounded down: the advice itself fits and starts
        largest = math.floor((box.largest_kv_gib - plan.start_slack_gib(cfg)) * 10) / 10
        fixes = [f"lower {box.kv_setting} to at most {largest:.1f} GiB"] if largest > 0 else []
        if box.embedders_gib:
            fixes.append("take the EMBEDDERS off its boxes (\"embedders\": False)")
        if where is not None and where.verdict.startswith("two boxes") and not pool.tensor_parallel:
            fixes.append("make it a tensor-parallel pool (\"tensor_parallel\": True, an even number of boxes)")
        part = "a box" if box.role == "box" else f"a pair's {box.role}"
        raise SettingError(pool.setting, box.box, f"a box whose memory holds {pool.model} as {part}: "
                           f"{box.arithmetic}", ("To fit it: " + "; or ".join(fixes)) if fixes else "")

