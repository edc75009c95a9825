"""What makes a bench record evidence: the bounds that need the box's settings and catalog, beyond its types.

record.BenchRecord refuses what no record can hold (a figure written as a string, a rate outside [0, 1], fewer
than one token per step, a date without a timezone). Here, what this box and model make impossible, and what the
record says of itself that can be re-derived; the judge (quick.judge_record), the deploy's append and `bench
confirm` (history.append) all refuse a record that is not evidence, naming the field, the value and the bound
(Refused: exit 2), before anything is judged or written:

* decode tok/s at every stream count above 0 and at most the box's bandwidth bound x ROOFLINE_CEILING_FACTOR: the
  weight bytes one decode step reads (the planner's facts) at BOX_MEMORY_BANDWIDTH_GBPS, times the stream count,
  times the most tokens a step can give (the catalog's num_speculative_tokens + 1); a fresh prefill above 0 tok/s
  (prefill is compute-bound: no bandwidth bound applies, record.MAX_FIGURE does);
* speculative decoding within the catalog's draft: tokens per step at most num_speculative_tokens + 1, a mean draft
  length at most num_speculative_tokens, per-position rates only at positions 0..num_speculative_tokens - 1;
* the date: not later than the judge's clock + ACCEPTANCE_CLOCK_SKEW_S (a box whose clock ran ahead would write a
  record that stays "the latest" for ever);
* the workload: its version and sha256 agree with the workload registry (sparkctl/measure/workloads): a registered
  name and version must carry the registry's sha256; a sha256 that is a registered workload's under another name or
  version is refused (the same prompts relabelled: refused rather than lined up with that workload's figures, since
  the record then contradicts itself and nobody can say which label is the mistake); a workload the registry does
  not know (`bench --workload FILE`) is its own workload, lined up only with records of its own sha256;
* the NIAH cell: re-scored from its answer and needle (niah.score_answer); a `passed` that disagrees is refused;
* the box: `box.simulated` must say true or false, and a history holds one kind only: a simulated record against
  a real box's history (or the other way round) is refused naming box.simulated.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from functools import lru_cache

from sparkctl.measure import niah, workloads
from sparkctl.measure.record import BenchError, parse_date

# the bandwidth bound (weights read once per step, KV reads neglected) is already an upper bound; the factor leaves
# room for a weight-bytes-per-step estimate that is too high (a checkpoint whose hand-typed figure counts a part it
# does not read every step): a figure beyond 1.5x the bound is no measurement of this box; unitless
ROOFLINE_CEILING_FACTOR = 1.5


class Refused(BenchError):
    """A record that is not evidence: the field, the value and the bound it broke."""

    def __init__(self, where: str, field: str, value, bound: str):
        self.field = field
        super().__init__(f"{where}: refused: {field} = {_shown(value)}: {bound}")


def _shown(value) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= 80 else text[:77] + "..."


@dataclass(frozen=True)
class Bounds:
    """What a record of one model on this box is bounded by (from the settings and catalog: `of`)."""

    now: _dt.datetime  # the judge's clock, UTC
    clock_skew_s: float  # ACCEPTANCE_CLOCK_SKEW_S
    draft_tokens: int | None  # the catalog's num_speculative_tokens (None: the model does not speculate)
    decode_ceiling_single: float | None  # one stream's most decode tok/s (None: the planner has no weight bytes)
    ceiling_source: str = ""  # how the ceiling was derived, for the refusal

    @classmethod
    def of(cls, config, model_key: str, tp: int = 1, now: _dt.datetime | None = None,
           where: str = "the record") -> "Bounds":
        """config: a HostConfig (typed settings and catalog); model_key: the record's catalog key (Refused when it
        is none of the catalog's keys)."""
        from sparkctl.capacity import facts
        from sparkctl.capacity.kv import num_speculative_tokens

        spec = config.catalog.get(model_key)
        if spec is None:
            raise Refused(where, "model.key", model_key,
                          f"one of the catalog's keys: {', '.join(sorted(config.catalog))}")
        draft = num_speculative_tokens(spec) if spec.speculative else None
        read = facts.bytes_read_per_step(spec).value
        bw = float(config.cfg.BOX_MEMORY_BANDWIDTH_GBPS)
        ceiling = bw / (read / tp) * ((draft or 0) + 1) * ROOFLINE_CEILING_FACTOR if read else None
        source = (f"BOX_MEMORY_BANDWIDTH_GBPS {bw:g} GB/s / {read / tp:.4g} GB read per step x "
                  f"{(draft or 0) + 1} tokens per step at most x {ROOFLINE_CEILING_FACTOR:g}") if read else ""
        return cls(now or _dt.datetime.now(_dt.timezone.utc), float(config.cfg.ACCEPTANCE_CLOCK_SKEW_S), draft,
                   ceiling, source)


def check(rec: dict, bounds: Bounds, where: str) -> None:
    """Refused (naming field, value and bound) unless rec is evidence: every check of the module but the history's."""
    _date(rec, bounds, where)
    _box(rec, where)
    _workload(rec, where)
    _decode(rec, bounds, where)
    _prefill(rec, where)
    _spec(rec, bounds, where)
    _niah(rec, where)


def _date(rec: dict, b: Bounds, where: str) -> None:
    when = parse_date(rec["date"])  # the model already refused one that does not parse
    latest = b.now + _dt.timedelta(seconds=b.clock_skew_s)
    if when > latest:
        raise Refused(where, "date", rec["date"], f"later than the judge's clock {b.now.isoformat(timespec='seconds')}"
                      f" + ACCEPTANCE_CLOCK_SKEW_S {b.clock_skew_s:g} s (a box whose clock runs ahead: its record "
                      "would stay the latest for ever)")


def _box(rec: dict, where: str) -> None:
    box = rec.get("box") or {}
    if not isinstance(box.get("simulated"), bool):
        raise Refused(where, "box.simulated", box.get("simulated"), "true or false: a record must say whether its box "
                      "was simulated (a development target's is unknown: it is never judged or recorded)")


@lru_cache(maxsize=1)
def registry() -> dict[tuple[str, int], str]:
    """{(name, version): sha256} of every workload this checkout ships."""
    out = {}
    for label in workloads.available():
        w = workloads.load(label)
        out[(w.name, w.version)] = w.sha256
    return out


def _workload(rec: dict, where: str) -> None:
    w = rec["workload"]
    label, sha = f"{w['name']}-v{w['version']}", w.get("sha256")
    known = registry()
    if sha is None:
        raise Refused(where, "workload.sha256", None, "the sha256 of the prompts the run sent (the probe always "
                      "writes it): without it nobody can say which prompts were measured")
    mine = known.get((w["name"], w["version"]))
    if mine is not None and sha != mine:
        raise Refused(where, "workload.sha256", sha, f"the registry's {label} prompts hash to {mine}: the record's "
                      "prompts are not the ones its name and version say")
    if mine is None:
        other = next((f"{n}-v{v}" for (n, v), s in known.items() if s == sha), None)
        if other is not None:
            raise Refused(where, "workload.version", w["version"], f"{label} with the sha256 of {other}'s prompts: "
                          f"the same prompts under another name or version contradict each other (refused, never "
                          f"lined up with {other}'s figures: relabel the record {other} if that is what ran)")


def _decode(rec: dict, b: Bounds, where: str) -> None:
    for i, run in enumerate(rec.get("runs", [])):
        field, rate, n = f"runs.{i}.counter_tokens_per_s", run["counter_tokens_per_s"], run["streams"]
        if not rate > 0:
            raise Refused(where, field, rate, f"above 0 tok/s: a window that decoded nothing at {n} stream(s) "
                          "measured no rate")
        if b.decode_ceiling_single is not None and rate > b.decode_ceiling_single * n:
            raise Refused(where, field, rate, f"at most {b.decode_ceiling_single * n:.6g} tok/s at {n} stream(s), the "
                          f"box's bandwidth bound ({b.ceiling_source}, x {n} streams)")


def _prefill(rec: dict, where: str) -> None:
    for i, p in enumerate(rec.get("prefill", [])):
        rate = p.get("tokens_per_s")
        if rate is not None and not rate > 0:
            raise Refused(where, f"prefill.{i}.tokens_per_s", rate, "above 0 tok/s (a prefill that was not measured "
                          "says so with its error and no rate)")


def _spec(rec: dict, b: Bounds, where: str) -> None:
    if b.draft_tokens is None:
        return
    k = b.draft_tokens
    for i, run in enumerate(rec.get("runs", [])):
        sd, at = run.get("spec_decode") or {}, f"runs.{i}.spec_decode"
        tps = sd.get("tokens_per_step")
        if tps is not None and tps > k + 1:
            raise Refused(where, f"{at}.tokens_per_step", tps, f"at most {k + 1} (the catalog's num_speculative_tokens "
                          f"{k} + the target's own token)")
        mean = sd.get("mean_draft_length")
        if mean is not None and mean > k:
            raise Refused(where, f"{at}.mean_draft_length", mean, f"at most the catalog's num_speculative_tokens {k}")
        for pos, rate in (sd.get("per_position_acceptance") or {}).items():
            if not (pos.isdigit() and int(pos) < k):
                raise Refused(where, f"{at}.per_position_acceptance.{pos}", rate, f"no such draft position: a rate "
                              f"at a draft position from 0 to {k - 1} (the catalog's num_speculative_tokens {k})")


def _niah(rec: dict, where: str) -> None:
    cell = (rec.get("gate") or {}).get("niah")
    if not cell:
        return
    if cell.get("skipped") or cell.get("error"):
        if cell["passed"]:
            raise Refused(where, "gate.niah.passed", True, "false on a cell that was skipped or erred: it answered "
                          "nothing that could be scored")
        return
    scored = niah.score_answer(cell.get("answer"), cell["needle_value"])
    if scored != cell["passed"]:
        answer = " ".join(str(cell.get("answer") or "").split())[:80]
        contains = "contains" if scored else "does not contain"
        raise Refused(where, "gate.niah.passed", cell["passed"], f"{str(scored).lower()}: re-scored from its answer "
                      f"{answer!r}, which {contains} the needle value {cell['needle_value']} (niah.score_answer)")


def clocks(box_s: float, control_s: float, skew_s: float, round_trip_s: float, where: str) -> dict:
    """{"box", "control"}: both clocks (UTC, ISO 8601, to the second) as a history line records them; Refused,
    naming the box's clock, when they disagree by more than skew_s (ACCEPTANCE_CLOCK_SKEW_S), plus half the
    round trip that read the box's clock and its 1 s resolution: a box whose clock is off dates its records
    wrongly, and the one that runs ahead writes the record that stays "the latest" for ever."""
    def iso(t: float) -> str:
        return _dt.datetime.fromtimestamp(int(t), _dt.timezone.utc).isoformat().replace("+00:00", "Z")

    off = box_s - control_s
    if abs(off) > skew_s + round_trip_s / 2 + 1:
        raise Refused(where, "the box's clock", iso(box_s), f"within ACCEPTANCE_CLOCK_SKEW_S {skew_s:g} s of the "
                      f"control machine's {iso(control_s)} (it is {abs(off):.0f} s {'ahead' if off > 0 else 'behind'}"
                      "): nothing is appended until the clocks agree (NTP: timedatectl status)")
    return {"box": iso(box_s), "control": iso(control_s)}


def same_kind(rec: dict, kinds: dict[bool | None, str], where: str) -> None:
    """kinds: {box.simulated of a history's lines: the first such line, named}. Refused when the history holds a
    line of the other kind: simulated and real boxes never share a baseline."""
    mine = (rec.get("box") or {}).get("simulated")
    other = next(((k, at) for k, at in kinds.items() if k != mine), None)
    if other is not None:
        kind, at = other
        said = {True: "a simulated box's", False: "a real box's", None: "an unknown box kind's"}[kind]
        raise Refused(where, "box.simulated", mine, f"{'true' if kind is False else 'false'}, as in this history: it "
                      f"holds {said} runs ({at}); simulated and real boxes never share a baseline")


def history_kinds(lines) -> dict[bool | None, str]:
    """{box.simulated: "line N (id ...)" of the first line of that kind} of a parsed history."""
    kinds: dict = {}
    for n, x in enumerate(lines, 1):
        kinds.setdefault((x.get("box") or {}).get("simulated"), f"line {n}, id {x['history']['id']}")
    return kinds
