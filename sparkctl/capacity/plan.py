"""The plan for a box (or several): what the weights leave free on a unified-memory box, and how many full-context
requests the KV cache then holds at once. Pure logic: no pyinfra, no printing (`sparkctl.capacity.report` writes
the JSON, the table and the refusal; the deploy's preflight calls `check_fits`).

Memory model (GiB = 2**30 bytes; one box)
-----------------------------------------
      usable                     BOX_USABLE_MEMORY_GIB (what CUDA reports on a GX10: 121.6)
    - OS reserve                 OS_RESERVE_GIB
    - each embedder              catalog resident_gib + its EMBEDDERS[i]["kv_cache_gib"]
    = available to the coder
    - coder resident             catalog MemoryFacts.resident_gib: weights + runtime, *excluding* the KV budget
    = free_gib                   "free after the embedders": what the coder's KV budget may take
    - coder KV budget            CODER_KV_CACHE_GIB[model] (--kv-cache-memory-bytes)
    = headroom_gib               must be >= 0, or the configuration is refused

Reconciling the production write-up: "Qwen at 44 GiB resident leaves 62 GiB free; Laguna at 98 GiB leaves 8".
Qwen's 44 GiB cannot include its 36 GiB KV (8 GiB is less than a 27B model's weights), and its 62 GiB is where
the KV budget goes ("a budget three times the size, with room for four"). Laguna's ~98 GiB was measured "at 262K
context", i.e. with its 12 GiB KV allocated, and its 8 GiB is what is left after that KV: had the 98 excluded the
KV, the 12 GiB budget Laguna ran with in production would not have fitted in 8. So one consistent reading is:
resident excludes KV for both (Qwen 44, Laguna 98 - 12 = 86), embedders + OS reserve = 121.6 - 44 - 62 = 15.6 GiB,
Qwen's free_gib = 62, and Laguna's free_gib = 20 of which its 12 GiB KV leaves headroom_gib = 8
(footprint_gib = resident + KV = 98). The catalog's embedder residents are set so the 15.6 adds up.

The KV pool is `sparkctl.capacity.kv`'s. With the MTP layer in it, Qwen's production configuration (36 GiB, FP8,
MTP depth 3, prefix caching) gives 693 blocks of 1,600 tokens and 179 blocks per request: 3.87 x 262,144 =
1,014,892 tokens, the figure vLLM logged.

Several Sparks (--sparks N): "replicas" runs N identical boxes (capacity adds up); "split" gives each coding model
its own box, where its KV budget becomes all the memory the box has left (unless a KV budget is given);
"tensor-parallel" runs one engine over N boxes: the weights (MemoryFacts.weights_gib) are divided by N on each box,
the runtime part of the resident figure is not, and the KV budget is per box with each box holding 1/N of every
token's KV heads, so the pool's tokens add up across boxes.

Decode roofline: BOX_MEMORY_BANDWIDTH_GBPS / weight bytes read per decode step x tokens per step (speculative
decoding), single stream at short context; `roofline_full_context_tokens_per_s` also reads one max-context
sequence's KV and state every step. Both are upper bounds, labelled estimates; the bench probe's measured
single-stream rate is shown beside them where production measured one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from sparkctl.capacity.kv import (
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    GIB,
    KvCapacity,
    KvLayout,
    cdiv,
    ceil_to,
    floor_to,
    kv_capacity,
    model_layout,
    num_speculative_tokens,
    serve_options,
)
from sparkctl.capacity.report import refusal_message
from sparkctl.config.catalog import CODER, EMBEDDER, ModelSpec, lookup
from sparkctl.config.topology import TOPOLOGIES
from sparkctl.errors import SettingError, SparkctlError

_EPS = 1e-9


class PlanError(SparkctlError):
    """A configuration whose memory does not add up; the message lists the numbers and the settings to change."""


# --- the box --------------------------------------------------------------------------------------------------------


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


def _number(data: dict, name: str, minimum: float = 0.0, strict: bool = False) -> float:
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
    return Box(usable_gib=_number(data, "BOX_USABLE_MEMORY_GIB", strict=True),
               os_reserve_gib=_number(data, "OS_RESERVE_GIB"),
               embedders=tuple(embedders),
               bandwidth_gbps=_number(data, "BOX_MEMORY_BANDWIDTH_GBPS", strict=True)
               if "BOX_MEMORY_BANDWIDTH_GBPS" in data else 273.0)



# --- one model on the box ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelPlan:
    name: str
    title: str
    topology: str
    sparks: int
    engines: int  # vLLM engines serving the model
    boxes: int  # boxes it occupies
    tp: int  # tensor-parallel ranks per engine
    box: Box
    resident_gib: float  # per box, excluding KV
    resident_source: str
    free_gib: float  # per box, after OS reserve and embedders, before KV
    kv_gib: float  # per box
    kv_setting: str  # where kv_gib came from
    max_context: int
    layout: KvLayout | None
    capacity: KvCapacity | None  # per engine, estimate
    measured_engine_kv_tokens: int | None  # what vLLM reported for this budget on one box, if known
    roofline_tokens_per_s: float | None
    roofline_full_context_tokens_per_s: float | None
    measured_decode_tokens_per_s: float | None
    problems: tuple[str, ...] = ()  # why it is refused, or why its facts disagree with a measurement
    notes: tuple[str, ...] = ()  # what the figures leave out

    # derived figures ---------------------------------------------------------------------------------------------
    @property
    def headroom_gib(self) -> float:
        return self.free_gib - self.kv_gib

    @property
    def footprint_gib(self) -> float:
        return self.resident_gib + self.kv_gib

    @property
    def max_kv_gib(self) -> float:
        return max(0.0, self.free_gib)

    @property
    def min_kv_gib(self) -> float | None:
        return self.capacity.min_kv_bytes / GIB if self.capacity else None

    @property
    def kv_bytes_per_token(self) -> int | None:
        return self.layout.kv_bytes_per_token if self.layout else None

    @property
    def kv_tokens_estimate(self) -> int | None:
        return self.capacity.tokens * self.engines if self.capacity else None

    @property
    def concurrent_requests_estimate(self) -> float | None:
        return self.capacity.concurrency * self.engines if self.capacity else None

    @property
    def kv_tokens_measured(self) -> int | None:
        return self.measured_engine_kv_tokens * self.engines if self.measured_engine_kv_tokens else None

    @property
    def concurrent_requests_measured(self) -> float | None:
        t = self.kv_tokens_measured
        return t / self.max_context if t else None

    @property
    def source(self) -> str:
        return "measured" if self.measured_engine_kv_tokens else "estimate"

    @property
    def kv_tokens(self) -> int | None:
        return self.kv_tokens_measured or self.kv_tokens_estimate

    @property
    def concurrent_requests(self) -> float | None:
        m = self.concurrent_requests_measured
        return m if m is not None else self.concurrent_requests_estimate

    @property
    def fits(self) -> bool:
        return self.headroom_gib >= -_EPS and (self.capacity is None or self.capacity.concurrency >= 1.0)


@dataclass(frozen=True)
class BoxPlan:
    box: Box
    sparks: int
    topology: str
    models: tuple[ModelPlan, ...] = field(default_factory=tuple)

    def model(self, name: str) -> ModelPlan:
        for m in self.models:
            if m.name == name:
                return m
        raise KeyError(name)


def _measured_here(spec: ModelSpec) -> bool:
    """Whether the catalog's measured figures belong to the checkpoint this entry names (not a stand-in's)."""
    return spec.memory.measured_on in ("", spec.checkpoint.repo)


def _measured_tokens(spec: ModelSpec, kv_gib: float) -> int | None:
    if not _measured_here(spec):
        return None
    for budget, tokens in (spec.memory.measured_kv_tokens or {}).items():
        try:
            if abs(float(budget) - kv_gib) < 1e-6 and int(tokens) > 0:
                return int(tokens)
        except (TypeError, ValueError):
            continue
    return None


def configured_kv_gib(data: dict, coding_model: str) -> float:
    table = data.get("CODER_KV_CACHE_GIB")
    setting = f"CODER_KV_CACHE_GIB[{coding_model!r}]"
    if not isinstance(table, dict) or coding_model not in table:
        raise SettingError(setting, None, "a KV budget in GiB for this coding model (group_data/gx10.py)")
    value = table[coding_model]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise SettingError(setting, value, "a KV budget in GiB (a number > 0)")
    return float(value)


def plan_model(data: dict, catalog: dict[str, ModelSpec], coding_model: str, *, box: Box | None = None,
               kv_gib: float | None = None, sparks: int = 1, topology: str = "replicas",
               config: dict | None = None, config_source: str = "config.json") -> ModelPlan:
    """One coding model on the configured box (or boxes); kv_gib None: the group data's budget (split: all free)."""
    _check_topology(sparks, topology)
    spec = lookup(catalog, "coding model", coding_model, CODER)
    box = box or box_from_data(data, catalog)
    m = spec.memory
    tp = sparks if topology == "tensor-parallel" else 1
    engines = sparks if topology == "replicas" else 1
    boxes = {"replicas": sparks, "split": 1, "tensor-parallel": sparks}[topology]

    resident, resident_source = float(m.resident_gib), m.resident_source
    if tp > 1:
        weights = m.weights_gib if 0 < m.weights_gib <= resident else resident
        resident = resident - weights + weights / tp
        resident_source = "estimate"
    free = box.available_gib - resident

    if kv_gib is not None:
        kv, kv_setting = float(kv_gib), "--kv"
    elif topology == "split":
        kv, kv_setting = max(0.0, floor_to(free)), "split: all the box has left"
    else:
        kv, kv_setting = configured_kv_gib(data, spec.key), f"CODER_KV_CACHE_GIB[{spec.key!r}]"
    if kv < 0:
        raise SettingError("KV budget", kv, "a number of GiB >= 0")

    layout = model_layout(spec, config, config_source)
    num_spec = num_speculative_tokens(spec)
    capacity = None
    if layout is not None:
        opts = serve_options(spec, data)
        capacity = kv_capacity(layout, int(round(kv * GIB)), spec.max_model_len, tp=tp,
                               num_speculative_tokens=num_spec, prefix_caching=opts["prefix_caching"],
                               mamba_cache_mode=opts["mamba_cache_mode"], block_size=opts["block_size"],
                               max_num_batched_tokens=int(data.get("CODER_MAX_NUM_BATCHED_TOKENS")
                                                          or DEFAULT_MAX_NUM_BATCHED_TOKENS))
    measured = _measured_tokens(spec, kv) if tp == 1 else None

    bw = box.bandwidth_gbps * 1e9
    roofline = full_ctx = None
    if m.bytes_read_per_step_gb > 0:
        step = m.bytes_read_per_step_gb * 1e9 / tp
        roofline = bw / step * m.tokens_per_step
        if layout is not None:
            kv_read = layout.pool_full_layers * layout.bytes_per_token_per_layer(tp) * spec.max_model_len
            kv_read += layout.window_layers * layout.bytes_per_token_per_layer(tp) * min(layout.window_tokens,
                                                                                         spec.max_model_len)
            kv_read += layout.state_layers * cdiv(layout.state_bytes_per_layer, tp)
            full_ctx = bw / (step + kv_read) * m.tokens_per_step
    measured_decode = (m.measured_decode_tokens_per_s or None) if tp == 1 and _measured_here(spec) else None

    plan = ModelPlan(
        name=spec.key, title=spec.title, topology=topology, sparks=sparks, engines=engines, boxes=boxes, tp=tp,
        box=box, resident_gib=resident, resident_source=resident_source, free_gib=free, kv_gib=kv,
        kv_setting=kv_setting, max_context=spec.max_model_len, layout=layout, capacity=capacity,
        measured_engine_kv_tokens=measured, roofline_tokens_per_s=roofline,
        roofline_full_context_tokens_per_s=full_ctx, measured_decode_tokens_per_s=measured_decode)
    return _annotate(plan, spec, _number(data, "PLAN_MEASURED_TOLERANCE", strict=True))


def _annotate(plan: ModelPlan, spec: ModelSpec, tolerance: float) -> ModelPlan:
    problems, notes = [], []
    if plan.headroom_gib < -_EPS:
        problems.append(f"resident {plan.resident_gib:.1f} GiB + KV {plan.kv_gib:.1f} GiB = {plan.footprint_gib:.1f}"
                        f" GiB, but only {plan.box.available_gib:.1f} GiB is left beside the OS reserve and the "
                        f"embedders ({-plan.headroom_gib:.1f} GiB over); the largest KV budget that fits is "
                        f"{floor_to(plan.max_kv_gib):.1f} GiB")
    cap = plan.capacity
    if cap is not None and cap.concurrency < 1.0:
        problems.append(f"a {plan.kv_gib:g} GiB KV budget holds {cap.concurrency:.2f} requests of "
                        f"{plan.max_context:,} tokens: vLLM refuses to start below one; the smallest budget that "
                        f"holds one is {ceil_to(cap.min_kv_bytes / GIB):.1f} GiB")
    if plan.layout is None:
        problems.append("no layer facts (catalog MemoryFacts or config.json): KV capacity unknown")
    if cap is not None and plan.measured_engine_kv_tokens:
        gap = abs(cap.tokens - plan.measured_engine_kv_tokens) / plan.measured_engine_kv_tokens
        if gap > tolerance:
            problems.append(f"estimate {cap.tokens:,} KV tokens is {gap:.0%} from the measured "
                            f"{plan.measured_engine_kv_tokens:,} (beyond PLAN_MEASURED_TOLERANCE, {tolerance:.0%}): "
                            f"check the layer facts in sparkctl/config/catalog.py")
    m = spec.memory
    if plan.layout is not None and plan.layout.source == "catalog" and m.linear_attention_layers and \
            not plan.layout.state_layers:
        notes.append(f"{m.linear_attention_layers} sliding-window layers have no per-sequence size in the catalog and "
                     f"are left out, so the KV capacity is an upper bound (its config.json's sliding_window refines "
                     f"it)")
    if plan.tp > 1:
        notes.append(f"tensor-parallel over {plan.tp} boxes: weights split, KV pooled; the per-layer all-reduce over "
                     f"the link is not in the roofline")
    if plan.kv_setting.startswith("split"):
        notes.append("split: the KV budget is all the memory this model's box has left (a what-if: the deploy "
                     "passes CODER_KV_CACHE_GIB)")
    return replace(plan, problems=tuple(problems), notes=tuple(notes))


def _check_topology(sparks: int, topology: str) -> None:
    if isinstance(sparks, bool) or not isinstance(sparks, int) or sparks < 1:
        raise SettingError("sparks", sparks, "a whole number of boxes >= 1")
    if topology not in TOPOLOGIES:
        raise SettingError("SPARK_TOPOLOGY", topology, list(TOPOLOGIES))
    if topology != "replicas" and sparks < 2:
        raise SettingError("sparks", sparks, f"2 or more: the {topology} topology spans several Sparks")


def coding_models(catalog: dict[str, ModelSpec]) -> list[str]:
    return [k for k, s in catalog.items() if s.role == CODER]


def plan_box(data: dict, catalog: dict[str, ModelSpec], coding_model: str | None = None, kv_gib: float | None = None,
             sparks: int = 1, topology: str = "replicas", configs: dict[str, tuple[dict, str]] | None = None
             ) -> BoxPlan:
    """The plan for the configured box and every coding model (or the one named).

    configs: {model key: (config.json dict, where it came from)} to use instead of the catalog's layer facts.
    With topology "split", each model is on its own box and (without kv_gib) gets all that box has left for KV.
    """
    _check_topology(sparks, topology)
    box = box_from_data(data, catalog)
    names = [coding_model] if coding_model else coding_models(catalog)
    plans = []
    for name in names:
        config, source = (configs or {}).get(name, (None, "config.json"))
        plans.append(plan_model(data, catalog, name, box=box, kv_gib=kv_gib, sparks=sparks, topology=topology,
                                config=config, config_source=source))
    return BoxPlan(box=box, sparks=sparks, topology=topology, models=tuple(plans))


def check_fits(data: dict, catalog: dict[str, ModelSpec], coding_model: str, *, kv_gib: float | None = None,
               config: dict | None = None) -> ModelPlan:
    """The deploy's preflight: the plan of what this host will run, or PlanError naming what does not add up.

    Checks the KV budget the deploy passes (CODER_KV_CACHE_GIB[coding_model], or kv_gib); with SPARK_TOPOLOGY
    "tensor-parallel" the weights are split over two boxes.
    """
    topology = data.get("SPARK_TOPOLOGY", "replicas")
    tp_sparks = 2 if topology == "tensor-parallel" else 1
    kv = configured_kv_gib(data, coding_model) if kv_gib is None else float(kv_gib)
    plan = plan_model(data, catalog, coding_model, kv_gib=kv, sparks=tp_sparks,
                      topology="tensor-parallel" if tp_sparks > 1 else "replicas", config=config)
    plan = replace(plan, kv_setting=f"CODER_KV_CACHE_GIB[{coding_model!r}]" if kv_gib is None else "kv_gib")
    if not plan.fits:
        raise PlanError(refusal_message(plan))
    return plan
