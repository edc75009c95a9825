"""scripts/fleet_control_cost.py (the control side's cost of a fleet's deploy, cited in docs/measured.md and docs/waves.md) still runs
the real deploy.py through the @fake stand-ins: every operation of a box is prepared, and the run stops where the
script says it does, at the health step no fake box can pass."""

from __future__ import annotations

import importlib.util

from sparkctl import REPO_ROOT


def test_the_control_side_cost_script_runs_the_whole_deploy():
    spec = importlib.util.spec_from_file_location("fleet_control_cost", REPO_ROOT / "scripts" / "fleet_control_cost.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    one = script.run(1)
    assert one["operations"] > 50 and one["commands"] > 200, one  # a box's whole deploy up to its health step
    assert one["error"] == "No hosts remaining!"  # where it stops: no fake box passes the health check
