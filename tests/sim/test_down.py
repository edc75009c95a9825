"""`sim down` leaves nothing running from the simulated Spark's state (without booting one: processes that name a
stand-in state directory, and one that does not)."""

import subprocess
import sys

from sparkctl.sim import api, config

SLEEPER = "import time; time.sleep(300)"


def test_down_ends_what_still_runs_from_the_sim_state_and_nothing_else(tmp_path, monkeypatch):
    state, elsewhere = tmp_path / ".sim", tmp_path / "other"
    monkeypatch.setattr(config, "SIM_DIR", state)
    left = subprocess.Popen([sys.executable, "-c", SLEEPER, str(state / "nvidia-gnupg")])
    bystander = subprocess.Popen([sys.executable, "-c", SLEEPER, str(elsewhere)])
    try:
        assert api.left_running() == [left.pid]  # this test's own process (an ancestor) is spared
        assert api._kill_left_running() == []  # ended by SIGTERM: nothing to note
        assert left.wait(timeout=10) is not None and api.left_running() == []
        assert bystander.poll() is None
    finally:
        for p in (left, bystander):
            p.kill()
            p.wait()
