"""Every file the gateway step writes, validated offline by `check` (sparkctl/check/gateway_files.py) with the real
validators: the nginx site through nginx -t, the routers' and the firewall's units through systemd-analyze verify,
the bridge's ruleset through nft -c, keepalived.conf through keepalived -t; a broken one is refused naming the file
and the validator's words (never the VRRP password), a validator this machine lacks is said to be skipped."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sparkctl.__main__ import main
from sparkctl.check import gateway_files
from sparkctl.check import tools as check_tools
from sparkctl.check.gateway import validate_gateway
from sparkctl.config import groupdata
from sparkctl.errors import SettingError
from sparkctl.render import front_doors, router
from tests.conftest import FAKE_LOCK

PASSWORD = "3f9a0c1d"
VIP = {"GATEWAY_VIP": "10.0.0.100", "GATEWAY_VIP_INTERFACE": "enP7s7"}  # an interface this machine does not have
GATEWAYS = {"gw-1": "10.0.0.21", "gw-2": "10.0.0.22"}
BOXES = {"spark-1": "spark-1.lan", "spark-2": "10.0.0.12"}  # one known by a name this machine cannot resolve

need = {tool: pytest.mark.skipif(shutil.which(tool) is None, reason=f"{tool} not installed "
                                 "(scripts/control-packages.txt)") for tool in ("nginx", "nft", "keepalived")}


@pytest.fixture()
def base(token_file, tmp_path):
    secrets = tmp_path / "secrets"
    secrets.mkdir(mode=0o700)
    (secrets / "vrrp_password").write_text(PASSWORD + "\n")
    (secrets / "vrrp_password").chmod(0o600)
    return {**groupdata.load(["all", "gx10"]), "MODEL_LOCK_FILE": FAKE_LOCK, "SECRETS_DIR": str(secrets), **VIP}


def files_of(base: dict, name: str = "gw-1", **data) -> tuple[str, ...]:
    boxes = {b: {**base, "ssh_hostname": a, **data} for b, a in BOXES.items()}
    gws = {g: {**base, "ssh_hostname": a, **data} for g, a in GATEWAYS.items()}
    gw = validate_gateway(name, gws[name], boxes, gateways=gws)
    return gateway_files.check_gateway_files(gw, name, list(GATEWAYS))


def _namespaces():
    if check_tools.namespaces() is None:
        pytest.skip("no network namespace can be made here")


@need["nginx"]
@need["nft"]
@need["keepalived"]
def test_the_shipped_gateway_files_pass_every_validator(base):
    _namespaces()
    notes = files_of(base)
    assert notes[0].startswith("nginx -t: sparkctl-gateway.conf, sparkctl-gateway-token.conf"), notes
    assert notes[1].startswith("systemd-analyze verify: sparkctl-router-coder.service") and \
        "sparkctl-bridge-firewall.service" in notes[1]
    assert notes[2] == "nft -c: bridge-firewall.nft"
    assert notes[3] == "keepalived -t: keepalived.conf (with front-door-health)"
    assert len(files_of(base, name="gw-2", GATEWAY_VIP="")) == 3  # no VIP: no keepalived


@need["keepalived"]
def test_a_broken_keepalived_conf_is_refused_naming_the_file_and_keepalived_without_the_password(base, monkeypatch):
    _namespaces()
    real = front_doors.keepalived_conf
    monkeypatch.setattr(front_doors, "keepalived_conf", lambda *a: real(*a).replace("advert_int", "advert_intx"))
    with pytest.raises(SettingError) as e:
        files_of(base)
    said = str(e.value)
    assert "/etc/keepalived/keepalived.conf line" in said and "keepalived -t" in said
    assert "Unknown keyword 'advert_intx'" in said
    monkeypatch.setattr(front_doors, "keepalived_conf", lambda *a: real(*a).replace("auth_pass", "auth_passx"))
    with pytest.raises(SettingError) as e:
        files_of(base)
    assert "auth_passx" in str(e.value) and PASSWORD not in str(e.value) and "<secret>" in str(e.value)


@need["nft"]
def test_a_broken_bridge_ruleset_is_refused_naming_the_file_and_nft(base, monkeypatch):
    _namespaces()
    real = front_doors.bridge_firewall
    monkeypatch.setattr(front_doors, "bridge_firewall", lambda *a: real(*a).replace("reject with tcp reset", "refuse"))
    with pytest.raises(SettingError) as e:
        files_of(base)
    said = str(e.value)
    assert "/etc/sparkctl/bridge-firewall.nft line" in said and "nft -c" in said and "syntax error" in said


@need["nft"]
def test_the_routers_user_is_known_to_nft_though_this_machine_has_no_such_account(base):
    _namespaces()
    assert "nft -c: bridge-firewall.nft" in files_of(base, ROUTER_USER="sparkctl-router-x")


@need["nginx"]
def test_a_broken_gateway_site_is_refused_naming_the_file_and_nginx(base, monkeypatch):
    real = router.site
    monkeypatch.setattr(router, "site", lambda *a, **k: real(*a, **k).replace("proxy_ssl_verify on;",
                                                                              "proxy_ssl_verify maybe;", 1))
    with pytest.raises(SettingError) as e:
        files_of(base)
    said = str(e.value)
    assert "/etc/nginx/sites-available/sparkctl-gateway.conf line" in said and "nginx -t" in said
    assert "proxy_ssl_verify" in said


def test_a_validator_this_machine_lacks_is_said_to_be_skipped(base, monkeypatch):
    monkeypatch.setattr(check_tools, "available", lambda tool: False)
    notes = files_of(base)
    for tool, exe in (("nginx -t", "nginx"), ("nft -c", "nft"), ("keepalived -t", "keepalived")):
        assert f"{tool}: skipped ({exe} is not installed on this control machine: apt-get install the packages of " \
               "scripts/control-packages.txt)" in notes, notes


def test_the_control_packages_list_every_gateway_validator():
    listed = {line.split()[0] for line in (Path(__file__).parents[2] / "scripts/control-packages.txt").read_text()
              .splitlines() if line.strip() and not line.startswith("#")}
    assert {"keepalived", "nftables", "nginx-light", "systemd", "iproute2", "util-linux"} <= listed


@need["nft"]
def test_check_refuses_a_broken_gateway_file_through_the_cli(token_file, monkeypatch, capsys):
    _namespaces()
    monkeypatch.setenv("GX10_HOSTS", "spark-1,spark-2")
    monkeypatch.setenv("GATEWAY_HOSTS", "gw")
    assert main(["check", "--data", f"MODEL_LOCK_FILE={FAKE_LOCK}"]) == 0
    assert "gw:   nft -c: bridge-firewall.nft" in capsys.readouterr().out
    real = front_doors.bridge_firewall
    monkeypatch.setattr(front_doors, "bridge_firewall", lambda *a: real(*a).replace("reject with tcp reset", "refuse"))
    assert main(["check", "--data", f"MODEL_LOCK_FILE={FAKE_LOCK}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sparkctl check: gw: ") and "nft -c accepts in /etc/sparkctl/bridge-firewall.nft" in err
    assert "syntax error" in err and "Traceback" not in err


def test_a_vip_with_one_gateway_is_warned_about_and_passes(base, monkeypatch, capsys):
    boxes = {b: {**base, "ssh_hostname": a} for b, a in BOXES.items()}
    gw = {**base, "ssh_hostname": "10.0.0.21"}
    warned = validate_gateway("gw-1", gw, boxes, gateways={"gw-1": gw}).warnings
    assert len(warned) == 1 and "GATEWAY_VIP = 10.0.0.100 with one gateway (gw-1)" in warned[0]
    two = {g: {**base, "ssh_hostname": a} for g, a in GATEWAYS.items()}
    assert validate_gateway("gw-1", two["gw-1"], boxes, gateways=two).warnings == ()
    monkeypatch.setenv("GX10_HOSTS", "spark-1,spark-2")
    monkeypatch.setenv("GATEWAY_HOSTS", "gw")
    monkeypatch.setattr(check_tools, "available", lambda tool: False)  # the warning, not the validators
    assert main(["check", "--data", f"MODEL_LOCK_FILE={FAKE_LOCK}", "--data", f"SECRETS_DIR={base['SECRETS_DIR']}",
                 "--data", "GATEWAY_VIP=10.0.0.100", "--data", "GATEWAY_VIP_INTERFACE=eth0"]) == 0
    assert "gw: WARNING: GATEWAY_VIP = 10.0.0.100 with one gateway (gw)" in capsys.readouterr().out
