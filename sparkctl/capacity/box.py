"""The box the coding model shares: usable memory, the OS reserve and each embedder (resident + KV), read from the
typed settings; what is left is the coding model's (sparkctl.capacity.plan).
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkctl.config.catalog import EMBEDDER, ModelSpec, lookup
from sparkctl.config.schema import GroupData


@dataclass(frozen=True)
class EmbedderUse:
    name: str
    setting: str  # "EMBEDDERS[0]"
    resident_gib: float
    kv_gib: float
    resident_source: str

    @property
    def total_gib(self) -> float:
        return self.resident_gib + self.kv_gib


@dataclass(frozen=True)
class Box:
    usable_gib: float
    os_reserve_gib: float
    embedders: tuple[EmbedderUse, ...]
    bandwidth_gbps: float

    @property
    def embedders_gib(self) -> float:
        return sum(e.total_gib for e in self.embedders)

    @property
    def available_gib(self) -> float:
        """What the coding model (resident + KV) may use."""
        return self.usable_gib - self.os_reserve_gib - self.embedders_gib


def box_from_data(cfg: GroupData, catalog: dict[str, ModelSpec]) -> Box:
    """The box of the typed settings (the schema checked every number and embedder entry) and a resolved catalog."""
    embedders = []
    for i, entry in enumerate(cfg.EMBEDDERS):
        spec = lookup(catalog, f"EMBEDDERS[{i}].model", entry.model, EMBEDDER)
        embedders.append(EmbedderUse(name=spec.key, setting=f"EMBEDDERS[{i}]", resident_gib=spec.memory.resident_gib,
                                     kv_gib=float(entry.kv_cache_gib), resident_source=spec.memory.resident_source))
    return Box(usable_gib=float(cfg.BOX_USABLE_MEMORY_GIB), os_reserve_gib=float(cfg.OS_RESERVE_GIB),
               embedders=tuple(embedders), bandwidth_gbps=float(cfg.BOX_MEMORY_BANDWIDTH_GBPS))
