"""The acceptance verdict (issue 12): is a quick-probe record as fast and as right as this configuration should be?

Pure: a record in (quick.py's, with its `gate` part), a Verdict out. Each figure is checked against the one
reference that can judge it, with the limit from group data (ACCEPTANCE_*):

* speculative decoding, lowest stream count: the mean acceptance length (tokens per step) against the catalog's
  (ModelSpec.memory.tokens_per_step) x ACCEPTANCE_SPEC_FLOOR_FRACTION, and the acceptance rate and each draft
  position's rate (measured_acceptance_*) likewise, each only where the catalog says it was measured
  (acceptance_provenance): a derived figure is printed beside the measured one, never judged;
* decode tok/s per stream count and fresh-prefill tok/s per prompt length against the Reference reference.choose
  picks (this box's baseline; another build's or revision's; the catalog's published figures; none), each with its
  own limits; a stream count or prompt length the reference lacks is not compared, and the verdict says so;
* decode as % of the planner's roofline at every stream count, in every verdict; judged only when there is nothing
  measured to compare with (ACCEPTANCE_ROOFLINE_FLOOR_FRACTION);
* KV capacity: vLLM's reported tokens against the plan x (1 - ACCEPTANCE_KV_MAX_SHORTFALL);
* retrieval: the one NIAH cell must pass;
* the record's own problems (client and counter disagree, a prefill that was not fresh) when
  ACCEPTANCE_FAIL_ON_PROBLEMS: a gate cannot pass on figures nobody can trust.

A baseline of another configuration or workload is refused, never lined up (history.mismatch).
ACCEPTANCE_MODE "warn" keeps the verdict's figures and failures but decides "commit".
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from sparkctl.box import contract
from sparkctl.errors import SettingError
from sparkctl.measure import reference as refs
from sparkctl.measure.maths import aggregate_roofline
from sparkctl.measure.record import BenchError
from sparkctl.measure.reference import Reference

MODES = ("fail", "warn")
FIRST_OF_CONFIGURATION = ("previous", "published", "none")  # references chosen only when no baseline exists
PROVENANCES = ("measured", "derived", "provisional")  # catalog.MemoryFacts.acceptance_provenance values
SPEC_FIGURES = ("tokens_per_step", "acceptance_rate", "per_position")  # its keys


@dataclass(frozen=True)
class Thresholds:
    mode: str = "fail"
    spec: bool = True
    spec_floor_fraction: float = 0.6
    decode: bool = True
    decode_max_regression: float = 0.15  # against this configuration's baseline
    prefill: bool = True
    prefill_max_regression: float = 0.15
    kv: bool = True
    kv_max_shortfall: float = 0.25
    niah: bool = True
    fail_on_problems: bool = True
    previous_decode_max_regression: float = 0.15  # against the previous build's or revision's baseline
    previous_prefill_max_regression: float = 0.15
    published_decode_max_regression: float = 0.3  # against the catalog's published figures
    published_prefill_max_regression: float = 0.3
    roofline_floor_fraction: float = 0.05  # of the roofline, with nothing measured to compare with; 0: off

    @classmethod
    def from_settings(cls, cfg) -> "Thresholds":
        """cfg: the typed settings (sparkctl.config.schema.GroupData): every value already checked there."""
        flags = {f: getattr(cfg, f"ACCEPTANCE_{f.upper()}_ENABLED") for f in ("spec", "decode", "prefill", "kv", "niah")}
        limits = {f: float(getattr(cfg, f"ACCEPTANCE_{f.upper()}")) for f in (
            "decode_max_regression", "prefill_max_regression", "kv_max_shortfall", "previous_decode_max_regression",
            "previous_prefill_max_regression", "published_decode_max_regression",
            "published_prefill_max_regression", "roofline_floor_fraction", "spec_floor_fraction")}
        return cls(mode=cfg.ACCEPTANCE_MODE, **flags, **limits, fail_on_problems=cfg.ACCEPTANCE_FAIL_ON_PROBLEMS)


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
    against: str  # "baseline", "previous baseline", "published", "roofline", "catalog floor", "plan", "itself"
    passed: bool
    measured: float | None = None
    expected: float | None = None  # the reference's, the catalog's, the roofline's or the plan's figure
    threshold: float | None = None  # the measured figure had to be at least this
    delta_pct: float | None = None  # (measured - expected) / expected, %
    baseline_id: str | None = None  # history id of the reference line
    note: str = ""
    judged: bool = True  # False: printed beside the others (a derived figure, the roofline), never failing

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
    reference: Reference = NO_REFERENCE  # what decode and prefill were judged against

    @property
    def decision(self) -> str:
        """What the control side sends to the box: "commit" or "rollback"."""
        return contract.decision(self.passed, self.mode)

    def roofline_summary(self) -> str:
        pct = [f"{c.figure.rsplit(', ', 1)[-1]} {100 * c.measured / c.expected:.1f} %" for c in self.checks
               if c.against == "roofline" and c.measured is not None and c.expected]
        return f"decode at {', '.join(pct)} of roofline" if pct else "no roofline"

    def reason(self) -> str:
        """One line for the box's record and the operator: which numbers failed, by how much, against what."""
        ref = self.reference
        if self.passed:
            becomes = "; this run becomes its configuration's baseline" if ref.kind in FIRST_OF_CONFIGURATION else ""
            return f"acceptance passed against {ref.name} ({self.roofline_summary()}{becomes})"
        return f"acceptance failed (against {ref.name}): " + "; ".join(c.line() for c in self.failures)

    def to_dict(self) -> dict:
        return {"passed": self.passed, "decision": self.decision, "mode": self.mode, "reason": self.reason(),
                "baseline_id": self.baseline_id, "reference": self.reference.to_dict(), "notes": self.notes,
                "failures": [asdict(c) for c in self.failures], "checks": [asdict(c) for c in self.checks],
                "record": self.record}


def _delta_pct(measured: float, expected: float) -> float | None:
    return 100.0 * (measured - expected) / expected if expected else None


def _at_least(figure: str, against: str, measured: float | None, expected: float, limit: float,
              baseline_id: str | None = None, note: str = "") -> Check:
    ok = measured is not None and measured >= limit
    return Check(figure, against, ok, measured, expected, limit,
                 None if measured is None else _delta_pct(measured, expected), baseline_id, note)


def _stream_label(n: int) -> str:
    return f"{n} stream{'s' if n != 1 else ''}"


# ---------------------------------------------------------------------------------------------------- speculative

def _spec_figures(sd: dict, floor: Floor, n: int) -> list[tuple[str, str, float, float]]:
    """(figure, provenance key, measured, catalog's) of every figure the catalog has."""
    out = []
    if floor.tokens_per_step:
        out.append((f"spec-decode tokens per step, {n} stream(s)", "tokens_per_step",
                    float(sd.get("tokens_per_step") or 1.0), floor.tokens_per_step))
    if floor.rate:
        out.append((f"spec-decode acceptance, {n} stream(s)", "acceptance_rate",
                    float(sd.get("acceptance_rate") or 0.0), floor.rate))
    per_pos = sd.get("per_position_acceptance") or {}
    out += [(f"spec-decode acceptance at draft position {i}, {n} stream(s)", "per_position",
             float(per_pos.get(str(i), 0.0)), expected) for i, expected in enumerate(floor.per_position)]
    return out


def spec_checks(rec: dict, floor: Floor, fraction: float) -> tuple[list[Check], list[str]]:
    runs = sorted(rec.get("runs", []), key=lambda r: r["streams"])
    run = next((r for r in runs if r.get("spec_decode")), None)
    if run is None:
        return [Check("speculative decoding", "catalog floor", False,
                      note="the server reported no speculative-decoding counters: it is not speculating")], []
    out, judged, printed = [], [], []
    for figure, key, measured, expected in _spec_figures(run["spec_decode"], floor, run["streams"]):
        kind = floor.kind(key)
        if kind == "derived":
            printed.append(key)
            out.append(Check(figure, "catalog (derived)", True, measured, expected, None,
                             _delta_pct(measured, expected), note="derived, not measured: not judged", judged=False))
            continue
        judged.append(f"{key} ({kind})")
        out.append(_at_least(figure, "catalog floor", measured, expected, expected * fraction,
                             note="provisional floor" if kind == "provisional" else ""))
    note = f"speculative decoding ({floor.source}): judged {', '.join(dict.fromkeys(judged)) or 'nothing'}" + \
        (f"; printed, not judged (derived): {', '.join(dict.fromkeys(printed))}" if printed else "")
    return out, [note]


# ---------------------------------------------------------------------------------------------------- speed

def decode_checks(rec: dict, ref: Reference) -> tuple[list[Check], list[str]]:
    """Each stream count against the reference's figure of the same count; one it lacks is not compared."""
    if ref.kind == "none":
        return [], []
    out, notes = [], []
    for r in sorted(rec.get("runs", []), key=lambda r: r["streams"]):
        n = int(r["streams"])
        if n not in ref.decode:
            notes.append(f"decode, {_stream_label(n)}: {ref.name} has no {_stream_label(n)} figure "
                         f"({sorted(ref.decode)}); not compared, never lined up with another stream count")
            continue
        b = ref.decode[n]
        out.append(_at_least(f"decode tok/s, {_stream_label(n)}", ref.against, float(r["counter_tokens_per_s"]), b,
                             b * (1 - ref.decode_max_regression), ref.id))
    return out, notes


def roofline_checks(rec: dict, ref: Reference, t: Thresholds) -> tuple[list[Check], list[str]]:
    """Decode as % of the planner's roofline at every stream count; judged (ACCEPTANCE_ROOFLINE_FLOOR_FRACTION)
    only when nothing measured can judge decode."""
    floor = t.roofline_floor_fraction if ref.kind == "none" and t.decode else 0.0
    out, notes = [], []
    for r in sorted(rec.get("runs", []), key=lambda r: r["streams"]):
        n, measured = int(r["streams"]), float(r["counter_tokens_per_s"])
        bound = r.get("roofline_tokens_per_s") or aggregate_roofline(rec.get("roofline_single_stream_tokens_per_s"), n)
        if not bound:
            notes.append(f"roofline, {_stream_label(n)}: the record has none (the planner could not size the model)")
            continue
        figure, pct = f"decode vs roofline, {_stream_label(n)}", f"{100 * measured / bound:.1f} % of roofline"
        if floor:
            out.append(_at_least(figure, "roofline", measured, bound, bound * floor, note=pct))
        else:
            out.append(Check(figure, "roofline", True, measured, bound, note=pct, judged=False))
    if ref.kind == "none" and t.decode and not floor:
        notes.append("decode: nothing measured to compare with and the roofline floor is off "
                     "(ACCEPTANCE_ROOFLINE_FLOOR_FRACTION = 0): decode is printed, not judged")
    return out, notes


def prefill_checks(rec: dict, ref: Reference) -> tuple[list[Check], list[str]]:
    out, notes = [], []
    for p in rec.get("prefill", []):
        n = int(p["target_tokens"])
        figure = f"prefill tok/s, {n} tokens"
        if p.get("error"):
            out.append(Check(figure, "itself", False, note=p["error"]))
        elif not p.get("fresh"):
            out.append(Check(figure, "itself", False, measured=p.get("prefix_cache_hits_delta"),
                             note="prefix-cache hits moved: the prompt was not fresh"))
        elif ref.kind != "none" and n not in ref.prefill:
            notes.append(f"prefill {n}: {ref.name} has no prefill of this length; not compared")
        elif ref.kind != "none":
            b = ref.prefill[n]
            out.append(_at_least(figure, ref.against, p.get("tokens_per_s"), b, b * (1 - ref.prefill_max_regression),
                                 ref.id))
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


def _reference_notes(ref: Reference) -> list[str]:
    if ref.kind == "off":
        return [f"decode/prefill: judged against {ref.name}"]
    said = f"decode/prefill judged against {ref.name}" + (f" ({ref.provenance})" if ref.provenance else "")
    if ref.kind == "none":
        said = "decode/prefill: nothing measured to compare with; judged against the roofline and the KV plan only"
    return [said] + [f"passed over: {why}" for why in ref.passed_over]


def _spec(rec: dict, t: Thresholds, floor: Floor | None) -> tuple[list[Check], list[str]]:
    if not t.spec:
        return [], []
    if floor is None:
        return [], ["speculative decoding: the catalog records no acceptance floor for this checkpoint"]
    return spec_checks(rec, floor, t.spec_floor_fraction)


def _speed(rec: dict, t: Thresholds, ref: Reference) -> tuple[list[Check], list[str]]:
    checks, notes = [], _reference_notes(ref)
    parts = [decode_checks(rec, ref) if t.decode else ([], []), roofline_checks(rec, ref, t),
             prefill_checks(rec, ref) if t.prefill else ([], [])]
    for c, n in parts:
        checks, notes = checks + c, notes + n
    return checks, notes


def judge(rec: dict, t: Thresholds, *, floor: Floor | None = None, reference: Reference | None = None,
          baseline: dict | None = None) -> Verdict:
    """The verdict on a quick-probe record. reference: what decode and prefill are judged against
    (reference.choose); baseline: a history line of the same configuration and workload, as a shorthand for its
    Reference (another configuration's is refused); neither: nothing to compare with (roofline and KV plan only)."""
    gate = rec.get("gate") or {}
    if not gate:
        raise BenchError("not an acceptance run: the record has no `gate` part (a full bench is not judged)")
    ref = _reference(rec, t, reference, baseline)
    checks, notes = _checks(rec, gate, t, floor, ref)
    failures = [c for c in checks if c.judged and not c.passed]
    return Verdict(passed=not failures, failures=failures, record=rec, mode=t.mode, checks=checks,
                   baseline_id=ref.id, notes=notes, reference=ref)


def _reference(rec: dict, t: Thresholds, reference: Reference | None, baseline: dict | None) -> Reference:
    """What decode and prefill are judged against: the one given, a baseline's, none; off when both are off."""
    if not (t.decode or t.prefill):
        return SPEED_OFF
    if reference is not None:
        return reference
    return refs.of_baseline(rec, baseline, t) if baseline is not None else NO_REFERENCE


def _checks(rec: dict, gate: dict, t: Thresholds, floor: Floor | None, ref: Reference) -> tuple[list, list[str]]:
    """Every enabled figure's check, and the notes on what was not judged."""
    checks, notes = [], []
    for c, n in (_spec(rec, t, floor), _speed(rec, t, ref), kv_check(gate, t.kv_max_shortfall) if t.kv else ([], []),
                 (niah_check(gate) if t.niah else [], [])):
        checks, notes = checks + c, notes + n
    if t.fail_on_problems:  # prefill problems are the prefill checks' own
        checks += [Check("record", "itself", False, note=p) for p in rec.get("problems", [])
                   if not p.startswith("prefill ")]
    return checks, notes


def verdict_table(v: Verdict, title: str):
    """Every figure checked: measured, reference, limit, delta, verdict; the caption names the reference."""
    from rich.table import Table

    t = Table(title=f"{title}: {'PASSED' if v.passed else 'FAILED'} -> {v.decision}"
                    + (" (ACCEPTANCE_MODE warn)" if v.mode == "warn" and not v.passed else "")
                    + f"\njudged against {v.reference.name}",
              caption="; ".join(v.notes) or None)
    for col in ("figure", "measured", "reference", "against", "limit", "delta", ""):
        t.add_column(col, justify="left" if col in ("figure", "against", "") else "right")

    def num(x) -> str:
        return "-" if x is None else f"{x:.4g}"

    for c in v.checks:
        against = c.against + (f" {c.baseline_id}" if c.baseline_id else "")
        mark = ("ok" if c.passed else "[bold red]FAIL[/]") if c.judged else "info"
        t.add_row(c.figure, num(c.measured), num(c.expected), against, num(c.threshold),
                  "-" if c.delta_pct is None else f"{c.delta_pct:+.1f} %", mark + (f" {c.note}" if c.note else ""))
    return t
