"""Stand-in for vLLM's OpenAI-compatible server (no GPU here): /health, /v1/models and /v1/chat/completions (JSON,
or SSE with `"stream": true`), on loopback, counting the requests it answers. Used by tests/gateway/ behind the
project's real box proxy (nginx) so the real vllm-router has workers to route to."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CHUNKS = 5  # SSE chunks of one streamed answer
CHUNK_GAP_S = 0.02  # pause between two chunks, s


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _json(self, status: int, doc: dict) -> None:
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _count(self) -> None:
        with self.server.lock:
            self.server.hits[(self.command, self.path)] += 1
            self.server.headers_seen.append({k.lower(): v for k, v in self.headers.items()})

    def do_GET(self):  # noqa: N802 - http.server's naming
        self._count()
        if self.path == "/health":
            self._json(200, {}) if self.server.healthy else self._json(503, {"error": "unhealthy"})
        elif self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": self.server.served, "object": "model"}]})
        else:
            self._json(404, {"error": "not found"})

    do_HEAD = do_GET

    def do_POST(self):  # noqa: N802
        self._count()
        req = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if self.path != "/v1/chat/completions":
            self._json(404, {"error": "not found"})
        elif req.get("stream"):
            self._stream(req)
        else:
            self._json(200, {"id": "cmpl-1", "object": "chat.completion", "model": req.get("model"),
                             "x_box": self.server.name,
                             "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                                          "finish_reason": "stop"}]})

    def _stream(self, req: dict) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i in range(CHUNKS):
            doc = {"id": "cmpl-1", "object": "chat.completion.chunk", "model": req.get("model"),
                   "x_box": self.server.name,
                   "choices": [{"index": 0, "delta": {"content": f"t{i} "}, "finish_reason": None}]}
            self._chunk(f"data: {json.dumps(doc)}\n\n".encode())
            time.sleep(CHUNK_GAP_S)
        self._chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def log_message(self, *args):
        pass


def start(name: str, served: str) -> ThreadingHTTPServer:
    """A stand-in vLLM on 127.0.0.1:<free port>, serving `served`; .hits counts (method, path)."""
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    srv.handle_error = lambda *_a: None  # a proxy closing an idle keep-alive connection is not an error here
    srv.name, srv.served, srv.healthy = name, served, True
    srv.hits, srv.headers_seen, srv.lock = Counter(), [], threading.Lock()
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def completions(srv) -> int:
    return srv.hits[("POST", "/v1/chat/completions")]
