"""Two simulated Sparks in the split topology, a different coding model per box: from the pair as the group data
says (replicas serving qwen3.8-27b), spark-2 flips to laguna-s-2.1 while nothing on spark-1 restarts; the test puts
spark-2 back itself."""

from __future__ import annotations

import json

import pytest

from sparkctl import REPO_ROOT
from tests.e2e.conftest import pyinfra, record
from tests.e2e.helpers import SERVICES, main_pids

pytestmark = pytest.mark.scenario("split")


# a split converge and back (~3.5 min here); the core set flips the replicas and renders split (tests/render)
@pytest.mark.e2e_extended(cost_s=210)
def test_split_one_box_flips_and_the_other_is_untouched(converged_spark):
    before1, before2 = main_pids("spark-1"), main_pids("spark-2")
    run = pyinfra("-y", "--data", "SPARK_TOPOLOGY=split", "inventory.py", "deploy.py",
                  env={"SPARK_CODING_MODELS": "spark-2=laguna-s-2.1"})
    record("split: spark-2 to laguna-s-2.1, both boxes converged", run.seconds)
    assert run.rc == 0, run.failure()
    assert main_pids("spark-1") == before1  # nothing restarted on the other box
    after2 = main_pids("spark-2")
    assert after2["vllm-coder.service"] != before2["vllm-coder.service"]
    assert {u: after2[u] for u in SERVICES[1:]} == {u: before2[u] for u in SERVICES[1:]}
    assert run.output.count("healthy") >= 6  # health passed on both boxes
    handoff = json.loads((REPO_ROOT / "handoff" / "endpoints.json").read_text())
    assert handoff["topology"] == "split"
    assert {(e["box"], e["model"]) for e in handoff["models"]["coder"]} == {("spark-1", "qwen3.8-27b"),
                                                                           ("spark-2", "laguna-s-2.1")}
    k8s = (REPO_ROOT / "handoff" / "k8s-endpoints.yaml").read_text()
    assert "spark-coder-laguna-s-2-1" in k8s and "EndpointSlice" in k8s
    run = pyinfra("-y", "--limit", "spark-2", "inventory.py", "deploy.py")  # back to replicas of qwen
    assert run.rc == 0, run.failure()
