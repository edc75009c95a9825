"""vLLM's Prometheus counters, parsed and differenced: pure functions, no I/O.

The probe reads `/metrics` twice (window start, window end) and every figure it reports from the server side is a
difference of two snapshots:

* decode tokens        = Δ `vllm:generation_tokens_total`, summed over every label set (model_name, engine).
  It counts every emitted token id, accepted speculative tokens included, and the first token of each request
  whose prefill finishes inside the window.
* acceptance rate      = Δ`vllm:spec_decode_num_accepted_tokens_total` / Δ`vllm:spec_decode_num_draft_tokens_total`
* tokens per step      = 1 + Δaccepted / Δ`vllm:spec_decode_num_drafts_total` (the bonus token included)
* per-position rate_i  = Δ`vllm:spec_decode_num_accepted_tokens_per_pos_total{position="i"}` / Δdrafts
* prefix-cache hits    = Δ`vllm:prefix_cache_hits_total` (tokens); a "fresh" prefill must leave it at 0.

Parsing uses prometheus_client's own text parser. Counters are exposed as `<name>_total` plus a
`<name>_created` timestamp sample (a separate gauge family in the text format); `_created` samples are never
summed. Sample names are matched exactly, so `vllm:prompt_tokens_total` never picks up
`vllm:prompt_tokens_cached_total`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from sparkctl.errors import SparkctlError

GENERATION_TOKENS = "vllm:generation_tokens_total"
PROMPT_TOKENS = "vllm:prompt_tokens_total"
PROMPT_TOKENS_CACHED = "vllm:prompt_tokens_cached_total"  # newer vLLM only; absent is fine
PREFIX_CACHE_QUERIES = "vllm:prefix_cache_queries_total"
PREFIX_CACHE_HITS = "vllm:prefix_cache_hits_total"
REQUEST_SUCCESS = "vllm:request_success_total"
NUM_PREEMPTIONS = "vllm:num_preemptions_total"
REQUESTS_RUNNING = "vllm:num_requests_running"
REQUESTS_WAITING = "vllm:num_requests_waiting"
SPEC_DRAFTS = "vllm:spec_decode_num_drafts_total"
SPEC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
SPEC_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
SPEC_ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
PREFILL_TIME_SUM = "vllm:request_prefill_time_seconds_sum"
PREFILL_TIME_COUNT = "vllm:request_prefill_time_seconds_count"
TTFT_SUM = "vllm:time_to_first_token_seconds_sum"
TTFT_COUNT = "vllm:time_to_first_token_seconds_count"


class MetricsError(SparkctlError):
    """/metrics text that cannot be used: unparsable, a required counter missing, or a counter that went back."""


@dataclass(frozen=True)
class Snapshot:
    """Every sample of one /metrics scrape: sample name -> [(labels, value)], `_created` samples dropped."""

    samples: dict[str, list[tuple[dict[str, str], float]]] = field(default_factory=dict)

    def has(self, name: str) -> bool:
        return name in self.samples

    def total(self, name: str, **match: str) -> float:
        """Sum of `name` over every label set (optionally only those whose labels equal `match`); 0 if absent."""
        return sum(v for labels, v in self.samples.get(name, ())
                   if all(labels.get(k) == want for k, want in match.items()))

    def by_label(self, name: str, label: str, **match: str) -> dict[str, float]:
        """`name` summed per value of `label` (e.g. position -> accepted tokens)."""
        out: dict[str, float] = {}
        for labels, v in self.samples.get(name, ()):
            if label in labels and all(labels.get(k) == want for k, want in match.items()):
                out[labels[label]] = out.get(labels[label], 0.0) + v
        return out


def parse(text: str) -> Snapshot:
    """Parse Prometheus text exposition (what vLLM's /metrics returns) into a Snapshot."""
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name.endswith("_created"):
                    continue
                samples.setdefault(s.name, []).append((dict(s.labels), float(s.value)))
    except (ValueError, TypeError) as exc:
        raise MetricsError(f"/metrics text could not be parsed: {exc}") from None
    return Snapshot(samples)


def delta(before: Snapshot, after: Snapshot, name: str, *, required: bool = False, **match: str) -> float:
    """after - before of a counter summed over label sets. A counter that went down means vLLM restarted."""
    if required and not (before.has(name) and after.has(name)):
        raise MetricsError(f"{name} is missing from /metrics; is this a vLLM generate server?")
    d = after.total(name, **match) - before.total(name, **match)
    if d < 0:
        raise MetricsError(f"{name} went down ({before.total(name, **match):g} -> {after.total(name, **match):g}): "
                           "vLLM restarted during the measurement")
    return d


def generation_tokens(before: Snapshot, after: Snapshot, **match: str) -> float:
    """Decode tokens vLLM emitted between the scrapes (Δ vllm:generation_tokens_total)."""
    return delta(before, after, GENERATION_TOKENS, required=True, **match)


def prefix_cache_hits(before: Snapshot, after: Snapshot, **match: str) -> float:
    """Prompt tokens served from the prefix cache between the scrapes (Δ vllm:prefix_cache_hits_total)."""
    return delta(before, after, PREFIX_CACHE_HITS, **match)


def requests_in_flight(snap: Snapshot, **match: str) -> float:
    return snap.total(REQUESTS_RUNNING, **match) + snap.total(REQUESTS_WAITING, **match)


@dataclass(frozen=True)
class SpecDecodeDelta:
    """Speculative-decoding counters over an interval, and what follows from them."""

    drafts: float  # verify steps that carried a draft (one per request per step)
    draft_tokens: float  # proposed draft tokens
    accepted: float  # accepted draft tokens (the bonus token excluded)
    accepted_per_pos: dict[int, float]  # position -> accepted draft tokens at that position

    @property
    def acceptance_rate(self) -> float | None:
        """Δaccepted / Δdraft tokens: the share of proposed tokens that were kept."""
        return self.accepted / self.draft_tokens if self.draft_tokens else None

    @property
    def tokens_per_step(self) -> float | None:
        """Mean acceptance length 1 + Δaccepted / Δdrafts: tokens one verify step emits (1 … k+1)."""
        return 1.0 + self.accepted / self.drafts if self.drafts else None

    @property
    def per_position_rates(self) -> dict[int, float]:
        """Δaccepted_per_pos[i] / Δdrafts: how often draft position i was accepted."""
        if not self.drafts:
            return {}
        return {pos: n / self.drafts for pos, n in sorted(self.accepted_per_pos.items())}

    @property
    def draft_length(self) -> float | None:
        """Mean draft tokens per draft (num_speculative_tokens when every draft is full length)."""
        return self.draft_tokens / self.drafts if self.drafts else None

    def to_dict(self) -> dict:
        return {
            "drafts": self.drafts,
            "draft_tokens": self.draft_tokens,
            "accepted_tokens": self.accepted,
            "acceptance_rate": self.acceptance_rate,
            "tokens_per_step": self.tokens_per_step,
            "mean_draft_length": self.draft_length,
            "per_position_acceptance": {str(p): r for p, r in self.per_position_rates.items()},
        }


def spec_decode(before: Snapshot, after: Snapshot, **match: str) -> SpecDecodeDelta | None:
    """Spec-decode deltas, or None when the server runs without --speculative-config (the families are absent)."""
    if not (after.has(SPEC_DRAFTS) or after.has(SPEC_DRAFT_TOKENS)):
        return None
    per_before = before.by_label(SPEC_ACCEPTED_PER_POS, "position", **match)
    per_after = after.by_label(SPEC_ACCEPTED_PER_POS, "position", **match)
    per_pos: dict[int, float] = {}
    for pos, v in per_after.items():
        d = v - per_before.get(pos, 0.0)
        if d < 0:
            raise MetricsError(f"{SPEC_ACCEPTED_PER_POS}{{position={pos}}} went down: vLLM restarted")
        try:
            per_pos[int(pos)] = d
        except ValueError:
            raise MetricsError(f"{SPEC_ACCEPTED_PER_POS} has a non-integer position label {pos!r}") from None
    return SpecDecodeDelta(
        drafts=delta(before, after, SPEC_DRAFTS, **match),
        draft_tokens=delta(before, after, SPEC_DRAFT_TOKENS, **match),
        accepted=delta(before, after, SPEC_ACCEPTED, **match),
        accepted_per_pos=per_pos,
    )


@dataclass(frozen=True)
class PrefillDelta:
    """What one isolated prefill moved on the server."""

    prompt_tokens: float  # Δ vllm:prompt_tokens_total (whole prompt, cached tokens included)
    prefix_cache_queries: float  # Δ vllm:prefix_cache_queries_total, tokens
    prefix_cache_hits: float  # Δ vllm:prefix_cache_hits_total, tokens: 0 for a fresh prompt
    prompt_tokens_cached: float | None  # Δ vllm:prompt_tokens_cached_total where this vLLM has it
    server_prefill_s: float | None  # Δ sum of vllm:request_prefill_time_seconds (SCHEDULED -> first token)
    server_ttft_s: float | None  # Δ sum of vllm:time_to_first_token_seconds (arrival -> first token)
    requests: float  # Δ count of the prefill-time histogram: requests that finished prefill in the interval

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def prefill(before: Snapshot, after: Snapshot, **match: str) -> PrefillDelta:
    def opt(name: str) -> float | None:
        return delta(before, after, name, **match) if after.has(name) else None

    return PrefillDelta(
        prompt_tokens=delta(before, after, PROMPT_TOKENS, required=True, **match),
        prefix_cache_queries=delta(before, after, PREFIX_CACHE_QUERIES, **match),
        prefix_cache_hits=prefix_cache_hits(before, after, **match),
        prompt_tokens_cached=opt(PROMPT_TOKENS_CACHED),
        server_prefill_s=opt(PREFILL_TIME_SUM),
        server_ttft_s=opt(TTFT_SUM),
        requests=delta(before, after, PREFILL_TIME_COUNT, **match),
    )
