"""The box the coding model shares: usable memory, the OS reserve and each embedder (resident + KV), read from group
data; what is left is the coding model's (sparkctl.capacity.plan).
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkctl.config.catalog import EMBEDDER, ModelSpec, lookup
from sparkctl.errors import SettingError


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


def number(data: dict, name: str, minimum: float = 0.0, strict: bool = False) -> float:
    value = data.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum or (strict and
                                                                                            value <= minimum):
        raise SettingError(name, value, f"a number {'>' if strict else '>='} {minimum:g}")
    return float(value)


def box_from_data(data: dict, catalog: dict[str, ModelSpec]) -> Box:
    embedders = []
    entries = data.get("EMBEDDERS") or []
    if not isinstance(entries, (list, tuple)):
        raise SettingError("EMBEDDERS", entries, 'a list of {"model": <catalog key>, "kv_cache_gib": <GiB>}')
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or "model" not in entry:
            raise SettingError(f"EMBEDDERS[{i}]", entry, '{"model": <catalog key>, "kv_cache_gib": <GiB>}')
        spec = lookup(catalog, f"EMBEDDERS[{i}].model", entry["model"], EMBEDDER)
        kv = entry.get("kv_cache_gib")
        if isinstance(kv, bool) or not isinstance(kv, (int, float)) or kv < 0:
            raise SettingError(f"EMBEDDERS[{i}].kv_cache_gib", kv, "a KV budget in GiB (a number >= 0)")
        embedders.append(EmbedderUse(name=spec.key, setting=f"EMBEDDERS[{i}]", resident_gib=spec.memory.resident_gib,
                                     kv_gib=float(kv), resident_source=spec.memory.resident_source))
    return Box(usable_gib=number(data, "BOX_USABLE_MEMORY_GIB", strict=True),
               os_reserve_gib=number(data, "OS_RESERVE_GIB"),
               embedders=tuple(embedders),
               bandwidth_gbps=number(data, "BOX_MEMORY_BANDWIDTH_GBPS", strict=True))
