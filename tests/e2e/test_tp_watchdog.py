"""A tensor-parallel pair is one unit for the watchdog too (issue 20, item 7), on the two simulated Sparks: the TP
rollback scenario (the head fails its gate, both boxes go back) never sees a watchdog restart, and the worker's
engine SIGSTOPped while the pair serves is caught by the head's watchdog and the pair restarted through both boxes'
transactions, so it serves again without a deploy. Converges the pair to tensor-parallel and back to replicas."""

from __future__ import annotations

import json
import time

from tests.e2e.conftest import pyinfra, record, sim_exec
from tests.e2e.test_d_topologies import head_fails_its_gate_and_both_boxes_go_back
from tests.e2e.test_g_monitoring import chat_ok, wait_for

HEAD, WORKER = "spark-1", "spark-2"
UNIT = "vllm-coder.service"


def watchdog_record(host: str, data: dict) -> dict:
    """The watchdog's persisted record of the coder on a box ({} before its first restart or follow)."""
    text = sim_exec(host, f"cat {data['STATE_DIR']}/watchdog/state.json 2>/dev/null || echo '{{}}'")
    return json.loads(text).get("coder", {})


def journal_cursor(host: str) -> str:
    out = sim_exec(host, "journalctl -u sparkctl-watchdog.service -n 1 --show-cursor --no-pager")
    return next(line.split("cursor: ", 1)[1] for line in out.splitlines() if "cursor: " in line)


def journal_since(host: str, cursor: str) -> str:
    return sim_exec(host, f"journalctl -u sparkctl-watchdog.service --after-cursor '{cursor}' --no-pager -o cat")


def invocation(host: str) -> str:
    return sim_exec(host, f"systemctl show -P InvocationID {UNIT}").strip()


def result(host: str, data: dict) -> dict:
    return json.loads(sim_exec(host, f"cat {data['STATE_DIR']}/rollout/vllm-coder.result.json"))


def engine_pids(host: str) -> list[str]:
    cgroup = sim_exec(host, f"systemctl show -P ControlGroup {UNIT}").strip()
    return sim_exec(host, f"cat /sys/fs/cgroup{cgroup}/cgroup.procs").split()


def rollback_never_sees_a_watchdog_restart(data: dict) -> None:
    """The CI run of issue 20: right after the pair rolled back from a failed head, while the worker still restored
    its snapshot, the head's watchdog restarted the head alone; the head then could not come up for 600 s."""
    before = {h: watchdog_record(h, data) for h in (HEAD, WORKER)}
    cursor = journal_cursor(HEAD)
    head_fails_its_gate_and_both_boxes_go_back()  # ends with a deploy whose health request went through both ranks
    journal = journal_since(HEAD, cursor)
    print(f"head watchdog during the TP rollback scenario:\n{journal}")
    assert "WEDGED" not in journal and "restarting it" not in journal, journal
    after = {h: watchdog_record(h, data) for h in (HEAD, WORKER)}
    assert after[HEAD].get("restarts_total", 0) == before[HEAD].get("restarts_total", 0), after
    assert after[WORKER].get("followed_total", 0) == before[WORKER].get("followed_total", 0), after


def sigstopped_worker_is_caught_and_the_pair_serves_again(spark, data: dict) -> None:
    assert chat_ok(spark)  # the pair serves
    restarts = watchdog_record(HEAD, data).get("restarts_total", 0)
    followed = watchdog_record(WORKER, data).get("followed_total", 0)
    heads, workers = invocation(HEAD), invocation(WORKER)
    pids = engine_pids(WORKER)
    cursor = journal_cursor(HEAD)
    t0 = time.monotonic()
    sim_exec(WORKER, f"kill -STOP {' '.join(pids)}")  # the worker's engine hangs; its unit stays active
    try:
        # idle head: its probe finds the pair wedged; the pair restart stops and starts both engines
        detection = data["WATCHDOG_PROBE_IDLE_S"] + data["WATCHDOG_PROBE_TIMEOUT_S"] + 3 * data["WATCHDOG_INTERVAL_S"]
        wait_for(lambda: invocation(HEAD) != heads and invocation(WORKER) != workers,
                 detection + 2 * data["SERVICE_STOP_TIMEOUT_S"] + 60, "the pair restart of both boxes", interval=2.0)
        restarted = time.monotonic() - t0
        wait_for(lambda: chat_ok(spark), data["HEALTH_READY_TIMEOUT_S"], "the pair to serve again", interval=2.0)
        serving = time.monotonic() - t0
    finally:
        sim_exec(WORKER, f"kill -CONT {' '.join(pids)} 2>/dev/null || true")
    record("tensor-parallel: worker engine SIGSTOPped until the watchdog restarted the pair", restarted)
    record("tensor-parallel: worker engine SIGSTOPped until the pair serves again (no deploy)", serving)
    journal = journal_since(HEAD, cursor)
    print(f"head watchdog:\n{journal}")
    assert "vllm-coder.service: WEDGED" in journal, journal
    wait_for(lambda: result(HEAD, data).get("outcome") == "restarted" and result(WORKER, data).get("outcome") ==
             "restarted", data["WATCHDOG_INTERVAL_S"] + 60, "both boxes to record the pair restart")
    head, worker = result(HEAD, data), result(WORKER, data)
    assert head["by"] == "watchdog" and worker["by"] == "pair-restart" and head["txn"] in worker["message"]
    assert watchdog_record(HEAD, data)["restarts_total"] == restarts + 1
    assert watchdog_record(WORKER, data)["followed_total"] == followed + 1


def test_a_tensor_parallel_pair_is_one_unit_for_the_watchdog(converged_spark):
    sp, d = converged_spark, converged_spark.data
    run = pyinfra("-y", "--data", "SPARK_TOPOLOGY=tensor-parallel", "inventory.py", "deploy.py", timeout=1800)
    record("tensor-parallel converge for the watchdog scenarios", run.seconds)
    assert run.rc == 0, run.failure()
    try:
        rollback_never_sees_a_watchdog_restart(d)
        sigstopped_worker_is_caught_and_the_pair_serves_again(sp, d)
    finally:
        back = pyinfra("-y", "inventory.py", "deploy.py", timeout=1800)  # replicas again
        record("back to replicas after the tensor-parallel watchdog scenarios", back.seconds)
    assert back.rc == 0, back.failure()
