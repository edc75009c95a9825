"""What production measured, from the catalog, set beside the plan's estimate: the KV capacity vLLM reported (as
tokens, or as concurrent full-context requests where the source gives no token count), the bench probe's decode
rate, where they were published, and which layer facts were calibrated to them.

A measurement belongs to the checkpoint it was taken on (MemoryFacts.measured_on): a stand-in checkpoint under the
same catalog key (the simulated Spark) inherits none of it. It is for one box: a tensor-parallel engine was never
measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sparkctl.capacity.kv import KvCapacity
from sparkctl.config.catalog import ModelSpec


@dataclass(frozen=True)
class Measured:
    engine_kv_tokens: int | None = None  # "GPU KV cache size: N tokens" for this budget on one box
    engine_concurrency: float | None = None  # concurrent max-context requests, when the source gives only that
    decode_tokens_per_s: float | None = None  # bench probe, single stream
    source: str | None = None  # where the figures were published
    calibrated: dict = field(default_factory=dict)  # {layer fact: why} calibrated to these figures

    @property
    def capacity_known(self) -> bool:
        return bool(self.engine_kv_tokens or self.engine_concurrency)


def _at_budget(table: dict, kv_gib: float) -> float | None:
    for budget, value in (table or {}).items():
        try:
            if abs(float(budget) - kv_gib) < 1e-6 and float(value) > 0:
                return float(value)
        except (TypeError, ValueError):
            continue
    return None


def measured_for(spec: ModelSpec, kv_gib: float, tp: int, draft_layers: int) -> Measured:
    """The catalog's production figures for this checkpoint at this KV budget (nothing for a stand-in or tp > 1).

    draft_layers: the draft layers the plan's pool holds (a calibrated draft_attention_layers counts only then).
    """
    m = spec.memory
    if tp != 1 or m.measured_on not in ("", spec.checkpoint.repo):
        return Measured()
    tokens = _at_budget(m.measured_kv_tokens, kv_gib)
    concurrency = None if tokens else _at_budget(m.measured_concurrency, kv_gib)
    calibrated = {k: v for k, v in (m.calibrated or {}).items() if k != "draft_attention_layers" or draft_layers}
    return Measured(engine_kv_tokens=int(tokens) if tokens else None, engine_concurrency=concurrency,
                    decode_tokens_per_s=m.measured_decode_tokens_per_s or None,
                    source=m.measured_source or None, calibrated=calibrated)


def disagreement(cap: KvCapacity, measured: Measured, tolerance: float) -> str | None:
    """Why the estimate disagrees with the measurement by more than tolerance (PLAN_MEASURED_TOLERANCE), or None."""
    if measured.engine_kv_tokens:
        est, meas, what = cap.tokens, measured.engine_kv_tokens, "KV tokens"
        est_text, meas_text = f"{est:,}", f"{meas:,}"
    elif measured.engine_concurrency:
        est, meas, what = cap.concurrency, measured.engine_concurrency, "concurrent requests"
        est_text, meas_text = f"{est:.2f}", f"{meas:g}"
    else:
        return None
    gap = abs(est - meas) / meas
    if gap <= tolerance:
        return None
    return (f"estimate {est_text} {what} is {gap:.0%} from the measured {meas_text} (beyond PLAN_MEASURED_TOLERANCE, "
            f"{tolerance:.0%}): check the layer facts in sparkctl/config/catalog.py")
