"""The bench probe's arithmetic, free of I/O: token timelines, the counter/client agreement, the roofline, and
what one decode window or one prefill yields from two /metrics scrapes (prometheus.py does the counter deltas
and the speculative-decoding figures).

Client token count, defined so that it measures what the counter measures. Every request streams with
`stream_options: {include_usage: true, continuous_usage_stats: true}`: vLLM then puts the request's cumulative
`usage.completion_tokens` on every chunk, so the client knows, per request, how many tokens it had received at
any instant (a chunk under speculative decoding carries several tokens; the cumulative count stays exact). The
client count of a window [t0, t1] is

    Σ over requests of  cum_tokens(t1) - cum_tokens(t0)

where cum_tokens(t) is the last cumulative count received at or before t (0 before the first chunk). Requests
that started before t0, finished inside the window, or are still running at t1 contribute exactly their tokens
inside the window. The reported client count uses the midpoints of the two scrape commands (perf_counter on
both sides) as t0 and t1. But the counters were read at some unknown instant inside each command (ssh, curl and
vLLM's /metrics handler on a busy event loop: tens of ms on an idle box, over half a second on a loaded one),
so the client count that matches the counter lies between

    lo = count over [end of scrape 0, start of scrape 1]   and   hi = count over [start of scrape 0, end of scrape 1]

and the check is made against that bracket: the gap is how far the counter lies outside [lo, hi], relative to the
counter (0 inside it). What is left beyond the bracket is tokens in flight between engine and client
(milliseconds). Other clients of the same vLLM make the counter larger than the client count: a gap above
BENCH_AGREEMENT_TOLERANCE means the counter figure is not the probe's alone, and the probe exits non-zero. A
server without continuous usage stats falls back to one token per content chunk corrected by the final usage
(marked "client_count_method": "chunks").
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from sparkctl.measure import prometheus


@dataclass
class RequestLog:
    """One request of a stream, as the client saw it. Times are time.perf_counter() seconds."""

    t_sent: float
    t_first: float | None = None  # first chunk that carried choices (time to first token)
    t_done: float | None = None  # stream ended ([DONE] received)
    times: list[float] = field(default_factory=list)  # chunk arrival times ...
    cum_tokens: list[int] = field(default_factory=list)  # ... and cumulative completion tokens at each
    prompt_tokens: int | None = None
    continuous_usage: bool = False  # counts came from per-chunk usage (exact) rather than chunk counting
    error: str | None = None

    def record(self, t: float, cum: int) -> None:
        if self.cum_tokens and cum < self.cum_tokens[-1]:
            cum = self.cum_tokens[-1]  # never let the count go backwards
        self.times.append(t)
        self.cum_tokens.append(cum)

    def tokens_at(self, t: float) -> int:
        """Cumulative completion tokens received at or before t (0 before the first chunk)."""
        i = bisect.bisect_right(self.times, t)
        return self.cum_tokens[i - 1] if i else 0


def tokens_in_window(logs: Sequence[RequestLog], t0: float, t1: float) -> int:
    """Tokens the client received in [t0, t1] over all requests: Σ cum(t1) - cum(t0) (see module docstring)."""
    return sum(r.tokens_at(t1) - r.tokens_at(t0) for r in logs)


def relative_gap(client: float, counter: float) -> float | None:
    """(client - counter) / counter; None when the counter moved by nothing."""
    return (client - counter) / counter if counter else None


def gap_outside(lo: float, hi: float, counter: float) -> float | None:
    """How far the counter lies outside the client's bracket [lo, hi], relative to the counter, signed like
    relative_gap (positive: the client saw more); 0 inside the bracket, None when the counter moved by nothing."""
    if not counter:
        return None
    if counter < lo:
        return relative_gap(lo, counter)
    if counter > hi:
        return relative_gap(hi, counter)
    return 0.0


def aggregate_roofline(single_stream_tokens_per_s: float | None, streams: int) -> float | None:
    """The aggregate decode roofline at N streams from the planner's single-stream one.

    Decode is bound by the bytes one step reads; a step of N streams reads the weights once and emits N times the
    tokens, so (bandwidth-bound, KV reads neglected) the bound is N x the single-stream roofline. Roofline % is
    then aggregate / bound, the same as per-stream rate / single-stream roofline.
    """
    if not single_stream_tokens_per_s:
        return None
    return single_stream_tokens_per_s * streams


@dataclass(frozen=True)
class Scrape:
    """One /metrics read: when the command ran (perf_counter) and what it returned."""

    t_start: float
    t_end: float
    snapshot: prometheus.Snapshot

    @property
    def t(self) -> float:
        """Best estimate of the instant the counters were read: the middle of the command."""
        return (self.t_start + self.t_end) / 2

    @property
    def duration(self) -> float:
        return self.t_end - self.t_start


def _per_second(amount: float, dt: float) -> float:
    return amount / dt if dt > 0 else 0.0


def _count_method(logs: Sequence[RequestLog]) -> str | None:
    """How the client counted the window's tokens: per-chunk usage (exact) only if every request could."""
    methods = {("usage" if r.continuous_usage else "chunks") for r in logs if r.times}
    return "usage" if methods == {"usage"} else ("chunks" if methods else None)


def _client_figures(s0: Scrape, s1: Scrape, logs: Sequence[RequestLog], counter: float, dt: float,
                    tolerance: float) -> dict:
    """The client's own token count of the window and its agreement with the counter (module docstring)."""
    client = tokens_in_window(logs, s0.t, s1.t)
    bracket = (tokens_in_window(logs, s0.t_end, s1.t_start), tokens_in_window(logs, s0.t_start, s1.t_end))
    gap = gap_outside(*bracket, counter)
    in_window = [r for r in logs if r.t_sent <= s1.t and (r.t_done is None or r.t_done >= s0.t)]
    return {
        "client_tokens": client,
        "client_tokens_per_s": _per_second(client, dt),
        "client_tokens_bracket": list(bracket),  # the client count over the scrapes' earliest/latest instants
        "client_vs_counter": relative_gap(client, counter),  # midpoint count, for information
        "counter_outside_bracket": gap,  # what the agreement check uses (module docstring)
        "agree": gap is not None and abs(gap) <= tolerance,
        "client_count_method": _count_method(in_window),
    }


def _request_figures(s0: Scrape, s1: Scrape, logs: Sequence[RequestLog]) -> dict:
    """Requests started, finished and failed in the window, and the mean time to first token of those started."""
    finished = [r for r in logs if r.t_done is not None and s0.t <= r.t_done <= s1.t]
    started = [r for r in logs if s0.t <= r.t_sent <= s1.t]
    ttfts = [r.t_first - r.t_sent for r in started if r.t_first is not None]
    return {
        "requests_started": len(started),
        "requests_finished": len(finished),
        "requests_errored": sum(1 for r in logs if r.error and r.t_sent <= s1.t),
        "ttft_s_mean": statistics.fmean(ttfts) if ttfts else None,
    }


def window_result(streams: int, s0: Scrape, s1: Scrape, logs: Sequence[RequestLog], *, tolerance: float,
                  roofline_single: float | None = None) -> dict:
    """Everything one decode window yields, from the two scrapes and the client's request logs.

    tolerance: BENCH_AGREEMENT_TOLERANCE, the largest relative gap between counter and client bracket that agrees."""
    dt = s1.t - s0.t
    counter = prometheus.generation_tokens(s0.snapshot, s1.snapshot)
    spec = prometheus.spec_decode(s0.snapshot, s1.snapshot)
    counter_rate = _per_second(counter, dt)
    bound = aggregate_roofline(roofline_single, streams)
    return {
        "streams": streams,
        "window_s": dt,
        "counter_tokens": counter,
        "counter_tokens_per_s": counter_rate,
        "per_stream_tokens_per_s": counter_rate / streams,
        **_client_figures(s0, s1, logs, counter, dt, tolerance),
        "roofline_tokens_per_s": bound,
        "roofline_pct": 100.0 * counter_rate / bound if bound else None,
        "spec_decode": spec.to_dict() if spec else None,
        **_request_figures(s0, s1, logs),
        "scrape_s": [s0.duration, s1.duration],
    }


def prefill_result(target_tokens: int, prompt_tokens: int | None, ttft_s: float | None,
                   before: prometheus.Snapshot, after: prometheus.Snapshot, token_count_source: str) -> dict:
    """One fresh prefill: client rate (prompt tokens / TTFT), the server's own prefill time, and whether any
    prefix-cache block matched (a fresh prompt leaves Δ prefix_cache_hits at 0)."""
    d = prometheus.prefill(before, after)
    rate = prompt_tokens / ttft_s if prompt_tokens and ttft_s else None
    return {
        "target_tokens": target_tokens,
        "prompt_tokens": prompt_tokens,
        "ttft_s": ttft_s,
        "tokens_per_s": rate,
        "server_prefill_s": d.server_prefill_s,
        "server_tokens_per_s": (d.prompt_tokens / d.server_prefill_s) if d.server_prefill_s else None,
        "prompt_tokens_delta": d.prompt_tokens,
        "prefix_cache_queries_delta": d.prefix_cache_queries,
        "prefix_cache_hits_delta": d.prefix_cache_hits,
        "prompt_tokens_cached_delta": d.prompt_tokens_cached,
        "fresh": d.prefix_cache_hits == 0 and not d.prompt_tokens_cached,
        "token_count_source": token_count_source,
        "error": None,
    }


def median_prefill(samples: list[dict]) -> dict:
    """The median-rate sample of several measured prefills of one length (the lower middle one for an even count,
    so every field is one real measurement's), with each sample's rate; fresh only if every prompt was."""
    ranked = sorted(samples, key=lambda p: p["tokens_per_s"] or 0.0)
    mid = dict(ranked[(len(ranked) - 1) // 2])
    mid["samples_tokens_per_s"] = [p["tokens_per_s"] for p in samples]
    mid["fresh"] = all(p["fresh"] for p in samples)
    if not mid["fresh"]:  # the check reads these deltas: report the worst sample's
        worst = max(samples, key=lambda p: (p["prefix_cache_hits_delta"] or 0, p["prompt_tokens_cached_delta"] or 0))
        mid["prefix_cache_hits_delta"] = worst["prefix_cache_hits_delta"]
        mid["prompt_tokens_cached_delta"] = worst["prompt_tokens_cached_delta"]
    return mid


def prefill_failure(target_tokens: int, error: str, prompt_tokens: int | None = None) -> dict:
    """A prefill that could not be measured (does not fit, HTTP error): the same keys the report reads."""
    return {"target_tokens": target_tokens, "error": error, "prompt_tokens": prompt_tokens, "ttft_s": None,
            "tokens_per_s": None, "fresh": None}
