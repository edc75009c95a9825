"""`python -m sparkctl plan` shows the fleet: placement, memory per box, capacity per pool with provenance, the
waves and the wall-time estimate, as a table and as JSON (schema sparkctl.fleet/1); what-ifs --boxes and --pools."""

from __future__ import annotations

import json

import pytest

from sparkctl.__main__ import main
from sparkctl.fleet import estimate, overview


@pytest.fixture(autouse=True)
def no_inventory(monkeypatch):
    monkeypatch.setenv("GX10_HOSTS", "")
    monkeypatch.setattr("sparkctl.config.hosts.SIM_HOSTS_FILE", "/nonexistent")
    monkeypatch.setattr("sparkctl.config.hosts.sim_hosts", lambda *a, **k: [])


def plan_json(capsys, *args) -> dict:
    assert main(["plan", "--no-local-config", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_keeps_the_capacity_plan_and_adds_the_fleet(capsys):
    out = plan_json(capsys, "--pools", "qwen3.8-27b=3,laguna-s-2.1=1")
    assert out["schema"] == "sparkctl.plan/1" and out["models"]  # the capacity plan, unchanged
    fleet = out["fleet"]
    assert fleet["schema"] == "sparkctl.fleet/1" and fleet["hosts"] == ["spark-1", "spark-2", "spark-3", "spark-4"]
    assert [(p["name"], p["boxes"], p["served_name"]) for p in fleet["pools"]] == [
        ("qwen3.8-27b", ["spark-1", "spark-2", "spark-3"], "coder"), ("laguna-s-2.1", ["spark-4"], "laguna-s-2.1")]
    qwen = fleet["pools"][0]["capacity"]
    assert qwen["concurrent_requests"] == pytest.approx(11.61, abs=0.01)
    assert qwen["decode_tokens_per_s"]["8"] == 366.0 and "Finding 2" in qwen["decode_source"]
    assert [b["headroom_gib"] for b in fleet["boxes"]] == [26.0, 26.0, 26.0, 8.0]
    assert fleet["rollout"]["waves"] == [["spark-1"], ["spark-2"], ["spark-3", "spark-4"]]


def test_the_default_is_todays_single_box(capsys):
    fleet = plan_json(capsys)["fleet"]
    assert fleet["topology"] == "replicas" and fleet["hosts"] == ["gx10"]
    assert fleet["boxes"][0]["role"] == "single" and fleet["rollout"]["waves"] == [["gx10"]]


def test_thirty_two_boxes_on_paper(capsys):
    rollout = plan_json(capsys, "--boxes", "32")["fleet"]["rollout"]
    assert [len(w) for w in rollout["waves"]] == [1, 8, 8, 8, 7]
    est = rollout["estimate"]
    # one box: drain 0-660 + load 120-900 + acceptance 120-240 s; 32 serially against 5 waves
    assert est["per_unit_s"] == [240.0, 1800.0]
    assert est["serial_s"] == [32 * 240.0, 32 * 1800.0] and est["waves_s"] == [5 * 240.0, 5 * 1800.0]
    # a new build's first rollout: load 1020-1569 s (ROLLOUT_ESTIMATE_COLD_LOAD_S) in place of the warm one
    cold = est["cold"]
    assert [p["setting"] for p in cold["phases"]][1] == "ROLLOUT_ESTIMATE_COLD_LOAD_S"
    assert cold["per_unit_s"] == [1140.0, 2469.0] and cold["waves_s"] == [5 * 1140.0, 5 * 2469.0]
    # each load beside the deadline the box's gate gives it: neither load outlasts it
    assert [(d["setting"], d["seconds"], d["load_high_s"], d["outlasted"]) for d in est["deadlines"]] == \
        [("HEALTH_READY_TIMEOUT_S", 1800, 900, False), ("HEALTH_COLD_READY_TIMEOUT_S", 3600, 1569, False)]


def test_a_load_that_outlasts_its_gate_deadline_is_said(capsys, monkeypatch):
    from sparkctl.config import groupdata
    real = groupdata.load
    monkeypatch.setattr(groupdata, "load", lambda *a, **k: {**real(*a, **k), "HEALTH_READY_TIMEOUT_S": 1500,
                                                           "HEALTH_COLD_READY_TIMEOUT_S": 1500})
    assert main(["plan", "--no-local-config"]) == 0
    out = capsys.readouterr().out
    assert "ROLLOUT_ESTIMATE_COLD_LOAD_S reaches 1569 s, past it: such a start is rolled back" in out


def test_the_table_shows_waves_estimate_and_provenance(capsys):
    assert main(["plan", "--no-local-config", "--boxes", "32"]) == 0
    out = capsys.readouterr().out
    assert "canary: 1 box: spark-1" in out and "wave 5: 7 boxes" in out
    assert "one at a time: 2.1 h-16.0 h; in waves: 20 min-2.5 h" in out
    assert "first rollout (cold JIT caches): one unit 19 min-41 min (load 1020-1569 s, ROLLOUT_ESTIMATE_COLD_LOAD_S)" \
        in out and "gate deadline HEALTH_COLD_READY_TIMEOUT_S = 3600 s" in out
    assert "published per box x 32" in out


def test_a_refused_what_if_names_the_setting(capsys):
    assert main(["plan", "--no-local-config", "--boxes", "4", "--pools", "qwen3.8-27b=3,laguna-s-2.1=2"]) == 2
    assert "FLEET_POOLS['laguna-s-2.1'] = 2 is not valid" in capsys.readouterr().err
    assert main(["plan", "--pools", "qwen3.8-27b"]) == 2
    assert "--pools = 'qwen3.8-27b' is not valid" in capsys.readouterr().err


def test_estimate_hours():
    assert estimate.hours(1800) == "30 min" and estimate.hours(9000) == "2.5 h"


def test_a_pool_of_one_box_is_noted(config, cfg_with):
    plan = overview.fleet_plan(cfg_with(FLEET_POOLS={"qwen3.8-27b": 1, "laguna-s-2.1": 1}), config.catalog,
                               ["spark-1", "spark-2"])
    assert any("'laguna-s-2.1' has one box" in n for n in plan.notes)


def test_the_readme_four_box_example(config, cfg_with):
    """README "A fleet": FLEET_POOLS = {"qwen3.8-27b": 3, "laguna": {"model": "laguna-s-2.1", "boxes": 1}}."""
    cfg = cfg_with(FLEET_POOLS={"qwen3.8-27b": 3, "laguna": {"model": "laguna-s-2.1", "boxes": 1}})
    plan = overview.fleet_plan(cfg, config.catalog, ["spark-1", "spark-2", "spark-3", "spark-4"])
    assert [(m.box, m.pool, m.headroom_gib) for m in plan.memory] == [
        ("spark-1", "qwen3.8-27b", 26.0), ("spark-2", "qwen3.8-27b", 26.0), ("spark-3", "qwen3.8-27b", 26.0),
        ("spark-4", "laguna", 8.0)]
    assert [(c.pool, c.served_name) for c in plan.capacity] == [("qwen3.8-27b", "coder"), ("laguna", "laguna")]
    assert [[b for u in w for b in u] for w in plan.waves] == [["spark-1"], ["spark-2"], ["spark-3", "spark-4"]]
