"""Metrics maths on recorded vLLM 0.32 /metrics text (tests/fixtures/bench/README.md gives the known deltas)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sparkctl.measure import prometheus

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "bench"


def snap(name: str) -> prometheus.Snapshot:
    return prometheus.parse((FIX / name).read_text())


@pytest.fixture(scope="module")
def ngram():
    return snap("vllm-0.32-ngram-before.txt"), snap("vllm-0.32-ngram-after.txt")


@pytest.fixture(scope="module")
def two_engines():
    return snap("vllm-0.32-two-engines-before.txt"), snap("vllm-0.32-two-engines-after.txt")


def test_created_samples_are_dropped_and_names_match_exactly(ngram):
    before, _ = ngram
    assert not any(name.endswith("_created") for name in before.samples)
    assert before.total("vllm:generation_tokens_total") == 23778
    # vllm:prompt_tokens_total must not pick up vllm:prompt_tokens_cached_total or _by_source
    assert before.total(prometheus.PROMPT_TOKENS) == 19218
    assert before.total(prometheus.PROMPT_TOKENS_CACHED) == 9472
    assert before.by_label(prometheus.SPEC_ACCEPTED_PER_POS, "position") == {"0": 6042, "1": 5832, "2": 5832}


def test_generation_tokens_delta(ngram):
    assert prometheus.generation_tokens(*ngram) == 128  # two requests x 64 tokens


def test_spec_decode_maths(ngram):
    sd = prometheus.spec_decode(*ngram)
    assert (sd.drafts, sd.draft_tokens, sd.accepted) == (34, 94, 94)
    assert sd.acceptance_rate == 1.0
    assert sd.tokens_per_step == pytest.approx(1 + 94 / 34)
    assert sd.per_position_rates == {0: 1.0, 1: pytest.approx(30 / 34), 2: pytest.approx(30 / 34)}
    d = sd.to_dict()
    assert d["per_position_acceptance"] == {"0": 1.0, "1": pytest.approx(30 / 34), "2": pytest.approx(30 / 34)}
    assert d["mean_draft_length"] == pytest.approx(94 / 34)


def test_sums_over_label_sets(two_engines):
    before, after = two_engines
    assert prometheus.generation_tokens(before, after) == 128 + 200
    assert prometheus.delta(before, after, prometheus.GENERATION_TOKENS, engine="1") == 200
    sd = prometheus.spec_decode(before, after)
    assert (sd.drafts, sd.draft_tokens, sd.accepted) == (84, 244, 154)
    assert sd.acceptance_rate == pytest.approx(154 / 244)
    assert sd.tokens_per_step == pytest.approx(1 + 154 / 84)
    assert sd.per_position_rates == {0: pytest.approx(64 / 84), 1: pytest.approx(50 / 84),
                                     2: pytest.approx(40 / 84)}


def test_prefix_cache_and_prefill_deltas(ngram):
    assert prometheus.prefix_cache_hits(*ngram) == 384
    p = prometheus.prefill(*ngram)
    assert p.prompt_tokens == 988
    assert p.prefix_cache_queries == 988
    assert p.prefix_cache_hits == 384
    assert p.prompt_tokens_cached == 384
    assert p.requests == 2
    assert p.server_prefill_s == pytest.approx(5.933770544997628 - 5.7158699989976185)


def test_no_movement_is_zero(ngram):
    before, _ = ngram
    assert prometheus.generation_tokens(before, before) == 0
    assert prometheus.prefix_cache_hits(before, before) == 0
    assert prometheus.spec_decode(before, before).tokens_per_step is None  # no drafts: undefined, not 1


def test_counter_going_back_means_restart(ngram):
    before, after = ngram
    with pytest.raises(prometheus.MetricsError, match="restarted"):
        prometheus.generation_tokens(after, before)
    with pytest.raises(prometheus.MetricsError, match="restarted"):
        prometheus.spec_decode(after, before)


def test_server_without_spec_decode():
    text = (FIX / "vllm-0.32-ngram-after.txt").read_text()
    plain = "\n".join(line for line in text.splitlines() if "spec_decode" not in line) + "\n"
    s = prometheus.parse(plain)
    assert prometheus.spec_decode(s, s) is None
    assert prometheus.generation_tokens(s, s) == 0


def test_missing_generation_counter_is_refused():
    empty = prometheus.parse("# HELP process_cpu_seconds_total x\n# TYPE process_cpu_seconds_total counter\n"
                          "process_cpu_seconds_total 1.0\n")
    with pytest.raises(prometheus.MetricsError, match="generation_tokens_total is missing"):
        prometheus.generation_tokens(empty, empty)


@pytest.mark.parametrize("text", ["<html>502 Bad Gateway</html>", 'vllm:x{a="1"} notanumber'])
def test_unparsable_text(text):
    with pytest.raises(prometheus.MetricsError, match="could not be parsed"):
        prometheus.parse(text)


def test_requests_in_flight(ngram):
    _, after = ngram
    assert prometheus.requests_in_flight(after) == 0
    busy = (FIX / "vllm-0.32-ngram-after.txt").read_text()
    busy = re.sub(r'^(vllm:num_requests_running\{[^}]*\}) 0\.0$', r"\1 3.0", busy, flags=re.M)
    assert prometheus.requests_in_flight(prometheus.parse(busy)) == 3
