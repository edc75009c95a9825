"""Two front doors: what `check` and the gateway step refuse before any host is touched (sparkctl/check/gateway.py
front_doors), each naming the setting, the value and what is valid; beside each refusal a variant that passes, so a
refusal firing on everything fails too. Gateways here are known by IP addresses (a DNS name is not looked up)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkctl.check.gateway import validate_gateway
from sparkctl.config import groupdata, pki
from sparkctl.errors import SettingError
from tests.conftest import FAKE_LOCK

BOXES = {"spark-1": "10.0.0.11", "spark-2": "10.0.0.12"}
GATEWAYS = {"gw-1": "10.0.0.21", "gw-2": "10.0.0.22"}
VIP = {"GATEWAY_VIP": "10.0.0.100", "GATEWAY_VIP_INTERFACE": "eth0"}


@pytest.fixture()
def base(tmp_path):
    secrets = tmp_path / "secrets"
    secrets.mkdir(mode=0o700)
    pw = secrets / "vrrp_password"
    pw.write_text("3f9a0c1d\n")
    pw.chmod(0o600)
    return {**groupdata.load(["all", "gx10"]), "MODEL_LOCK_FILE": FAKE_LOCK, "SECRETS_DIR": str(secrets)}


def check(base: dict, name: str = "gw-1", per_gateway: dict | None = None, **data):
    """validate_gateway for `name` with both gateways' data (per_gateway: one gateway's own host data on top)."""
    boxes = {b: {**base, "ssh_hostname": a, **data} for b, a in BOXES.items()}
    gws = {g: {**base, "ssh_hostname": a, **data, **(per_gateway or {}).get(g, {})} for g, a in GATEWAYS.items()}
    return validate_gateway(name, gws[name], boxes, gateways=gws)


def refused(base: dict, **kw) -> SettingError:
    with pytest.raises(SettingError) as e:
        check(base, **kw)
    return e.value


def test_two_gateways_with_a_vip_pass_and_one_without_keeps_today(base):
    assert check(base, **VIP).config.cfg.GATEWAY_VIP == "10.0.0.100"
    assert check(base, name="gw-2", **VIP).pools
    assert check(base).config.cfg.GATEWAY_VIP == ""  # no VIP: no password needed, nothing of keepalived checked


def test_a_vip_outside_the_gateways_subnet_is_refused(base):
    e = refused(base, **{**VIP, "GATEWAY_VIP": "10.0.1.100"})
    assert e.setting == "GATEWAY_VIP" and e.value == "10.0.1.100"
    assert "10.0.0.0/24" in str(e) and "GATEWAY_VIP_PREFIX_LEN = 24" in str(e)
    check(base, **{**VIP, "GATEWAY_VIP": "10.0.1.100", "GATEWAY_VIP_PREFIX_LEN": 16})  # a /16 holds both


@pytest.mark.parametrize("address, owner", [("10.0.0.12", "spark-2"), ("10.0.0.22", "gw-2")])
def test_a_vip_equal_to_a_hosts_address_is_refused(base, address, owner):
    e = refused(base, **{**VIP, "GATEWAY_VIP": address})
    assert e.setting == "GATEWAY_VIP" and e.value == address and f"{owner}'s own address" in str(e)


def test_the_subnets_broadcast_address_is_refused(base):
    e = refused(base, **{**VIP, "GATEWAY_VIP": "10.0.0.255"})
    assert e.setting == "GATEWAY_VIP" and "broadcast" in str(e)


@pytest.mark.parametrize("router_id", [0, 256, -1])
def test_a_vrrp_router_id_outside_1_to_255_is_refused(base, router_id):
    e = refused(base, VRRP_ROUTER_ID=router_id, **VIP)
    assert e.setting == "VRRP_ROUTER_ID" and e.value == router_id and "from 1 to 255" in str(e)


def test_router_ids_1_and_255_pass(base):
    check(base, VRRP_ROUTER_ID=1, **VIP)
    check(base, VRRP_ROUTER_ID=255, **VIP)


def test_two_gateways_on_different_front_ports_are_refused(base):
    e = refused(base, per_gateway={"gw-2": {"GATEWAY_FRONT_PORT": 8443}}, **VIP)
    assert e.setting == "GATEWAY_FRONT_PORT" and e.value == 8443 and "443, as on gw-1" in str(e)
    assert "gw-2's own data" in str(e)
    e = refused(base, name="gw-2", per_gateway={"gw-2": {"VRRP_ROUTER_ID": 52}}, **VIP)
    assert e.setting == "VRRP_ROUTER_ID" and e.value == 52  # the gateway step of either gateway refuses it
    check(base, per_gateway={"gw-2": {"GATEWAY_VIP_INTERFACE": "enP7s7"}}, **VIP)  # an interface may differ


def test_two_gateways_on_different_cas_are_refused(base, tmp_path):
    """gw-2 with the operator's certificate from a CA of its own, gw-1 with the generated CA: refused naming
    TLS_CERT_FILE; both with certificates from one CA pass (two leaves, one issuer)."""
    one = pki.ensure_server_cert(tmp_path / "ca-one", "gw-1", ["10.0.0.21", "10.0.0.100"])
    two = pki.ensure_server_cert(tmp_path / "ca-one", "gw-2", ["10.0.0.22", "10.0.0.100"])
    other = pki.ensure_server_cert(tmp_path / "ca-other", "gw-2", ["10.0.0.22", "10.0.0.100"])
    for path in (*one[:2], *two[:2], *other[:2]):
        path.chmod(0o600)
    tls = {g: {"TLS_CERT_FILE": str(c), "TLS_KEY_FILE": str(k)} for g, (c, k, _) in (("gw-1", one), ("gw-2", two))}
    check(base, per_gateway=tls, **VIP)
    e = refused(base, per_gateway={**tls, "gw-2": {"TLS_CERT_FILE": str(other[0]), "TLS_KEY_FILE": str(other[1])}},
                **VIP)
    assert e.setting == "TLS_CERT_FILE" and e.value == str(other[0]) and "one CA" in str(e)


def test_a_missing_vrrp_password_names_the_file_to_create(base):
    pw = Path(base["SECRETS_DIR"]) / "vrrp_password"
    pw.unlink()
    e = refused(base, **VIP)
    assert e.setting == "VRRP_PASSWORD_FILE" and e.value == str(pw)
    assert "openssl rand -hex 4" in str(e) and str(pw) in str(e)
    check(base)  # no VIP: no password read


def test_a_vrrp_password_keepalived_would_cut_is_refused(base):
    pw = Path(base["SECRETS_DIR"]) / "vrrp_password"
    pw.write_text("0123456789abcdef\n")
    e = refused(base, **VIP)
    assert e.setting == "VRRP_PASSWORD_FILE" and "1 to 8" in str(e)


def test_a_vip_without_its_interface_is_refused(base):
    e = refused(base, GATEWAY_VIP="10.0.0.100")
    assert e.setting == "GATEWAY_VIP_INTERFACE" and e.value == ""


def test_a_priority_step_leaving_the_last_gateway_below_1_is_refused(base):
    e = refused(base, VRRP_PRIORITY_FIRST=100, VRRP_PRIORITY_STEP=100, **VIP)
    assert e.setting == "VRRP_PRIORITY_STEP" and e.value == 100 and "at most 99 for 2 gateways" in str(e)
    check(base, VRRP_PRIORITY_FIRST=100, VRRP_PRIORITY_STEP=99, **VIP)


def test_the_health_page_port_is_kept_apart_from_the_gateways_other_ports(base):
    e = refused(base, FRONT_HEALTH_PORT=base["ROUTER_BRIDGE_PORT"], **VIP)
    assert e.setting == "FRONT_HEALTH_PORT" and e.value == base["ROUTER_BRIDGE_PORT"]  # the one changed
    assert "ROUTER_BRIDGE_PORT" in str(e)
    check(base, FRONT_HEALTH_PORT=base["ROUTER_BRIDGE_PORT"])  # no VIP: no health page, no clash
