"""vLLM's start-up memory admission, walked over every start the deploy can make on a box.

vLLM 0.32.0 (vllm/v1/worker/utils.py `request_memory`, called by gpu_worker.py at every CUDA start) refuses to start
when the device's free memory is below ceil(total x gpu_memory_utilization), whether or not --kv-cache-memory-bytes
is given (that flag sizes the KV pool; it does not lift this check). On an integrated GPU such as the GB10, "free" is
MemAvailable (vllm/utils/mem_utils.py MemorySnapshot.measure), so every engine already running on the box counts.
Left at its default (0.92, vllm/config/cache.py), the utilization asks for 111.9 of a GX10's 121.6 GiB: the first
engine starts and the second is refused.

So every vLLM service gets --gpu-memory-utilization from the plan: its own planned footprint on the box (resident +
KV, sparkctl.capacity.plan) plus VLLM_ADMISSION_MARGIN_GIB, over the total CUDA reports (BOX_USABLE_MEMORY_GIB). The
walk then replays each start the deploy can make and what is running then:

    first install     the services in rollout order (the coder, then each embedder), each beside the ones before
    restarted alone   one service beside all the others (the watchdog's restart, systemd's, an upgrade's)
    a flip            each other coding model with a KV budget, beside the running embedders (stop, then start)

free then = usable - OS_RESERVE_GIB - the footprints of what runs - VLLM_STARTING_ENGINE_GIB (what the starting
service itself already holds when vLLM takes its snapshot: its API server, engine process and CUDA context); required
= ceil(total x utilization), the engine's footprint + VLLM_ADMISSION_MARGIN_GIB rounded up. A start whose free is below
required, its slack (free - its planned footprint) under the margin, is one vLLM would refuse: `check` and the
preflight refuse the configuration first, naming the start.
The rule is vLLM's own `request_memory` fed a snapshot where vLLM is importable, else `request_memory_copy`, the same
arithmetic and words (tests hold the two to each other on the simulated Spark's vLLM). Pure: no pyinfra, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from sparkctl.capacity import facts, plan
from sparkctl.config.catalog import CODER, ModelSpec
from sparkctl.config.quantities import GIB
from sparkctl.config.schema import GroupData
from sparkctl.errors import SettingError, SparkctlError

VLLM_DEFAULT_UTILIZATION = 0.92  # vllm/config/cache.py CacheConfig.gpu_memory_utilization's default (0.32.0)
UTILIZATION_DECIMALS = plan.UTILIZATION_DECIMALS  # --gpu-memory-utilization is rendered rounded up to this many decimals
DEVICE = "cuda:0"  # what vLLM's message names on a GX10 (one GPU per box)
HOLDING = ("active", "activating", "deactivating", "reloading")  # a unit in these states holds its engine's memory


@dataclass(frozen=True)
class Engine:
    """One vLLM engine on a box, with what the plan says it holds there."""

    service: str  # coder, embed-qwen3, ...
    model: str  # catalog key
    footprint_gib: float  # resident + KV on this box, GiB (a tensor-parallel coder: its share on this box)
    setting: str  # the setting that sizes its KV (what to change when it does not fit)


@dataclass(frozen=True)
class Start:
    """One start the deploy can make and vLLM's verdict on it."""

    host: str
    service: str
    start: str  # "first install, 2 of 3", "restarted alone", "flip to laguna-s-2.1"
    running: tuple[str, ...]  # the engines already holding memory then
    free_gib: float  # what MemAvailable would be at vLLM's snapshot (the plan's; the starting service's own held)
    required_gib: float  # ceil(total x utilization), GiB
    utilization: float  # --gpu-memory-utilization
    refusal: str  # vLLM's message when it would refuse; "" when admitted
    setting: str = ""  # the setting that sizes this engine's KV
    footprint_gib: float = 0.0  # the starting engine's planned footprint (resident + KV), GiB
    starting_gib: float = 0.0  # what it held itself at the snapshot (VLLM_STARTING_ENGINE_GIB), GiB

    @property
    def admitted(self) -> bool:
        return not self.refusal

    @property
    def slack_gib(self) -> float:
        """Free at the snapshot beyond the engine's planned footprint: vLLM admits it only at or above the margin."""
        return self.free_gib - self.footprint_gib

    def arithmetic(self, cfg: GroupData) -> str:
        held = " - ".join(self.running) or "nothing else"
        return (f"free {self.free_gib:.2f} GiB (usable {cfg.BOX_USABLE_MEMORY_GIB:g} - OS reserve "
                f"{cfg.OS_RESERVE_GIB:g} - {held} - its own {self.starting_gib:g} before vLLM's snapshot, "
                f"VLLM_STARTING_ENGINE_GIB) vs required {self.required_gib:.2f} GiB "
                f"({cfg.BOX_USABLE_MEMORY_GIB:g} x gpu_memory_utilization {self.utilization:g}); slack "
                f"{self.slack_gib:.2f} GiB over its planned {self.footprint_gib:.2f} GiB against a margin of "
                f"{cfg.VLLM_ADMISSION_MARGIN_GIB:g} GiB")


class AdmissionError(SparkctlError):
    """A start vLLM would refuse: the service, the start, the arithmetic, vLLM's own words, what to change."""

    def __init__(self, start: Start, cfg: GroupData):
        self.start = start
        super().__init__(
            f"{start.host or 'the box'}: vLLM would refuse to start {start.service} ({start.start}): "
            f"{start.arithmetic(cfg)}. vLLM: {start.refusal} Free memory for it: a smaller {start.setting or 'KV budget'}"
            f", fewer EMBEDDERS, or a smaller VLLM_ADMISSION_MARGIN_GIB (now {cfg.VLLM_ADMISSION_MARGIN_GIB:g} GiB; "
            f"VLLM_STARTING_ENGINE_GIB {cfg.VLLM_STARTING_ENGINE_GIB:g} GiB is what a starting service was seen to "
            f"hold)")


# --- vLLM's rule ------------------------------------------------------------------------------------------------------


def _format_gib(b: int) -> str:
    return f"{round(b / GIB, 2)}"  # vllm/utils/mem_utils.py format_gib


def request_memory_copy(free_bytes: int, total_bytes: int, utilization: float) -> tuple[int, str]:
    """(requested bytes, refusal or ""): vllm/v1/worker/utils.py request_memory without external weights."""
    requested = math.ceil(total_bytes * utilization)
    if free_bytes < requested:
        return requested, (f"Free memory on device {DEVICE} ({_format_gib(free_bytes)}/{_format_gib(total_bytes)} "
                           f"GiB) on startup is less than desired GPU memory utilization ({utilization}, "
                           f"{_format_gib(requested)} GiB). Decrease GPU memory utilization or reduce GPU memory "
                           f"used by other processes.")
    return requested, ""


def request_memory_vllm(free_bytes: int, total_bytes: int, utilization: float) -> tuple[int, str]:
    """The same, by vLLM's own `request_memory` fed a snapshot (ImportError where vLLM is not installed)."""
    from vllm.config import CacheConfig
    from vllm.utils.mem_utils import MemorySnapshot
    from vllm.v1.worker.utils import request_memory

    snapshot = MemorySnapshot(free_memory=free_bytes, total_memory=total_bytes, device="cpu", auto_measure=False)
    requested = math.ceil(total_bytes * utilization)
    try:
        return request_memory(snapshot, CacheConfig(gpu_memory_utilization=utilization)), ""
    except ValueError as exc:
        return requested, str(exc).replace("device cpu ", f"device {DEVICE} ")


def vllm_rule() -> Callable[[int, int, float], tuple[int, str]]:
    """vLLM's own rule where vLLM is importable (the box's venv, a control machine with vLLM), else the copy."""
    try:
        from vllm.v1.worker.utils import request_memory  # noqa: F401 - importable: vLLM's own is used
    except ImportError:
        return request_memory_copy
    return request_memory_vllm


# --- the utilization each service is given ------------------------------------------------------------------------


def utilization(footprint_gib: float, cfg: GroupData, what: str = "a vLLM service") -> float:
    """--gpu-memory-utilization for an engine: (its planned footprint + VLLM_ADMISSION_MARGIN_GIB) / total, rounded
    up to UTILIZATION_DECIMALS; above 1 nothing can admit it."""
    scale = 10 ** UTILIZATION_DECIMALS
    u = math.ceil((footprint_gib + cfg.VLLM_ADMISSION_MARGIN_GIB) / cfg.BOX_USABLE_MEMORY_GIB * scale) / scale
    if u > 1:
        raise SettingError("VLLM_ADMISSION_MARGIN_GIB", cfg.VLLM_ADMISSION_MARGIN_GIB,
                           f"a margin that keeps {what}'s gpu_memory_utilization at or below 1",
                           f"Its planned {footprint_gib:.2f} GiB + the margin exceed the box's "
                           f"{cfg.BOX_USABLE_MEMORY_GIB:g} GiB (BOX_USABLE_MEMORY_GIB)")
    return u


def coder_footprint(cfg: GroupData, spec: ModelSpec, kv_gib: float, tp: int = 1) -> float:
    """A coding model's resident share on one box (weights split over tp boxes) + its KV budget there, GiB."""
    resident = plan.resident_per_box(spec, cfg, tp)
    if resident.value is None:
        raise SettingError(f"the catalog entry {spec.key!r}", spec.key, "a model whose resident memory is known",
                           resident.source)
    return resident.value + kv_gib


def embedder_footprint(cfg: GroupData, spec: ModelSpec, kv_gib: float) -> float:
    resident = facts.resident(spec, cfg.MODEL_RUNTIME_OVERHEAD_GIB)
    if resident.value is None:
        raise SettingError(f"the catalog entry {spec.key!r}", spec.key, "an embedder whose resident memory is known",
                           resident.source)
    return resident.value + kv_gib


# --- the walk -------------------------------------------------------------------------------------------------------


def judge(cfg: GroupData, host: str, engine: Engine, start: str, running: list[Engine],
          utilization_of: Callable[[Engine], float] | None = None, rule=None) -> Start:
    """vLLM's verdict on one start of `engine` beside `running`."""
    u = utilization_of(engine) if utilization_of else utilization(engine.footprint_gib, cfg, engine.service)
    own = cfg.VLLM_STARTING_ENGINE_GIB  # held by the starting service itself when vLLM measures free memory
    free = cfg.BOX_USABLE_MEMORY_GIB - cfg.OS_RESERVE_GIB - sum(e.footprint_gib for e in running) - own
    total_bytes = int(round(cfg.BOX_USABLE_MEMORY_GIB * GIB))
    requested, refusal = (rule or vllm_rule())(int(free * GIB), total_bytes, u)
    return Start(host=host, service=engine.service, start=start,
                 running=tuple(f"{e.service} {e.footprint_gib:.2f}" for e in running), free_gib=free,
                 required_gib=requested / GIB, utilization=u, refusal=refusal, setting=engine.setting,
                 footprint_gib=engine.footprint_gib, starting_gib=own)


def walk(cfg: GroupData, engines: list[Engine], flips: list[Engine], host: str = "",
         utilization_of: Callable[[Engine], float] | None = None, rule=None) -> list[Start]:
    """Every start the deploy can make on one box: engines in rollout order (the coder first), flips: the other
    coding models it may flip to (their footprint on this box)."""
    rule = rule or vllm_rule()
    out = []
    for i, e in enumerate(engines):
        out.append(judge(cfg, host, e, f"first install, {i + 1} of {len(engines)}", engines[:i], utilization_of,
                         rule))
    if len(engines) > 1:
        for e in engines:
            others = [o for o in engines if o is not e]
            out.append(judge(cfg, host, e, "restarted alone (watchdog / systemd / upgrade)", others,
                             utilization_of, rule))
    for f in flips:  # the coder stops, then the new model starts beside the rest (on unified memory never both)
        beside = [e for e in engines if e.service != f.service]
        out.append(judge(cfg, host, f, f"flip to {f.model}", beside, utilization_of, rule))
    return out


def refuse(cfg: GroupData, starts: list[Start]) -> None:
    """AdmissionError on the first start vLLM would refuse."""
    for s in starts:
        if not s.admitted:
            raise AdmissionError(s, cfg)


def coder_engines(cfg: GroupData, catalog: dict[str, ModelSpec], current: str, kv_gib: float, tp: int,
                  name: str = "coder") -> tuple[Engine, list[Engine]]:
    """(the coder as configured, the flips: every other coding model with a CODER_KV_CACHE_GIB budget whose plan fits
    this topology; one that does not, such as a model too big for one box, is refused by the plan itself when it is
    chosen, with its own arithmetic and the topology that would fit it)."""
    coder = Engine(name, current, coder_footprint(cfg, catalog[current], kv_gib, tp),
                   f"CODER_KV_CACHE_GIB[{current!r}]")
    flips = [Engine(name, key, coder_footprint(cfg, catalog[key], float(budget), tp), f"CODER_KV_CACHE_GIB[{key!r}]")
             for key, budget in cfg.CODER_KV_CACHE_GIB.items()
             if key != current and key in catalog and catalog[key].role == CODER
             and _plan_fits(cfg, catalog, key, float(budget), tp)]
    return coder, flips


def _plan_fits(cfg: GroupData, catalog: dict[str, ModelSpec], key: str, kv_gib: float, tp: int) -> bool:
    topology = "tensor-parallel" if tp > 1 else "replicas"
    return plan.plan_model(cfg, catalog, key, kv_gib=kv_gib, sparks=tp, topology=topology).fits


def configured_engines(cfg: GroupData, catalog: dict[str, ModelSpec], tp: int = 1, embedders: bool = True
                       ) -> tuple[list[Engine], list[Engine]]:
    """The configured box's engines (CODING_MODEL, then EMBEDDERS) and its flips, from the settings alone (`plan`)."""
    coder, flips = coder_engines(cfg, catalog, cfg.CODING_MODEL, float(cfg.CODER_KV_CACHE_GIB[cfg.CODING_MODEL]), tp)
    emb = [Engine(catalog[e.model].served_name, e.model, embedder_footprint(cfg, catalog[e.model], float(e.kv_cache_gib)),
                  f"EMBEDDERS[{i}].kv_cache_gib") for i, e in enumerate(cfg.EMBEDDERS)] if embedders else []
    return [coder, *emb], flips


# --- a derived service (sparkctl.config.service.Service) ------------------------------------------------------------


def tensor_parallel_of(extra_args: tuple[str, ...]) -> int:
    """The tensor-parallel size a service's topology flags give its engine (1 when none)."""
    args = list(extra_args)
    return int(args[args.index("--tensor-parallel-size") + 1]) if "--tensor-parallel-size" in args else 1


def engine_of(svc, cfg: GroupData, index: int = 0) -> Engine:
    """A derived service as an engine on its box: its plan's footprint (a coder's share of a tensor-parallel pair;
    a Ray worker runs no service, its GPU joins the head's engine with the head's figures)."""
    kv = svc.kv_cache_bytes / GIB
    if svc.role == CODER:
        return Engine(svc.name, svc.model.key, coder_footprint(cfg, svc.model, kv, tensor_parallel_of(svc.extra_args)),
                      f"CODER_KV_CACHE_GIB[{svc.model.key!r}]")
    return Engine(svc.name, svc.model.key, embedder_footprint(cfg, svc.model, kv), f"EMBEDDERS[{index}].kv_cache_gib")


def service_utilization(svc, cfg: GroupData) -> float:
    """The --gpu-memory-utilization a derived service is rendered with."""
    return utilization(engine_of(svc, cfg).footprint_gib, cfg, svc.name)


def walk_settings(settings, utilization_of: Callable[[Engine], float] | None = None) -> list[Start]:
    """Every start the deploy can make on the box of a derived Settings (sparkctl.config.settings): its services in
    rollout order, each coding model it may flip to (a tensor-parallel worker's too: the pair flips as one).
    utilization_of: what each engine is given instead of its plan's (vLLM's default, to show what it would do)."""
    cfg, svcs = settings.cfg, list(settings.services)
    engines = [engine_of(s, cfg, i - 1) for i, s in enumerate(svcs)]
    tp = tensor_parallel_of(settings.coder.extra_args)
    if not svcs and settings.role.name == "worker":  # Ray: the head's engine holds this box's GPU as a Ray actor
        engines = [Engine("coder (the head's Ray actor)", settings.coder.model.key,
                          coder_footprint(cfg, settings.coder.model, settings.coder.kv_cache_bytes / GIB, 2),
                          f"CODER_KV_CACHE_GIB[{settings.coder.model.key!r}]")]
        tp = 2
    _, flips = coder_engines(cfg, settings.catalog, settings.coder.model.key, settings.coder.kv_cache_bytes / GIB, tp,
                             engines[0].service if engines else "coder")
    return walk(cfg, engines, flips, host=settings.host_name, utilization_of=utilization_of)


def walk_rollout(settings, holds: dict[str, dict]) -> list[Start]:
    """This deploy's rollouts on the box as it runs now (the preflight, which reads `holds`: tasks/facts.py
    PlannedHolds): the services in rollout order, each started beside the ones rolled out before it (at their new
    plan) and the ones still to come as they hold memory now (the plan their live env file was rendered with; a file
    written before the deploy recorded it: the new plan). A change that moves memory from one service to another is
    admitted only if each start is, in the order the deploy makes them. Services the box runs but no longer
    configures are gone by then (the stale step, before the rollouts)."""
    cfg = settings.cfg
    engines = [engine_of(s, cfg, i - 1) for i, s in enumerate(settings.services)]
    out = []
    for i, e in enumerate(engines):
        later = [_as_held(o, holds[o.service]) for o in engines[i + 1:]
                 if holds.get(o.service, {}).get("state") in HOLDING]
        out.append(judge(cfg, settings.host_name, e, f"this deploy's rollout, {i + 1} of {len(engines)}, beside the "
                                                     f"box as it runs now", engines[:i] + later))
    return out


def _as_held(engine: Engine, hold: dict) -> Engine:
    gib = hold.get("gib")
    return engine if gib is None else Engine(f"{engine.service} (now)", engine.model, float(gib), engine.setting)
