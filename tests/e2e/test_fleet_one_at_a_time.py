"""The simulated fleet (tests/e2e/fleet.py) flipped one box at a time, the defaults for a pool of three, with a
request every 0.5 s through the router and every box's router health path sampled beside it: to Laguna with
spark-3's serving coder SIGKILLed the moment spark-2's wave begins (one box out for its rollout, one dead), then back.
The router takes the dead box out within its health window, systemd restarts it, and its own wave rolls it out."""

from __future__ import annotations

import time

import pytest

from tests.e2e.conftest import pyinfra_popen, record, sim_exec
from tests.e2e.fleet import LAGUNA, Front, Traffic, assert_served_throughout, fleet, flip
from tests.e2e.helpers import wait_for

# the join of spark-3 and the gateway (~360 s) and two flips one box at a time (~550 s)
pytestmark = [pytest.mark.scenario("fleet"), pytest.mark.e2e_extended(cost_s=950)]
__all__ = ["fleet"]  # the module's own fleet (a module-scoped fixture)


def test_one_box_at_a_time_with_a_box_killed_mid_wave(fleet):
    """The flip to Laguna one box at a time with spark-3's coder killed in spark-2's wave, then back one at a time
    (a plain deploy): never the whole pool out, one box out on purpose at a time, no request failed in the flip back."""
    killed = _flip_killing_a_box(fleet)
    back = flip(fleet, "fleet flip back to qwen one box at a time (plain deploy)")
    assert_served_throughout("fleet flip back to qwen one box at a time", back, limit=1)
    assert killed.out_on_purpose() <= 1, killed.summary()  # one wave's box at a time
    assert killed.taken_out_while_serving(spare=("spark-3",)) == {}, killed.summary()


def _flip_killing_a_box(fleet: Front) -> Traffic:
    """The flip to Laguna one box at a time; SIGKILL spark-3's coder as spark-2 leaves the routers (its wave)."""
    label = "fleet flip to laguna one box at a time (spark-3's coder SIGKILLed in wave 2)"
    unready = f"{fleet.spark.data['DRAIN_DIR']}/coder.unready.conf"
    with Traffic(fleet) as traffic:
        t0 = time.monotonic()
        proc = pyinfra_popen(*LAGUNA)
        wait_for(lambda: proc.poll() is not None or sim_exec("spark-2", f"test -e {unready} && echo y || true").strip(),
                 1800, "spark-2's wave (its router health path failing)", interval=0.5)
        sim_exec("spark-3", "systemctl kill -s KILL vllm-coder.service")
        killed = time.monotonic()
        output, _ = proc.communicate(timeout=2400)
        seconds = time.monotonic() - t0
    record(label, seconds)
    out = next((t for t, codes, _s in traffic.health.samples if t > killed and codes["spark-3"] != 200), None)
    print(f"{label}: {seconds:.1f} s; {traffic.summary()}")
    assert proc.returncode == 0, output[-6000:]  # a serving box that died is no failed rollout: its wave rolls it out
    assert out is not None and out - killed < 5, out  # a dead engine: its health path fails at once (502)
    failed = traffic.errors()
    record(f"fleet: requests through the router while spark-2 rolled out and spark-3's coder was killed: "
           f"{len(failed)} of {len(traffic.results)} failed", len(failed), "n")
    assert len(failed) <= 2, failed  # only requests the dead engine held, or sent before the router saw it
    assert all(b in output for b in ("wave 2 of 3 (spark-2)", "wave 3 of 3 (spark-3)")), output[-3000:]
    return traffic


