"""vLLM's start-up memory admission (sparkctl/capacity/admission.py): the walk of every start the deploy can make, the
utilization each service is rendered with, and the refusal `check` and the preflight raise."""

from __future__ import annotations

import shlex

import pytest

from sparkctl.box.check_vllm_args import unescape_env_value
from sparkctl.capacity import admission
from sparkctl.check.validate import validate_host
from sparkctl.config.quantities import GIB
from sparkctl.errors import SettingError
from sparkctl.render import units
from tests.conftest import changed


def _gib(x: float) -> int:
    return int(x * GIB)


def test_the_copy_says_what_vllm_said_to_a_gx10_owner():
    # the line a GX10 owner reported (vllm/v1/worker/utils.py request_memory, 0.32.0's words), from its own figures
    requested, refusal = admission.request_memory_copy(_gib(2.6), _gib(121.63), 0.08)
    assert refusal.startswith("Free memory on device cuda:0 (2.6/121.63 GiB) on startup is less than desired GPU "
                              "memory utilization (0.08, 9.73 GiB)")
    assert requested == -(-_gib(121.63) * 0.08 // 1)
    assert admission.request_memory_copy(_gib(9.74), _gib(121.63), 0.08)[1] == ""


def test_without_a_utilization_the_shipped_box_admits_the_coder_and_refuses_the_first_embedder(gx10_data):
    """Today's main rendered no --gpu-memory-utilization: vLLM's 0.92 default asks for 111.9 of 121.6 GiB."""
    s = validate_host(gx10_data, "gx10")
    starts = admission.walk_settings(s, utilization_of=lambda e: admission.VLLM_DEFAULT_UTILIZATION)
    first = {st.service: st for st in starts if st.start.startswith("first install")}
    assert first["coder"].admitted and first["coder"].free_gib == pytest.approx(115.6 - 3)  # its own 3 GiB held
    assert first["coder"].required_gib == pytest.approx(111.87, abs=0.01)
    embed = next(st for st in starts if st.start == "first install, 2 of 3")
    assert not embed.admitted and embed.free_gib == pytest.approx(115.6 - 80 - 3, abs=0.05)  # the coder's 44 + 36
    assert "is less than desired GPU memory utilization (0.92, 111.87 GiB)" in embed.refusal
    flip = next(st for st in starts if st.start == "flip to laguna-s-2.1")
    assert not flip.admitted and 101 < flip.free_gib < 105  # beside the running embedders, its own 3 GiB held


def test_the_planned_utilization_admits_every_start_of_the_shipped_box(gx10_data):
    s = validate_host(gx10_data, "gx10")  # the deploy's whole check passes: it walks the same starts
    starts = admission.walk_settings(s)
    assert starts and all(st.admitted for st in starts), [st for st in starts if not st.admitted]
    kinds = {st.start.split(",")[0] for st in starts}
    assert kinds == {"first install", "restarted alone (watchdog / systemd / upgrade)", "flip to laguna-s-2.1"}
    coder = next(st for st in starts if st.service == "coder")
    margin = s.cfg.VLLM_ADMISSION_MARGIN_GIB
    assert coder.utilization == pytest.approx((44 + 36 + margin) / 121.6, abs=1e-4)
    assert coder.utilization * 121.6 >= 44 + 36 + margin  # rounded up, never below the plan


def test_every_unit_is_rendered_with_its_planned_utilization_and_footprint(gx10_data):
    s = validate_host(gx10_data, "gx10")
    for svc in s.services:
        env = dict(line.split("=", 1) for line in units.render_env(svc, s.cfg).splitlines()
                   if line and not line.startswith("#"))
        args = shlex.split(unescape_env_value(env["VLLM_ARGS"]))
        u = float(args[args.index("--gpu-memory-utilization") + 1])
        engine = admission.engine_of(svc, s.cfg)
        assert u == admission.service_utilization(svc, s.cfg)
        assert float(env["SPARKCTL_PLANNED_GIB"]) == pytest.approx(engine.footprint_gib, abs=1e-3)
        assert 0 < u <= 1 and u * s.cfg.BOX_USABLE_MEMORY_GIB >= engine.footprint_gib


def test_a_flip_vllm_would_refuse_is_refused_before_the_box_is_touched(gx10_data):
    """Laguna at 17 GiB of KV still fits the plan (3 GiB headroom) but not the 3 GiB the starting engine holds at
    vLLM's snapshot and the margin: its flip start is refused."""
    data = {**gx10_data, "CODER_KV_CACHE_GIB": {"qwen3.8-27b": 36, "laguna-s-2.1": 17}}
    with pytest.raises(admission.AdmissionError) as err:
        validate_host(data, "gx10")
    msg = str(err.value)
    for needle in ("vLLM would refuse to start coder (flip to laguna-s-2.1)", "usable 121.6 - OS reserve 6",
                   "embed-qwen3", "vs required", "gpu_memory_utilization", "Free memory on device cuda:0",
                   "CODER_KV_CACHE_GIB['laguna-s-2.1']", "VLLM_ADMISSION_MARGIN_GIB", "VLLM_STARTING_ENGINE_GIB",
                   "its own 3 before vLLM's snapshot", "slack 0.00 GiB over its planned 103.00 GiB"):
        assert needle in msg, needle
    smaller = {**data, "CODER_KV_CACHE_GIB": {"qwen3.8-27b": 36, "laguna-s-2.1": 16}, "VLLM_ADMISSION_MARGIN_GIB": 0.5}
    assert validate_host(smaller, "gx10")  # a smaller budget and margin admit it


def test_a_margin_no_utilization_can_hold_is_refused_naming_it(gx10_cfg):
    with pytest.raises(SettingError) as err:
        admission.utilization(80.0, changed(gx10_cfg, VLLM_ADMISSION_MARGIN_GIB=50.0), "coder")
    assert "VLLM_ADMISSION_MARGIN_GIB = 50.0" in str(err.value) and "at or below 1" in str(err.value)


def test_a_tensor_parallel_worker_walks_its_own_box(gx10_data):
    hosts = ["spark-1", "spark-2"]
    data = {**gx10_data, "SPARK_TOPOLOGY": "tensor-parallel", "CODING_MODEL": "laguna-s-2.1",
            "CODER_KV_CACHE_GIB": {"qwen3.8-27b": 36, "laguna-s-2.1": 40}}
    worker = validate_host(data, "spark-2", hosts=hosts, address="10.0.0.2")
    starts = admission.walk_settings(worker)
    assert {st.service for st in starts} == {"coder"} and all(st.admitted for st in starts)
    first = starts[0]
    assert first.running == () and first.free_gib == pytest.approx(121.6 - 6 - 3)
    head = validate_host(data, "spark-1", hosts=hosts, address="10.0.0.1")
    assert {st.service for st in admission.walk_settings(head)} == {"coder", "embed-qwen3", "embed-bge-m3"}


def test_vllms_own_rule_is_used_where_vllm_is_importable(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "vllm", None)  # import vllm -> ImportError
    assert admission.vllm_rule() is admission.request_memory_copy


def test_a_deploy_that_moves_memory_is_walked_in_rollout_order_beside_the_box_as_it_runs(gx10_data):
    """The preflight's walk (tasks/facts.py PlannedHolds on the box): the coder rolls out first, beside the embedders
    as they hold memory now, before their own rollouts shrink them."""
    s = validate_host(gx10_data, "gx10")
    bigger = {"embed-qwen3": {"gib": 30.0, "state": "active"}, "embed-bge-m3": {"gib": 30.0, "state": "active"}}
    first = admission.walk_rollout(s, bigger)[0]
    assert first.service == "coder" and not first.admitted
    assert first.free_gib == pytest.approx(121.6 - 6 - 60 - 3) and "embed-qwen3 (now) 30.00" in first.running
    assert "this deploy's rollout, 1 of 3" in first.start
    as_planned = {"embed-qwen3": {"gib": 4.8, "state": "active"}, "embed-bge-m3": {"gib": None, "state": "active"}}
    assert all(st.admitted for st in admission.walk_rollout(s, as_planned))
    stopped = {name: dict(hold, state="failed") for name, hold in bigger.items()}  # a failed unit holds nothing
    assert all(st.admitted for st in admission.walk_rollout(s, stopped))
    assert all(st.admitted for st in admission.walk_rollout(s, {}))  # a first install


def test_the_preflight_refuses_a_rollout_vllm_would_refuse_naming_the_start(gx10_data):
    from tasks.preflight import rollout_admission

    s = validate_host(gx10_data, "gx10")
    problems = rollout_admission(s, {"embed-qwen3": {"gib": 30.0, "state": "active"},
                                     "embed-bge-m3": {"gib": 30.0, "state": "activating"}})
    assert len(problems) == 2 and problems[0].startswith("coder (this deploy's rollout, 1 of 3")  # and embed-qwen3
    assert problems[1].startswith("embed-qwen3 (this deploy's rollout, 2 of 3") and "Deploy what frees" in problems[1]
    assert "vLLM would refuse it: free 52.60 GiB" in problems[0] and "CODER_KV_CACHE_GIB['qwen3.8-27b']" in problems[0]


def test_a_flip_the_plan_itself_refuses_is_not_walked_as_an_admission(token_file, tmp_path):
    """sim-too-big has a KV budget but fits only two boxes: on one box the plan refuses it when it is chosen (its own
    arithmetic, the topology that fits it), so the walk of the shipped coder's starts leaves it out; across a pair
    its flip is walked."""
    from sparkctl.config import groupdata
    from tests.conftest import FAKE_LOCK

    data = {**groupdata.load(["all", "gx10", "sim"]), "MODEL_LOCK_FILE": FAKE_LOCK, "SECRETS_DIR": str(tmp_path),
            "CODER_KV_CACHE_GIB": {"qwen3.8-27b": 0.0625, "laguna-s-2.1": 0.0625, "sim-too-big": 0.0625}}
    one = admission.walk_settings(validate_host(data, "spark-1", hosts=["spark-1"]))
    assert {st.start for st in one if st.start.startswith("flip")} == {"flip to laguna-s-2.1"}
    pair = validate_host({**data, "SPARK_TOPOLOGY": "tensor-parallel"}, "spark-2", hosts=["spark-1", "spark-2"])
    assert "flip to sim-too-big" in {st.start for st in admission.walk_settings(pair)}


def test_every_start_is_walked_with_what_the_starting_engine_holds_before_vllms_snapshot(gx10_data):
    """Issue 39 item 4: the starting service's API server, engine process and CUDA context (about 3 GiB on a GB10)
    are not free when vLLM measures; the Laguna flip beside the embedders keeps 5 GiB of slack over its 98 GiB."""
    s = validate_host(gx10_data, "gx10")
    starts = admission.walk_settings(s)
    assert all(st.starting_gib == 3.0 for st in starts)
    flip = next(st for st in starts if st.start == "flip to laguna-s-2.1")
    assert flip.free_gib == pytest.approx(121.6 - 6 - 2 * 4.8 - 3) and flip.footprint_gib == pytest.approx(98)
    assert flip.slack_gib == pytest.approx(5.0) and flip.admitted
    without = admission.walk_settings(validate_host({**gx10_data, "VLLM_STARTING_ENGINE_GIB": 0.0}, "gx10"))
    assert next(st for st in without if st.start == "flip to laguna-s-2.1").slack_gib == pytest.approx(8.0)


def test_a_start_whose_slack_is_under_the_margin_is_refused_naming_it(gx10_data):
    """Laguna at 16 GiB: slack 103 - 102 = 1 GiB, under the 2 GiB margin. Without the starting engine's own memory
    the walk would have admitted it (4 GiB of slack): the start a GB10 would refuse."""
    data = {**gx10_data, "CODER_KV_CACHE_GIB": {"qwen3.8-27b": 36, "laguna-s-2.1": 16}}
    assert validate_host({**data, "VLLM_STARTING_ENGINE_GIB": 0.0}, "gx10")
    with pytest.raises(admission.AdmissionError) as err:
        validate_host(data, "gx10")
    assert err.value.start.start == "flip to laguna-s-2.1" and err.value.start.slack_gib == pytest.approx(1.0)
    assert "start coder (flip to laguna-s-2.1)" in str(err.value) and "against a margin of 2 GiB" in str(err.value)
