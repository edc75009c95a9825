"""The proxy's scrape paths (issue 11), run in the real nginx on loopback: the scrape token opens
/<served>/metrics and /node/metrics and nothing else; the API token does not open them."""

from __future__ import annotations

import http.server
import json
import shutil
import socket
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from sparkctl.config import pki
from tests.render.test_render import SCRAPE_TOKEN as SCRAPE
from tests.render.test_render import TOKEN, render_proxy_files, settings_for

pytestmark = pytest.mark.skipif(shutil.which("nginx") is None, reason="nginx not installed (nginx-light)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Upstream(http.server.BaseHTTPRequestHandler):
    """Stands in for a vLLM / node exporter: echoes which port and path were reached, and the auth it got."""

    def do_GET(self):
        body = json.dumps({"port": self.server.server_address[1], "path": self.path,
                           "authorization": self.headers.get("Authorization")}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def render(s, tmp: Path) -> str:
    """The site and its root-only token file (both maps), as tasks/proxy.py writes them (paths under tmp)."""
    cert, key, ca = pki.ensure_server_cert(tmp / "pki", "test-box", ["127.0.0.1"])
    return render_proxy_files(s.cfg, s.services, tmp, cert, key)


@pytest.fixture
def proxy(gx10_data, tmp_path):
    ports = [free_port() for _ in range(5)]
    data = dict(gx10_data, PROXY_PORT=ports[0], CODER_PORT=ports[1], EMBEDDER_PORTS=ports[2:4],
                NODE_EXPORTER_PORT=ports[4])
    s = settings_for(data)
    servers = [http.server.ThreadingHTTPServer(("127.0.0.1", p), Upstream) for p in ports[1:]]
    for srv in servers:
        threading.Thread(target=srv.serve_forever, daemon=True).start()
    (tmp_path / "site.conf").write_text(render(s, tmp_path))
    conf = tmp_path / "nginx.conf"
    conf.write_text(f"daemon off;\nmaster_process off;\npid {tmp_path}/nginx.pid;\nerror_log stderr;\nevents {{}}\n"
                    f"http {{\n    access_log off;\n    client_body_temp_path {tmp_path}/body;\n"
                    f"    proxy_temp_path {tmp_path}/proxy;\n    include {tmp_path}/site.conf;\n}}\n")
    check = subprocess.run(["nginx", "-t", "-p", str(tmp_path), "-c", str(conf)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    nginx = subprocess.Popen(["nginx", "-p", str(tmp_path), "-c", str(conf)], stderr=subprocess.PIPE)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", ports[0]), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    ctx = ssl.create_default_context(cafile=str(tmp_path / "pki" / "ca.pem"))
    yield {"port": ports[0], "ctx": ctx, "data": data, "s": s}
    nginx.terminate()
    nginx.wait(timeout=10)
    for srv in servers:
        srv.shutdown()


def get(proxy, path: str, token: str | None, method: str = "GET") -> tuple[int, dict | None]:
    req = urllib.request.Request(f"https://127.0.0.1:{proxy['port']}{path}", method=method,
                                 headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, context=proxy["ctx"], timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, None


def test_scrape_token_opens_only_the_scrape_paths(proxy):
    d, s = proxy["data"], proxy["s"]
    for svc in s.services:
        code, body = get(proxy, f"/{svc.served_name}/metrics", SCRAPE)
        assert code == 200 and body == {"port": svc.port, "path": "/metrics", "authorization": None}
        assert get(proxy, f"/{svc.served_name}/metrics", TOKEN)[0] == 401  # the API token does not open metrics
        assert get(proxy, f"/{svc.served_name}/metrics", None)[0] == 401
        assert get(proxy, f"/{svc.served_name}/v1/models", SCRAPE)[0] == 401  # nor the scrape token the API
        assert get(proxy, f"/{svc.served_name}/v1/models", TOKEN)[0] == 200
        assert get(proxy, f"/{svc.served_name}/metrics", SCRAPE, method="POST")[0] == 403
    code, body = get(proxy, f"/{d['SCRAPE_NODE_PATH']}/metrics", SCRAPE)
    assert code == 200 and body == {"port": d["NODE_EXPORTER_PORT"], "path": "/metrics", "authorization": None}
    assert get(proxy, f"/{d['SCRAPE_NODE_PATH']}/metrics", TOKEN)[0] == 401
    assert get(proxy, "/node/other", SCRAPE)[0] == 401  # anything else: the API's rules (token, then 404)
