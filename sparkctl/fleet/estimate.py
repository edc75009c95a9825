"""A coder rollout's wall time on paper: one box at a time (a serial rollout) against the waves.

Each unit's rollout is drain + load + acceptance, each a [low, high] range from group data
(ROLLOUT_ESTIMATE_DRAIN_S, _LOAD_S, _ACCEPTANCE_S, each with its source there). Serially the units add up; in
waves a wave lasts as long as its slowest unit, so the waves add up, each between one unit's low and high. Left
out: the control side's own time (facts, operations: measured with pyinfra's @fake connector,
scripts/fleet_control_cost.py), downloads and venv builds (a flip of a model on disk and an unchanged vLLM), and a
tensor-parallel pair's longer start.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkctl.config.schema import GroupData

PHASES = (("drain", "ROLLOUT_ESTIMATE_DRAIN_S"), ("load", "ROLLOUT_ESTIMATE_LOAD_S"),
          ("acceptance", "ROLLOUT_ESTIMATE_ACCEPTANCE_S"))


@dataclass(frozen=True)
class Phase:
    name: str
    setting: str
    low_s: float
    high_s: float


@dataclass(frozen=True)
class RolloutEstimate:
    units: int
    waves: int
    phases: tuple[Phase, ...]

    @property
    def per_unit_s(self) -> tuple[float, float]:
        return sum(p.low_s for p in self.phases), sum(p.high_s for p in self.phases)

    @property
    def serial_s(self) -> tuple[float, float]:
        low, high = self.per_unit_s
        return low * self.units, high * self.units

    @property
    def waves_s(self) -> tuple[float, float]:
        low, high = self.per_unit_s
        return low * self.waves, high * self.waves


def estimate(cfg: GroupData, waves: list[list]) -> RolloutEstimate:
    phases = tuple(Phase(name, setting, *map(float, getattr(cfg, setting))) for name, setting in PHASES)
    return RolloutEstimate(units=sum(len(w) for w in waves), waves=len(waves), phases=phases)


def hours(seconds: float) -> str:
    """1,800 s -> "30 min"; 9,000 s -> "2.5 h"."""
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"
