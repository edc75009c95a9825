"""What vLLM itself says about its KV cache, read back after a rollout and set beside the capacity plan.

Two sources, both pure text in, numbers out (the deploy's health step fetches them from the box):

* the startup log (journal of the vllm-* unit). Two formats exist, both with thousands separators, and a device
  prefix that is "GPU" on CUDA and "CPU" on the CPU build:
      older, two lines:  GPU KV cache size: 342,144 tokens
                         Maximum concurrency for 262,144 tokens per request: 1.31x
      newer, one line:   GPU KV cache size: 1,014,892 tokens, Maximum concurrency for 262,144 tokens per request: 3.87x
  For hybrid models the token count is group-aware (concurrency x max_model_len), which is what the planner's
  engine_kv_tokens_estimate predicts. A log holding several starts is read from its last one.
* /metrics: the info gauge vllm:cache_config_info carries the CacheConfig fields as labels. vLLM 0.32 has
  kv_cache_size_tokens and kv_cache_max_concurrency there (the same group-aware figures as the log); older ones
  only num_gpu_blocks and block_size, whose product counts raw token slots (the planner's
  engine_kv_token_slots_estimate), which for a hybrid model is more than the group-aware figure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_NUM = r"([0-9][0-9,_]*)"
KV_SIZE_RE = re.compile(r"\b(?:[A-Z]{2,5} )?KV cache size:\s*" + _NUM + r"\s*tokens")
CONCURRENCY_RE = re.compile(r"Maximum concurrency for\s*" + _NUM
                            + r"\s*tokens per request:\s*([0-9][0-9,]*(?:\.[0-9]+)?)x")
KV_MEMORY_RE = re.compile(r"Available KV cache memory:\s*([0-9.]+)\s*GiB"
                          r"|reserved\s+([0-9.]+)\s*GiB memory for KV Cache")
INFO_METRIC = "vllm:cache_config_info"


def _int(text: str) -> int:
    return int(text.replace(",", "").replace("_", ""))


@dataclass(frozen=True)
class LogCapacity:
    tokens: int | None  # "GPU KV cache size: N tokens"
    max_concurrency: float | None  # "Maximum concurrency for L tokens per request: X x"
    per_request_tokens: int | None  # L
    kv_memory_gib: float | None = None  # "Available KV cache memory" / "reserved ... for KV Cache", when logged


def parse_log(log_text: str) -> LogCapacity:
    """The last KV capacity vLLM logged (either format); fields are None when a line is absent."""
    tokens = conc = per_req = mem = None
    for m in KV_SIZE_RE.finditer(log_text or ""):
        tokens = _int(m.group(1))
    for m in CONCURRENCY_RE.finditer(log_text or ""):
        per_req, conc = _int(m.group(1)), float(m.group(2).replace(",", ""))
    for m in KV_MEMORY_RE.finditer(log_text or ""):
        mem = float(m.group(1) or m.group(2))
    return LogCapacity(tokens=tokens, max_concurrency=conc, per_request_tokens=per_req, kv_memory_gib=mem)


def parse_kv_capacity(log_text: str) -> tuple[int | None, float | None, int | None]:
    """(tokens, max_concurrency, per_request_tokens) from vLLM's startup log; None for what it does not say."""
    cap = parse_log(log_text)
    return cap.tokens, cap.max_concurrency, cap.per_request_tokens


@dataclass(frozen=True)
class MetricsCapacity:
    tokens: int | None  # group-aware tokens when labelled, else num_gpu_blocks x block_size
    group_aware: bool  # True: kv_cache_size_tokens (compare with the log); False: raw slots
    num_gpu_blocks: int | None
    block_size: int | None
    max_concurrency: float | None


def _label_int(labels: dict, name: str) -> int | None:
    try:
        value = float(labels.get(name, ""))
    except ValueError:  # "None" before the engine has sized its cache
        return None
    return int(value) if value > 0 else None


def kv_capacity_from_metrics(metrics_text: str, engine: str | None = None) -> MetricsCapacity | None:
    """The KV capacity in vllm:cache_config_info (the first engine, or the one named); None when it is absent."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(metrics_text or ""):
        for sample in family.samples:
            if sample.name != INFO_METRIC or (engine is not None and sample.labels.get("engine") != engine):
                continue
            labels = sample.labels
            blocks, block_size = _label_int(labels, "num_gpu_blocks"), _label_int(labels, "block_size")
            tokens = _label_int(labels, "kv_cache_size_tokens")
            try:
                conc = float(labels["kv_cache_max_concurrency"])
            except (KeyError, ValueError):
                conc = None
            if tokens is not None:
                return MetricsCapacity(tokens, True, blocks, block_size, conc)
            if blocks is not None and block_size is not None:
                return MetricsCapacity(blocks * block_size, False, blocks, block_size, conc)
            return MetricsCapacity(None, False, blocks, block_size, conc)
    return None


def kv_tokens_from_metrics(metrics_text: str) -> int | None:
    """KV tokens from /metrics text: kv_cache_size_tokens, else num_gpu_blocks x block_size; None when absent."""
    cap = kv_capacity_from_metrics(metrics_text)
    return cap.tokens if cap else None


def compare_planned_measured(planned_tokens: int | None, measured_tokens: int | None,
                             tolerance: float) -> str | None:
    """A warning naming both numbers when vLLM's figure is more than `tolerance` (a fraction) from the plan."""
    if not planned_tokens or measured_tokens is None:
        return None
    gap = (measured_tokens - planned_tokens) / planned_tokens
    if abs(gap) <= tolerance:
        return None
    direction = "fewer" if gap < 0 else "more"
    return (f"KV cache: planned {planned_tokens:,} tokens, vLLM reports {measured_tokens:,} "
            f"({abs(gap):.0%} {direction}, beyond the {tolerance:.0%} tolerance of PLAN_MEASURED_TOLERANCE): "
            f"the KV budget on the box or the memory facts in sparkctl/config/catalog.py do not match what runs")


@dataclass(frozen=True)
class Comparison:
    line: str  # "planned vs measured", always printed
    warning: str | None  # compare_planned_measured's warning, or None
    planned_tokens: int | None
    measured_tokens: int | None
    measured_from: str | None  # "log" | "metrics" | None


def compare_with_plan(plan, log_text: str | None = None, metrics_text: str | None = None,
                      tolerance: float = 0.25) -> Comparison:
    """Planned (a planner.ModelPlan) vs what one vLLM engine reported, the log preferred over /metrics.

    The log's and kv_cache_size_tokens' counts are compared with the plan's engine_kv_tokens_estimate; an older
    vLLM's num_gpu_blocks x block_size with engine_kv_token_slots_estimate.
    """
    cap = plan.capacity
    log = parse_log(log_text) if log_text else None
    planned = cap.tokens if cap else None
    measured = source = None
    conc = None
    if log and log.tokens is not None:
        measured, source, conc = log.tokens, "log", log.max_concurrency
    elif metrics_text:
        mc = kv_capacity_from_metrics(metrics_text)
        if mc and mc.tokens is not None:
            measured, source, conc = mc.tokens, "metrics", mc.max_concurrency
            if not mc.group_aware:
                planned = cap.token_slots if cap else None
    planned_text = (f"{planned:,} tokens ({cap.concurrency:.2f} x {plan.max_context:,}, estimate)"
                    if planned is not None else "unknown")
    if measured is None:
        line = f"KV cache of {plan.name}: planned {planned_text}; vLLM reported no KV cache size"
        return Comparison(line, None, planned, None, None)
    conc_text = f", {conc:.2f} x" if conc is not None else ""
    line = f"KV cache of {plan.name}: planned {planned_text}; measured {measured:,} tokens{conc_text} ({source})"
    return Comparison(line, compare_planned_measured(planned, measured, tolerance), planned, measured, source)
