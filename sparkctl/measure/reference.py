"""What a quick run's decode and prefill are judged against: always something measured, named in the verdict.

Pure: a record, the box's history (history.py lines) and the catalog's published figures in; References out.

The moving reference, per figure the first of these that has it (a reference missing a stream count or a prefill
length hands that figure to the next one; the first that exists names the verdict):

1. baseline: this box's baseline of the same configuration and workload (history.baseline_for), with the limits
   ACCEPTANCE_DECODE_MAX_REGRESSION / ACCEPTANCE_PREFILL_MAX_REGRESSION;
2. previous: after a changed vLLM version, vLLM build (its venv: labels.build_labels) or checkpoint revision, the
   baseline of the closest configuration this box accepted a run of the same model, workload and topology under
   (fewest of version, build, revision changed, then the newest), with ACCEPTANCE_PREVIOUS_*;
3. published: the catalog's published figures (the write-up's probe on the production GX10) when the run's
   checkpoint, workload and topology are theirs, with the wider ACCEPTANCE_PUBLISHED_* (another box of the class);
4. none: nothing measured to compare with: decode is judged against the planner's roofline only
   (ACCEPTANCE_ROOFLINE_FLOOR_FRACTION), and the run is provisional (history.py) until an operator confirms it.

The fixed anchors, in every verdict beside the moving reference, with the cumulative ACCEPTANCE_ANCHOR_*: this
box's anchor (`anchor_for`: the first confirmed baseline of the model, topology and workload under any version,
build or revision) and the catalog's published figures where they apply. Each upgrade may pass its own 15 % step;
the anchors keep five such steps from adding up to a 45 % loss. The first baseline, not the best: the best is the
luckiest run's noise, and a yardstick raised by noise rolls back healthy runs; the first is fixed the day the box
was accepted, and the published figures bound it from below where they apply.

A tensor-parallel pair is also bounded below by one box of the same model (`pair_bound`: this box's newest
confirmed one-box baseline, else the published figures), times ACCEPTANCE_PAIR_MIN_SPEEDUP.

A line that is provisional (judged on the roofline alone, not confirmed) is never a reference. A reference is never
lined up with another workload or another stream count or prompt length.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from sparkctl.measure import history
from sparkctl.measure.record import BenchError
from sparkctl.measure.thresholds import Thresholds

# off: acceptance.SPEED_OFF, both comparisons off; anchor, published anchor: the fixed anchors; one box: a pair's bound
KINDS = history.REFERENCE_KINDS
CHANGEABLE = ("vllm_version", "vllm_build", "revision")  # what may differ from a previous configuration's run


@dataclass(frozen=True)
class Reference:
    """The figures a run's decode and prefill are compared with, their limits, and how the verdict names them."""

    kind: str  # one of KINDS
    name: str  # e.g. "baseline 1a2b3c4d5e6f", "the previous vLLM 0.32.0 baseline 1a2b3c4d5e6f"
    decode: dict[int, float] = field(default_factory=dict)  # aggregate decode tok/s by stream count
    prefill: dict[int, float] = field(default_factory=dict)  # fresh-prefill tok/s by prompt tokens
    decode_max_regression: float = 0.0  # fraction below the reference that still passes
    prefill_max_regression: float = 0.0
    id: str | None = None  # history id of the line the figures are from
    provenance: str = ""  # where the figures come from
    passed_over: tuple[str, ...] = ()  # why each reference before this one in the order did not apply
    fallbacks: tuple["Reference", ...] = ()  # the next references in the order, for a figure this one lacks
    judged: bool = True  # False: its checks are printed beside the others, never failing (a pair accepted as is)
    windows: tuple[int, ...] = ()  # the stream counts its line's gate measured (a full bench's: none required)

    @property
    def against(self) -> str:
        """A check's `against` column."""
        return {"previous": "previous baseline"}.get(self.kind, self.kind)

    def chain(self) -> tuple["Reference", ...]:
        """This reference and the ones after it in the order."""
        return (self, *self.fallbacks)

    def tag(self) -> dict:
        """What a history line records of the reference its run was judged against."""
        return {"kind": self.kind, "name": self.name, "id": self.id}

    def to_dict(self) -> dict:
        d = asdict(self)
        d["decode"] = {str(k): v for k, v in self.decode.items()}
        d["prefill"] = {str(k): v for k, v in self.prefill.items()}
        d["fallbacks"] = [f.to_dict() for f in self.fallbacks]
        return d


@dataclass(frozen=True)
class Published:
    """A catalog entry's published bench-probe figures (catalog.MemoryFacts.published_*)."""

    model: str  # catalog key
    checkpoint: str  # the repo they were measured on
    decode: dict[int, float]
    prefill: dict[int, float]
    workload: dict  # the history.workload_key fields known of their workload
    source: str


def published_of(spec) -> Published | None:
    """spec (a catalog ModelSpec): its published figures, or None when the catalog records none."""
    m = spec.memory
    if not m.published_decode_tokens_per_s and not m.published_prefill_tokens_per_s:
        return None
    return Published(spec.key, m.measured_on or spec.checkpoint.repo,
                     {int(k): float(v) for k, v in m.published_decode_tokens_per_s.items()},
                     {int(k): float(v) for k, v in m.published_prefill_tokens_per_s.items()},
                     dict(m.published_workload), m.published_source)


def figures(line: dict) -> tuple[dict[int, float], dict[int, float]]:
    """A record's (decode tok/s by streams, fresh-prefill tok/s by prompt tokens)."""
    decode = {int(r["streams"]): float(r["counter_tokens_per_s"]) for r in line.get("runs", [])}
    prefill = {int(p["target_tokens"]): float(p["tokens_per_s"]) for p in line.get("prefill", [])
               if p.get("tokens_per_s")}
    return decode, prefill


def _from_line(line: dict, kind: str, name: str, decode_limit: float, prefill_limit: float,
               passed_over: tuple[str, ...] = (), judged: bool = True) -> Reference:
    decode, prefill = figures(line)
    h = line["history"]
    return Reference(kind, name, decode, prefill, decode_limit, prefill_limit, h["id"],
                     f"this box's history ({h['source']} run of {line.get('date')}, appended {h['appended']})",
                     passed_over, judged=judged, windows=tuple((line.get("gate") or {}).get("streams") or ()))


def of_baseline(rec: dict, line: dict, t: Thresholds) -> Reference:
    """line as rec's baseline; one of another configuration or workload is refused, never lined up."""
    why = history.mismatch(rec, line)
    if why:
        raise BenchError("refusing to judge against a baseline of another configuration or workload: "
                         + "; ".join(why))
    return _from_line(line, "baseline", f"baseline {line['history']['id']}", t.decode_max_regression,
                      t.prefill_max_regression)


# ---------------------------------------------------------------------------------------------------- previous

def changed(line: dict, rec: dict) -> list[str] | None:
    """The CHANGEABLE fields a history line's configuration differs from rec's in ([]: the same configuration), or
    None when it is not rec's model, box, topology and workload under another build or revision."""
    if history.workload_key(line) != history.workload_key(rec):
        return None
    a, b = history.config_key(line), history.config_key(rec)
    if any(a[k] != b[k] for k in a if k not in CHANGEABLE):
        return None
    return [k for k in CHANGEABLE if a[k] != b[k]]


def previous_name(line: dict, fields: list[str]) -> str:
    """E.g. "the previous vLLM 0.32.0 baseline <id>", "the previous revision 1a2b3c4d, vLLM 0.32.0 baseline <id>"."""
    key = history.config_key(line)
    parts = []
    if "revision" in fields:
        parts.append(f"revision {str(key['revision'] or 'not recorded')[:8]}")
    if "vllm_version" in fields:
        parts.append(f"vLLM {key['vllm_version']}")
    elif "vllm_build" in fields:
        parts.append(f"vLLM build {key['vllm_build'] or str(key['vllm_version']) + ' (build not recorded)'}")
    return f"the previous {', '.join(parts)} baseline {line['history']['id']}"


def previous_for(lines: list[dict], rec: dict) -> tuple[dict, list[str]] | None:
    """(the baseline of the closest configuration this box accepted a run of rec's model, workload and topology
    under, what changed since), or None when there is none. Closest: the fewest of vLLM version, build and revision
    changed, then the newest; a provisional line is no configuration's yardstick."""
    found = [(len(fields), -i, line, fields) for i, line in enumerate(lines)
             if history.confirmed(line) and (fields := changed(line, rec))]
    if not found:
        return None
    _, _, line, fields = min(found, key=lambda f: f[:2])
    return history.baseline_for(lines, line) or line, fields


# ---------------------------------------------------------------------------------------------------- published

def published_mismatch(rec: dict, pub: Published | None) -> str:
    """Why pub cannot judge rec ("" when it can)."""
    if pub is None:
        return f"the catalog has no published figures for {history.config_key(rec)['model']}"
    repo = (rec.get("model") or {}).get("repo")
    if repo != pub.checkpoint:
        return f"{pub.model}'s published figures were measured on {pub.checkpoint}, this run serves {repo}"
    tp = history.config_key(rec)["tensor_parallel_size"]
    if tp != 1:
        return f"{pub.model}'s published figures were measured on one box, this run on a tensor-parallel pair of {tp}"
    work = history.workload_key(rec)
    other = [f"{k} {v!r} (this run: {work.get(k)!r})" for k, v in pub.workload.items() if work.get(k) != v]
    return f"{pub.model}'s published figures were measured with {', '.join(other)}" if other else ""


def _published(pub: Published, t: Thresholds, passed_over: tuple[str, ...]) -> Reference:
    return Reference("published", f"the catalog's published figures for {pub.model}", pub.decode, pub.prefill,
                     t.published_decode_max_regression, t.published_prefill_max_regression, None, pub.source,
                     passed_over)


# ---------------------------------------------------------------------------------------------------- the order

def candidates(rec: dict, lines: list[dict], published: Published | None,
               t: Thresholds) -> tuple[list[Reference], list[str]]:
    """(every moving reference that exists for rec, in the order; why each one that does not was passed over)."""
    found, passed_over = [], []
    base = history.baseline_for(lines, rec)
    if base is not None:
        found.append(of_baseline(rec, base, t))
    else:
        passed_over.append("baseline: this box has none of this configuration and workload yet")
    prev = previous_for(lines, rec)
    if prev is not None:
        line, fields = prev
        found.append(_from_line(line, "previous", previous_name(line, fields), t.previous_decode_max_regression,
                                t.previous_prefill_max_regression))
    else:
        passed_over.append("previous: this box accepted no run of this model, workload and topology under another "
                           "vLLM build or revision")
    why = published_mismatch(rec, published)
    if not why:
        found.append(_published(published, t, ()))
    else:
        passed_over.append(f"published: {why}")
    return found, passed_over


def choose(rec: dict, lines: list[dict], published: Published | None, t: Thresholds) -> Reference:
    """rec's moving reference: the first of baseline, previous, published that exists, with the ones after it as
    its fallbacks (a figure it lacks is judged by the next that has it), else none (see the module)."""
    found, passed_over = candidates(rec, lines, published, t)
    if not found:
        return Reference("none", "the roofline and the KV plan only", passed_over=tuple(passed_over))
    first, *rest = found
    before = tuple(p for p in passed_over if _order(p) < _order(first.kind))
    return replace(first, passed_over=before, fallbacks=tuple(rest))


def _order(what: str) -> int:
    """The position in the order of a kind, or of a passed-over reason (which starts with its kind)."""
    return next(i for i, k in enumerate(("baseline", "previous", "published")) if what.startswith(k))


# ---------------------------------------------------------------------------------------------------- the anchors

def anchor_for(lines: list[dict], rec: dict) -> dict | None:
    """This box's anchor for rec's model, topology and workload: the first confirmed baseline of them under any
    vLLM version, build or revision (see the module for why the first and not the best)."""
    return next((x for x in lines if x["history"]["baseline"] and history.confirmed(x)
                 and changed(x, rec) is not None), None)


def _is_line_of(ref: Reference, line: dict) -> bool:
    """Whether ref's figures are line's own: the same history id and the same figures. Ids alone can repeat in a
    history (hand-edited, or written before ids were checked): an anchor that only shares the moving reference's id
    is another run, and is judged."""
    return ref.id == line["history"]["id"] and (ref.decode, ref.prefill) == figures(line)


def _anchor_name(line: dict) -> str:
    key = history.config_key(line)
    return (f"this box's anchor {line['history']['id']} (vLLM {key['vllm_version']}, revision "
            f"{str(key['revision'] or 'not recorded')[:8]}, appended {line['history']['appended'][:10]})")


def anchors(rec: dict, lines: list[dict], published: Published | None, moving: Reference,
            t: Thresholds) -> tuple[list[Reference], list[str]]:
    """(the fixed anchors rec is judged against beside its moving reference, notes on those that do not apply)."""
    out, notes = [], []
    line = anchor_for(lines, rec)
    if line is None:
        notes.append("anchor: this box has no confirmed baseline of this model, topology and workload yet")
    elif _is_line_of(moving, line):
        notes.append(f"anchor: {_anchor_name(line)} is the reference itself, with its tighter limits")
    else:
        out.append(_from_line(line, "anchor", _anchor_name(line), t.anchor_decode_max_regression,
                              t.anchor_prefill_max_regression))
    why = published_mismatch(rec, published)
    if not why and moving.kind != "published":
        out.append(replace(_published(published, t, ()), kind="published anchor",
                           decode_max_regression=t.anchor_decode_max_regression,
                           prefill_max_regression=t.anchor_prefill_max_regression))
    return out, notes


# ---------------------------------------------------------------------------------------------------- a pair

def pair_line(lines: list[dict], rec: dict) -> dict | None:
    """A tensor-parallel pair's one-box yardstick: the newest confirmed one-box baseline of rec's model and
    workload on this box (None on one box, or when there is none)."""
    if history.config_key(rec)["tensor_parallel_size"] == 1:
        return None
    one_box = {**rec, "box": {**(rec.get("box") or {}), "tensor_parallel_size": 1}}
    return next((x for x in reversed(lines) if x["history"]["baseline"] and history.confirmed(x)
                 and changed(x, one_box) is not None), None)


def pair_bound(rec: dict, lines: list[dict], published: Published | None, t: Thresholds) -> Reference | None:
    """A tensor-parallel pair's lower bound: one box of the same model, as this box measured it alone (its newest
    confirmed one-box baseline of the workload), else as published; None on one box or when neither exists."""
    if history.config_key(rec)["tensor_parallel_size"] == 1:
        return None
    limit, judged = 1 - t.pair_min_speedup, t.pair_min_speedup > 0
    one_box = {**rec, "box": {**(rec.get("box") or {}), "tensor_parallel_size": 1}}
    found = []
    line = pair_line(lines, rec)
    if line is not None:
        found.append(_from_line(line, "one box", f"one box of this model, baseline {line['history']['id']}",
                                limit, limit, judged=judged))
    if published is not None and not published_mismatch(one_box, published):
        found.append(replace(_published(published, t, ()), kind="one box", decode_max_regression=limit,
                             prefill_max_regression=limit, judged=judged,
                             name=f"one box of this model, the catalog's published figures for {published.model}"))
    return replace(found[0], fallbacks=tuple(found[1:])) if found else None
