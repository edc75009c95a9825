"""The acceptance verdict (issue 12): is a quick-probe record as fast and as right as this configuration should be?

Pure: a record in (quick.py's, with its `gate` part), a Verdict out. Each figure is checked against the one
reference that can judge it, with the limit from group data (ACCEPTANCE_*):

* speculative decoding, lowest stream count: acceptance rate and each draft position's rate against the catalog's
  measured figure for this checkpoint (ModelSpec.memory.measured_acceptance_*) x ACCEPTANCE_SPEC_FLOOR_FRACTION;
* decode tok/s per stream count and fresh-prefill tok/s per prompt length against this box's baseline for the same
  configuration and workload (history.py), failing below baseline x (1 - ACCEPTANCE_*_MAX_REGRESSION); with no
  baseline yet, nothing to compare: the run becomes the baseline if it is accepted;
* KV capacity: vLLM's reported tokens against the plan x (1 - ACCEPTANCE_KV_MAX_SHORTFALL);
* retrieval: the one NIAH cell must pass;
* the record's own problems (client and counter disagree, a prefill that was not fresh) when
  ACCEPTANCE_FAIL_ON_PROBLEMS: a gate cannot pass on figures nobody can trust.

A baseline of another configuration or workload is refused, never lined up (history.mismatch).
ACCEPTANCE_MODE "warn" keeps the verdict's figures and failures but decides "commit".
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from sparkctl.errors import SettingError
from sparkctl.measure import history
from sparkctl.measure.record import BenchError

MODES = ("fail", "warn")


def _fraction(data: dict, name: str, upper: float = 1.0) -> float:
    value = data[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < upper:
        raise SettingError(name, value, f"a fraction from 0 up to (not including) {upper:g}")
    return float(value)


def _flag(data: dict, name: str) -> bool:
    value = data[name]
    if not isinstance(value, bool):
        raise SettingError(name, value, "True or False")
    return value


@dataclass(frozen=True)
class Thresholds:
    mode: str = "fail"
    spec: bool = True
    spec_floor_fraction: float = 0.6
    decode: bool = True
    decode_max_regression: float = 0.15
    prefill: bool = True
    prefill_max_regression: float = 0.15
    kv: bool = True
    kv_max_shortfall: float = 0.25
    niah: bool = True
    fail_on_problems: bool = True

    @classmethod
    def from_settings(cls, data: dict) -> "Thresholds":
        if data["ACCEPTANCE_MODE"] not in MODES:
            raise SettingError("ACCEPTANCE_MODE", data["ACCEPTANCE_MODE"], list(MODES))
        return cls(mode=data["ACCEPTANCE_MODE"],
                   spec=_flag(data, "ACCEPTANCE_SPEC_ENABLED"),
                   spec_floor_fraction=_fraction(data, "ACCEPTANCE_SPEC_FLOOR_FRACTION", upper=1.0001),
                   decode=_flag(data, "ACCEPTANCE_DECODE_ENABLED"),
                   decode_max_regression=_fraction(data, "ACCEPTANCE_DECODE_MAX_REGRESSION"),
                   prefill=_flag(data, "ACCEPTANCE_PREFILL_ENABLED"),
                   prefill_max_regression=_fraction(data, "ACCEPTANCE_PREFILL_MAX_REGRESSION"),
                   kv=_flag(data, "ACCEPTANCE_KV_ENABLED"),
                   kv_max_shortfall=_fraction(data, "ACCEPTANCE_KV_MAX_SHORTFALL"),
                   niah=_flag(data, "ACCEPTANCE_NIAH_ENABLED"),
                   fail_on_problems=_flag(data, "ACCEPTANCE_FAIL_ON_PROBLEMS"))


@dataclass(frozen=True)
class Floor:
    """The catalog's speculative-decoding figures for one checkpoint (what the decision was made on)."""

    rate: float  # 0: none
    per_position: tuple[float, ...]
    source: str


def floor_of(spec) -> Floor | None:
    """spec (a catalog ModelSpec): its acceptance floor, or None when the catalog records none for the checkpoint
    it names (a stand-in under the same key does not inherit the production figures)."""
    m = spec.memory
    belongs_to = m.measured_acceptance_on or m.measured_on
    if belongs_to not in ("", spec.checkpoint.repo) or not spec.speculative:
        return None
    per_pos = tuple(float(x) for x in m.measured_acceptance_per_position or ())
    if not m.measured_acceptance_rate and not per_pos:
        return None
    return Floor(float(m.measured_acceptance_rate), per_pos, m.measured_acceptance_source)


@dataclass(frozen=True)
class Check:
    """One figure: what was measured, against what, the limit it had to reach, and whether it did."""

    figure: str  # e.g. "decode tok/s, 4 streams"
    against: str  # "baseline", "catalog floor", "plan", "itself"
    passed: bool
    measured: float | None = None
    expected: float | None = None  # the baseline's or the catalog's figure, or the plan's
    threshold: float | None = None  # the measured figure had to be at least this
    delta_pct: float | None = None  # (measured - expected) / expected, %
    baseline_id: str | None = None  # history id of the baseline line
    note: str = ""

    def line(self) -> str:
        if self.measured is None or self.expected is None:
            return f"{self.figure}: {self.note or ('ok' if self.passed else 'failed')}"
        limit = f", limit {self.threshold:.4g}" if self.threshold is not None else ""
        delta = f" ({self.delta_pct:+.1f} %{limit})" if self.delta_pct is not None else ""
        ref = f" [{self.against} {self.baseline_id}]" if self.baseline_id else f" [{self.against}]"
        note = f"; {self.note}" if self.note else ""
        return f"{self.figure}: {self.measured:.4g} vs {self.expected:.4g}{delta}{ref}{note}"


@dataclass
class Verdict:
    passed: bool  # every enabled figure reached its limit
    failures: list[Check]
    record: dict  # the quick-probe bench record judged
    mode: str = "fail"
    checks: list[Check] = field(default_factory=list)  # every figure, passed or not
    baseline_id: str | None = None  # None: no baseline yet (this run becomes it when accepted)
    notes: list[str] = field(default_factory=list)  # checks skipped, and why

    @property
    def decision(self) -> str:
        """What the control side sends to the box: "commit" or "rollback"."""
        return "commit" if self.passed or self.mode == "warn" else "rollback"

    def reason(self) -> str:
        """One line for the box's record and the operator: which numbers failed, by how much, against what."""
        if self.passed:
            return "acceptance passed" + (f" against baseline {self.baseline_id}" if self.baseline_id
                                          else " (no baseline yet: this run becomes the baseline)")
        return "acceptance failed: " + "; ".join(c.line() for c in self.failures)

    def to_dict(self) -> dict:
        return {"passed": self.passed, "decision": self.decision, "mode": self.mode, "reason": self.reason(),
                "baseline_id": self.baseline_id, "notes": self.notes,
                "failures": [asdict(c) for c in self.failures], "checks": [asdict(c) for c in self.checks],
                "record": self.record}


def _delta_pct(measured: float, expected: float) -> float | None:
    return 100.0 * (measured - expected) / expected if expected else None


def _at_least(figure: str, against: str, measured: float | None, expected: float, limit: float,
              baseline_id: str | None = None, note: str = "") -> Check:
    ok = measured is not None and measured >= limit
    return Check(figure, against, ok, measured, expected, limit,
                 None if measured is None else _delta_pct(measured, expected), baseline_id, note)


def spec_checks(rec: dict, floor: Floor, fraction: float) -> list[Check]:
    runs = sorted(rec.get("runs", []), key=lambda r: r["streams"])
    run = next((r for r in runs if r.get("spec_decode")), None)
    against = "catalog floor"
    if run is None:
        return [Check("speculative decoding", against, False,
                      note="the server reported no speculative-decoding counters: it is not speculating")]
    sd, n = run["spec_decode"], run["streams"]
    out = []
    if floor.rate:
        out.append(_at_least(f"spec-decode acceptance, {n} stream(s)", against, sd.get("acceptance_rate") or 0.0,
                             floor.rate, floor.rate * fraction))
    per_pos = sd.get("per_position_acceptance") or {}
    for i, expected in enumerate(floor.per_position):
        out.append(_at_least(f"spec-decode acceptance at draft position {i}, {n} stream(s)", against,
                             float(per_pos.get(str(i), 0.0)), expected, expected * fraction))
    return out


def _stream_label(n: int) -> str:
    return f"{n} stream{'s' if n != 1 else ''}"


def decode_checks(rec: dict, base: dict, max_regression: float, base_id: str) -> tuple[list[Check], list[str]]:
    mine = {int(r["streams"]): r for r in rec.get("runs", [])}
    theirs = {int(r["streams"]): r for r in base.get("runs", [])}
    common = sorted(set(mine) & set(theirs))
    notes = [] if common else [f"decode: the baseline {base_id} measured no stream count of this run "
                               f"({sorted(theirs)} vs {sorted(mine)})"]
    out = []
    for n in common:
        b = float(theirs[n]["counter_tokens_per_s"])
        out.append(_at_least(f"decode tok/s, {_stream_label(n)}", "baseline",
                             float(mine[n]["counter_tokens_per_s"]), b, b * (1 - max_regression), base_id))
    return out, notes


def prefill_checks(rec: dict, base: dict | None, max_regression: float,
                   base_id: str | None) -> tuple[list[Check], list[str]]:
    out, notes = [], []
    theirs = {int(p["target_tokens"]): p for p in (base or {}).get("prefill", []) if p.get("tokens_per_s")}
    for p in rec.get("prefill", []):
        n = int(p["target_tokens"])
        figure = f"prefill tok/s, {n} tokens"
        if p.get("error"):
            out.append(Check(figure, "itself", False, note=p["error"]))
            continue
        if not p.get("fresh"):
            out.append(Check(figure, "itself", False, measured=p.get("prefix_cache_hits_delta"),
                             note="prefix-cache hits moved: the prompt was not fresh"))
            continue
        if base is None:
            continue
        if n not in theirs:
            notes.append(f"prefill {n}: the baseline {base_id} has no prefill of this length")
            continue
        b = float(theirs[n]["tokens_per_s"])
        out.append(_at_least(figure, "baseline", p.get("tokens_per_s"), b, b * (1 - max_regression), base_id))
    return out, notes


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


def judge(rec: dict, t: Thresholds, *, floor: Floor | None = None, baseline: dict | None = None) -> Verdict:
    """The verdict on a quick-probe record. baseline: a history line (history.baseline_for) of the same
    configuration and workload, or None when the box has none yet; another configuration's is refused."""
    gate = rec.get("gate") or {}
    if not gate:
        raise BenchError("not an acceptance run: the record has no `gate` part (a full bench is not judged)")
    base_id = None
    if baseline is not None:
        why = history.mismatch(rec, baseline)
        if why:
            raise BenchError("refusing to judge against a baseline of another configuration or workload: "
                             + "; ".join(why))
        base_id = baseline["history"]["id"]
    checks: list[Check] = []
    notes: list[str] = []
    if t.spec:
        if floor is None:
            notes.append("speculative decoding: the catalog records no acceptance floor for this checkpoint")
        else:
            checks += spec_checks(rec, floor, t.spec_floor_fraction)
    if baseline is None and (t.decode or t.prefill):
        notes.append("decode/prefill: no baseline for this configuration and workload yet; "
                     "this run becomes it if accepted")
    if t.decode and baseline is not None:
        c, n = decode_checks(rec, baseline, t.decode_max_regression, base_id)
        checks, notes = checks + c, notes + n
    if t.prefill:
        c, n = prefill_checks(rec, baseline, t.prefill_max_regression, base_id)
        checks, notes = checks + c, notes + n
    if t.kv:
        c, n = kv_check(gate, t.kv_max_shortfall)
        checks, notes = checks + c, notes + n
    if t.niah:
        checks += niah_check(gate)
    if t.fail_on_problems:  # prefill problems are the prefill checks' own
        checks += [Check("record", "itself", False, note=p) for p in rec.get("problems", [])
                   if not p.startswith("prefill ")]
    failures = [c for c in checks if not c.passed]
    return Verdict(passed=not failures, failures=failures, record=rec, mode=t.mode, checks=checks,
                   baseline_id=base_id, notes=notes)


def verdict_table(v: Verdict, title: str):
    """Every figure checked: measured, reference, limit, delta, verdict."""
    from rich.table import Table

    t = Table(title=f"{title}: {'PASSED' if v.passed else 'FAILED'} -> {v.decision}"
                    + (" (ACCEPTANCE_MODE warn)" if v.mode == "warn" and not v.passed else ""),
              caption="; ".join(v.notes) or None)
    for col in ("figure", "measured", "reference", "against", "limit", "delta", ""):
        t.add_column(col, justify="left" if col in ("figure", "against", "") else "right")

    def num(x) -> str:
        return "-" if x is None else f"{x:.4g}"

    for c in v.checks:
        against = c.against + (f" {c.baseline_id}" if c.baseline_id else "")
        t.add_row(c.figure, num(c.measured), num(c.expected), against, num(c.threshold),
                  "-" if c.delta_pct is None else f"{c.delta_pct:+.1f} %",
                  ("ok" if c.passed else "[bold red]FAIL[/]") + (f" {c.note}" if c.note else ""))
    return t
