"""An allow-listed HTTP forward proxy for apt in the simulated Sparks (they have no route out).

Instances set `Acquire::http::Proxy "http://10.250.0.1:3142"`. Only GET/HEAD of absolute http:// URLs on the
Debian mirror and the Debian security mirror (allow-list entries: a host
for port 80, or host:port) are forwarded; anything else gets 403. One log line per request.
"""

from __future__ import annotations

import argparse
import http.client
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from sparkctl.sim import config
from sparkctl.sim.util import http_server_class, serve

HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
              "transfer-encoding", "upgrade", "proxy-connection"}
CHUNK = 256 * 1024


class ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "sparkctl-sim-aptproxy"

    def log_message(self, fmt, *args):
        pass

    def _log(self, status, nbytes, t0):
        sys.stderr.write(f"{time.strftime('%H:%M:%S')} {self.client_address[0]} {self.command} {self.path} "
                         f"{status} {nbytes}B {time.monotonic() - t0:.2f}s\n")

    def _refuse(self, status, why, t0):
        body = (why + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self._log(status, 0, t0)

    def do_CONNECT(self):
        self._refuse(403, "the simulated Spark's apt proxy forwards plain http to the Debian mirrors only",
                     time.monotonic())

    def do_HEAD(self):
        self.do_GET()

    def do_POST(self):
        self._refuse(405, "only GET and HEAD", time.monotonic())

    def do_GET(self):
        t0 = time.monotonic()
        url = urlsplit(self.path)
        refusal = self._refusal(url)
        if refusal:
            return self._refuse(*refusal, t0)
        conn, target = self._upstream(url)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
        headers["Host"] = url.netloc
        try:
            conn.request(self.command, target or "/", headers=headers)
            resp = conn.getresponse()
        except OSError as exc:
            conn.close()
            return self._refuse(502, f"upstream {url.hostname}: {exc}", t0)
        self._relay_head(resp)
        try:
            sent = self._relay_body(resp)
        finally:
            conn.close()
        self._log(resp.status, sent, t0)

    def _refusal(self, url) -> tuple[int, str] | None:
        """(status, why) when the request is not one this proxy forwards."""
        if url.scheme != "http" or not url.hostname:
            return 400, "expected an absolute http:// URL (this is a forward proxy)"
        host, port = url.hostname.lower(), url.port or 80
        allowed = self.server.allowed_hosts
        if not (port == 80 and host in allowed) and f"{host}:{port}" not in allowed:
            return 403, f"{url.hostname} is not on the simulated Spark's allow-list ({', '.join(sorted(allowed))})"
        return None

    def _upstream(self, url) -> tuple[http.client.HTTPConnection, str]:
        """The connection to forward on (the host's own proxy when it has one) and the request target on it."""
        if self.server.upstream_proxy:
            up = urlsplit(self.server.upstream_proxy)
            return http.client.HTTPConnection(up.hostname, up.port or 80, timeout=60), self.path
        target = url.path + (f"?{url.query}" if url.query else "")
        return http.client.HTTPConnection(url.hostname, url.port or 80, timeout=60), target

    def _relay_head(self, resp: http.client.HTTPResponse) -> None:
        self.send_response(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in HOP_BY_HOP:
                self.send_header(k, v)
        unknown_length = resp.getheader("Content-Length") is None
        if unknown_length and self.command != "HEAD" and resp.status not in (204, 304):
            self.send_header("Connection", "close")  # unknown length: the end of the body is the end of the stream
            self.close_connection = True
        self.end_headers()

    def _relay_body(self, resp: http.client.HTTPResponse) -> int:
        """Copy the upstream body to the client; returns the bytes sent."""
        sent = 0
        try:
            if self.command != "HEAD":
                while chunk := resp.read(CHUNK):
                    self.wfile.write(chunk)
                    sent += len(chunk)
        except OSError:
            self.close_connection = True
        return sent


def make_server(host: str, port: int, allowed_hosts=None, upstream_proxy: str | None = None) -> ThreadingHTTPServer:
    srv = http_server_class()((host, port), ProxyHandler)
    srv.allowed_hosts = {h.lower() for h in (allowed_hosts or config.APT_ALLOWED_HOSTS)}
    srv.upstream_proxy = upstream_proxy
    return srv


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default=config.HOST_ADDRESS)
    ap.add_argument("--port", type=int, default=config.APT_PROXY_PORT)
    a = ap.parse_args(argv)
    srv = make_server(a.host, a.port, upstream_proxy=os.environ.get("http_proxy") or os.environ.get("HTTP_PROXY"))
    return serve(srv, f"apt proxy on http://{a.host}:{srv.server_address[1]}, allowed: "
                      f"{', '.join(sorted(srv.allowed_hosts))}")


if __name__ == "__main__":
    sys.exit(main())
