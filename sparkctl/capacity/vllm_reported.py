"""What vLLM itself says about its KV cache, read back after a rollout and set beside the capacity plan.

Its startup log (the journal of the vllm-* unit, which the deploy's health step fetches) is pure text in, numbers
out. Two formats exist, both with thousands separators, and a device prefix that is "GPU" on CUDA and "CPU" on the
CPU build:
      older, two lines:  GPU KV cache size: 342,144 tokens
                         Maximum concurrency for 262,144 tokens per request: 1.31x
      newer, one line:   GPU KV cache size: 1,014,892 tokens, Maximum concurrency for 262,144 tokens per request: 3.87x
For hybrid models the token count is group-aware (concurrency x max_model_len), which is what the plan's
engine_kv_tokens_estimate predicts. A log holding several starts is read from its last one.
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
    warning: str | None  # compare_planned_measured's warning, or None
    planned_tokens: int | None  # the plan's engine_kv_tokens_estimate
    measured_tokens: int | None  # "GPU KV cache size: N tokens" (None: not logged)


def compare_with_plan(plan, log_text: str | None, tolerance: float) -> Comparison:
    """Planned (a plan.ModelPlan) vs what one vLLM engine logged at startup; tolerance: PLAN_MEASURED_TOLERANCE."""
    planned = plan.capacity.tokens if plan.capacity else None
    measured = parse_log(log_text).tokens if log_text else None
    return Comparison(compare_planned_measured(planned, measured, tolerance), planned, measured)
