"""The proxy serves the API and nothing else: the rendered site run by the real nginx (nginx-light) on loopback in
front of upstreams that echo what reached them. A table of paths (encoded, dot-segment, trailing-slash, case and
;param variants) must either reach exactly one allowed route's fixed upstream path, or answer 404 without touching
an upstream; without the bearer token every path answers 401.

The same table runs against the simulated Spark's nginx in tests/e2e/test_hardening.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import json
import re
import shutil
import socket
import ssl
import subprocess
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from sparkctl.config import pki
from tests.render.test_render import TOKEN, render_proxy_files, settings_for

pytestmark = pytest.mark.skipif(shutil.which("nginx") is None,
                                reason="nginx not installed (apt-get install nginx-light)")

# (method, path as sent on the request line, the upstream path it must arrive as); served names of the shipped
# configuration: coder, embed-qwen3, embed-bge-m3
ALLOWED = [
    ("GET", "/coder/v1/models", "/v1/models"),
    ("HEAD", "/coder/v1/models", "/v1/models"),
    ("GET", "/coder/v1/models?limit=1", "/v1/models?limit=1"),
    ("POST", "/coder/v1/chat/completions", "/v1/chat/completions"),
    ("POST", "/coder/v1/completions", "/v1/completions"),
    ("POST", "/coder/v1/responses", "/v1/responses"),
    ("POST", "/coder/v1/messages", "/v1/messages"),
    ("POST", "/coder/v1/messages/count_tokens", "/v1/messages/count_tokens"),
    ("POST", "/coder/tokenize", "/tokenize"),
    ("GET", "/coder/version", "/version"),
    ("POST", "/embed-qwen3/v1/embeddings", "/v1/embeddings"),
    ("GET", "/embed-bge-m3/v1/models", "/v1/models"),
    ("GET", "/embed-bge-m3/version", "/version"),
    # the gateway router's health path (ROUTER_HEALTH_PATH below each served name): vLLM's /health, GET only
    ("GET", "/coder/health", "/health"),
    ("HEAD", "/coder/health", "/health"),
    ("GET", "/embed-qwen3/health", "/health"),
    ("GET", "/coder/./health", "/health"),
    # spellings nginx normalises to an allowed route: they reach that route's fixed path, never anything else
    ("GET", "//coder//v1/models", "/v1/models"),
    ("GET", "/coder/./v1/models", "/v1/models"),
    ("GET", "/coder/v1/../v1/models", "/v1/models"),
    ("GET", "/coder/v1/%6dodels", "/v1/models"),
    ("GET", "/coder%2Fv1%2Fmodels", "/v1/models"),
    ("POST", "/coder/v1/chat/x/../completions", "/v1/chat/completions"),
]

# (method, path): 404 through the proxy, no upstream touched
DENIED = [
    ("GET", "/coder/metrics"), ("GET", "/coder/metrics/"), ("GET", "/coder/metrics%2F"), ("GET", "/coder/metrics%2f"),
    ("HEAD", "/coder/metrics/"), ("POST", "/coder/metrics"), ("GET", "/coder/%6detrics"), ("GET", "/coder/./metrics"),
    ("GET", "//coder//metrics"), ("GET", "/coder/v1/../metrics"), ("GET", "/coder/v1/%2e%2e/metrics"),
    ("GET", "/coder/v1/%2E%2E/metrics"), ("GET", "/coder/v1/models/../../metrics"), ("GET", "/coder/metrics;x"),
    ("GET", "/coder/docs"), ("GET", "/coder/docs/"), ("GET", "/coder/redoc"), ("GET", "/coder/openapi.json"),
    ("OPTIONS", "/coder/openapi.json"), ("GET", "/coder/load"), ("GET", "/coder/health/"), ("GET", "/coder/health%2F"),
    ("GET", "/coder/v1/health"), ("GET", "/health"), ("GET", "/coder/healthz"), ("GET", "/coder/ping"),
    ("POST", "/coder/ping"), ("GET", "/coder/server_info"), ("POST", "/coder/pause"), ("POST", "/coder/sleep"),
    ("POST", "/coder/collective_rpc"), ("POST", "/coder/reset_prefix_cache"), ("POST", "/coder/detokenize"),
    ("POST", "/coder/v1/load_lora_adapter"), ("POST", "/coder/invocations"), ("POST", "/coder/pooling"),
    ("GET", "/coder/v1/responses/resp_1"), ("POST", "/coder/v1/chat/completions/render"),
    ("POST", "/coder/v1/chat/completionsX"), ("POST", "/coder/v1/embeddings"),
    ("GET", "/coder/v1/models/"), ("GET", "/coder/v1/models%2F"), ("GET", "/coder/v1/models/."),
    ("GET", "/coder/v1/models/.."), ("POST", "/coder/v1/chat/completions/x/.."), ("GET", "/coder/v1/models;x"),
    ("GET", "/coder/v1/models%3Bx"),
    ("GET", "/Coder/v1/models"), ("GET", "/coder/V1/models"), ("GET", "/coder/v1/MODELS"),
    ("GET", "/coder\\v1\\models"), ("GET", "/coder/"), ("GET", "/coder"), ("GET", "/"), ("GET", "/metrics"),
    ("GET", "/v1/models"), ("POST", "/v1/chat/completions"), ("GET", "/coder/v1"), ("GET", "/coder/v1/"),
    ("POST", "/embed-qwen3/v1/chat/completions"), ("POST", "/embed-qwen3/tokenize"),
    ("GET", "/embed-qwen3/metrics"), ("GET", "/embed-bge-m3/docs"),
]


def request(address: tuple[str, int], ctx: ssl.SSLContext, method: str, path: str, token: str | None):
    """One HTTP/1.1 request with `path` sent exactly as written (http.client does not normalise it)."""
    conn = http.client.HTTPSConnection(*address, context=ctx, timeout=10)
    try:
        conn.putrequest(method, path, skip_accept_encoding=True)
        body = b"{}" if method == "POST" else b""
        if token is not None:
            conn.putheader("Authorization", f"Bearer {token}")
        if body:
            conn.putheader("Content-Type", "application/json")
        conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Echo(BaseHTTPRequestHandler):
    """Stand-in for a vLLM server: answers 200 with the method, path and headers that reached it."""

    def _echo(self):
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.server.hits.append((self.command, self.path))
        body = json.dumps({"method": self.command, "path": self.path, "port": self.server.server_port,
                           "headers": {k.lower(): v for k, v in self.headers.items()}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_POST = do_HEAD = do_OPTIONS = do_PUT = do_DELETE = _echo

    def log_message(self, *args):
        pass


@dataclasses.dataclass
class Proxy:
    address: tuple[str, int]
    ctx: ssl.SSLContext
    upstreams: dict  # served name -> ThreadingHTTPServer
    site: str

    def hits(self) -> list:
        return [h for srv in self.upstreams.values() for h in srv.hits]

    def clear(self) -> None:
        for srv in self.upstreams.values():
            srv.hits.clear()


@contextlib.contextmanager
def nginx_running(tmp: Path, site: str):
    """The real nginx, in the foreground, with `site` inside its http block; yields its (host, port)."""
    port = int(re.search(r"listen (\d+) ssl", site).group(1))
    (tmp / "site.conf").write_text(site)
    conf = tmp / "nginx.conf"
    temp = "".join(f"    {k}_temp_path {tmp}/{k};\n" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    conf.write_text(f"daemon off;\nuser root;\npid {tmp}/nginx.pid;\nerror_log stderr;\nevents {{}}\n"
                    f"http {{\n    access_log off;\n{temp}    include {tmp}/site.conf;\n}}\n")
    proc = subprocess.Popen(["nginx", "-p", str(tmp), "-c", str(conf)], stderr=subprocess.PIPE, text=True)
    address = ("127.0.0.1", port)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(address, timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read()
                assert time.monotonic() < deadline, "nginx did not start listening"
                time.sleep(0.05)
        yield address
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def echo_server() -> ThreadingHTTPServer:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    srv.daemon_threads, srv.hits = True, []
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


@pytest.fixture(scope="module")
def proxy(tmp_path_factory):
    """The shipped configuration's site, rendered for loopback high ports, run by the real nginx."""
    from sparkctl.config import groupdata
    from tests.conftest import API_TOKEN, FAKE_LOCK, SCRAPE_TOKEN

    tmp = tmp_path_factory.mktemp("nginx")
    data = groupdata.load(["all", "gx10"])
    data.update(MODEL_LOCK_FILE=FAKE_LOCK, SECRETS_DIR=str(tmp / "secrets"), PROXY_PORT=free_port())
    token_path = tmp / "api_token"
    token_path.write_text(API_TOKEN + "\n")
    token_path.chmod(0o600)
    mp = pytest.MonkeyPatch()
    mp.setenv("SPARK_API_TOKEN_FILE", str(token_path))
    scrape_path = tmp / "scrape_token"
    scrape_path.write_text(SCRAPE_TOKEN + "\n")
    scrape_path.chmod(0o600)
    mp.setenv("SPARK_SCRAPE_TOKEN_FILE", str(scrape_path))
    mp.setenv("GX10_HOSTS", "")
    try:
        settings = settings_for(data)
    finally:
        mp.undo()
    services = [s for s in settings.services if not s.headless]
    upstreams, moved = {}, []
    for svc in services:  # the services' real ports may be taken here: give each echo server a free one
        srv = echo_server()
        upstreams[svc.served_name] = srv
        moved.append(dataclasses.replace(svc, port=srv.server_port))
    cert, key, ca = pki.ensure_server_cert(tmp / "pki", "test-box", ["127.0.0.1"])
    site = render_proxy_files(settings.cfg, moved, tmp, cert, key)
    with nginx_running(tmp, site) as address:
        yield Proxy(address, ssl.create_default_context(cafile=str(ca)), upstreams, site)
    for srv in upstreams.values():
        srv.shutdown()
        srv.server_close()


@pytest.mark.parametrize("method,path,upstream", ALLOWED)
def test_allowed_routes_reach_exactly_their_fixed_upstream_path(proxy, method, path, upstream):
    proxy.clear()
    status, headers, body = request(proxy.address, proxy.ctx, method, path, TOKEN)
    assert status == 200, (status, body)
    served = next(p for p in path.replace("%2F", "/").split("/") if p)
    assert proxy.hits() == [(method, upstream)]  # one request, at the fixed path, at this model's server only
    assert proxy.upstreams[served].hits == [(method, upstream)]
    assert "WWW-Authenticate" not in headers
    if method != "HEAD":
        assert "authorization" not in json.loads(body)["headers"]  # the token never reaches vLLM


def dot_segments_resolved(path: str) -> str:
    """The path percent-decoded, slashes merged and . and .. segments resolved, as nginx does before choosing a
    location (merge_slashes is on by default)."""
    out: list[str] = []
    for segment in re.sub("/+", "/", urllib.parse.unquote(path.split("?")[0])).split("/"):
        if segment == "..":
            out = out[:-1] if len(out) > 1 else out
        elif segment != ".":
            out.append(segment)
    return "/".join(out)


@pytest.mark.parametrize("method,path", DENIED)
def test_everything_else_is_404_and_reaches_no_upstream(proxy, method, path):
    """With the API token: 404, except where nginx's normalised URI is a scrape path (/<served>/metrics): that one
    needs the scrape token, so the API token gets 401. Either way nothing reaches vLLM."""
    proxy.clear()
    status, _headers, _body = request(proxy.address, proxy.ctx, method, path, TOKEN)
    assert status == (401 if re.fullmatch(r"/[^/]+/metrics", dot_segments_resolved(path)) else 404), status
    assert proxy.hits() == []


@pytest.mark.parametrize("token", [None, "wrong", TOKEN + "x"])
def test_without_the_token_every_path_is_401(proxy, token):
    proxy.clear()
    for method, path, *_ in ALLOWED + DENIED:
        status, headers, _ = request(proxy.address, proxy.ctx, method, path, token)
        assert status == 401, (method, path, status)
        assert headers.get("WWW-Authenticate") == 'Bearer realm="sparkctl"', (method, path)
    assert proxy.hits() == []


def test_every_configured_route_is_published_and_only_those(proxy):
    """The site is generated from PROXY_ROUTES: each route of each model has its exact location, nothing more."""
    from sparkctl.config import groupdata

    routes = groupdata.load(["all", "gx10"])["PROXY_ROUTES"]
    locations = [line.strip() for line in proxy.site.splitlines() if line.strip().startswith("location ")]
    exact = sorted(line.split()[2] for line in locations if line.startswith("location = "))
    served = (("coder", "coder"), ("embed-qwen3", "embedder"), ("embed-bge-m3", "embedder"))
    scrape = [f"/{name}/metrics" for name, _ in served] + ["/node/metrics"]  # scrape token only (issue 11)
    health = [f"/{name}/health" for name, _ in served]  # the gateway router's health checks
    assert exact == sorted([f"/{name}{r}" for name, role in served for r in routes[role]] + scrape + health)
    assert [line for line in locations if not line.startswith("location = ")] == ["location / {"]  # the 404


def test_the_health_path_takes_only_get(proxy):
    """Anything but GET/HEAD on the health path is refused before vLLM (a draining box failing it: tests/gateway)."""
    proxy.clear()
    status, _h, _b = request(proxy.address, proxy.ctx, "POST", "/coder/health", TOKEN)
    assert status == 403 and proxy.hits() == []


def test_the_table_catches_a_prefix_proxy(tmp_path):
    """Not vacuous: behind the previous design (one prefix location per model, /metrics blocked by an exact
    match) the table finds the leaks the issue reported."""
    cert, key, ca = pki.ensure_server_cert(tmp_path / "pki", "test-box", ["127.0.0.1"])
    srv = echo_server()
    site = (f"server {{\n listen {free_port()} ssl;\n ssl_certificate {cert};\n ssl_certificate_key {key};\n"
            f" location = /coder/metrics {{ return 404; }}\n"
            f" location /coder/ {{ proxy_pass http://127.0.0.1:{srv.server_port}/; }}\n"
            f" location / {{ return 404; }}\n}}\n")
    try:
        with nginx_running(tmp_path, site) as address:
            ctx = ssl.create_default_context(cafile=str(ca))
            leaked = [path for method, path in DENIED if path.startswith("/coder/")
                      and request(address, ctx, method, path, None)[0] != 404]
    finally:
        srv.shutdown()
        srv.server_close()
    assert {"/coder/metrics/", "/coder/metrics%2F", "/coder/docs", "/coder/openapi.json", "/coder/load"} <= set(leaked)


@pytest.mark.parametrize("routes", [
    {"coder": ["/v1/models; } location / { proxy_pass http://127.0.0.1:8000"], "embedder": ["/v1/embeddings"]},
    {"coder": ["v1/models"], "embedder": ["/v1/embeddings"]},
    {"coder": ["/v1/models/"], "embedder": ["/v1/embeddings"]},
    {"coder": ["/v1/models"], "embedder": []},
    {"coder": "/v1/models", "embedder": ["/v1/embeddings"]},
    {"coder": ["/v1/models"]},
])
def test_routes_that_are_not_plain_paths_are_refused(routes):
    """PROXY_ROUTES goes into the site verbatim: the settings schema refuses anything but plain paths per role."""
    from sparkctl.config import groupdata
    from sparkctl.errors import SettingError
    from tests.conftest import typed

    with pytest.raises(SettingError, match=r"PROXY_ROUTES"):
        typed({**groupdata.load(["all", "gx10"]), "PROXY_ROUTES": routes})


def test_the_shipped_routes_pass_the_check():
    from sparkctl.config import groupdata
    from tests.conftest import typed

    typed(groupdata.load(["all", "gx10"]))
