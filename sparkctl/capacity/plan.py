"""The plan for a box (or several): what the weights leave free on a unified-memory box, and how many full-context
requests the KV cache then holds at once. Pure logic: no pyinfra, no printing (`sparkctl.capacity.report` writes
the JSON and the table; a refused plan is a PlanError that carries the plan and says why; the deploy's preflight
calls `check_fits`).

Memory model (GiB = 2**30 bytes; one box)
-----------------------------------------
      usable                     BOX_USABLE_MEMORY_GIB (what CUDA reports on a GX10: 121.6)
    - OS reserve                 OS_RESERVE_GIB
    - each embedder              resident + its EMBEDDERS[i]["kv_cache_gib"]
    = available to the coder
    - coder resident             weights + runtime, *excluding* the KV budget: the entry's resident_gib when typed,
                                 else the checkpoint's weights (the lock's safetensors sizes) + MODEL_RUNTIME_OVERHEAD_GIB
                                 (sparkctl.capacity.facts; each figure's provenance is in ModelPlan.provenance)
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

The KV pool is `sparkctl.capacity.kv`'s; production's figures beside it are `sparkctl.capacity.measured`'s.
With the MTP layer in it, Qwen's production configuration (36 GiB, FP8, MTP depth 3, prefix caching) gives 693
blocks of 1,600 tokens and 179 blocks per request: 3.87 x 262,144 = 1,014,892 tokens, the figure vLLM logged; that
the MTP layer shares the pool is calibrated to that figure, so the agreement is not independent. Laguna at 12 GiB:
the write-up measured 1.2 concurrent 262K requests. Its 12 full-attention layers alone (24 KiB/token, FP8) give
2.00; its DFlash draft's 6 layers keep a full-context KV too (+12 KiB/token, counted with the target's heads: an
assumption) and its 36 sliding-window layers (512 tokens) hold ~1K blocks each per request: 1.18 estimated.

Several Sparks (--sparks N): "replicas" runs N identical boxes (capacity adds up); "split" gives each coding model
its own box, where its KV budget becomes all the memory the box has left (unless a KV budget is given);
"tensor-parallel" runs one engine over N boxes: the weights (typed, or the lock's safetensors) are divided by N on
each box, the runtime part of the resident figure is not, and the KV budget is per box with each box holding 1/N of
every token's KV heads, so the pool's tokens add up across boxes.

Where a model fits (`placement`): one max-context request's KV beside the embedders on one box; else per box over
two in tensor-parallel; else nowhere, each with the arithmetic. A model with no CODER_KV_CACHE_GIB budget (a
catalog entry not selected) is planned with all the box has left. `check_fits` refuses a model too big for one box
naming the topology that would fit it.

Decode roofline: BOX_MEMORY_BANDWIDTH_GBPS / weight bytes read per decode step x tokens per step (speculative
decoding), single stream at short context; `roofline_full_context_tokens_per_s` also reads one max-context
sequence's KV and state every step. Both are upper bounds, labelled estimates; the bench probe's measured
single-stream rate is shown beside them where production measured one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from sparkctl.capacity import facts
from sparkctl.capacity.box import Box, box_from_data
from sparkctl.capacity.kv import (
    KvCapacity,
    KvLayout,
    cdiv,
    ceil_to,
    floor_to,
    kv_capacity,
    num_speculative_tokens,
    serve_options,
    spec_method,
)
from sparkctl.capacity.measured import Measured, disagreement, measured_for
from sparkctl.config.catalog import CODER, ModelSpec, lookup
from sparkctl.config.quantities import GB, GIB
from sparkctl.config.schema import TOPOLOGIES, GroupData
from sparkctl.errors import SettingError, SparkctlError

_EPS = 1e-9
ONE_BOX, TWO_BOXES, NOWHERE = "one box", "two boxes (tensor-parallel) only", "does not fit"
UNKNOWN = "unknown: its memory facts are missing"
NO_BUDGET = "no CODER_KV_CACHE_GIB entry: all the box has left"


UTILIZATION_DECIMALS = 4  # --gpu-memory-utilization is rendered rounded up to this many decimals (admission.py)


def start_slack_gib(cfg: GroupData) -> float:
    """What vLLM's start-up admission needs free beyond a service's plan: VLLM_ADMISSION_MARGIN_GIB, what the
    starting service itself holds at vLLM's snapshot (VLLM_STARTING_ENGINE_GIB), and its utilization's rounding up
    (capacity/admission.py). A KV budget advised by a refusal leaves it, so the advice starts too."""
    return (cfg.VLLM_ADMISSION_MARGIN_GIB + cfg.VLLM_STARTING_ENGINE_GIB
            + cfg.BOX_USABLE_MEMORY_GIB / 10 ** UTILIZATION_DECIMALS)


class PlanError(SparkctlError):
    """A configuration whose memory does not add up: it carries the refused plan, and its message lists the numbers
    and the settings to change (slack_gib: what the advised KV budget leaves for vLLM's start-up admission)."""

    def __init__(self, plan: ModelPlan, slack_gib: float = 0.0):
        self.plan = plan
        super().__init__(_refusal_message(plan, slack_gib))


# --- one model on the box ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    """Where a coding model fits beside the embedders, each with the arithmetic: one box, only across two boxes in
    tensor-parallel (its weights split, the KV per box), or not at all. One max-context request is the least."""

    verdict: str  # ONE_BOX | TWO_BOXES | NOWHERE | UNKNOWN
    one_box: str  # the arithmetic on one box
    two_boxes: str  # the arithmetic per box, over two in tensor-parallel


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
    measured: Measured  # what production reported for this budget on one box (nothing when unknown)
    roofline_tokens_per_s: float | None
    roofline_full_context_tokens_per_s: float | None
    engine_concurrency_without_draft: float | None = None  # the estimate without the draft layers' KV
    problems: tuple[str, ...] = ()  # why it is refused, or why its facts disagree with a measurement
    notes: tuple[str, ...] = ()  # what the figures leave out
    provenance: dict = field(default_factory=dict)  # {figure: where it came from} (sparkctl.capacity.plan)
    placement: Placement | None = None  # one box, only two in tensor-parallel, or nowhere, with the arithmetic

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
    def measured_decode_tokens_per_s(self) -> float | None:
        return self.measured.decode_tokens_per_s

    @property
    def kv_tokens_measured(self) -> int | None:
        t = self.measured.engine_kv_tokens
        return t * self.engines if t else None

    @property
    def concurrent_requests_measured(self) -> float | None:
        if self.kv_tokens_measured:
            return self.kv_tokens_measured / self.max_context
        c = self.measured.engine_concurrency
        return c * self.engines if c else None

    @property
    def source(self) -> str:
        """Where concurrent_requests comes from (kv_tokens_source for kv_tokens)."""
        return "measured" if self.measured.capacity_known else "estimate"

    @property
    def kv_tokens_source(self) -> str:
        return "measured" if self.kv_tokens_measured else "estimate"

    @property
    def estimate_agreement(self) -> str | None:
        """'calibrated' when a layer fact was set so the estimate meets the measurement, 'independent' when none
        was; None without a measurement."""
        if not self.measured.capacity_known or self.capacity is None:
            return None
        return "calibrated" if self.measured.calibrated else "independent"

    @property
    def kv_tokens(self) -> int | None:
        return self.kv_tokens_measured or self.kv_tokens_estimate

    @property
    def concurrent_requests(self) -> float | None:
        m = self.concurrent_requests_measured
        return m if m is not None else self.concurrent_requests_estimate

    @property
    def fits(self) -> bool:
        return self.headroom_gib >= -_EPS and (self.capacity is None or self.capacity.concurrency >= 1.0) and \
            self.resident_source != "unknown"


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


def configured_kv_gib(cfg: GroupData, coding_model: str) -> float:
    """CODER_KV_CACHE_GIB[coding_model]: the schema checked every budget and that CODING_MODEL has one; another
    coding model the plan is asked about may have none."""
    if coding_model not in cfg.CODER_KV_CACHE_GIB:
        raise SettingError(f"CODER_KV_CACHE_GIB[{coding_model!r}]", None,
                           "a KV budget in GiB for this coding model (group_data/gx10.py)")
    return float(cfg.CODER_KV_CACHE_GIB[coding_model])


def plan_model(cfg: GroupData, catalog: dict[str, ModelSpec], coding_model: str, *, box: Box | None = None,
               kv_gib: float | None = None, sparks: int = 1, topology: str = "replicas",
               config: dict | None = None, config_source: str = "config.json") -> ModelPlan:
    """One coding model on the configured box (or boxes); kv_gib None: the settings' budget (split, or a model
    without one: all the box has left)."""
    _check_topology(sparks, topology)
    spec = lookup(catalog, "coding model", coding_model, CODER)
    box = box or box_from_data(cfg, catalog)
    tp = sparks if topology == "tensor-parallel" else 1
    resident = resident_per_box(spec, cfg, tp)
    free = box.available_gib - (resident.value or 0.0)
    kv, kv_setting = _kv_budget(cfg, spec, topology, free, kv_gib)
    layout = facts.model_layout(spec, config, config_source)
    capacity = _pool(layout, kv, spec, cfg, tp) if layout is not None else None
    without_draft = None  # what the pool would hold without the draft's KV: the part of the estimate it explains
    if layout is not None and layout.draft_layers:
        without_draft = _pool(replace(layout, draft_layers=0), kv, spec, cfg, tp).concurrency
    roofline, full_ctx = _roofline(spec, layout, box, tp)
    plan = ModelPlan(
        name=spec.key, title=spec.title or spec.key, topology=topology, sparks=sparks,
        engines=sparks if topology == "replicas" else 1,
        boxes={"replicas": sparks, "split": 1, "tensor-parallel": sparks}[topology], tp=tp,
        box=box, resident_gib=resident.value or 0.0, resident_source=resident.kind, free_gib=free, kv_gib=kv,
        kv_setting=kv_setting, max_context=spec.max_model_len, layout=layout, capacity=capacity,
        measured=measured_for(spec, kv, tp, layout.draft_layers if layout else 0),
        roofline_tokens_per_s=roofline, roofline_full_context_tokens_per_s=full_ctx,
        engine_concurrency_without_draft=without_draft,
        placement=placement(cfg, spec, box, layout))
    return _annotate(plan, spec, cfg)


def resident_per_box(spec: ModelSpec, cfg: GroupData, tp: int) -> facts.Figure:
    """GiB per box, excluding KV: tensor-parallel divides the weights, not the runtime."""
    whole = facts.resident(spec, cfg.MODEL_RUNTIME_OVERHEAD_GIB)
    if tp <= 1 or whole.value is None:
        return whole
    known = facts.weights(spec).value
    weights = known if known and 0 < known <= whole.value else whole.value
    return facts.Figure(whole.value - weights + weights / tp, "derived" if whole.kind == "derived" else "estimate",
                        f"{whole.source}; its weights {weights:.1f} GiB split over {tp} boxes")


def _kv_budget(cfg: GroupData, spec: ModelSpec, topology: str, free: float, kv_gib: float | None
               ) -> tuple[float, str]:
    """(the KV budget per box, where it came from)."""
    if kv_gib is not None:
        kv, setting = float(kv_gib), "--kv"
    elif topology == "split":
        kv, setting = max(0.0, floor_to(free)), "split: all the box has left"
    elif spec.key not in cfg.CODER_KV_CACHE_GIB:
        kv, setting = max(0.0, floor_to(free)), NO_BUDGET
    else:
        kv, setting = configured_kv_gib(cfg, spec.key), f"CODER_KV_CACHE_GIB[{spec.key!r}]"
    if kv < 0:
        raise SettingError("KV budget", kv, "a number of GiB >= 0")
    return kv, setting


# --- where a model fits: one box beside the embedders, only across two in tensor-parallel, or not at all -----------


def _fit(cfg: GroupData, spec: ModelSpec, box: Box, layout: KvLayout | None, tp: int) -> tuple[bool, str]:
    """Whether one max-context request fits beside the embedders on each of tp boxes, with the arithmetic."""
    where = "one box" if tp == 1 else f"per box over {tp} (tensor-parallel; the head also runs the embedders)"
    res = resident_per_box(spec, cfg, tp)
    if res.value is None:
        return False, f"{where}: resident memory unknown ({res.source})"
    free = box.available_gib - res.value
    need = _pool(layout, 0.0, spec, cfg, tp).min_kv_bytes / GIB if layout is not None else 0.0
    ok = free > 0 and free + _EPS >= need
    needs = (f"one {spec.max_model_len:,}-token request needs {need:.{1 if need >= 1 else 3}f} GiB of KV"
             f"{' per box' if tp > 1 else ''}"
             if layout is not None else "the KV one request needs is unknown (no layer facts)")
    weights = facts.weights(spec).value
    split = (f" (weights {weights / tp:.1f} + runtime {res.value - weights / tp:.1f})"
             if weights and weights / tp <= res.value else "")
    link = "; the per-layer all-reduce over the CX7 link is not in the roofline" if tp > 1 else ""
    return ok, (f"{where}: {box.available_gib:.1f} GiB beside the OS reserve and embedders - resident "
                f"{res.value:.1f}{split} = {free:.1f} GiB for KV; {needs}: "
                f"{f'fits, {free - need:.1f} GiB headroom' if ok else 'does not fit'}{link}")


def placement(cfg: GroupData, spec: ModelSpec, box: Box, layout: KvLayout | None) -> Placement:
    one_ok, one = _fit(cfg, spec, box, layout, 1)
    two_ok, two = _fit(cfg, spec, box, layout, 2)
    if resident_per_box(spec, cfg, 1).value is None:
        return Placement(UNKNOWN, one, two)
    return Placement(ONE_BOX if one_ok else TWO_BOXES if two_ok else NOWHERE, one, two)


def _pool(layout: KvLayout, kv_gib: float, spec: ModelSpec, cfg: GroupData, tp: int) -> KvCapacity:
    """One engine's KV pool for this budget, with the `vllm serve` flags that change it."""
    opts = serve_options(spec, cfg.VLLM_COMMON_ARGS)
    return kv_capacity(layout, int(round(kv_gib * GIB)), spec.max_model_len, tp=tp,
                       num_speculative_tokens=num_speculative_tokens(spec), prefix_caching=opts["prefix_caching"],
                       mamba_cache_mode=opts["mamba_cache_mode"], block_size=opts["block_size"],
                       max_num_batched_tokens=cfg.CODER_MAX_NUM_BATCHED_TOKENS)


def _roofline(spec: ModelSpec, layout: KvLayout | None, box: Box, tp: int) -> tuple[float | None, float | None]:
    """Single-stream decode upper bounds, tokens/s: at short context, and reading one max-context sequence's KV."""
    read = facts.bytes_read_per_step(spec).value
    if not read:
        return None, None
    m = spec.memory
    bw = box.bandwidth_gbps * GB
    step = read * GB / tp
    if layout is None:
        return bw / step * m.tokens_per_step, None
    per_token = layout.bytes_per_token_per_layer(tp)
    kv_read = layout.pool_full_layers * per_token * spec.max_model_len
    kv_read += layout.window_layers * per_token * min(layout.window_tokens, spec.max_model_len)
    kv_read += layout.state_layers * cdiv(layout.state_bytes_per_layer, tp)
    return bw / step * m.tokens_per_step, bw / (step + kv_read) * m.tokens_per_step


def _annotate(plan: ModelPlan, spec: ModelSpec, cfg: GroupData) -> ModelPlan:
    return replace(plan, problems=tuple(_problems(plan, cfg.PLAN_MEASURED_TOLERANCE)),
                   notes=tuple(_notes(plan, spec)) + facts.override_notes(spec, cfg.MODEL_RUNTIME_OVERHEAD_GIB),
                   provenance=provenance(plan, spec, cfg))


def provenance(plan: ModelPlan, spec: ModelSpec, cfg: GroupData) -> dict[str, str]:
    """Where each figure of the plan came from: measured (with its source), calibrated, derived from the
    checkpoint's files (config.json at <sha>, the lock's safetensors), hand-typed, or estimated."""
    res, w = resident_per_box(spec, cfg, plan.tp), facts.weights(spec)
    kv = ("measured: " + (plan.measured.source or "") if plan.measured.capacity_known else
          f"estimate from the layers ({plan.layout.source})" if plan.layout else "unknown: no layer facts")
    if plan.estimate_agreement == "calibrated":
        kv += "; the estimate is calibrated to it"
    read = facts.bytes_read_per_step(spec)
    out = {"resident": f"{res.kind}: {res.source}", "weights": f"{w.kind}: {w.source}",
           "layers": plan.layout.source if plan.layout else "unknown", "kv": kv,
           "roofline": f"{read.kind}: {read.source}; tokens per step "
                       f"{spec.memory.tokens_per_step:g}{' (measured)' if plan.measured.source else ''}"}
    if spec.target_facts is None and spec.memory.hub_facts is not None:
        out["Hub page"] = f"{spec.memory.hub_facts.source} (unmeasured; `lock refresh` records the checkpoint's own)"
    return out


def _problems(plan: ModelPlan, tolerance: float) -> list[str]:
    """Why the plan is refused, or why its facts disagree with a measurement (tolerance: PLAN_MEASURED_TOLERANCE)."""
    if plan.kv_setting == NO_BUDGET and plan.placement and plan.placement.verdict in (TWO_BOXES, NOWHERE):
        return [f"does not fit one box: {plan.placement.one_box}"]
    problems = []
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
    if plan.resident_source == "unknown":
        problems.append(f"resident memory unknown: {plan.placement.one_box if plan.placement else ''}; run "
                        f"`python -m sparkctl lock refresh` or type memory.weights_gib / resident_gib in its entry")
    if cap is not None and (why := disagreement(cap, plan.measured, tolerance)):
        problems.append(why)
    return problems


def _layer_notes(plan: ModelPlan, spec: ModelSpec) -> list[str]:
    """What the layer facts leave out of the KV estimate."""
    notes, m, layout = [], spec.memory, plan.layout
    if layout is None:
        return notes
    if layout.source == "catalog" and m.linear_attention_layers and not (layout.state_layers or layout.window_layers):
        notes.append(f"{m.linear_attention_layers} linear layers have no per-sequence size in the catalog and are left "
                     f"out, so the KV capacity is an upper bound (its config.json refines it)")
    if layout.draft_layers and plan.engine_concurrency_without_draft is not None and plan.kv_gib > 0:
        notes.append(_draft_note(plan, spec))
    return notes


def _notes(plan: ModelPlan, spec: ModelSpec) -> list[str]:
    """What the figures leave out, and where they come from."""
    notes = _layer_notes(plan, spec)
    if plan.measured.source and (plan.measured.capacity_known or plan.measured_decode_tokens_per_s):
        notes.append(f"measured: {plan.measured.source}")
    for fact, why in plan.measured.calibrated.items():
        notes.append(f"calibrated, not independent: {fact}: {why}")
    if plan.tp > 1:
        notes.append(f"tensor-parallel over {plan.tp} boxes: weights split, KV pooled; the per-layer all-reduce over "
                     f"the link is not in the roofline")
    if plan.kv_setting.startswith("split"):
        notes.append("split: the KV budget is all the memory this model's box has left (a what-if: the deploy "
                     "passes CODER_KV_CACHE_GIB)")
    return notes


def _draft_note(plan: ModelPlan, spec: ModelSpec) -> str:
    """What the speculative layers add to the pool, and the estimate without them."""
    layout = plan.layout
    n, extra = layout.draft_layers, layout.draft_layers * layout.bytes_per_token_per_layer() // 1024
    method = spec_method(spec)
    what = "the MTP head's attention layer holds" if method == "mtp" else (
        f"the {'DFlash draft' if method == 'dflash' else 'draft model'}'s {n} "
        f"layer{'s' if n > 1 else ''} hold{'' if n > 1 else 's'}")
    assumed = "" if method == "mtp" else ", counted with the target's KV heads and head dim: an assumption"
    return (f"{what} a full-context KV in the pool (+{extra} KiB/token on the model's "
            f"{layout.kv_bytes_per_token // 1024} KiB{assumed}); without {'them' if n > 1 else 'it'} the "
            f"estimate would be {plan.engine_concurrency_without_draft * plan.engines:.2f} requests")


def _check_topology(sparks: int, topology: str) -> None:
    if isinstance(sparks, bool) or not isinstance(sparks, int) or sparks < 1:
        raise SettingError("sparks", sparks, "a whole number of boxes >= 1")
    if topology not in TOPOLOGIES:
        raise SettingError("SPARK_TOPOLOGY", topology, list(TOPOLOGIES))
    if topology != "replicas" and sparks < 2:
        raise SettingError("sparks", sparks, f"2 or more: the {topology} topology spans several Sparks")


def coding_models(catalog: dict[str, ModelSpec]) -> list[str]:
    return [k for k, s in catalog.items() if s.role == CODER]


def plan_box(cfg: GroupData, catalog: dict[str, ModelSpec], coding_model: str | None = None,
             kv_gib: float | None = None, sparks: int = 1, topology: str = "replicas",
             configs: dict[str, tuple[dict, str]] | None = None) -> BoxPlan:
    """The plan for the configured box and every coding model (or the one named).

    configs: {model key: (config.json dict, where it came from)} to use instead of the catalog's layer facts.
    With topology "split", each model is on its own box and (without kv_gib) gets all that box has left for KV.
    """
    _check_topology(sparks, topology)
    box = box_from_data(cfg, catalog)
    names = [coding_model] if coding_model else coding_models(catalog)
    plans = []
    for name in names:
        config, source = (configs or {}).get(name, (None, "config.json"))
        plans.append(plan_model(cfg, catalog, name, box=box, kv_gib=kv_gib, sparks=sparks, topology=topology,
                                config=config, config_source=source))
    return BoxPlan(box=box, sparks=sparks, topology=topology, models=tuple(plans))


def check_fits(cfg: GroupData, catalog: dict[str, ModelSpec], coding_model: str, *, kv_gib: float | None = None,
               config: dict | None = None) -> ModelPlan:
    """The deploy's preflight: the plan of what this host will run, or PlanError naming what does not add up.

    Checks the KV budget the deploy passes (CODER_KV_CACHE_GIB[coding_model], or kv_gib); with SPARK_TOPOLOGY
    "tensor-parallel" the weights are split over two boxes. cfg: the typed settings.
    """
    tp_sparks = 2 if cfg.SPARK_TOPOLOGY == "tensor-parallel" else 1
    kv = configured_kv_gib(cfg, coding_model) if kv_gib is None else float(kv_gib)
    plan = plan_model(cfg, catalog, coding_model, kv_gib=kv, sparks=tp_sparks,
                      topology="tensor-parallel" if tp_sparks > 1 else "replicas", config=config)
    plan = replace(plan, kv_setting=f"CODER_KV_CACHE_GIB[{coding_model!r}]" if kv_gib is None else "kv_gib")
    if not plan.fits:
        raise PlanError(plan, start_slack_gib(cfg))
    return plan


# --- why a plan is refused (PlanError's message) -----------------------------------------------------------------


def _refusal_message(plan: ModelPlan, slack_gib: float = 0.0) -> str:
    """Why a plan is refused: every number of the sum, the largest KV budget that fits, the settings to change."""
    box = plan.box
    key = plan.name
    lines = [f"{plan.title} ({key}) cannot run as configured:"]
    rows = [("usable memory (BOX_USABLE_MEMORY_GIB)", box.usable_gib),
            ("OS reserve (OS_RESERVE_GIB)", -box.os_reserve_gib)]
    for e in box.embedders:
        rows.append((f"embedder {e.name} ({e.setting}: {e.resident_gib:g} resident + {e.kv_gib:g} KV)",
                     -e.total_gib))
    rows.append((f"{key} resident (weights + runtime{', per box' if plan.tp > 1 else ''})", -plan.resident_gib))
    rows.append(("= free for its KV cache", plan.free_gib))
    rows.append((f"{key} KV budget ({plan.kv_setting})", -plan.kv_gib))
    rows.append(("= headroom", plan.headroom_gib))
    width = max(len(r[0]) for r in rows)
    lines += [f"  {label:<{width}} {value:8.1f} GiB" for label, value in rows]
    needed = box.os_reserve_gib + box.embedders_gib + plan.footprint_gib
    lines.append(f"  total {needed:.1f} GiB needed vs {box.usable_gib:.1f} GiB usable")
    lines += [f"  - {p}" for p in plan.problems]
    fit = max(0.0, floor_to(plan.max_kv_gib - slack_gib))
    lines.append(f"Largest KV budget that fits: {fit:.1f} GiB" + (
        f" (smallest that holds one {plan.max_context:,}-token request: {ceil_to(plan.min_kv_gib):.1f} GiB)"
        if plan.min_kv_gib is not None else "") + ".")
    lines.append(f"Change CODER_KV_CACHE_GIB[{key!r}] in group_data/gx10.py (group_data/sim.py on the simulated "
                 f"Spark), or free memory: EMBEDDERS (fewer, or a smaller kv_cache_gib) or OS_RESERVE_GIB in "
                 f"group_data/all.py.")
    return "\n".join(lines + _topology_advice(plan))


def _topology_advice(plan: ModelPlan) -> list[str]:
    """A model too big for one box: the topology that would fit it, with the arithmetic."""
    where = plan.placement
    if where is None or plan.tp > 1 or where.verdict == "one box":
        return []
    if where.verdict.startswith("unknown"):
        return []
    if where.verdict.startswith("two boxes"):
        return [f"{plan.name} does not fit one box beside the embedders ({where.one_box}).",
                f"It fits across two boxes in tensor-parallel ({where.two_boxes}): put two boxes in the inventory "
                f"and set SPARK_TOPOLOGY = \"tensor-parallel\" (README \"A second Spark\")."]
    return [f"{plan.name} fits neither one box ({where.one_box}) nor two in tensor-parallel ({where.two_boxes})."]
