"""`sim up --gateway NAME`: which instances are the fleet's front door instead of boxes, refused before any
instance starts when the names cannot work (without booting one)."""

import pytest

from sparkctl.errors import SparkctlError
from sparkctl.sim import api, config, instance

NAMES = ["spark-1", "spark-2", "spark-3", "spark-4"]


def test_the_named_instances_are_gateways_and_the_rest_boxes():
    assert api._roles(NAMES, [], ("spark-4",)) == {"spark-1": "box", "spark-2": "box", "spark-3": "box",
                                                   "spark-4": "gateway"}
    assert set(api._roles(NAMES, [], ()).values()) == {"box"}


@pytest.mark.parametrize("gateways, says", [
    (("spark-5",), "--gateway spark-5 is not valid; expected one of spark-1, spark-2, spark-3, spark-4"),
    (("spark-4 ",), "--gateway spark-4  is not valid"),  # a name with a stray space is no instance
    (tuple(NAMES), "leaves no box"),
])
def test_gateway_names_that_cannot_work_are_refused(gateways, says):
    with pytest.raises(SparkctlError, match=says.replace("(", r"\(")):
        api._roles(NAMES, [], gateways)


def test_a_running_instance_keeps_its_role(tmp_path, monkeypatch):
    """Its disk holds what its role's deploy installed: changing it means `sim down` first."""
    monkeypatch.setattr(config, "RUN_DIR", tmp_path)
    monkeypatch.setattr(config, "instance_dir", lambda n: tmp_path / n)
    instance.set_role("spark-4", "gateway")
    assert instance.role_of("spark-4") == "gateway" and instance.role_of("spark-3") == "box"
    with pytest.raises(SparkctlError, match="spark-4 is running as a gateway, not a box; run `python -m sparkctl "
                                            "sim down` first"):
        api._roles(NAMES, ["spark-4"], ())
    assert api._roles(NAMES, ["spark-4"], ("spark-4",))["spark-4"] == "gateway"


def test_two_gateways_by_comma_or_repeated_and_each_once():
    from sparkctl.sim.cli import gateway_names

    assert gateway_names(["spark-4,spark-5"]) == gateway_names(["spark-4", "spark-5"]) == ("spark-4", "spark-5")
    assert gateway_names(["spark-4, spark-5", "spark-4"]) == ("spark-4", "spark-5")
    assert gateway_names(None) == ()
    assert api._roles(NAMES + ["spark-5"], [], gateway_names(["spark-4,spark-5"]))["spark-5"] == "gateway"


def test_two_gateways_carry_the_vip_as_their_own_host_data_and_one_does_not(tmp_path, monkeypatch):
    """hosts.json: with two gateways each has GATEWAY_VIP (keepalived between them); a lone gateway and the boxes
    have none, so `sim up --hosts 4 --gateway spark-4` deploys as it did. The VIP is no instance's address."""
    from sparkctl.config import hosts

    monkeypatch.setattr(config, "RUN_DIR", tmp_path)
    monkeypatch.setattr(config, "instance_dir", lambda n: tmp_path / n)
    monkeypatch.setattr(config, "HOSTS_FILE", tmp_path / "hosts.json")
    names = [config.instance_name(i) for i in range(1, 6)]
    for n in names:
        instance.set_role(n, "gateway" if n in ("spark-4", "spark-5") else "box")
    instance.write_hosts_file(names)
    gws = hosts.sim_gateway_hosts(tmp_path / "hosts.json")
    assert [g.data.get("GATEWAY_VIP") for g in gws] == [config.GATEWAY_VIP] * 2
    assert all("GATEWAY_VIP" not in b.data for b in hosts.sim_hosts(tmp_path / "hosts.json"))
    instance.write_hosts_file(names[:4])
    assert [g.data.get("GATEWAY_VIP") for g in hosts.sim_gateway_hosts(tmp_path / "hosts.json")] == [None]
    assert config.GATEWAY_VIP not in {config.address_of(config.instance_name(i))
                                      for i in range(1, config.MAX_HOSTS + 1)} | {config.HOST_ADDRESS}
    import ipaddress

    assert ipaddress.ip_address(config.GATEWAY_VIP) in ipaddress.ip_network(
        f"{config.HOST_ADDRESS}/{config.PREFIX_LEN}", strict=False)


def test_an_airgapped_instance_boots_without_the_stand_in_index_and_keeps_it_while_running(tmp_path, monkeypatch):
    """`sim up --airgapped NAME`: the box is marked before it boots, so it boots without the wheelhouse's bind mount
    (the stand-in package index, as its veth's firewall cuts the stand-in hub); a running instance keeps the mounts it
    booted with, so changing it is refused, naming it."""
    monkeypatch.setattr(config, "RUN_DIR", tmp_path)
    monkeypatch.setattr(config, "instance_dir", lambda n: tmp_path / n)
    monkeypatch.setattr(config, "WHEELHOUSE", tmp_path / "wheelhouse")
    (tmp_path / "wheelhouse").mkdir()
    (tmp_path / "wheelhouse" / ".complete").touch()
    api._airgap_markers(NAMES[:3], [], ("spark-3",))
    assert [instance.is_airgapped(n) for n in NAMES[:3]] == [False, False, True]
    assert instance.ro_binds("spark-1") == [f"{tmp_path}/wheelhouse:{config.WHEELHOUSE_MOUNT}"]
    assert instance.ro_binds("spark-3") == []
    with pytest.raises(SparkctlError, match="--airgapped: spark-3 is running air-gapped.*sim down` first to boot "
                                            "it without --airgapped spark-3"):
        api._airgap_markers(NAMES[:3], NAMES[:3], ())
    with pytest.raises(SparkctlError, match="spark-1 is running not air-gapped"):
        api._airgap_markers(NAMES[:3], NAMES[:3], ("spark-1", "spark-3"))
    api._airgap_markers(NAMES[:3], NAMES[:3], ("spark-3",))  # as it booted: nothing to change
    assert instance.is_airgapped("spark-3")
