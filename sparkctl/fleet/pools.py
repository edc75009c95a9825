"""Pools: each serves one coding model under one served name, on boxes named or counted, or is made of
tensor-parallel pairs. From FLEET_POOLS, or, when it is empty (the default), from today's SPARK_TOPOLOGY:

    replicas          one pool of every box, serving CODING_MODEL
    split             one pool per box, serving that box's CODING_MODEL (its host data)
    tensor-parallel   one pool of one pair, TP_HEAD (else the first host) first

so an operator's existing group data needs no edit. A pool's boxes are placed by sparkctl.fleet.placement.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkctl.config.schema import GroupData

COMPAT = "SPARK_TOPOLOGY"  # where compat pools came from (a refusal names it)
POOLS_TOPOLOGY = "pools"  # Fleet.topology when FLEET_POOLS is set


@dataclass(frozen=True)
class Pool:
    name: str  # FLEET_POOLS key, or the compat pool's name
    model: str  # coding model catalog key
    served_name: str  # the OpenAI model id clients ask for
    named: tuple[str, ...] = ()  # inventory host names given by the operator
    count: int = 0  # boxes the planner places (when none are named)
    tensor_parallel: bool = False  # boxes in pairs, each pair one vLLM engine over two boxes
    embedders: bool = True  # its boxes (a pair's head) run EMBEDDERS
    setting: str = "FLEET_POOLS"  # the setting an operator changes to change this pool

    @property
    def size(self) -> int:
        return len(self.named) if self.named else self.count


@dataclass(frozen=True)
class Pools:
    """The pools of a configuration, before placement; topology: SPARK_TOPOLOGY, or "pools" for FLEET_POOLS."""

    topology: str
    pools: tuple[Pool, ...]

    @property
    def explicit(self) -> bool:
        return self.topology == POOLS_TOPOLOGY


def from_settings(cfg: GroupData, hosts: list[str], host_models: dict[str, str] | None = None) -> Pools:
    """The configured pools: FLEET_POOLS, else today's topology over the inventory's gx10 hosts (in order).
    host_models: each box's CODING_MODEL where its own host data sets one (split)."""
    if cfg.FLEET_POOLS:
        return Pools(POOLS_TOPOLOGY, tuple(_explicit(cfg, name, entry) for name, entry in cfg.FLEET_POOLS.items()))
    return from_topology(cfg, hosts, host_models or {})


def _explicit(cfg: GroupData, name: str, entry) -> Pool:
    model = entry.model or name
    served = entry.served_name or (cfg.CODER_SERVED_NAME if model == cfg.CODING_MODEL else name)
    return Pool(name=name, model=model, served_name=served, named=tuple(entry.boxes),
                count=0 if entry.boxes else entry.count, tensor_parallel=entry.tensor_parallel,
                embedders=entry.embedders, setting=f"FLEET_POOLS[{name!r}]")


def from_topology(cfg: GroupData, hosts: list[str], host_models: dict[str, str]) -> Pools:
    """Today's SPARK_TOPOLOGY read as pools (its refusals stay sparkctl.config.topology's)."""
    served, model = cfg.CODER_SERVED_NAME, cfg.CODING_MODEL
    if cfg.SPARK_TOPOLOGY == "split":
        return Pools("split", tuple(Pool(name=h, model=host_models.get(h, model), served_name=served, named=(h,),
                                         setting=COMPAT) for h in hosts))
    if cfg.SPARK_TOPOLOGY == "tensor-parallel" and len(hosts) >= 2:
        head = cfg.TP_HEAD if cfg.TP_HEAD in hosts else hosts[0]
        pair = (head, *(h for h in hosts if h != head))
        return Pools("tensor-parallel", (Pool(name=model, model=model, served_name=served, named=pair,
                                              tensor_parallel=True, setting=COMPAT),))
    return Pools(cfg.SPARK_TOPOLOGY, (Pool(name=model, model=model, served_name=served, named=tuple(hosts),
                                           setting=COMPAT),))
