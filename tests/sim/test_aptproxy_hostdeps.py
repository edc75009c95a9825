"""The apt proxy's allow-list, and the host-deps refusal."""

import threading
from http.server import BaseHTTPRequestHandler

import httpx
import pytest

from sparkctl.errors import SparkctlError
from sparkctl.sim import aptproxy, hostdeps
from sparkctl.sim.util import http_server_class


class Upstream(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_GET(self):
        body = f"upstream saw {self.path} host={self.headers['Host']}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def servers():
    up = http_server_class()(("127.0.0.1", 0), Upstream)
    allowed = f"127.0.0.1:{up.server_address[1]}"
    px = aptproxy.make_server("127.0.0.1", 0, allowed_hosts=["deb.debian.org", allowed])
    for s in (up, px):
        threading.Thread(target=s.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{px.server_address[1]}", allowed
    for s in (up, px):
        s.shutdown()
        s.server_close()


def test_forwards_allowed_and_refuses_the_rest(servers):
    proxy, allowed = servers
    with httpx.Client(proxy=proxy, trust_env=False) as c:
        r = c.get(f"http://{allowed}/debian/dists/bookworm/InRelease")
        assert r.status_code == 200 and r.text == f"upstream saw /debian/dists/bookworm/InRelease host={allowed}"
        assert c.get("http://example.com/").status_code == 403
    with httpx.Client(trust_env=False) as c:
        assert c.get(f"{proxy}/not-absolute").status_code == 400


def test_hostdeps_names_tool_and_package(monkeypatch):
    missing = hostdeps.missing_tools(path="/nonexistent")
    assert missing["debootstrap"] == "debootstrap" and missing["gpg"] == "gnupg"
    assert set(missing.values()) <= set(hostdeps.host_packages())  # CI installs host-packages.txt
    monkeypatch.setattr(hostdeps, "missing_tools", lambda: {"debootstrap": "debootstrap"})
    monkeypatch.setattr(hostdeps.os, "geteuid", lambda: 0)
    with pytest.raises(SparkctlError, match=r"debootstrap .*Debian package debootstrap"):
        hostdeps.check()
