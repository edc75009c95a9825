"""Models added as data on the simulated Spark, reusing the converged pair: two stand-ins that exist only
as data (SIM_CHECKPOINTS and CATALOG_MODELS in group_data/sim.py), planned from their own config.json in the sim's
lock. One fits a box and flips in and out on one box; the other does not fit one box's memory budget: the deploy
refuses it there with the arithmetic, naming tensor-parallel, and serves it across the pair in tensor-parallel.
Both first flips are judged against the roofline and the KV plan only: nothing was ever measured for them."""

from __future__ import annotations

import json

import pytest

from sparkctl.config import groupdata
from tests.e2e.conftest import pyinfra, record, sim_exec
from tests.e2e.helpers import main_pids, probe_all

pytestmark = pytest.mark.scenario("models")

SIM = groupdata.load(["all", "gx10", "sim"])
KV = {**SIM["CODER_KV_CACHE_GIB"], "sim-coder-4l": 0.0625, "sim-too-big": 0.0625}  # 64 MiB each, as the others
# the sim's speed comparisons are off (two boxes share 2 cores); on, a model with nothing measured is judged
# against the roofline (its floor is off on the sim) and the KV plan
JUDGED = ["--data", "ACCEPTANCE_DECODE_ENABLED=true"]


def flip_to(model: str, *extra: str) -> list[str]:
    return ["--data", f"CODING_MODEL={model}", "--data", "CODER_KV_CACHE_GIB=" + json.dumps(KV), *extra]


def test_1_a_model_too_big_for_one_box_is_refused_there_with_the_arithmetic(converged_spark):
    before = sim_exec("spark-1", "cat /etc/sparkctl/vllm-coder.env")
    run = pyinfra("-y", "--limit", "spark-1", *flip_to("sim-too-big"), "inventory.py", "deploy.py")
    record("a model too big for one box: refused by the preflight", run.seconds)
    assert run.rc != 0
    for needle in ("sim-too-big resident (weights + runtime)", "resident 15.5 (weights 14.0 + runtime 1.5)",
                   "It fits across two boxes in tensor-parallel", 'SPARK_TOPOLOGY = "tensor-parallel"'):
        assert needle in run.output, (needle, run.failure())
    assert sim_exec("spark-1", "cat /etc/sparkctl/vllm-coder.env") == before  # nothing touched


# a flip like the core set's laguna flip, of a model added as data (in 88 s, back 85 s: docs/measured.md)
@pytest.mark.e2e_extended(cost_s=175)
def test_2_a_data_only_model_flips_in_and_out_on_one_box(converged_spark):
    before, other = main_pids("spark-1"), main_pids("spark-2")
    run = pyinfra("-y", "--limit", "spark-1", *flip_to("sim-coder-4l", *JUDGED), "inventory.py", "deploy.py")
    record("flip spark-1 to a model added as data (download, gate, acceptance)", run.seconds)
    assert run.rc == 0, run.failure()
    env = sim_exec("spark-1", "cat /etc/sparkctl/vllm-coder.env")
    assert "SPARKCTL_MODEL=sim-coder-4l" in env and "models--sim--tiny-qwen-4l" in env
    assert "acceptance passed against the roofline and the KV plan only" in run.output, run.failure()
    assert probe_all(converged_spark)["coder"]["model"] == "coder"  # the same served name and URL
    after = main_pids("spark-1")
    assert after["vllm-coder.service"] != before["vllm-coder.service"]
    assert {u: after[u] for u in after if u != "vllm-coder.service"} == \
        {u: before[u] for u in before if u != "vllm-coder.service"}  # only the coder restarted
    assert main_pids("spark-2") == other
    back = pyinfra("-y", "--limit", "spark-1", "inventory.py", "deploy.py")
    record("flip spark-1 back from the data-only model", back.seconds)
    assert back.rc == 0, back.failure()
    assert "SPARKCTL_MODEL=qwen3.8-27b" in sim_exec("spark-1", "cat /etc/sparkctl/vllm-coder.env")


@pytest.mark.e2e_extended(cost_s=325)  # a tensor-parallel converge of its own and back (155 s, 170 s)
def test_3_the_model_too_big_for_one_box_is_served_across_the_pair(converged_spark):
    run = pyinfra("-y", "--data", "SPARK_TOPOLOGY=tensor-parallel", *flip_to("sim-too-big", *JUDGED),
                  "inventory.py", "deploy.py", timeout=1800)
    record("tensor-parallel: the model too big for one box, across the pair (gated, judged)", run.seconds)
    try:
        assert run.rc == 0, run.failure()
        head, worker = (sim_exec(h, "cat /etc/sparkctl/vllm-coder.env") for h in ("spark-1", "spark-2"))
        for env in (head, worker):
            assert "SPARKCTL_MODEL=sim-too-big" in env and "--tensor-parallel-size 2" in env
        assert "--headless" in worker and "health through https://10.250.0.11:443" in run.output
        assert "acceptance passed against the roofline and the KV plan only" in run.output, run.failure()
        assert probe_all(converged_spark)["coder"]["usage"]["completion_tokens"] == 16  # both ranks answer
    finally:
        back = pyinfra("-y", "inventory.py", "deploy.py", timeout=1800)  # replicas of the shipped coder again
        record("back to replicas after the model too big for one box", back.seconds)
    assert back.rc == 0, back.failure()
    assert "SPARKCTL_MODEL=qwen3.8-27b" in sim_exec("spark-2", "cat /etc/sparkctl/vllm-coder.env")
