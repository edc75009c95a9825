"""A coder rollout's wall time on paper: one box at a time (a serial rollout) against the waves.

Each unit's rollout is drain + load + acceptance, each a [low, high] range from group data
(ROLLOUT_ESTIMATE_DRAIN_S, _LOAD_S, _ACCEPTANCE_S, each with its source there). Serially the units add up; in
waves a wave lasts as long as its slowest unit, so the waves add up, each between one unit's low and high. The first
rollout of a new build or model (its JIT caches empty on every box) loads for ROLLOUT_ESTIMATE_COLD_LOAD_S instead:
`cold`, the same sum with that load. Each load is set beside the deadline the box's gate gives it (a warm start:
HEALTH_READY_TIMEOUT_S; a cold one: HEALTH_COLD_READY_TIMEOUT_S), and a load that may outlast it is said. Left
out: the control side's own time (facts, operations: measured with pyinfra's @fake connector,
scripts/fleet_control_cost.py), downloads and venv builds (a flip of a model on disk and an unchanged vLLM), and a
tensor-parallel pair's longer start.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkctl.config.schema import GroupData

PHASES = (("drain", "ROLLOUT_ESTIMATE_DRAIN_S"), ("load", "ROLLOUT_ESTIMATE_LOAD_S"),
          ("acceptance", "ROLLOUT_ESTIMATE_ACCEPTANCE_S"))
COLD_LOAD = ("load", "ROLLOUT_ESTIMATE_COLD_LOAD_S")  # a cold start's load, in place of the warm one
DEADLINES = {"ROLLOUT_ESTIMATE_LOAD_S": "HEALTH_READY_TIMEOUT_S",  # the gate's deadline each load is judged by
             "ROLLOUT_ESTIMATE_COLD_LOAD_S": "HEALTH_COLD_READY_TIMEOUT_S"}


@dataclass(frozen=True)
class Phase:
    name: str
    setting: str
    low_s: float
    high_s: float


@dataclass(frozen=True)
class Deadline:
    """The gate's deadline a load is judged by: past it the box rolls the start back."""
    load_setting: str
    setting: str
    seconds: float
    load_high_s: float

    @property
    def outlasted(self) -> bool:
        return self.load_high_s > self.seconds


@dataclass(frozen=True)
class RolloutEstimate:
    units: int
    waves: int
    phases: tuple[Phase, ...]
    cold: RolloutEstimate | None = None  # the first rollout of a new build or model (None: this is that one)
    deadlines: tuple[Deadline, ...] = ()

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
    def phases_of(table) -> tuple[Phase, ...]:
        return tuple(Phase(name, setting, *map(float, getattr(cfg, setting))) for name, setting in table)

    units, n = sum(len(w) for w in waves), len(waves)
    warm = phases_of(PHASES)
    cold = RolloutEstimate(units, n, phases_of([COLD_LOAD if name == "load" else (name, s) for name, s in PHASES]))
    # the box never gives a cold start less than a warm one (readiness_gate.deadline_of)
    seconds = {"HEALTH_READY_TIMEOUT_S": cfg.HEALTH_READY_TIMEOUT_S,
               "HEALTH_COLD_READY_TIMEOUT_S": max(cfg.HEALTH_READY_TIMEOUT_S, cfg.HEALTH_COLD_READY_TIMEOUT_S)}
    deadlines = tuple(Deadline(load, gate, float(seconds[gate]), float(max(getattr(cfg, load))))
                      for load, gate in DEADLINES.items())
    return RolloutEstimate(units, n, warm, cold, deadlines)


def hours(seconds: float) -> str:
    """1,800 s -> "30 min"; 9,000 s -> "2.5 h"."""
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"
