"""What a quick run's decode and prefill are judged against (issue 20): always something measured, named in the verdict.

Pure: a record, the box's history (history.py lines) and the catalog's published figures in; one Reference out, the
first of these that exists:

1. baseline: this box's baseline of the same configuration and workload (history.baseline_for), with the limits
   ACCEPTANCE_DECODE_MAX_REGRESSION / ACCEPTANCE_PREFILL_MAX_REGRESSION;
2. previous: after a changed vLLM version, vLLM build (its venv: labels.build_labels) or checkpoint revision, the
   baseline of the configuration this box last accepted a run of the same model, workload and topology under,
   with ACCEPTANCE_PREVIOUS_*. Its baseline rather than that last run: a run accepted a little slower must not lower
   the yardstick of the next upgrade;
3. published: a model's first flip on a box: the catalog's published figures (the write-up's probe on the
   production GX10) when the run's checkpoint, workload and topology are theirs, with the wider
   ACCEPTANCE_PUBLISHED_* (another box of the class);
4. none: nothing measured to compare with: decode is judged against the planner's roofline only
   (ACCEPTANCE_ROOFLINE_FLOOR_FRACTION), and the verdict says so and why each of the above did not apply.

A reference is never lined up with another workload (it is not chosen) or another stream count or prompt length
(that figure is not compared, and the verdict says so).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from sparkctl.measure import history
from sparkctl.measure.record import BenchError

if TYPE_CHECKING:
    from sparkctl.measure.acceptance import Thresholds

KINDS = ("baseline", "previous", "published", "none", "off")  # off: acceptance.SPEED_OFF, both comparisons off
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

    @property
    def against(self) -> str:
        """A check's `against` column."""
        return {"previous": "previous baseline", "published": "published"}.get(self.kind, self.kind)

    def tag(self) -> dict:
        """What a history line records of the reference its run was judged against."""
        return {"kind": self.kind, "name": self.name, "id": self.id}

    def to_dict(self) -> dict:
        d = asdict(self)
        d["decode"] = {str(k): v for k, v in self.decode.items()}
        d["prefill"] = {str(k): v for k, v in self.prefill.items()}
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
               passed_over: tuple[str, ...] = ()) -> Reference:
    decode, prefill = figures(line)
    h = line["history"]
    return Reference(kind, name, decode, prefill, decode_limit, prefill_limit, h["id"],
                     f"this box's history ({h['source']} run of {line.get('date')}, appended {h['appended']})",
                     passed_over)


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
    """(the baseline of the configuration this box last accepted a run of rec's model, workload and topology
    under, what changed since), or None when there is none."""
    for line in reversed(lines):
        fields = changed(line, rec)
        if fields:
            return history.baseline_for(lines, line) or line, fields
    return None


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

def choose(rec: dict, lines: list[dict], published: Published | None, t: Thresholds) -> Reference:
    """rec's reference: the first of baseline, previous, published that exists, else none (see the module)."""
    base = history.baseline_for(lines, rec)
    if base is not None:
        return of_baseline(rec, base, t)
    passed_over = ("baseline: this box has none of this configuration and workload yet",)
    prev = previous_for(lines, rec)
    if prev is not None:
        line, fields = prev
        return _from_line(line, "previous", previous_name(line, fields), t.previous_decode_max_regression,
                          t.previous_prefill_max_regression, passed_over)
    passed_over += ("previous: this box accepted no run of this model, workload and topology under another vLLM "
                    "build or revision",)
    why = published_mismatch(rec, published)
    if not why:
        return _published(published, t, passed_over)
    return Reference("none", "the roofline and the KV plan only", passed_over=passed_over + (f"published: {why}",))
