"""The acceptance verdict's limits (group data ACCEPTANCE_*), typed once: what acceptance.py judges with and what
reference.py gives each reference it chooses. Its own module so neither imports the other for it."""

from __future__ import annotations

from dataclasses import dataclass

LIMITS = ("decode_max_regression", "prefill_max_regression", "kv_max_shortfall", "previous_decode_max_regression",
          "previous_prefill_max_regression", "published_decode_max_regression", "published_prefill_max_regression",
          "anchor_decode_max_regression", "anchor_prefill_max_regression", "roofline_floor_fraction",
          "spec_floor_fraction", "spec_min_tokens_per_step", "pair_min_speedup")


@dataclass(frozen=True)
class Thresholds:
    mode: str = "fail"
    spec: bool = True
    spec_floor_fraction: float = 0.6
    spec_min_tokens_per_step: float = 1.1  # below: the draft costs more than it gives, floor or no floor
    decode: bool = True
    decode_max_regression: float = 0.15  # against this configuration's baseline
    prefill: bool = True
    prefill_max_regression: float = 0.15
    kv: bool = True
    kv_max_shortfall: float = 0.25
    niah: bool = True
    fail_on_problems: bool = True
    previous_decode_max_regression: float = 0.15  # against the closest previous build's or revision's baseline
    previous_prefill_max_regression: float = 0.15
    published_decode_max_regression: float = 0.3  # against the catalog's published figures, as the moving reference
    published_prefill_max_regression: float = 0.3
    anchor_decode_max_regression: float = 0.35  # cumulative: against the box's anchor and the published figures
    anchor_prefill_max_regression: float = 0.35
    roofline_floor_fraction: float = 0.05  # of the roofline, with nothing measured to compare with; 0: off
    pair_min_speedup: float = 1.0  # a tensor-parallel pair against one box of the same model; 0: accepted as it is

    @classmethod
    def from_settings(cls, cfg) -> "Thresholds":
        """cfg: the typed settings (sparkctl.config.schema.GroupData): every value already checked there."""
        flags = {f: getattr(cfg, f"ACCEPTANCE_{f.upper()}_ENABLED")
                 for f in ("spec", "decode", "prefill", "kv", "niah")}
        limits = {f: float(getattr(cfg, f"ACCEPTANCE_{f.upper()}")) for f in LIMITS}
        return cls(mode=cfg.ACCEPTANCE_MODE, **flags, **limits, fail_on_problems=cfg.ACCEPTANCE_FAIL_ON_PROBLEMS)
