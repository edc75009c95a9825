"""The gateway's refusals (sparkctl/check/gateway.py), before any host is touched: through `validate_gateway` (what
the deploy's gateway step runs), through `python -m sparkctl check` with GATEWAY_HOSTS set, and once through the
whole deploy against pyinfra's @fake connector. Each case changes a valid configuration in one way and asserts the
refusal names the setting (and, for a clash, the other setting) and the value; a variant beside it passes, so a
refusal that fired on everything would fail too."""

from __future__ import annotations

import pytest

from sparkctl.__main__ import main
from sparkctl.check.gateway import unique_gateways, validate_gateway
from sparkctl.config import groupdata
from sparkctl.errors import SettingError
from tests.conftest import FAKE_LOCK

BOXES = ("spark-1", "spark-2")


@pytest.fixture(scope="module")
def base():
    return {**groupdata.load(["all", "gx10"]), "MODEL_LOCK_FILE": FAKE_LOCK}


def check(base: dict, gateway: str = "gw", boxes=BOXES, own: dict | None = None, **data):
    """validate_gateway as the deploy calls it: every box's merged data (the same group data, --data on top), and
    the gateway's own (a box's whole data when it is one)."""
    box_data = {b: {**base, "ssh_hostname": f"{b}.test", **data} for b in boxes}
    gw_data = box_data.get(gateway) or {**base, "ssh_hostname": f"{gateway}.test", **data}
    return validate_gateway(gateway, {**gw_data, **(own or {})}, box_data)


def test_the_shipped_gateway_passes_with_one_router_per_served_model(base):
    gw = check(base)
    assert [p.served for p in gw.pools] == ["coder", "embed-bge-m3", "embed-qwen3"]
    assert [w.box for w in gw.pools[0].workers] == list(BOXES) and not gw.beside_box
    assert gw.pools[2].standby_port == base["ROUTER_STANDBY_PORT_BASE"] + 2


# --- the gateway's own ports: pairwise distinct -----------------------------------------------------------------------


def test_two_gateway_ports_equal_are_refused_naming_both(base):
    with pytest.raises(SettingError) as e:
        check(base, GATEWAY_FRONT_PORT=base["ROUTER_BRIDGE_PORT"])
    assert e.value.setting == "GATEWAY_FRONT_PORT" and e.value.value == base["ROUTER_BRIDGE_PORT"]
    assert "ROUTER_BRIDGE_PORT" in str(e.value)
    check(base, GATEWAY_FRONT_PORT=8443)


def test_a_range_reaching_the_next_by_the_served_model_count_is_refused(base):
    """Three served models: ROUTER_PORT_BASE takes base, +1, +2; a standby range from +2 clashes, from +3 not;
    with one served model (no embedders) +1 is free."""
    start = base["ROUTER_PORT_BASE"]
    with pytest.raises(SettingError) as e:
        check(base, ROUTER_STANDBY_PORT_BASE=start + 2)
    assert e.value.setting == "ROUTER_STANDBY_PORT_BASE" and e.value.value == start + 2
    assert f"ROUTER_PORT_BASE + 2 = {start + 2}" in str(e.value) and "3 served models" in str(e.value)
    check(base, ROUTER_STANDBY_PORT_BASE=start + 3)
    alone = dict(FLEET_POOLS={"qwen3.8-27b": {"boxes": 2, "embedders": False}})  # boxes without embedders
    assert [p.served for p in check(base, ROUTER_STANDBY_PORT_BASE=start + 1, **alone).pools] == ["coder"]
    with pytest.raises(SettingError, match="ROUTER_STANDBY_PORT_BASE"):
        check(base, ROUTER_STANDBY_PORT_BASE=start + 1)


def test_a_metrics_range_reaching_the_bridge_is_refused(base):
    bridge = base["ROUTER_BRIDGE_PORT"]
    with pytest.raises(SettingError, match=r"ROUTER_METRICS_PORT_BASE = .*ROUTER_BRIDGE_PORT"):
        check(base, ROUTER_METRICS_PORT_BASE=bridge - 2)
    check(base, ROUTER_METRICS_PORT_BASE=bridge - 3)


def test_a_range_past_the_last_port_is_refused(base):
    with pytest.raises(SettingError, match="ROUTER_PORT_BASE = 65534 .*3 served models below 65536"):
        check(base, ROUTER_PORT_BASE=65534)
    check(base, ROUTER_PORT_BASE=65533)


@pytest.mark.parametrize("setting, port", [("GATEWAY_FRONT_PORT", 22), ("ROUTER_BRIDGE_PORT", 2222),
                                           ("ROUTER_METRICS_PORT_BASE", 2220)])
def test_a_gateway_port_on_sshd_is_refused(base, setting, port):
    """sshd's 22 always, and the port the deploy reaches the gateway on (its ssh_port: GX10_SSH_PORT)."""
    with pytest.raises(SettingError, match=f"{setting} = {port} .*sshd's \\(22 and 2222\\)"):
        check(base, own={"ssh_port": 2222}, **{setting: port})
    if port != 22:
        check(base, **{setting: port})  # sshd on 22 there


# --- a box that is the gateway too ------------------------------------------------------------------------------------


def test_a_box_that_is_the_gateway_too_keeps_its_proxy_port(base):
    with pytest.raises(SettingError) as e:
        check(base, "spark-1")  # both 443 as shipped: the gateway's setting is the one named
    assert e.value.setting == "GATEWAY_FRONT_PORT" and "PROXY_PORT" in str(e.value)
    assert check(base, "spark-1", GATEWAY_FRONT_PORT=8443).beside_box


@pytest.mark.parametrize("box_setting, gateway_setting, offset", [
    ("CODER_PORT", "ROUTER_PORT_BASE", 0),
    ("EMBEDDER_PORTS[1]", "ROUTER_METRICS_PORT_BASE", 0),
    ("NODE_EXPORTER_PORT", "ROUTER_BRIDGE_PORT", 0),
    ("TP_MASTER_PORT", "ROUTER_STANDBY_METRICS_PORT_BASE", 1),
    ("RAY_PORT", "ROUTER_STANDBY_PORT_BASE", 2),  # the third served model's standby
])
def test_a_gateway_port_on_one_of_its_boxs_ports_is_refused_naming_both(base, box_setting, gateway_setting, offset):
    name, index = box_setting.partition("[")[0], box_setting.partition("[")[2].rstrip("]")
    port = base[name][int(index)] if index else base[name]
    data = {gateway_setting: port - offset, "GATEWAY_FRONT_PORT": 8443}
    with pytest.raises(SettingError) as e:
        check(base, "spark-1", **data)
    assert e.value.setting == gateway_setting and box_setting in str(e.value), e.value
    check(base, "gw", **data)  # a gateway of its own has no box's ports


def test_a_box_port_the_operator_moved_onto_a_router_is_the_one_named(base):
    with pytest.raises(SettingError) as e:
        check(base, "spark-1", GATEWAY_FRONT_PORT=8443, PROXY_PORT=base["ROUTER_PORT_BASE"] + 1)
    assert e.value.setting == "PROXY_PORT" and "ROUTER_PORT_BASE + 1" in str(e.value)


# --- tensor-parallel pairs: the worker is refused, the head may be the gateway ----------------------------------------


@pytest.mark.parametrize("data, worker, head", [
    ({"SPARK_TOPOLOGY": "tensor-parallel"}, "spark-2", "spark-1"),
    ({"SPARK_TOPOLOGY": "tensor-parallel", "TP_HEAD": "spark-2"}, "spark-1", "spark-2"),
])
def test_a_tensor_parallel_worker_as_gateway_is_refused_and_the_head_passes(base, data, worker, head):
    data = {**data, "GATEWAY_FRONT_PORT": 8443}
    with pytest.raises(SettingError) as e:
        check(base, worker, **data)
    assert e.value.setting == "GATEWAY_HOSTS" and e.value.value == worker and f"the head {head}" in str(e.value)
    gw = check(base, head, **data)
    assert gw.beside_box
    assert [w.box for p in gw.pools for w in p.workers] == [head] * len(gw.pools)  # a worker serves no API


TP_FLEET = dict(FLEET_POOLS={"laguna": {"model": "laguna-s-2.1", "boxes": ["spark-1"]},
                             "pair": {"model": "qwen3.8-27b", "boxes": 2, "tensor_parallel": True}},
                CX7_ADDRESSES={f"spark-{i}": [f"192.168.100.1{i}/24", f"192.168.101.1{i}/24"] for i in (1, 2, 3)},
                GATEWAY_FRONT_PORT=8443)


def test_a_tensor_parallel_pool_in_fleet_pools_is_a_pair_behind_the_router_and_its_worker_no_gateway(base):
    """spark-2 + spark-3 are the pool's pair (the first its head): the coder's router reaches the head alone, the
    Laguna box serves its own name; the worker as gateway is refused naming the pool, the head passes."""
    boxes = ("spark-1", "spark-2", "spark-3")
    gw = check(base, "gw", boxes=boxes, **TP_FLEET)
    workers = {p.served: [w.box for w in p.workers] for p in gw.pools}
    assert workers["coder"] == ["spark-2"] and workers["laguna"] == ["spark-1"]
    assert workers["embed-bge-m3"] == ["spark-1", "spark-2"]  # a worker runs no embedders
    with pytest.raises(SettingError) as e:
        check(base, "spark-3", boxes=boxes, **TP_FLEET)
    assert e.value.setting == "GATEWAY_HOSTS" and "FLEET_POOLS['pair']" in str(e.value)
    assert check(base, "spark-2", boxes=boxes, **TP_FLEET).beside_box


# --- the rest ---------------------------------------------------------------------------------------------------------


def test_a_gateway_without_boxes_is_refused(base):
    with pytest.raises(SettingError, match="GX10_HOSTS = '' .*at least one gx10 box"):
        check(base, boxes=())


def test_a_first_retry_wait_longer_than_the_longest_is_refused(base):
    with pytest.raises(SettingError, match="ROUTER_RETRY_INITIAL_BACKOFF_MS = 5000 .*ROUTER_RETRY_MAX_BACKOFF_MS"):
        check(base, ROUTER_RETRY_INITIAL_BACKOFF_MS=5000)
    with pytest.raises(SettingError, match="ROUTER_RETRY_MAX_BACKOFF_MS = 50 .*at least"):
        check(base, ROUTER_RETRY_MAX_BACKOFF_MS=50)
    check(base, ROUTER_RETRY_INITIAL_BACKOFF_MS=base["ROUTER_RETRY_MAX_BACKOFF_MS"])


def test_a_router_wait_below_the_health_window_is_refused_behind_a_gateway_zero_included(base):
    """0 says no router is in front of the boxes: with a gateway there is one, and a rollout would drain the box while
    its routers still send to it (issue 34). Refused naming both settings; the window itself passes."""
    with pytest.raises(SettingError) as e:
        check(base, ROUTER_OUT_WAIT_S=0)
    assert e.value.setting == "ROUTER_OUT_WAIT_S" and e.value.value == 0
    assert "at least 20 s on spark-1" in str(e.value) and "GATEWAY_HOSTS names gw" in str(e.value)
    check(base, ROUTER_OUT_WAIT_S=20)


def test_the_gateways_own_health_window_is_what_a_boxs_wait_must_cover(base):
    """The routers run on the gateway: its health settings (its own host data here) make the window the boxes wait."""
    slower = {"ROUTER_HEALTH_INTERVAL_S": 10, "ROUTER_OUT_WAIT_S": 30}  # 2 x (10 + 5) = 30 s
    with pytest.raises(SettingError, match="ROUTER_OUT_WAIT_S = 20 .*at least 30 s on spark-1.*GATEWAY_HOSTS names gw"):
        check(base, own=slower)
    check(base, own=slower, ROUTER_OUT_WAIT_S=30)


def test_a_gateway_named_twice_is_refused():
    with pytest.raises(SettingError, match="GATEWAY_HOSTS = 'gw,gw' .*each host once"):
        unique_gateways(["gw", "gw"])
    unique_gateways(["gw", "spark-1"])


# --- through `python -m sparkctl check` and the deploy ----------------------------------------------------------------


def test_check_validates_every_gateway_host(token_file, monkeypatch, capsys):
    monkeypatch.setenv("GX10_HOSTS", "spark-1,spark-2")
    monkeypatch.setenv("GATEWAY_HOSTS", "gw")
    assert main(["check", "--data", f"MODEL_LOCK_FILE={FAKE_LOCK}"]) == 0
    assert "gw: ok: gateway, routers for coder, embed-bge-m3, embed-qwen3" in capsys.readouterr().out
    assert main(["check", "--data", f"MODEL_LOCK_FILE={FAKE_LOCK}", "--data", "ROUTER_STANDBY_PORT_BASE=30002"]) == 2
    captured = capsys.readouterr()
    assert "spark-1: ok" in captured.out and "spark-2: ok" in captured.out  # the boxes themselves pass
    assert "gw: ROUTER_STANDBY_PORT_BASE = 30002 is not valid" in captured.err and "ROUTER_PORT_BASE + 2" in captured.err
    monkeypatch.setenv("GATEWAY_HOSTS", "spark-2")  # the shipped front port is the box proxy's
    monkeypatch.setenv("SPARK_CODING_MODELS", "")
    assert main(["check", "--data", f"MODEL_LOCK_FILE={FAKE_LOCK}", "--data", "SPARK_TOPOLOGY=tensor-parallel",
                 "--data", "GATEWAY_FRONT_PORT=8443"]) == 2
    assert "spark-2: GATEWAY_HOSTS = 'spark-2' is not valid" in capsys.readouterr().err


def test_check_refuses_a_router_wait_of_0_whenever_a_gateway_is_configured(token_file, monkeypatch, capsys):
    monkeypatch.setenv("GX10_HOSTS", "spark-1,spark-2")
    monkeypatch.setenv("GATEWAY_HOSTS", "")
    assert main(["check", "--data", f"MODEL_LOCK_FILE={FAKE_LOCK}", "--data", "ROUTER_OUT_WAIT_S=0"]) == 0
    capsys.readouterr()
    monkeypatch.setenv("GATEWAY_HOSTS", "gw")
    assert main(["check", "--data", f"MODEL_LOCK_FILE={FAKE_LOCK}", "--data", "ROUTER_OUT_WAIT_S=0"]) == 2
    err = capsys.readouterr().err
    assert "gw: ROUTER_OUT_WAIT_S = 0 is not valid; expected at least 20 s on spark-1" in err, err
    assert "GATEWAY_HOSTS names gw" in err and "Traceback" not in err


def test_check_refuses_a_gateway_when_no_box_is_configured(token_file, monkeypatch, capsys):
    monkeypatch.delenv("GX10_HOSTS", raising=False)
    monkeypatch.setenv("GATEWAY_HOSTS", "gw")
    assert main(["check", "--data", f"MODEL_LOCK_FILE={FAKE_LOCK}"]) == 2
    assert "gw: GX10_HOSTS = '' is not valid" in capsys.readouterr().err


def test_the_deploy_refuses_the_same_before_any_command(tmp_path, monkeypatch):
    from tests.deploy.test_deploy_fake import run_fake
    from tests.deploy.test_gateway_fake import GW

    monkeypatch.setenv("FAKE_GATEWAY", "1")  # a gateway host of its own (tests/standins/gx10_inventory.py)
    monkeypatch.setenv("SPARKCTL_TEST_HANDOFF", str(tmp_path / "handoff"))
    out = run_fake("dgx", tmp_path, "--data", "ROUTER_STANDBY_PORT_BASE=30002")
    assert "ROUTER_STANDBY_PORT_BASE = 30002 is not valid" in out["log"] and "ROUTER_PORT_BASE + 2" in out["log"]
    assert "Traceback" not in out["log"]
    assert not out["by_host"].get(GW), out["by_host"].get(GW)


def test_check_sim_validates_the_simulated_gateway_where_hosts_knows_one(token_file, monkeypatch, capsys):
    """--sim: hosts.sim_gateway_hosts, when sparkctl.config.hosts has it (the simulated gateway); else none."""
    from sparkctl.config import hosts

    sparks = [hosts.HostConn(name=f"spark-{i}", address=f"127.0.0.{i}", simulated=True) for i in (1, 2)]
    monkeypatch.setattr(hosts, "sim_hosts", lambda: sparks)
    monkeypatch.setattr(hosts, "sim_gateway_hosts", lambda: [hosts.HostConn("sim-gw", "127.0.0.9", simulated=True)],
                        raising=False)
    assert main(["check", "--sim", "--data", f"MODEL_LOCK_FILE={FAKE_LOCK}"]) == 0
    assert "sim-gw: ok: gateway, routers for " in capsys.readouterr().out
    assert main(["check", "--sim", "--data", f"MODEL_LOCK_FILE={FAKE_LOCK}", "--data", "GATEWAY_FRONT_PORT=22"]) == 2
    assert "sim-gw: GATEWAY_FRONT_PORT = 22 is not valid" in capsys.readouterr().err
    monkeypatch.delattr(hosts, "sim_gateway_hosts")
    assert main(["check", "--sim", "--data", f"MODEL_LOCK_FILE={FAKE_LOCK}", "--data", "GATEWAY_FRONT_PORT=22"]) == 0
    assert "gateway" not in capsys.readouterr().out
