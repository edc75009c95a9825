"""Two simulated Sparks in the tensor-parallel topology over the bridge that stands in for the CX7 link: converged
once for this module (`tensor_parallel` fixture, from the pair as the group data says); the next scenario that
needs replicas puts them back (`converged_spark`), or the end of a run on a kept pair (SPARKCTL_E2E_REUSE).
"""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import dataclass

import pytest

from sparkctl.config import groupdata
from tests.e2e.conftest import GROUPS, PAIR, Run, pyinfra, record, sim_exec
from tests.e2e.helpers import chat_ok, hub_file_gets, invocation, wait_for

pytestmark = pytest.mark.scenario("tensor-parallel")

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


def result(host: str, data: dict) -> dict:
    return json.loads(sim_exec(host, f"cat {data['STATE_DIR']}/rollout/vllm-coder.result.json"))


def engine_pids(host: str) -> list[str]:
    cgroup = sim_exec(host, f"systemctl show -P ControlGroup {UNIT}").strip()
    return sim_exec(host, f"cat /sys/fs/cgroup{cgroup}/cgroup.procs").split()


@dataclass
class TensorParallel:
    run: Run  # the deploy that formed the pair (spark-2 started with an empty model store)
    hub_gets_before: int  # the stand-in hub's file GETs before it


@pytest.fixture(scope="module")
def tensor_parallel(spark_1) -> TensorParallel:
    """The pair converged as tensor-parallel (head spark-1, headless worker spark-2), the worker with an empty model
    store before (it must get its checkpoints from the head, not from the hub); replicas again afterwards."""
    PAIR.as_in_the_files()
    PAIR.disturbed("spark-2")
    sim_exec("spark-2", "rm -rf /srv/models/hub /srv/models/verified")
    gets0 = hub_file_gets()
    run = pyinfra("-y", "--data", "SPARK_TOPOLOGY=tensor-parallel", "inventory.py", "deploy.py", timeout=1800)
    record("tensor-parallel over the simulated link (rollout, gated)", run.seconds)
    yield TensorParallel(run=run, hub_gets_before=gets0)
    PAIR.disturbed()  # tensor-parallel: the next scenario that needs replicas (converged_spark) puts them back


def test_tensor_parallel_over_the_simulated_link(tensor_parallel):
    """vLLM's CPU build on two 2-core test hosts: --tensor-parallel-size 2 --nnodes 2, the headless worker started
    first, checkpoints copied from the head over the link, the head serving through the proxy."""
    run = tensor_parallel.run
    head_env = sim_exec("spark-1", "cat /etc/sparkctl/vllm-coder.env.next")
    worker_env = sim_exec("spark-2", "cat /etc/sparkctl/vllm-coder.env.next")
    for env, rank in ((head_env, "0"), (worker_env, "1")):
        assert f"--node-rank {rank}" in env and "--master-addr 10.250.0.11" in env and "--nnodes 2" in env
        assert "GLOO_SOCKET_IFNAME=eth0" in env
    assert "--headless" in worker_env and "--headless" not in head_env
    # the worker copied every checkpoint from the head over the link (no second download from the hub)
    copied = set(sim_exec("spark-2", "ls /srv/models/verified").split())
    assert len(copied) == 5 and copied <= set(sim_exec("spark-1", "ls /srv/models/verified").split())
    assert hub_file_gets() == tensor_parallel.hub_gets_before
    # vLLM's CPU build forms the two-node group over Gloo on the bridge; the head serves through the proxy
    assert run.rc == 0, run.failure()
    assert "health through https://10.250.0.11:443" in run.output and run.output.count("healthy") >= 3
    assert "health through https://10.250.0.12:443" in run.output  # the worker: unit up, no API of its own
    assert "Worker_TP1" in sim_exec("spark-2", "journalctl -u vllm-coder.service --no-pager -o cat | tail -n 400")
    # the worker runs only its headless engine: its embedders were drained, stopped, disabled and removed by the
    # deploy's stale step (their memory is the pair's), the worker not marked retired
    embedders = "vllm-embed-qwen3.service vllm-embed-bge-m3.service"
    assert sim_exec("spark-2", f"systemctl is-active {embedders} || true").split() == ["inactive", "inactive"]
    assert sim_exec("spark-2", "ls /etc/sparkctl/vllm-embed-* /etc/systemd/system/vllm-embed-* 2>/dev/null || true") \
        .strip() == ""
    assert "stopped, disabled and removed (no longer configured here)" in run.output
    marker = f"{groupdata.load(GROUPS)['STATE_DIR']}/retire/retired.json"
    assert sim_exec("spark-2", f"test -e {marker} && echo retired || true").strip() == ""


# the head's unit: a candidate carrying the marker starts, stays "activating" for a while, then fails (an
# ExecStartPost= that only the marked candidate trips); the worker has no such drop-in and could serve it
BREAK_DROPIN = "/etc/systemd/system/vllm-coder.service.d/sparkctl-e2e-tp-break.conf"
BREAK_AFTER_S = 20  # long enough for the worker's transaction to see the head's candidate installed and follow it


# two pair rollouts (~3.5 min here); tests/box/test_rollout_tp.py runs both boxes' real transactions through it
@pytest.mark.e2e_extended(cost_s=210)
def test_a_head_that_fails_its_gate_brings_both_boxes_back(tensor_parallel):
    """Tensor-parallel as one unit: the head's candidate fails its gate -> the head rolls back, and
    the worker, which had followed it forward, rolls back too: both boxes on the previous configuration. The head's
    watchdog restarts nothing meanwhile (it once restarted the head alone while the worker still restored
    its snapshot; the head then could not come up for 600 s)."""
    assert tensor_parallel.run.rc == 0, "the pair must serve as tensor-parallel first"
    data = groupdata.load(GROUPS)
    watchdog_before = {h: watchdog_record(h, data) for h in (HEAD, WORKER)}
    cursor = journal_cursor(HEAD)
    extra = dict(groupdata.load(GROUPS)["VLLM_EXTRA_ENV"], SPARKCTL_E2E_MARKER="tp-broken")
    before = {h: sim_exec(h, "cat /etc/sparkctl/vllm-coder.env") for h in ("spark-1", "spark-2")}
    # $$: a literal $ for systemd, so the shell reads the marker from the unit's environment
    script = f'if [ "$$SPARKCTL_E2E_MARKER" = tp-broken ]; then sleep {BREAK_AFTER_S}; exit 1; fi'
    PAIR.disturbed("spark-1")
    sim_exec("spark-1", f"mkdir -p {BREAK_DROPIN.rsplit('/', 1)[0]} && printf '%s\\n' '[Service]' "
                        f"{shlex.quote('ExecStartPost=/bin/sh -c ' + shlex.quote(script))} > {BREAK_DROPIN} "
                        "&& systemctl daemon-reload")
    try:  # the box remembers a failed candidate: ROLLOUT_RETRY_FAILED, so this test can run again on a kept pair
        run = pyinfra("-y", "--data", "SPARK_TOPOLOGY=tensor-parallel", "--data",
                      "VLLM_EXTRA_ENV=" + json.dumps(extra), "--data", "ROLLOUT_RETRY_FAILED=True", "inventory.py",
                      "deploy.py", timeout=1800)
        record("tensor-parallel: head fails its gate -> both boxes back", run.seconds)
    finally:
        sim_exec("spark-1", f"rm -f {BREAK_DROPIN} && systemctl daemon-reload")
    assert run.rc != 0, "a failed head must fail the deploy"
    assert "ROLLED BACK vllm-coder.service" in run.output, run.failure()
    results = {h: json.loads(sim_exec(h, "cat /var/lib/sparkctl/rollout/vllm-coder.result.json"))
               for h in ("spark-1", "spark-2")}
    assert results["spark-1"]["outcome"] == "rolled-back", results
    assert results["spark-2"]["outcome"] == "rolled-back", results  # it went forward with the head, then back
    assert "tensor-parallel" in sim_exec("spark-2", "cat /var/lib/sparkctl/rollout/vllm-coder.log")
    for h in ("spark-1", "spark-2"):  # exactly the previous configuration, on both boxes
        assert sim_exec(h, "cat /etc/sparkctl/vllm-coder.env") == before[h], h
        assert sim_exec(h, "systemctl is-active vllm-coder.service").strip() == "active", h
    # the pair serves again: the head answers through the proxy with both ranks
    again = pyinfra("-y", "--data", "SPARK_TOPOLOGY=tensor-parallel", "inventory.py", "deploy.py", timeout=1800)
    assert again.rc == 0, again.failure()
    assert "health through https://10.250.0.11:443" in again.output
    journal = journal_since(HEAD, cursor)
    print(f"head watchdog during the TP rollback scenario:\n{journal}")
    assert "WEDGED" not in journal and "restarting it" not in journal, journal
    watchdog_after = {h: watchdog_record(h, data) for h in (HEAD, WORKER)}
    assert watchdog_after[HEAD].get("restarts_total", 0) == watchdog_before[HEAD].get("restarts_total", 0)
    assert watchdog_after[WORKER].get("followed_total", 0) == watchdog_before[WORKER].get("followed_total", 0)


# a pair restart (~4 min here); tests/box/test_rollout_tp.py drives the head's real watchdog through it
@pytest.mark.e2e_extended(cost_s=240)
def test_a_sigstopped_worker_engine_is_caught_and_the_pair_restarted(tensor_parallel, spark_1):
    """A tensor-parallel pair is one unit for the watchdog: the worker's engine SIGSTOPped while
    the pair serves is caught by the head's watchdog and the pair restarted through both boxes' transactions, so it
    serves again without a deploy."""
    spark, data = spark_1, spark_1.data
    PAIR.disturbed()
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
