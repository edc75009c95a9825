"""The gateway step against pyinfra's @fake connector: a host of the `gateway` group gets the router, its units and
the nginx front + bridge, and nothing of a box's deploy; the boxes' own deploy is the same with or without it."""

from __future__ import annotations

import pytest

from tests.conftest import API_TOKEN, SCRAPE_TOKEN
from tests.deploy.test_deploy_fake import changes, run_fake

GW = "@fake/gateway"


def fake_with(kind: str, tmp, gateway: str | None) -> dict:
    mp = pytest.MonkeyPatch()
    mp.setenv("SPARKCTL_TEST_HANDOFF", str(tmp / "handoff"))
    if gateway:
        mp.setenv("FAKE_GATEWAY", gateway)
    else:
        mp.delenv("FAKE_GATEWAY", raising=False)
    try:
        return run_fake(kind, tmp)
    finally:
        mp.undo()


@pytest.fixture(scope="module")
def gw_tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("gw")


@pytest.fixture(scope="module")
def with_gw(gw_tmp):
    return fake_with("dgx", gw_tmp, "1")


def test_the_gateway_host_runs_the_gateway_step_and_nothing_else(with_gw):
    assert GW not in with_gw["failed_hosts"], with_gw["log"][-3000:]  # (the box fails its health: no box answers)
    ops = with_gw["ops_by_host"][GW]
    assert ops[0] == "Fleet | Every box's steps before the gateway's"  # the one operation it shares with the boxes
    assert ops[1:] and all(o.startswith("Gateway: vLLM's router | ") for o in ops[1:]), ops
    cmds = "\n".join(changes({"commands": with_gw["by_host"][GW]}))
    assert "vllm-router==0.1.17" in cmds and "/opt/sparkctl-router/venvs/vllm-router-0.1.17" in cmds
    assert "sparkctl-router-coder.service" in cmds and "nginx -t -q" in cmds
    for other in ("nvidia", "vllm serve", "rollout.py", "fetch_checkpoint"):
        assert other not in cmds, other
    assert API_TOKEN not in "\n".join(with_gw["commands"]) and SCRAPE_TOKEN not in "\n".join(with_gw["commands"])


def test_every_gateway_operation_runs_after_every_box_operation(with_gw):
    """pyinfra orders each host's chain of operations; chains sharing no operation interleave (the routers then
    waited for boxes that did not serve yet). The shared barrier puts the whole gateway step after the boxes'."""
    started = [ln.split("Starting operation: ", 1)[1].strip() for ln in with_gw["log"].splitlines()
               if "Starting operation: " in ln]
    gateway = [i for i, op in enumerate(started) if op.startswith("Gateway: vLLM's router | ")]
    boxes = [i for i, op in enumerate(started) if not op.startswith(("Gateway: vLLM's router | ", "Fleet | "))]
    assert gateway and boxes and min(gateway) > max(boxes), (started[:5], len(started))


def test_a_box_deploys_the_same_with_or_without_a_gateway(with_gw, tmp_path):
    """The boxes' commands do not change when a gateway joins the inventory (same secrets folder: same PKI)."""
    without = fake_with("dgx", tmp_path, None)
    again = fake_with("dgx", tmp_path, "1")
    assert again["by_host"]["@fake/gx10"] == without["by_host"]["@fake/gx10"]
    assert again["ops_by_host"]["@fake/gx10"] == without["ops_by_host"]["@fake/gx10"]


def test_a_box_that_is_also_the_gateway_runs_both(tmp_path):
    out = fake_with("dgx", tmp_path, "box")
    assert "Traceback" not in out["log"], out["log"][-3000:]
    ops = out["ops_by_host"]["@fake/gx10"]
    assert any(o.startswith("TLS proxy | ") for o in ops) and any(o.startswith("Gateway: vLLM's router | ")
                                                                  for o in ops)
    # the box's proxy step owns the distribution's default site; the gateway's step leaves it alone
    assert not any(o.startswith("Gateway: vLLM's router | Disable the distribution's default site") for o in ops)


def test_the_gateway_records_the_one_url_and_the_routers_scrape_job(with_gw, gw_tmp):
    import json

    import yaml

    doc = json.loads((gw_tmp / "handoff" / "router.json").read_text())
    assert doc["models"]["coder"]["base_url"] == "https://@fake/gateway:443/coder/v1"
    assert doc["models"]["coder"]["boxes"] == ["@fake/gx10"]
    jobs = yaml.safe_load((gw_tmp / "handoff" / "prometheus-scrape.yml").read_text())
    router_job = next(j for j in jobs if j["job_name"] == "sparkctl-router")
    paths = sorted(g["labels"]["__metrics_path__"] for g in router_job["static_configs"])
    assert paths == sorted(f"/router/{s}{r}/metrics" for s in ("coder", "embed-bge-m3", "embed-qwen3")
                           for r in ("", "/standby"))
    assert router_job["authorization"]["credentials_file"] and router_job["tls_config"]["ca_file"]
