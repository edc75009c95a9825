"""The box rollout's rendered command lines (sparkctl/box/contract.py from the host's validated settings): a
transaction is told how long the gateway's routers need to take the box out before its drain; the watchdog's
restart is not (it leaves the routers at once)."""

from __future__ import annotations

import json

from sparkctl.box import contract
from sparkctl.config import groupdata
from sparkctl.config.schema import validate
from sparkctl.render.monitoring import rollout_limits, watchdog_config
from sparkctl.render.units import rollout_values
from tests.render.test_render import settings_for


def test_the_apply_argv_carries_the_routers_wait_from_its_setting():
    cfg = validate({**groupdata.load(["all", "gx10"]), "ROUTER_OUT_WAIT_S": 45})
    argv = contract.argv("apply", rollout_values(cfg), service="coder", port=8000, served="coder", kind="chat")
    assert argv[argv.index("--unready-wait") + 1] == "45"
    shipped = validate(groupdata.load(["all", "gx10"]))
    argv = contract.argv("apply", rollout_values(shipped), service="coder", port=8000, served="coder", kind="chat")
    window = shipped.ROUTER_HEALTH_FAILURE_THRESHOLD * (shipped.ROUTER_HEALTH_INTERVAL_S +
                                                         shipped.ROUTER_HEALTH_TIMEOUT_S)
    assert float(argv[argv.index("--unready-wait") + 1]) >= window  # as shipped it covers the routers' window
    # the transient unit's `run` gets it from `apply`
    parsed = contract.parse(argv)
    run = contract.forward("apply", vars(parsed), txn="t1")
    assert run[run.index("--unready-wait") + 1] == argv[argv.index("--unready-wait") + 1]


def test_the_watchdog_restart_does_not_wait_for_the_routers(gx10_data):
    cfg = settings_for(gx10_data).cfg
    assert "--unready-wait" not in rollout_limits(cfg)
    doc = json.loads(watchdog_config(cfg, settings_for(gx10_data).services))
    assert "--unready-wait" not in doc["rollout_limits"]


def test_no_router_in_front_is_a_wait_of_0(gx10_data):
    """A fleet without a gateway sets ROUTER_OUT_WAIT_S = 0 (accepted by the whole check) and drains at once."""
    cfg = settings_for({**gx10_data, "ROUTER_OUT_WAIT_S": 0}).cfg
    argv = contract.argv("apply", rollout_values(cfg), service="coder", port=8000, served="coder", kind="chat")
    assert argv[argv.index("--unready-wait") + 1] == "0"
