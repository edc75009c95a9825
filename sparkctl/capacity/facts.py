"""A model's memory facts, each with where it came from: derived from the checkpoint's own files (what the lock
recorded at the locked commit: config.json's layer layout, the safetensors sizes), typed from its Hub page into the
catalog entry until the lock records them (MemoryFacts.hub_facts), or typed by hand in the entry, which overrides a
derived fact and says so (a disagreement is a note of the plan).

    weights   hand-typed weights_gib, else the target's (and a separate draft's) safetensors bytes
    resident  hand-typed resident_gib (measured, calibrated or estimate), else weights + MODEL_RUNTIME_OVERHEAD_GIB
    per step  hand-typed bytes_read_per_step_gb, else a dense checkpoint's weights (a mixture of experts: unknown)
    layers    hand-typed layer facts, over the config.json's (sparkctl.capacity.kv.config_facts)

Pure logic: no pyinfra, no printing.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkctl.capacity.kv import DRAFT_IN_POOL, KvLayout, config_facts, is_moe, layout_from_config, \
    layout_from_facts, spec_method, typed_facts
from sparkctl.config.catalog import CheckpointFacts, ModelSpec
from sparkctl.config.quantities import GB, GIB

HAND = "hand-typed"


@dataclass(frozen=True)
class Figure:
    """One planned figure and where it came from."""

    value: float | None
    kind: str  # measured | calibrated | estimate (typed in the entry) | derived | unknown
    source: str  # where it came from, in words
    note: str = ""  # a hand-typed figure that overrides a different derived one says so here


def files_of(facts: CheckpointFacts | None) -> str:
    """Where a checkpoint's facts were read: at a locked commit, or typed from its Hub page."""
    if facts is None:
        return ""
    return f"the lock at {facts.sha[:12]}" if facts.sha else "typed from its Hub page"


def target_files(spec: ModelSpec) -> CheckpointFacts | None:
    """The target checkpoint's facts: the lock's when it recorded them, else the entry's hub_facts."""
    return spec.target_facts or spec.memory.hub_facts


def _derived_layer_facts(spec: ModelSpec) -> tuple[dict, dict]:
    """(layer facts, {fact: where}) from the checkpoint's config.json and a separate draft's."""
    facts, origin = {}, {}
    target = target_files(spec)
    if target is not None and target.config:
        facts = config_facts(target.config, spec, f"config.json ({files_of(target)})")
        origin = {k: f"config.json ({files_of(target)})" for k in facts}
    draft = spec.draft_facts
    if spec_method(spec) in DRAFT_IN_POOL and spec_method(spec) != "mtp" and draft and draft.config:
        conf = {**draft.config, **(draft.config.get("text_config") or {})}
        if conf.get("num_hidden_layers"):
            facts["draft_attention_layers"] = int(conf["num_hidden_layers"])
            origin["draft_attention_layers"] = f"the draft's config.json ({files_of(draft)})"
    return facts, origin


def layer_facts(spec: ModelSpec) -> tuple[dict, dict, tuple[str, ...]]:
    """(layer facts, {fact: where it came from}, notes): the derived ones, each hand-typed one over it."""
    derived, origin = _derived_layer_facts(spec)
    typed = typed_facts(spec)
    notes = tuple(f"{HAND} {k} = {v} overrides {origin[k]}'s {derived[k]}" for k, v in typed.items()
                  if k in derived and derived[k] != v)
    origin.update({k: HAND for k in typed})
    return {**derived, **typed}, origin, notes


def _layout_source(origin: dict, used: tuple[str, ...]) -> str:
    """'catalog' when every fact the layout uses is hand-typed, else the derived source (and the hand-typed ones)."""
    kinds = {origin[k] for k in used if k in origin}
    derived = sorted(k for k in kinds if k != HAND)
    if not derived:
        return "catalog"
    hand = sorted(k for k in used if origin.get(k) == HAND)
    return derived[0] + (f" + {HAND} {', '.join(hand)}" if hand else "")


def model_layout(spec: ModelSpec, config: dict | None = None, config_source: str = "config.json"
                 ) -> KvLayout | None:
    """The KV layout the planner uses: a config.json given explicitly (--config, a local cache), else the entry's
    layer facts over the ones its checkpoint's files give."""
    if config is not None:
        return layout_from_config(config, spec, config_source)
    facts, origin, _ = layer_facts(spec)
    used = tuple(k for k in ("full_attention_layers", "kv_heads", "head_dim", "linear_attention_layers",
                             "linear_state_bytes_per_layer", "sliding_window", "draft_attention_layers") if k in facts)
    return layout_from_facts(facts, spec, _layout_source(origin, used))


def weights(spec: ModelSpec) -> Figure:
    """The weights resident on one box, GiB: hand-typed, else the target's (and a separate draft's) safetensors."""
    target, draft = target_files(spec), spec.draft_facts
    derived = None
    if target is not None:
        derived = (target.weights_bytes + (draft.weights_bytes if draft else 0)) / GIB
    where = f"the safetensors ({files_of(target)}{'; draft: ' + files_of(draft) if draft else ''})"
    typed = spec.memory.weights_gib
    if typed is not None:
        note = (f"{HAND} weights {typed:.1f} GiB override {where}'s {derived:.2f} GiB"
                if derived is not None and abs(derived - typed) > 0.05 else "")
        return Figure(typed, "estimate", f"{HAND} weights_gib", note)
    if derived is None:
        return Figure(None, "unknown", "no weights_gib and no lock entry (`python -m sparkctl lock refresh`)")
    missing = " (the draft's not yet known)" if spec.draft is not None and draft is None else ""
    return Figure(derived, "derived", f"{where}{missing}")


def resident(spec: ModelSpec, overhead_gib) -> Figure:
    """Weights + runtime resident while serving, excluding the KV budget, GiB, on one box (overhead_gib: the
    MODEL_RUNTIME_OVERHEAD_GIB setting, per role)."""
    m, w = spec.memory, weights(spec)
    overhead = float(getattr(overhead_gib, spec.role))
    derived = w.value + overhead if w.value is not None else None
    if m.resident_gib is not None:
        kind = m.resident_source or "estimate"
        note = (f"{HAND} resident {m.resident_gib:.1f} GiB ({kind}) overrides weights + runtime overhead = "
                f"{derived:.1f} GiB" if derived is not None and w.kind == "derived"
                and abs(derived - m.resident_gib) > 0.05 else "")
        return Figure(float(m.resident_gib), kind, f"{HAND} resident_gib ({kind})", note)
    if derived is None:
        return Figure(None, "unknown", w.source)
    return Figure(derived, "derived", f"weights {w.value:.1f} GiB ({w.kind}: {w.source}) + "
                                      f"MODEL_RUNTIME_OVERHEAD_GIB[{spec.role!r}] {overhead:g} GiB")


def bytes_read_per_step(spec: ModelSpec) -> Figure:
    """Weight bytes one decode step reads, GB (1e9): hand-typed, else a dense checkpoint's weights."""
    typed = spec.memory.bytes_read_per_step_gb
    if typed is not None:
        return Figure(typed or None, "estimate", f"{HAND} bytes_read_per_step_gb")
    target = target_files(spec)
    if target is None or not target.config:
        return Figure(None, "unknown", "no bytes_read_per_step_gb and no config.json")
    if is_moe(target.config):
        return Figure(None, "unknown", "a mixture of experts reads its active experts only: type "
                                       "bytes_read_per_step_gb")
    return Figure(target.weights_bytes / GB, "derived", f"a dense checkpoint reads its weights every step "
                                                        f"({files_of(target)})")


def override_notes(spec: ModelSpec, overhead_gib) -> tuple[str, ...]:
    """Every hand-typed fact that overrides a different derived one, said once."""
    _, _, layer_notes = layer_facts(spec)
    notes = [f.note for f in (weights(spec), resident(spec, overhead_gib)) if f.note]
    return tuple(notes) + layer_notes
