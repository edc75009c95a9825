"""Cold and warm deadlines of the box's readiness gate (issue 39 item 5; sparkctl/box/readiness_gate.py, the warm
records of rollout_txn.py), against the stand-in systemd tools and vLLM endpoint of tests/box/test_rollout_box.py.

A start whose build (the venv its unit runs) and model never started ready on this box is cold (its JIT caches are
empty): past the warm deadline (HEALTH_READY_TIMEOUT_S) it is kept while its journal advances, up to
HEALTH_COLD_READY_TIMEOUT_S, and rolled back as wedged once its journal stands still for HEALTH_STALL_S. A warm
start keeps the warm deadline. Here the warm deadline is 1 s and the cold one 20 s: a stand-in model that answers
2.5 s after its start passes only as a cold start that logs."""

from __future__ import annotations

import json
import re

from sparkctl.box import contract
from tests.box.test_rollout_box import box, restarts  # noqa: F401  (the fixture)

WAITS = {"timeout": 1, "cold-timeout": 20, "stall": 1}  # warm 1 s, cold 20 s, stalled after 1 s without a line


def slow(b, model: str, seconds: float, logging: bool, logs_for: float | None = None) -> None:
    """`model` answers `seconds` after its start; its journal advances meanwhile when `logging` (for `logs_for` s
    after its start when given)."""
    (b.sd / "slow").write_text(f"{model} {seconds}\n")
    (b.sd / "logging").write_text(f"{model} {logs_for if logs_for is not None else ''}\n" if logging else "")


def warm_records(b) -> list[dict]:
    d = b.state / "rollout" / "warm"
    return sorted((json.loads(f.read_text()) for f in d.iterdir()), key=lambda r: r["at"]) if d.exists() else []


def test_a_cold_start_that_keeps_logging_past_the_warm_deadline_is_not_rolled_back(box):
    box.converge("qwen")
    assert [r["model"] for r in warm_records(box)] == ["qwen"]  # a start that passed its gate is recorded warm
    slow(box, "laguna", 2.5, logging=True)
    box.stage("laguna")  # a model this box never served: its kernels are not compiled yet
    r = box.run(**WAITS)
    assert r.returncode == 0, r.stdout + r.stderr
    res = box.result()
    assert box.live_model() == "laguna" and res["outcome"] == contract.READY and res["cold_start"] is True
    assert res["load_s"] > WAITS["timeout"]  # it went past the warm deadline, and was kept
    assert "a cold start: up to 20 s while its journal advances" in r.stdout
    assert {r["model"] for r in warm_records(box)} == {"qwen", "laguna"}


def test_a_cold_start_whose_journal_stops_for_the_stall_window_is_rolled_back_as_wedged(box):
    box.converge("qwen")
    slow(box, "laguna", 60, logging=False)  # active, never answering, and silent: wedged
    box.stage("laguna")
    r = box.run(**WAITS)
    assert r.returncode == contract.code(contract.ROLLED_BACK), r.stdout + r.stderr
    res = box.result()
    assert box.live_model() == "qwen" and res["cold_start"] is True
    assert "wedged" in res["why"] and "HEALTH_STALL_S" in res["why"] and "HEALTH_READY_TIMEOUT_S" in res["why"]
    assert res["total_s"] < WAITS["cold-timeout"]  # judged by its silence, not by the cold deadline
    assert [r["model"] for r in warm_records(box)] == ["qwen"]  # a failed start is not warm


def test_a_cold_start_silent_since_before_the_warm_deadline_is_wedged_at_the_warm_deadline(box):
    box.converge("qwen")
    slow(box, "laguna", 60, logging=True, logs_for=0.2)  # logs for 0.2 s, then nothing: its silence began early
    box.stage("laguna")
    r = box.run(**{**WAITS, "timeout": 3, "stall": 3})
    assert r.returncode == contract.code(contract.ROLLED_BACK), r.stdout + r.stderr
    res = box.result()
    assert res["cold_start"] is True
    # the silence is counted from its last line (0.2 s after the start): wedged soon after the warm deadline (3 s),
    # not a whole stall window (3 s) after it
    after = float(re.search(r"wedged after ([0-9.]+) s", res["why"]).group(1))
    assert 3 <= after < 3 + 2


def test_a_warm_start_keeps_the_warm_deadline_even_while_it_logs(box):
    box.converge("laguna")  # laguna started ready on this venv once: its caches are warm
    box.converge("qwen")
    slow(box, "laguna", 2.5, logging=True)
    box.stage("laguna", unit_extra="# another candidate of the same build and model\n")
    r = box.run(**WAITS)
    assert r.returncode == contract.code(contract.ROLLED_BACK), r.stdout + r.stderr
    res = box.result()
    assert box.live_model() == "qwen" and res["cold_start"] is False
    assert "not ready after 1 s (HEALTH_READY_TIMEOUT_S" in res["why"]


def test_a_new_build_is_cold_for_a_model_it_never_started(box):
    box.converge("qwen")
    venv2 = box.root / "venv2"  # a new vLLM venv (another build), same model
    (venv2 / "bin").mkdir(parents=True)
    (venv2 / "bin" / "vllm").write_text("#!/bin/sh\n")
    box.stage("qwen")
    unit = box.env_dir / "vllm-coder.service.next"
    unit.write_text(unit.read_text().replace(str(box.venv), str(venv2)))
    slow(box, "qwen", 2.5, logging=True)
    r = box.run(**WAITS)
    assert r.returncode == 0, r.stdout + r.stderr
    assert box.result()["cold_start"] is True
    assert sorted(r["venv"] for r in warm_records(box)) == sorted([str(box.venv), str(venv2)])


def test_a_watchdog_restart_of_a_warm_configuration_keeps_the_warm_deadline(box):
    box.converge("qwen")
    slow(box, "qwen", 2.5, logging=True)
    n = restarts(box)
    r = box.run("--restart-only", "--reason", "watchdog", txn="r1", **WAITS)
    assert r.returncode == contract.code(contract.RESTART_FAILED), r.stdout + r.stderr
    res = box.result()
    assert res["cold_start"] is False and "HEALTH_READY_TIMEOUT_S" in res["why"] and restarts(box) == n + 1
