"""How the deploy reaches a box: the inventory's ssh data, and the TCP_NODELAY socket under pyinfra's ssh."""

from __future__ import annotations

import copy
import json
import socket

from sparkctl.config.hosts import HostConn, NoDelaySocket, real_hosts, sim_gateway_hosts, sim_hosts


def test_pyinfra_data_hands_paramiko_a_nodelay_socket():
    data = HostConn(name="spark-1", address="10.0.0.5", ssh_port=2222).pyinfra_data()
    assert (data["ssh_hostname"], data["ssh_port"]) == ("10.0.0.5", 2222)
    sock = data["ssh_paramiko_connect_kwargs"]["sock"]
    assert isinstance(sock, NoDelaySocket) and sock._target == ("10.0.0.5", 2222)
    assert sock._sock is None  # reading the inventory connects to nothing


def test_nodelay_socket_connects_on_first_use_with_nagle_off():
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        lazy = NoDelaySocket("127.0.0.1", port, 5)
        twin = copy.deepcopy(lazy)  # pyinfra copies host data: the copy must not share the connection
        lazy.settimeout(1.0)  # first use, as paramiko's Transport does
        peer, _ = server.accept()
        with peer:
            assert lazy.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
            lazy.sendall(b"SSH-2.0-test\r\n")
            assert peer.recv(64) == b"SSH-2.0-test\r\n"
        lazy.close()
        assert twin._sock is None


def test_real_hosts_from_environment():
    hosts = real_hosts({"GX10_HOSTS": "gx10-a, gx10-b", "GX10_SSH_PORT": "2200", "GX10_SSH_USER": "ops"})
    assert [(h.name, h.ssh_port, h.ssh_user) for h in hosts] == [("gx10-a", 2200, "ops"), ("gx10-b", 2200, "ops")]


def test_a_simulated_gateway_is_the_gateway_groups_host_and_not_a_box(tmp_path):
    """`sim up --gateway spark-4`: spark-4 is listed with role "gateway"; the inventory's boxes (and every probe's
    host list) leave it out, and its role never reaches the host data (where `check` would call it a typo'd key)."""
    listed = tmp_path / "hosts.json"
    listed.write_text(json.dumps([{"name": f"spark-{i}", "address": f"10.250.0.{10 + i}", "flavor": "dgx",
                                   "role": "gateway" if i == 4 else "box"} for i in range(1, 5)]))
    assert [h.name for h in sim_hosts(listed)] == ["spark-1", "spark-2", "spark-3"]
    (gw,) = sim_gateway_hosts(listed)
    assert (gw.name, gw.address, gw.simulated) == ("spark-4", "10.250.0.14", True)
    assert "role" not in gw.pyinfra_data() and gw.data == {"flavor": "dgx"}
    listed.write_text(json.dumps([{"name": "spark-1", "address": "10.250.0.11"}]))  # written before roles existed
    assert [h.name for h in sim_hosts(listed)] == ["spark-1"] and sim_gateway_hosts(listed) == []
