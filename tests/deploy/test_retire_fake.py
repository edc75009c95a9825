"""`pyinfra inventory.py retire.py --limit <box>` against pyinfra's @fake connector (tests/standins/gx10_inventory.py
scripts the box's retire_services.py): what it runs on the box, what it reports, and every refusal before anything is touched."""

from __future__ import annotations

import json

import pytest

from tests.deploy.test_deploy_fake import changes, dgx, run_fake  # noqa: F401 - dgx: the fixture

S1, S2 = "@fake/spark-1", "@fake/spark-2"


def retire(tmp, *extra: str, hosts: str = "2", state: str = "", handoff: dict | None = None) -> dict:
    """retire.py over the fake inventory (two replicas by default); handoff: an endpoints.json already there."""
    mp = pytest.MonkeyPatch()
    mp.setenv("FAKE_DEPLOY_FILE", "retire.py")
    mp.setenv("FAKE_HOSTS", hosts)
    mp.setenv("FAKE_RETIRE", state)
    mp.setenv("SPARKCTL_TEST_HANDOFF", str(tmp / "handoff"))
    if handoff is not None:
        (tmp / "handoff").mkdir(exist_ok=True)
        (tmp / "handoff" / "endpoints.json").write_text(json.dumps(handoff))
    try:
        return run_fake("dgx", tmp, *extra)
    finally:
        mp.undo()


def endpoints(**ready: bool) -> dict:
    """A hand-off recording each box serving coder, ready or not."""
    return {"schema": "sparkctl.endpoints/1", "topology": "replicas", "ca_bundle": None,
            "models": {"coder": [{"box": f"@fake/{box}", "address": "10.0.0.5", "port": 443, "ready": up,
                                  "base_url": "https://10.0.0.5/coder/v1", "model": "qwen3.8-27b"}
                                 for box, up in ready.items()]}}


def box_calls(out: dict, host: str) -> list[str]:
    return [c for c in out["by_host"].get(host, []) if "retire_services.py" in c]


def test_it_runs_the_boxs_retire_and_reports_what_the_box_did(tmp_path):
    out = retire(tmp_path, "--limit", S1)
    assert out["error"] in (None, "exit 0") and out["failed_hosts"] == [], out["log"][-3000:]
    apply = next(c for c in box_calls(out, S1) if "retire_services.py apply" in c)
    # every served model (coder and embedders) with its port, every vLLM unit, the watchdog, the existing settings
    for part in ("--serve coder=8000", "--service coder", "--quiet sparkctl-watchdog.service", "--unready-wait 20",
                 "--drain-timeout 1800", "--retry-after 30", "--textfile-dir /var/lib/prometheus/node-exporter"):
        assert part in apply, (part, apply)
    assert apply.count("--serve ") >= 2, apply  # the embedders too
    assert "SPARKCTL_DRAIN_DIR=/etc/nginx/sparkctl-drain" in apply
    assert "@fake/spark-1: out of the routers, drained (0 in flight after 3.2 s), coder stopped and disabled" \
        in out["log"]
    assert out["by_host"][S2] == []  # the other box is not touched
    assert any("Upload retire_services.py" in o for o in out["ops"]), out["ops"]
    # nothing of a deploy: no rollout, no package, no unit written
    cmds = "\n".join(changes(out))
    for other in ("rollout.py", "apt-get", "nginx -t", "vllm serve"):
        assert other not in cmds, other


def test_a_retired_box_is_left_as_it_is_and_the_run_says_so(tmp_path):
    out = retire(tmp_path, "--limit", S1, state="retired")
    assert out["error"] in (None, "exit 0") and out["failed_hosts"] == [], out["log"][-3000:]
    assert not any("retire_services.py apply" in c for c in box_calls(out, S1))
    assert "already retired (2026-12-03T02:00:00Z: vllm-coder.service stopped and disabled); nothing changed" \
        in out["log"]


def test_refused_while_a_rollout_owns_a_service(tmp_path):
    out = retire(tmp_path, "--limit", S1, state="owned")
    assert out["failed_hosts"] == [S1]
    assert not any("retire_services.py apply" in c for c in box_calls(out, S1))
    assert "a rollout or restart owns coder now" in out["log"]


def test_refused_without_a_limit_before_any_command(tmp_path):
    out = retire(tmp_path)
    assert "no --limit was given (it would retire every box of the inventory)" in (out["error"] or ""), out["log"]
    assert out["commands"] == []


def test_refused_to_retire_the_last_box_serving_a_model(tmp_path):
    out = retire(tmp_path, "--limit", "@fake/gx10", hosts="1")
    error = out["error"] or ""
    assert "retiring @fake/gx10 leaves no box serving 'coder'" in error, out["log"][-3000:]
    assert "--data RETIRE_LAST_OF_POOL=True" in error and out["commands"] == []


def test_refused_to_retire_every_box_of_a_pool_at_once(tmp_path):
    out = retire(tmp_path, "--limit", S1, "--limit", S2)
    assert "retiring @fake/spark-1, @fake/spark-2 leaves no box serving 'coder'" in (out["error"] or "")
    assert out["commands"] == []


def test_refused_when_the_hand_off_records_the_other_box_not_ready(tmp_path):
    """Retired before (or in a rollout now): two retires in a row cannot empty a pool."""
    out = retire(tmp_path, "--limit", S1, handoff=endpoints(**{"spark-1": True, "spark-2": False}))
    error = out["error"] or ""
    assert "@fake/spark-2 is recorded not ready for it in the gateway hand-off" in error, out["log"][-3000:]
    assert out["commands"] == []


def test_the_last_box_is_retired_on_purpose_with_the_setting_and_the_hand_off_records_it(tmp_path):
    out = retire(tmp_path, "--limit", S1, "--data", "RETIRE_LAST_OF_POOL=True",
                 handoff=endpoints(**{"spark-1": True, "spark-2": False}))
    assert out["error"] in (None, "exit 0") and out["failed_hosts"] == [], out["log"][-3000:]
    assert "the last box serving 'coder', retired on purpose (RETIRE_LAST_OF_POOL=True)" in out["log"]
    recorded = json.loads((tmp_path / "handoff" / "endpoints.json").read_text())["models"]["coder"]
    assert {e["box"]: e["ready"] for e in recorded} == {S1: False, S2: False}


def test_a_tensor_parallel_pair_retires_whole_the_head_drained_before_the_worker_stops(tmp_path):
    out = retire(tmp_path, "--limit", S1, "--limit", S2, "--data", "SPARK_TOPOLOGY=tensor-parallel",
                 "--data", "RETIRE_LAST_OF_POOL=True")
    assert out["error"] in (None, "exit 0") and out["failed_hosts"] == [], out["log"][-3000:]
    ops = out["ops"]
    head = ops.index("Retire | Retire: out of the routers, drained, stopped and disabled")
    worker = ops.index("Retire | Retire: a tensor-parallel worker's units stopped and disabled (after its head)")
    assert head < worker
    apply = [c for c in box_calls(out, S2) if "retire_services.py apply" in c][0]
    assert "--serve" not in apply and "--service coder" in apply  # the worker serves nothing, stops its engine
    half = retire(tmp_path, "--limit", S2, "--data", "SPARK_TOPOLOGY=tensor-parallel")
    assert "@fake/spark-1 and @fake/spark-2 are one tensor-parallel engine" in (half["error"] or "")
    assert half["commands"] == []


def test_the_deploy_lifts_a_retirement_once_the_box_serves_again(dgx):
    """deploy.py's monitoring step (after the services step restarted the box) removes what holds its alerts."""
    ops = dgx["ops"]
    for path in ("/var/lib/sparkctl/retire/retired.json", "/var/lib/prometheus/node-exporter/sparkctl_retired.prom"):
        assert f"Monitoring | Not retired: no {path}" in ops, ops
    assert ops.index("Monitoring | Not retired: no /var/lib/sparkctl/retire/retired.json") > \
        max(i for i, o in enumerate(ops) if o.startswith("vLLM services | "))
