"""vLLM's start-up admission on the converged simulated Spark: the stand-in GB10 pool (sparkctl/sim/standins/gb10-memory,
UNIFIED_MEMORY_STANDIN) runs vLLM's own request_memory before every vLLM start. Without the planned
--gpu-memory-utilization (what main rendered before it) the first embedder is refused with vLLM's own words, as on a
GX10; with it every start passes; and the planner's copy of the rule gives vLLM's own answer (the box's vLLM)."""

from __future__ import annotations

import json
import shlex

import pytest

from sparkctl.capacity import admission
from sparkctl.config.quantities import GIB
from tests.e2e.conftest import sim_exec

pytestmark = pytest.mark.scenario("hardening")

HOST = "spark-1"


def standin_start(spark, service: str, env_file: str) -> tuple[int, str]:
    """The stand-in as the unit's ExecStartPre=+ runs it: systemd reads env_file, the command is the rendered one."""
    d = spark.data
    unit = sim_exec(HOST, f"systemctl cat vllm-{service}.service")
    pre = next(line for line in unit.splitlines() if line.startswith("ExecStartPre=+") and "gb10-memory" in line)
    command = pre.split("+", 1)[1]
    out = sim_exec(HOST, f"systemd-run --wait --pipe --quiet --collect -p EnvironmentFile={shlex.quote(env_file)} "
                         f"{command} 2>&1; echo rc=$?")
    text, _, rc = out.rpartition("rc=")
    assert d["UNIFIED_MEMORY_STANDIN"] in command
    return int(rc), text


def test_the_simulated_pool_refuses_the_first_embedder_without_the_planned_utilization(converged_spark):
    live = "/etc/sparkctl/vllm-embed-bge-m3.env"
    rc, text = standin_start(converged_spark, "embed-bge-m3", live)
    assert rc == 0 and "embed-bge-m3 admitted" in text, text
    # the same env file as main rendered it: no --gpu-memory-utilization, vLLM's 0.92 default
    main_env = "/run/sparkctl-e2e-main.env"
    sim_exec(HOST, f"sed -E 's/ --gpu-memory-utilization [0-9.]+//' {live} > {main_env}")
    try:
        assert "--gpu-memory-utilization" not in sim_exec(HOST, f"cat {main_env}")
        rc, text = standin_start(converged_spark, "embed-bge-m3", main_env)
    finally:
        sim_exec(HOST, f"rm -f {main_env}")
    total = converged_spark.data["BOX_USABLE_MEMORY_GIB"]
    assert rc == 1, text
    assert f"is less than desired GPU memory utilization (0.92, {round(total * 0.92, 2)} GiB)" in text, text
    assert "coder" in text and "embed-qwen3" in text  # what the pool holds beside it, by their plan
    print(f"admission without the planned utilization: {text.strip().splitlines()[-1]}")


def test_every_start_of_the_converge_was_judged_by_the_stand_in(converged_spark):
    for service in ("coder", "embed-qwen3", "embed-bge-m3"):
        log = sim_exec(HOST, f"journalctl -u vllm-{service}.service -o cat --no-pager | grep 'gb10-memory' | tail -1")
        assert f"gb10-memory: {service} admitted" in log, (service, log)


def test_the_planners_copy_of_request_memory_is_vllms_answer(converged_spark):
    grid = [(free, 20.0, u) for free in (0.5, 2.6, 9.7304, 14.0, 18.4, 18.5) for u in (0.08, 0.5, 0.92, 0.9201, 1.0)]
    grid += [(2.6, 121.63, 0.08), (115.6, 121.6, 0.92), (35.6, 121.6, 0.92)]
    cases = [(int(f * GIB), int(t * GIB), u) for f, t, u in grid]
    venv = sim_exec(HOST, "systemctl show -P ExecStart vllm-coder.service").split("path=")[1].split(" ;")[0]
    code = ("import json,sys\nfrom vllm.config import CacheConfig\nfrom vllm.utils.mem_utils import MemorySnapshot\n"
            "from vllm.v1.worker.utils import request_memory\nout=[]\nfor f,t,u in json.loads(sys.argv[1]):\n"
            " s=MemorySnapshot(free_memory=f,total_memory=t,device='cpu',auto_measure=False)\n"
            " try: out.append([request_memory(s,CacheConfig(gpu_memory_utilization=u)),''])\n"
            " except ValueError as e: out.append([None,str(e)])\nprint(json.dumps(out))")
    python = venv.rsplit("/", 1)[0] + "/python"
    got = json.loads(sim_exec(HOST, f"{python} -c {shlex.quote(code)} {shlex.quote(json.dumps(cases))} "
                                    "2>/dev/null").strip().splitlines()[-1])
    for (f, t, u), (requested, refusal) in zip(cases, got):
        ours_requested, ours_refusal = admission.request_memory_copy(f, t, u)
        assert ours_refusal.replace("cuda:0", "cpu") == refusal, (f, t, u)
        if not refusal:
            assert ours_requested == requested, (f, t, u)
    print(f"request_memory: the planner's copy agrees with the box's vLLM on {len(cases)} snapshots "
          f"({sum(1 for _, r in got if r)} refusals)")
