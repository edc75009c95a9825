"""The fleet in the deploy's own validation (check/validate.py): FLEET_POOLS gives each box its pool's coding model
and served name over the group data, and a fleet that cannot work is refused for every host before any is
touched, naming the setting. What the pools, placement and refusals compute is tested in tests/fleet."""

from __future__ import annotations

import pytest

from sparkctl.check.validate import validate_host
from sparkctl.errors import SettingError

HOSTS = ["spark-1", "spark-2", "spark-3", "spark-4"]
FOUR_BOXES = {"qwen3.8-27b": 3, "laguna-s-2.1": 1}  # the README's example: 3 x Qwen + 1 x Laguna


def settings_of(data: dict, box: str, hosts=HOSTS, host_models=None):
    return validate_host(data, box, read_secrets=False, hosts=hosts, host_models=host_models)


def test_each_box_serves_its_pools_model_under_its_pools_name(gx10_data):
    data = {**gx10_data, "FLEET_POOLS": FOUR_BOXES}
    served = {box: (settings_of(data, box).coder.model.key, settings_of(data, box).coder.served_name) for box in HOSTS}
    assert served == {"spark-1": ("qwen3.8-27b", "coder"), "spark-2": ("qwen3.8-27b", "coder"),
                      "spark-3": ("qwen3.8-27b", "coder"), "spark-4": ("laguna-s-2.1", "laguna-s-2.1")}


def test_without_pools_a_two_box_group_data_is_read_as_before(gx10_data):
    for box in HOSTS[:2]:
        s = settings_of(gx10_data, box, hosts=HOSTS[:2])
        assert (s.coder.model.key, s.coder.served_name, s.role.name) == ("qwen3.8-27b", "coder", "replica")


@pytest.mark.parametrize("change, setting", [
    ({"FLEET_POOLS": {"qwen3.8-27b": 5}}, "FLEET_POOLS"),  # more boxes than the inventory has
    ({"FLEET_POOLS": {"qwen3.8-27b": 3}}, "FLEET_POOLS"),  # a box in no pool
    ({"FLEET_POOLS": {"qwen3-8b": 4}}, "FLEET_POOLS"),  # an unknown model
    ({"MAX_FAIL_PERCENTAGE": 101}, "MAX_FAIL_PERCENTAGE"),
    ({"ROLLOUT_WAVES": [2, "100%"]}, "ROLLOUT_WAVES"),  # no canary
    ({"ROLLOUT_WAVES": [1, "50%", "25%"]}, "ROLLOUT_WAVES"),  # shrinking, not ending at the whole fleet
])
def test_a_fleet_that_cannot_work_is_refused_for_every_host_naming_the_setting(gx10_data, change, setting):
    data = {**gx10_data, **change}
    for box in HOSTS:
        with pytest.raises(SettingError) as exc:
            settings_of(data, box)
        assert setting in str(exc.value)


def test_a_replicas_pool_whose_boxes_would_serve_different_models_is_refused(gx10_data):
    with pytest.raises(SettingError) as exc:
        settings_of(gx10_data, "spark-1", hosts=HOSTS[:2], host_models={"spark-2": "laguna-s-2.1"})
    assert "CODING_MODEL" in str(exc.value) and "split" in str(exc.value)


# --- a tensor-parallel pool: each pair is deployed as SPARK_TOPOLOGY = "tensor-parallel" makes a pair ---------------

TP_POOLS = {"pairs": {"model": "qwen3.8-27b", "boxes": 4, "tensor_parallel": True}}
LINKS = {f"spark-{i}": [f"192.168.100.1{i}/24", f"192.168.101.1{i}/24"] for i in range(1, 5)}  # one per twin


def test_a_tensor_parallel_pool_deploys_each_pair_as_head_and_worker_of_that_pair_alone(gx10_data):
    """Four boxes, two pairs: each box's engine flags name its own pair's head, never the other pair's; the worker
    serves no API and runs no embedders; every box says tensor-parallel, so the pair rules apply to it."""
    data = {**gx10_data, "FLEET_POOLS": TP_POOLS, "CX7_ADDRESSES": LINKS}
    parts = {box: settings_of(data, box) for box in HOSTS}
    assert {b: (s.role.name, s.role.pair) for b, s in parts.items()} == {
        "spark-1": ("head", ("spark-1", "spark-2")), "spark-2": ("worker", ("spark-1", "spark-2")),
        "spark-3": ("head", ("spark-3", "spark-4")), "spark-4": ("worker", ("spark-3", "spark-4"))}
    for box, head_ip in (("spark-2", "192.168.100.11"), ("spark-4", "192.168.100.13")):
        args = parts[box].coder.extra_args
        assert args[args.index("--master-addr") + 1] == head_ip and args[args.index("--node-rank") + 1] == "1"
        assert parts[box].coder.headless and not parts[box].embedders and not parts[box].role.serves_api
    assert parts["spark-3"].embedders and parts["spark-3"].cfg.SPARK_TOPOLOGY == "tensor-parallel"
    assert parts["spark-3"].role.env["MASTER_ADDR"] == "192.168.100.13"


def test_a_pair_beside_a_box_serving_alone_leaves_that_box_a_box(gx10_data):
    data = {**gx10_data, "CX7_ADDRESSES": LINKS, "FLEET_POOLS": {
        "pair": {"model": "qwen3.8-27b", "boxes": ["spark-2", "spark-3"], "tensor_parallel": True},
        "laguna": {"model": "laguna-s-2.1", "boxes": 2}}}
    roles = {box: settings_of(data, box).role for box in HOSTS}
    assert (roles["spark-2"].name, roles["spark-3"].name) == ("head", "worker")
    assert roles["spark-2"].pair == roles["spark-3"].pair == ("spark-2", "spark-3")
    for alone in ("spark-1", "spark-4"):
        assert not roles[alone].tensor_parallel and roles[alone].serves_api and roles[alone].coder_args == ()


def test_a_pair_box_without_a_link_address_is_refused_naming_it(gx10_data):
    data = {**gx10_data, "FLEET_POOLS": TP_POOLS, "CX7_ADDRESSES": {**LINKS, "spark-4": []}}
    with pytest.raises(SettingError) as exc:
        settings_of(data, "spark-3")
    assert exc.value.setting == "CX7_ADDRESSES['spark-4']"


def test_a_tool_off_the_deploy_path_reads_a_box_as_its_pool_makes_it(monkeypatch):
    """`bench`, `status`, `niah` read a box through check.load: a Laguna pool's box is benched under Laguna's
    served name and model, a pair's worker as a worker, as the deploy made them; without FLEET_POOLS, as before."""
    from sparkctl.check.load import load
    from sparkctl.config.hosts import HostConn
    from tests.conftest import FAKE_LOCK
    monkeypatch.setenv("GX10_HOSTS", ",".join(HOSTS[:3]))
    pools = {"FLEET_POOLS": {"laguna": {"model": "laguna-s-2.1", "boxes": ["spark-1"]},
                             "pair": {"model": "qwen3.8-27b", "boxes": 2, "tensor_parallel": True}},
             "CX7_ADDRESSES": LINKS, "MODEL_LOCK_FILE": FAKE_LOCK}
    laguna = load(None, HostConn("spark-1", "spark-1"), pools).cfg
    assert (laguna.CODING_MODEL, laguna.CODER_SERVED_NAME) == ("laguna-s-2.1", "laguna")
    worker = load(None, HostConn("spark-3", "spark-3"), pools).cfg
    assert (worker.SPARK_TOPOLOGY, worker.TP_HEAD, worker.EMBEDDERS) == ("tensor-parallel", "spark-2", [])
    plain = load(None, HostConn("spark-1", "spark-1"), {"MODEL_LOCK_FILE": FAKE_LOCK}).cfg
    assert (plain.CODING_MODEL, plain.CODER_SERVED_NAME) == ("qwen3.8-27b", "coder")


def test_a_pair_box_with_fewer_link_addresses_than_twins_is_refused_before_the_netplan_file(gx10_data):
    """The shipped link has two twin interfaces; a netplan file with one address for two would not render."""
    twins = LINKS
    data = {**gx10_data, "FLEET_POOLS": TP_POOLS, "CX7_ADDRESSES": {**twins, "spark-2": ["192.168.100.12/24"]}}
    with pytest.raises(SettingError) as exc:
        settings_of(data, "spark-1")
    assert exc.value.setting == "CX7_ADDRESSES['spark-2']" and "CX7_INTERFACES" in str(exc.value)
    settings_of({**data, "CX7_MANAGE_NETPLAN": False}, "spark-1")
    settings_of({**data, "CX7_ADDRESSES": twins}, "spark-1")
