"""The acceptance verdict: is a quick-probe record as fast and as right as this configuration should be?

Pure: a record in (quick.py's, with its `gate` part), a Verdict out. Each figure is checked against the references
that can judge it, with the limits from group data (ACCEPTANCE_*, typed in thresholds.py):

* speculative decoding, lowest stream count: the mean acceptance length (tokens per step) against the catalog's
  (ModelSpec.memory.tokens_per_step) x ACCEPTANCE_SPEC_FLOOR_FRACTION, and the acceptance rate and each draft
  position's rate (measured_acceptance_*) likewise, each only where the catalog says it was measured
  (acceptance_provenance): a derived figure is printed beside the measured one, never judged; and, floor or no
  floor, tokens per step at least ACCEPTANCE_SPEC_MIN_TOKENS_PER_STEP (a draft that accepts nothing is slower than
  no draft). A figure the record lacks fails as not measured, never read as 1 or 0;
* decode tok/s per stream count and fresh-prefill tok/s per prompt length: every one the run was configured to
  measure (its gate part: ACCEPTANCE_STREAMS, ACCEPTANCE_PREFILL_TOKENS) must be in the record, measured and finite
  (record.py refuses NaN), or the verdict fails naming it; so must every stream count the gate run that is this
  box's baseline (or its previous configuration's) measured (dropped_windows). Each is judged against the moving
  reference (reference.choose: this box's baseline, the closest previous configuration's, the catalog's published
  figures; a reference lacking the figure hands it to the next), against the fixed anchors (reference.anchors: the
  box's anchor and the published figures, cumulative limits), and on a tensor-parallel pair against one box
  (reference.pair_bound);
* decode as % of the planner's roofline at every stream count, in every verdict; judged only for a stream count
  nothing measured can judge (ACCEPTANCE_ROOFLINE_FLOOR_FRACTION); such a run passes provisional (history.py);
* KV capacity: vLLM's reported tokens against the plan x (1 - ACCEPTANCE_KV_MAX_SHORTFALL);
* retrieval: the one NIAH cell must pass;
* the record's own problems (client and counter disagree, a prefill that was not fresh) when
  ACCEPTANCE_FAIL_ON_PROBLEMS: a gate cannot pass on figures nobody can trust.

A baseline of another configuration or workload is refused, never lined up (history.mismatch). The verdict names
every reference it used and which of them failed. ACCEPTANCE_MODE "warn" keeps the verdict's figures and failures
but decides "commit".
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace

from sparkctl.box import contract
from sparkctl.errors import SettingError
from sparkctl.measure import reference as refs
from sparkctl.measure.maths import aggregate_roofline
from sparkctl.measure.record import BenchError
from sparkctl.measure.reference import Reference
from sparkctl.measure.thresholds import Thresholds

__all__ = ["Check", "Floor", "Thresholds", "Verdict", "floor_of", "judge", "verdict_table"]
MODES = ("fail", "warn")
FIRST_OF_CONFIGURATION = ("previous", "published")  # references chosen only when no baseline exists
PROVENANCES = ("measured", "derived", "provisional")  # catalog.MemoryFacts.acceptance_provenance values
SPEC_FIGURES = ("tokens_per_step", "acceptance_rate", "per_position")  # its keys


@dataclass(frozen=True)
class Floor:
    """The catalog's speculative-decoding figures for one checkpoint (what the decision was made on)."""

    rate: float  # 0: none
    per_position: tuple[float, ...]
    source: str
    tokens_per_step: float = 0.0  # mean acceptance length; 0: none
    provenance: dict = field(default_factory=dict)  # {SPEC_FIGURES key: PROVENANCES value}; absent: measured

    def kind(self, figure: str) -> str:
        return self.provenance.get(figure, "measured")


def floor_of(spec) -> Floor | None:
    """spec (a catalog ModelSpec): its acceptance floor, or None when the catalog records none for the checkpoint
    it names (a stand-in under the same key does not inherit the production figures). A tokens-per-step figure of
    1 or less is none: one token per step is what no speculation gives."""
    m = spec.memory
    belongs_to = m.measured_acceptance_on or m.measured_on
    if belongs_to not in ("", spec.checkpoint.repo) or not spec.speculative:
        return None
    provenance = dict(m.acceptance_provenance)
    for name, kind in provenance.items():
        if name not in SPEC_FIGURES or kind not in PROVENANCES:
            raise SettingError(f"the catalog's {spec.key} acceptance_provenance", {name: kind},
                               f"keys {', '.join(SPEC_FIGURES)} with values {', '.join(PROVENANCES)}")
    per_pos = tuple(float(x) for x in m.measured_acceptance_per_position or ())
    tokens_per_step = float(m.tokens_per_step) if m.tokens_per_step > 1 else 0.0
    if not m.measured_acceptance_rate and not per_pos and not tokens_per_step:
        return None
    return Floor(float(m.measured_acceptance_rate), per_pos, m.measured_acceptance_source, tokens_per_step,
                 provenance)


@dataclass(frozen=True)
class Check:
    """One figure: what was measured, against what, the limit it had to reach, and whether it did."""

    figure: str  # e.g. "decode tok/s, 4 streams"
    against: str  # "baseline", "previous baseline", "published", "anchor", "published anchor", "one box",
    # "roofline", "catalog floor", "minimum", "plan", "itself"
    passed: bool
    measured: float | None = None  # None: not measured (the check then fails, or is a note)
    expected: float | None = None  # the reference's, the catalog's, the roofline's or the plan's figure
    threshold: float | None = None  # the measured figure had to be at least this
    delta_pct: float | None = None  # (measured - expected) / expected, %
    baseline_id: str | None = None  # history id of the reference line
    note: str = ""
    judged: bool = True  # False: printed beside the others (a derived figure, the roofline), never failing
    reference: str = ""  # the name of the reference it was judged against, when it was one

    def line(self) -> str:
        if self.measured is None or self.expected is None:
            return f"{self.figure}: {self.note or ('ok' if self.passed else 'failed')}"
        limit = f", limit {self.threshold:.4g}" if self.threshold is not None else ""
        delta = f" ({self.delta_pct:+.1f} %{limit})" if self.delta_pct is not None else ""
        ref = f" [{self.against} {self.baseline_id}]" if self.baseline_id else f" [{self.against}]"
        note = f"; {self.note}" if self.note else ""
        return f"{self.figure}: {self.measured:.4g} vs {self.expected:.4g}{delta}{ref}{note}"


NO_REFERENCE = Reference("none", "the roofline and the KV plan only", passed_over=("no reference was given",))
# both speed comparisons switched off: no reference is used, and the history line says so
SPEED_OFF = Reference("off", "its floors and the KV plan only, decode and prefill comparisons off "
                             "(ACCEPTANCE_DECODE_ENABLED, ACCEPTANCE_PREFILL_ENABLED)")


@dataclass
class Verdict:
    passed: bool  # every enabled figure reached its limit
    failures: list[Check]
    record: dict  # the quick-probe bench record judged
    mode: str = "fail"
    checks: list[Check] = field(default_factory=list)  # every figure, passed or not, judged or printed
    baseline_id: str | None = None  # history id of the reference's line (None: published figures, or none)
    notes: list[str] = field(default_factory=list)  # checks skipped, references passed over, and why
    reference: Reference = NO_REFERENCE  # the moving reference: what decode and prefill were judged against first
    anchors: list[Reference] = field(default_factory=list)  # the fixed anchors judged beside it
    pair: Reference | None = None  # a tensor-parallel pair's one-box bound
    unreferenced: list[str] = field(default_factory=list)  # speed figures no measured reference could judge

    @property
    def decision(self) -> str:
        """What the control side sends to the box: "commit" or "rollback"."""
        return contract.decision(self.passed, self.mode)

    @property
    def provisional(self) -> bool:
        """Passed on the roofline alone for some figure: recorded, but no yardstick until an operator confirms it."""
        return self.passed and bool(self.unreferenced) and self.reference.kind != "off"

    def references(self) -> list[str]:
        """The name of every reference a judged figure was compared with, in order of first use."""
        return list(dict.fromkeys(c.reference for c in self.checks if c.reference and c.judged))

    def failed_references(self) -> list[str]:
        return list(dict.fromkeys(c.reference for c in self.failures if c.reference))

    def roofline_summary(self) -> str:
        pct = [f"{c.figure.rsplit(', ', 1)[-1]} {100 * c.measured / c.expected:.1f} %" for c in self.checks
               if c.against == "roofline" and c.measured is not None and c.expected]
        return f"decode at {', '.join(pct)} of roofline" if pct else "no roofline"

    def reason(self) -> str:
        """One line for the box's record and the operator: which numbers failed, by how much, against what; every
        reference used, and which of them failed."""
        ref, used = self.reference, self.references()
        if self.passed:
            tail = ("; provisional: " + ", ".join(self.unreferenced) + " judged on the roofline alone, no yardstick "
                    "until an operator confirms it (bench confirm @ID)") if self.provisional else \
                "; this run becomes its configuration's baseline" if ref.kind in FIRST_OF_CONFIGURATION else ""
            also = [n for n in used if n != ref.name]
            return (f"acceptance passed against {ref.name} ({self.roofline_summary()}{tail})"
                    + (f"; also within {'; '.join(also)}" if also else ""))
        failed = self.failed_references()
        lead = ref.name if ref.name in failed or not failed else failed[0]
        return (f"acceptance failed (against {lead}): " + "; ".join(c.line() for c in self.failures)
                + (f" (references used: {'; '.join(used)}; failed: {'; '.join(failed)})" if used else ""))

    def to_dict(self) -> dict:
        return {"passed": self.passed, "decision": self.decision, "mode": self.mode, "reason": self.reason(),
                "provisional": self.provisional, "unreferenced": self.unreferenced,
                "baseline_id": self.baseline_id, "reference": self.reference.to_dict(),
                "anchors": [a.to_dict() for a in self.anchors], "pair": self.pair.to_dict() if self.pair else None,
                "references": self.references(), "failed_references": self.failed_references(), "notes": self.notes,
                "failures": [asdict(c) for c in self.failures], "checks": [asdict(c) for c in self.checks],
                "record": self.record}


def _delta_pct(measured: float, expected: float) -> float | None:
    """None without an expected figure, or when the ratio overflows (a vanishing reference): never +inf %."""
    delta = 100.0 * (measured - expected) / expected if expected else None
    return delta if delta is not None and math.isfinite(delta) else None


def _at_least(figure: str, against: str, measured: float | None, expected: float, limit: float,
              baseline_id: str | None = None, note: str = "", reference: str = "") -> Check:
    ok = measured is not None and measured >= limit
    note = note or ("not measured" if measured is None else "")
    return Check(figure, against, ok, measured, expected, limit,
                 None if measured is None else _delta_pct(measured, expected), baseline_id, note, True, reference)


def _stream_label(n: int) -> str:
    return f"{n} stream{'s' if n != 1 else ''}"


def _num(x) -> float | None:
    return None if x is None else float(x)


# ---------------------------------------------------------------------------------------------------- speculative

def _spec_figures(sd: dict, floor: Floor, n: int) -> list[tuple[str, str, float | None, float]]:
    """(figure, provenance key, measured or None when the record lacks it, catalog's) of every figure the catalog
    has: a missing figure is not measured, never read as 1 token per step or a rate of 0."""
    out = []
    if floor.tokens_per_step:
        out.append((f"spec-decode tokens per step, {n} stream(s)", "tokens_per_step",
                    _num(sd.get("tokens_per_step")), floor.tokens_per_step))
    if floor.rate:
        out.append((f"spec-decode acceptance, {n} stream(s)", "acceptance_rate",
                    _num(sd.get("acceptance_rate")), floor.rate))
    per_pos = sd.get("per_position_acceptance") or {}
    out += [(f"spec-decode acceptance at draft position {i}, {n} stream(s)", "per_position",
             _num(per_pos.get(str(i))), expected) for i, expected in enumerate(floor.per_position)]
    return out


def _spec_run(rec: dict) -> dict | None:
    runs = sorted(rec.get("runs", []), key=lambda r: r["streams"])
    return next((r for r in runs if r.get("spec_decode")), None)


def spec_checks(rec: dict, floor: Floor, fraction: float) -> tuple[list[Check], list[str]]:
    run = _spec_run(rec)
    if run is None:
        return [Check("speculative decoding", "catalog floor", False,
                      note="the server reported no speculative-decoding counters: it is not speculating")], []
    out, judged, printed = [], [], []
    for figure, key, measured, expected in _spec_figures(run["spec_decode"], floor, run["streams"]):
        kind = floor.kind(key)
        if kind == "derived":
            printed.append(key)
            out.append(Check(figure, "catalog (derived)", True, measured, expected, None,
                             None if measured is None else _delta_pct(measured, expected),
                             note="derived, not measured: not judged", judged=False))
            continue
        judged.append(f"{key} ({kind})")
        out.append(_at_least(figure, "catalog floor", measured, expected, expected * fraction,
                             note="provisional floor" if kind == "provisional" else ""))
    note = f"speculative decoding ({floor.source}): judged {', '.join(dict.fromkeys(judged)) or 'nothing'}" + \
        (f"; printed, not judged (derived): {', '.join(dict.fromkeys(printed))}" if printed else "")
    return out, [note]


def spec_minimum(rec: dict, minimum: float, floor: Floor | None) -> list[Check]:
    """Floor or no floor: a speculating model's tokens per step at least `minimum` (1: off), measured."""
    if minimum <= 1:
        return []
    run = _spec_run(rec)
    if run is None:  # the floor's own check says it already
        return [] if floor else [Check("speculative decoding", "minimum", False, note="the server reported no "
                                       "speculative-decoding counters: it is not speculating")]
    measured = _num(run["spec_decode"].get("tokens_per_step"))
    return [_at_least(f"spec-decode tokens per step, {run['streams']} stream(s), at least", "minimum", measured,
                      minimum, minimum, note="not measured" if measured is None else
                      "" if measured >= minimum else "the draft accepts (almost) nothing: slower than no draft")]


# ---------------------------------------------------------------------------------------------------- speed

@dataclass(frozen=True)
class Speed:
    """The references a run's decode and prefill figures are judged against."""

    moving: Reference  # with its fallbacks: the first that has a figure judges it
    anchors: tuple[Reference, ...] = ()
    pair: Reference | None = None


def _limit(ref: Reference, attr: str) -> float:
    return ref.decode_max_regression if attr == "decode" else ref.prefill_max_regression


def _against(ref: Reference, attr: str, n: int, figure: str, measured: float) -> Check:
    b = getattr(ref, attr)[n]
    check = _at_least(figure, ref.against, measured, b, b * (1 - _limit(ref, attr)), ref.id, reference=ref.name)
    return check if ref.judged else replace(check, passed=True, judged=False,
                                            note="printed, not judged (ACCEPTANCE_PAIR_MIN_SPEEDUP = 0)")


def _figure_checks(speed: Speed, attr: str, n: int, figure: str, measured: float) -> tuple[list[Check], list[str]]:
    """One figure against the moving reference (or the next that has it), every anchor, and a pair's bound."""
    out, notes, moving = [], [], speed.moving
    what = _stream_label(n) if attr == "decode" else f"prefill of {n} tokens"
    ref = next((r for r in moving.chain() if n in getattr(r, attr)), None) if moving.kind != "none" else None
    if ref is None and moving.kind != "none":  # with none at all, the reference's own note says so
        notes.append(f"{attr}, {what}: {moving.name} has no {what} figure ({sorted(getattr(moving, attr))}) nor "
                     "does any reference after it; not compared, never lined up with another stream count or length")
    elif ref is not None:
        if ref is not moving:
            notes.append(f"{attr}, {what}: {moving.name} has no {what} figure; judged against the next reference "
                         f"that has it, {ref.name}")
        out.append(_against(ref, attr, n, figure, measured))
    out += [_against(a, attr, n, figure, measured) for a in speed.anchors if n in getattr(a, attr)]
    bound = next((r for r in speed.pair.chain() if n in getattr(r, attr)), None) if speed.pair else None
    out += [_against(bound, attr, n, figure, measured)] if bound else []
    return out, notes


def _decode_figures(rec: dict) -> tuple[list[tuple[int, float]], list[Check]]:
    """(stream count, decode tok/s) of every run; a configured stream count the record lacks fails."""
    runs = {int(r["streams"]): float(r["counter_tokens_per_s"]) for r in rec.get("runs", [])}
    wanted = set((rec.get("gate") or {}).get("streams") or ())  # what the run was configured to measure
    missing = [Check(f"decode tok/s, {_stream_label(n)}", "itself", False, note="configured, not measured")
               for n in sorted(wanted - set(runs))]
    return sorted(runs.items()), missing


def _prefill_figures(rec: dict) -> tuple[list[tuple[int, float]], list[Check]]:
    """(prompt tokens, fresh-prefill tok/s) of every usable prefill; one that erred, was not fresh, has no rate or
    was configured and is absent fails."""
    out, failed, seen = [], [], set()
    for p in rec.get("prefill", []):
        n = int(p["target_tokens"])
        seen.add(n)
        figure = f"prefill tok/s, {n} tokens"
        if p.get("error"):
            failed.append(Check(figure, "itself", False, note=p["error"]))
        elif not p.get("fresh"):
            failed.append(Check(figure, "itself", False, measured=p.get("prefix_cache_hits_delta"),
                                note="prefix-cache hits moved: the prompt was not fresh"))
        elif p.get("tokens_per_s") is None:
            failed.append(Check(figure, "itself", False, note="not measured (no first token, no rate)"))
        else:
            out.append((n, float(p["tokens_per_s"])))
    wanted = set((rec.get("gate") or {}).get("prefill_tokens") or ())
    failed += [Check(f"prefill tok/s, {n} tokens", "itself", False, note="configured, not measured")
               for n in sorted(wanted - seen)]
    return out, failed


def dropped_windows(rec: dict, ref: Reference) -> list[Check]:
    """Every stream count the box's baseline (or previous configuration's) gate measured must be in the run: a
    stream set that drops one leaves that window judged by nobody. A full bench as the baseline requires none (the
    gate never measures all of BENCH_STREAMS); `bench --record-baseline` is how an operator changes the set."""
    if ref.kind not in ("baseline", "previous"):
        return []
    runs = {int(r["streams"]) for r in rec.get("runs", [])}
    wanted = set((rec.get("gate") or {}).get("streams") or ())  # a configured one missing fails as not measured
    return [Check(f"decode tok/s, {_stream_label(n)}", ref.against, False, expected=ref.decode.get(n),
                  baseline_id=ref.id, reference=ref.name,
                  note=f"measured by {ref.name}, missing from this run: its window was dropped (ACCEPTANCE_STREAMS "
                       "changed?), so nothing judged it; measure it again, or make a full bench the baseline "
                       "(`bench --record-baseline`)")
            for n in sorted(set(ref.windows) - runs - wanted)]


def speed_checks(rec: dict, t: Thresholds, speed: Speed) -> tuple[list[Check], list[str], list[str]]:
    """(checks, notes, the figures no measured reference judged) of decode and prefill."""
    checks, notes, unreferenced = [], [], []
    if t.decode:
        checks += dropped_windows(rec, speed.moving)
    for attr, enabled, figures, label in (("decode", t.decode, _decode_figures, "decode tok/s, {}"),
                                          ("prefill", t.prefill, _prefill_figures, "prefill tok/s, {} tokens")):
        if not enabled:
            continue
        values, failed = figures(rec)
        checks += failed
        for n, measured in values:
            figure = label.format(_stream_label(n) if attr == "decode" else n)
            c, nn = _figure_checks(speed, attr, n, figure, measured)
            checks, notes = checks + c, notes + nn
            if not any(x.against not in ("anchor", "published anchor", "one box") for x in c):
                unreferenced.append(figure)
    return checks, notes, unreferenced


def roofline_checks(rec: dict, t: Thresholds, unreferenced: list[str]) -> tuple[list[Check], list[str]]:
    """Decode as % of the planner's roofline at every stream count; judged (ACCEPTANCE_ROOFLINE_FLOOR_FRACTION)
    only for a stream count nothing measured judged."""
    out, notes, off = [], [], False
    for r in sorted(rec.get("runs", []), key=lambda r: r["streams"]):
        n, measured = int(r["streams"]), float(r["counter_tokens_per_s"])
        bound = r.get("roofline_tokens_per_s") or aggregate_roofline(rec.get("roofline_single_stream_tokens_per_s"), n)
        alone = f"decode tok/s, {_stream_label(n)}" in unreferenced
        off = off or (alone and not t.roofline_floor_fraction)
        if not bound:
            notes.append(f"roofline, {_stream_label(n)}: the record has none (the planner could not size the model)")
            continue
        figure, pct = f"decode vs roofline, {_stream_label(n)}", f"{100 * measured / bound:.1f} % of roofline"
        if alone and t.roofline_floor_fraction:
            out.append(_at_least(figure, "roofline", measured, bound, bound * t.roofline_floor_fraction, note=pct))
        else:
            out.append(Check(figure, "roofline", True, measured, bound, note=pct, judged=False))
    if off:
        notes.append("decode: nothing measured to compare with and the roofline floor is off "
                     "(ACCEPTANCE_ROOFLINE_FLOOR_FRACTION = 0): decode is printed, not judged")
    return out, notes


# ---------------------------------------------------------------------------------------------------- the rest

def kv_check(gate: dict, max_shortfall: float) -> tuple[list[Check], list[str]]:
    kv = gate.get("kv") or {}
    planned, measured = kv.get("planned_tokens"), kv.get("measured_tokens")
    if not planned:
        return [], ["KV capacity: the plan has no token figure for this model"]
    if measured is None:
        return [Check("KV cache tokens", "plan", False, expected=planned,
                      note="vLLM logged no KV cache size since its last start")], []
    return [_at_least("KV cache tokens", "plan", float(measured), float(planned),
                      planned * (1 - max_shortfall))], []


def niah_check(gate: dict) -> list[Check]:
    cell = gate.get("niah")
    if not cell:
        return [Check("NIAH cell", "itself", False, note="no NIAH cell was measured")]
    figure = f"NIAH {cell['length']} tokens at depth {cell['depth']:g} %"
    if cell.get("skipped") or cell.get("error"):
        return [Check(figure, "itself", False, note=cell.get("error") or "skipped")]
    answer = " ".join(str(cell.get("answer") or "").split())[:80]
    return [Check(figure, "itself", bool(cell["passed"]), 1.0 if cell["passed"] else 0.0, 1.0, 1.0,
                  note="" if cell["passed"] else f"answered {answer!r}, the needle was {cell['needle_value']}")]


def _reference_notes(speed: Speed, notes: tuple[str, ...] = ()) -> list[str]:
    ref = speed.moving
    if ref.kind == "off":
        return [f"decode/prefill: judged against {ref.name}"]
    said = f"decode/prefill judged against {ref.name}" + (f" ({ref.provenance})" if ref.provenance else "")
    if ref.kind == "none":
        said = "decode/prefill: nothing measured to compare with; judged against the roofline and the KV plan only"
    out = [said] + [f"passed over: {why}" for why in ref.passed_over]
    out += [f"fixed anchor: {a.name}, cumulative limits {a.decode_max_regression:g} decode, "
            f"{a.prefill_max_regression:g} prefill" for a in speed.anchors] + list(notes)
    if speed.pair is not None:
        out.append(f"tensor-parallel pair: bounded below by {speed.pair.name}")
    return out


def _spec(rec: dict, t: Thresholds, floor: Floor | None, speculative: bool) -> tuple[list[Check], list[str]]:
    if not t.spec:
        return [], []
    # a floor that judges a measured figure implies the minimum (a rate at 0.6 of the catalog's gives well over
    # 1.1 tokens per step): only a draft nothing measured judges gets the minimum on its own
    judges = floor is not None and any(floor.kind(k) != "derived" for k, v in (
        ("tokens_per_step", floor.tokens_per_step), ("acceptance_rate", floor.rate),
        ("per_position", floor.per_position)) if v)
    minimum = spec_minimum(rec, t.spec_min_tokens_per_step, floor) if speculative and not judges else []
    if floor is None:
        return minimum, ["speculative decoding: the catalog records no acceptance floor for this checkpoint"]
    checks, notes = spec_checks(rec, floor, t.spec_floor_fraction)
    return checks + minimum, notes


def judge(rec: dict, t: Thresholds, *, floor: Floor | None = None, reference: Reference | None = None,
          baseline: dict | None = None, anchors: tuple[Reference, ...] = (), pair: Reference | None = None,
          speculative: bool | None = None, notes: tuple[str, ...] = ()) -> Verdict:
    """The verdict on a quick-probe record. reference: the moving reference (reference.choose); baseline: a history
    line of the same configuration and workload, as a shorthand for its Reference (another configuration's is
    refused); neither: nothing to compare with (roofline and KV plan only). anchors: the fixed anchors
    (reference.anchors); pair: a tensor-parallel pair's one-box bound; speculative: whether the model drafts
    (default: the record's model says so); notes: what the caller knows of references that did not apply."""
    gate = rec.get("gate") or {}
    if not gate:
        raise BenchError("not an acceptance run: the record has no `gate` part (a full bench is not judged)")
    ref = _reference(rec, t, reference, baseline)
    speed = Speed(ref, tuple(anchors), pair) if ref.kind != "off" else Speed(ref)
    if speculative is None:
        speculative = bool((rec.get("model") or {}).get("speculative")) or floor is not None
    checks, all_notes, unreferenced = _checks(rec, gate, t, floor, speed, speculative)
    failures = [c for c in checks if c.judged and not c.passed]
    return Verdict(passed=not failures, failures=failures, record=rec, mode=t.mode, checks=checks,
                   baseline_id=ref.id, notes=_reference_notes(speed, notes) + all_notes, reference=ref,
                   anchors=list(speed.anchors), pair=speed.pair, unreferenced=unreferenced)


def _reference(rec: dict, t: Thresholds, reference: Reference | None, baseline: dict | None) -> Reference:
    """What decode and prefill are judged against: the one given, a baseline's, none; off when both are off."""
    if not (t.decode or t.prefill):
        return SPEED_OFF
    if reference is not None:
        return reference
    return refs.of_baseline(rec, baseline, t) if baseline is not None else NO_REFERENCE


def _checks(rec: dict, gate: dict, t: Thresholds, floor: Floor | None, speed: Speed,
            speculative: bool) -> tuple[list, list[str], list[str]]:
    """Every enabled figure's check, the notes on what was not judged, and the figures nothing measured judged."""
    speed_c, speed_n, unreferenced = speed_checks(rec, t, speed)
    roof_c, roof_n = roofline_checks(rec, t, unreferenced if t.decode else [])
    checks, notes = [], []
    for c, n in (_spec(rec, t, floor, speculative), (speed_c, speed_n), (roof_c, roof_n),
                 kv_check(gate, t.kv_max_shortfall) if t.kv else ([], []), (niah_check(gate) if t.niah else [], [])):
        checks, notes = checks + c, notes + n
    if not rec.get("runs"):  # whatever is switched on: a quick run always measures at least one stream count
        checks.append(Check("decode tok/s", "itself", False, note="measured nothing: the record has no decode "
                            "window, so no reference could judge it"))
    if t.fail_on_problems:  # prefill problems are the prefill checks' own
        checks += [Check("record", "itself", False, note=p) for p in rec.get("problems", [])
                   if not p.startswith("prefill ")]
    return checks, notes, unreferenced


def _title(v: Verdict, title: str) -> str:
    failed = v.failed_references()
    return (f"{title}: {'PASSED' if v.passed else 'FAILED'} -> {v.decision}"
            + (" (ACCEPTANCE_MODE warn)" if v.mode == "warn" and not v.passed else "")
            + (" (provisional)" if v.provisional else "") + f"\njudged against {v.reference.name}"
            + (f"\nfailed against {'; '.join(failed)}" if failed else ""))


def _cell(x) -> str:
    return "-" if x is None else f"{x:.4g}"


def _row(c: Check) -> list[str]:
    """One check's cells, escaped: a `[baseline <id>]` in a note is shown, not read as rich markup."""
    from rich.markup import escape

    mark = ("ok" if c.passed else "[bold red]FAIL[/]") if c.judged else "info"
    return [escape(c.figure), _cell(c.measured), _cell(c.expected),
            escape(c.against + (f" {c.baseline_id}" if c.baseline_id else "")), _cell(c.threshold),
            "-" if c.delta_pct is None else f"{c.delta_pct:+.1f} %", mark + escape(f" {c.note}" if c.note else "")]


def verdict_table(v: Verdict, title: str):
    """Every figure checked: measured, reference, limit, delta, verdict; the title names the references used and
    failed. Every text is escaped."""
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=escape(_title(v, title)), caption=escape("; ".join(v.notes)) or None)
    for col in ("figure", "measured", "reference", "against", "limit", "delta", ""):
        t.add_column(col, justify="left" if col in ("figure", "against", "") else "right")
    for c in v.checks:
        t.add_row(*_row(c))
    return t
