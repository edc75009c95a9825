"""WaveGate: the state machine the deploy's rollout step drives while it runs the waves, from every host's greenlet.

    gate = rollout_gate(plan_waves(..., with_work=work), work, active, cfg.MAX_FAIL_PERCENTAGE)
    # in each host's rollout with something to roll out, before its service is touched:
    d = wait_turn(gate, box, lambda: gevent.sleep(poll_s))  # WAIT until its wave: GO or STOP
    if d is Decision.STOP: leave the box alone               # the budget was spent
    else: roll out, then gate.record(box, ok)                # a failed box has rolled itself back

A wave may start when every unit of the waves before it has a result; a unit (a box, or a tensor-parallel pair,
whose two boxes each report) has a result when each of its boxes has recorded one. A box with nothing to roll out
is not in the gate at all (rollout_gate keeps only the boxes with work that are still active), so it neither waits
nor holds a wave back, and a converge that restarts nothing is not slowed. Failure budget: a wave has spent it when
its failed units exceed MAX_FAIL_PERCENTAGE of its units (Ansible's max_fail_percentage: 0 stops at the first
failure); that is decided as soon as no later result could bring it back under, and then no box not yet started is
touched (`may_start` says STOP) and `not_rolled_out` names them. A box the gate does not know (not in the waves:
--limit left it out, or it has nothing to roll out) is refused.

Pure: no clock and no I/O; its methods never yield, so greenlets need no lock.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

from sparkctl.errors import SparkctlError

Unit = tuple[str, ...]
OK, FAILED = "ok", "failed"


class Decision(Enum):
    GO = "go"  # start this box's rollout now
    WAIT = "wait"  # an earlier wave is still running
    STOP = "stop"  # the failure budget is spent: do not touch this box


class WaveGate:
    def __init__(self, waves: list[list[Unit]], max_fail_percentage: float):
        self.waves = [list(w) for w in waves if w]
        self.max_fail_percentage = float(max_fail_percentage)
        self._unit = {b: u for wave in self.waves for u in wave for b in u}
        self._wave = {u: i for i, wave in enumerate(self.waves) for u in wave}
        self._results: dict[str, str] = {}  # box -> OK | FAILED
        self._started: set[Unit] = set()
        self.stopped_at: int | None = None  # the wave whose failures spent the budget

    # --- what the glue calls ----------------------------------------------------------------------------------------
    def record(self, box: str, ok: bool) -> None:
        unit = self._known(box)
        self._results[box] = OK if ok else FAILED
        self._started.add(unit)
        wave = self._wave[unit]
        if not self.stopped and self._budget_spent(wave):
            self.stopped_at = wave

    def may_start(self, box: str) -> Decision:
        unit = self._known(box)
        if unit in self._started:
            return Decision.GO
        if self.stopped:
            return Decision.STOP
        if self._wave[unit] > self.current_wave:
            return Decision.WAIT
        self._started.add(unit)
        return Decision.GO

    def wave_of(self, box: str) -> tuple[list[str], int]:
        """The boxes of this box's wave, and its number from 1: for the log."""
        index = self._wave[self._known(box)]
        return [b for u in self.waves[index] for b in u], index + 1

    # --- state ------------------------------------------------------------------------------------------------------
    @property
    def current_wave(self) -> int:
        """The first wave with a unit still without a result (len(waves) when all have one)."""
        for i, wave in enumerate(self.waves):
            if any(self.unit_result(u) is None for u in wave):
                return i
        return len(self.waves)

    @property
    def stopped(self) -> bool:
        return self.stopped_at is not None

    @property
    def done(self) -> bool:
        return self.stopped or self.current_wave == len(self.waves)

    def unit_result(self, unit: Unit) -> str | None:
        results = [self._results.get(b) for b in unit]
        if None in results:
            return None
        return FAILED if FAILED in results else OK

    def failed(self) -> list[str]:
        return [b for b, r in self._results.items() if r == FAILED]

    def not_rolled_out(self) -> list[str]:
        """Boxes left untouched because the budget was spent (none while it is not)."""
        if not self.stopped:
            return []
        return [b for wave in self.waves for u in wave if u not in self._started for b in u]

    # --- internals --------------------------------------------------------------------------------------------------
    def _known(self, box: str) -> Unit:
        if box not in self._unit:
            raise SparkctlError(f"the rollout's waves have no box {box!r} (waves: {self.waves})")
        return self._unit[box]

    def _budget_spent(self, index: int) -> bool:
        """Failed units over the wave's units (an upper bound until all have reported) exceed the budget: no later
        result can bring it back under."""
        results = [self.unit_result(u) for u in self.waves[index]]
        failed = results.count(FAILED)
        return failed > 0 and failed * 100 > self.max_fail_percentage * len(results)


def wait_turn(gate: WaveGate, box: str, sleep: Callable[[], None]) -> Decision:
    """GO or STOP for this box, calling sleep() (the glue's: a greenlet's gevent.sleep) while its wave must wait."""
    while (decision := gate.may_start(box)) is Decision.WAIT:
        sleep()
    return decision


def rollout_gate(waves: list[list[Unit]], work: set[str], active: set[str], max_fail_percentage: float) -> WaveGate:
    """The gate one service's rollout op passes, over the waves plan_waves(..., with_work=work) gave: each unit cut
    down to its boxes that run this op (a tensor-parallel pair's worker only follows its head, so the head alone
    reports for the pair) and are still active (a box that failed an earlier step never reaches the gate, and must
    not hold its wave back)."""
    kept = [[tuple(b for b in unit if b in work and b in active) for unit in wave] for wave in waves]
    return WaveGate([[u for u in wave if u] for wave in kept], max_fail_percentage)


def describe_stop(gate: WaveGate, setting: str = "MAX_FAIL_PERCENTAGE") -> str:
    """Why a box is left alone once the budget is spent, naming the failed boxes and every box not rolled out."""
    return (f"wave {(gate.stopped_at or 0) + 1} of {len(gate.waves)} failed on {', '.join(gate.failed()) or '?'} "
            f"(each rolled itself back), beyond {setting} = {gate.max_fail_percentage:g} %: no further box is "
            f"touched; not rolled out: {', '.join(gate.not_rolled_out()) or 'none'}")
