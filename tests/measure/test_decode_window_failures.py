"""A decode window whose requests fail stops with an error that says why, and never hangs: a stream gives up after
failed requests in a row (the server's errors), at once on an error that is not the server's, and a failure
after the streams filled stops the window that is open."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from sparkctl.measure import probe, record
from tests.measure.test_bench_probe import EP, LABELS, FakeMetrics, FakeVLLM, settings


@pytest.fixture
def server(monkeypatch):
    """The fake vLLM, whose chat route answers `chat_status` when that is set; `chats` counts chat requests."""
    fake = FakeVLLM()
    fake.chat_status, fake.chats = None, 0

    async def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/chat/completions"):
            fake.chats += 1
            if fake.chat_status:
                return httpx.Response(fake.chat_status, json={"error": "overloaded"})
        return await fake.handler(request)

    def make_client(ep, timeout_s, max_connections=64):
        return httpx.AsyncClient(transport=httpx.MockTransport(handler), timeout=timeout_s,
                                 headers={"Authorization": f"Bearer {ep.token}"})
    monkeypatch.setattr(probe, "make_client", make_client)
    return fake


def probe_run(fake, **kw):
    return asyncio.run(probe.run_probe(EP, FakeMetrics(fake, duration=0.01), settings(**kw), LABELS))


def test_a_server_that_refuses_every_request_fails_the_window_after_a_few_tries(server):
    server.chat_status = 503
    started = time.monotonic()
    with pytest.raises(record.BenchError, match="requests fail: HTTP 503"):
        probe_run(server, timeout_s=30.0)
    assert 1 < server.chats <= 5  # retried, then gave up: not one try, not until the client timeout
    assert time.monotonic() - started < 30
    assert server.running == 0


def test_an_error_that_is_not_the_servers_stops_the_window_at_once(server, monkeypatch):
    async def broken(*args, **kwargs):
        raise RuntimeError("a malformed stream")
    monkeypatch.setattr(probe, "stream_request", broken)
    with pytest.raises(record.BenchError, match="requests fail: RuntimeError: a malformed stream"):
        probe_run(server, timeout_s=30.0)


def test_a_failure_once_the_streams_are_full_stops_the_open_window(server, monkeypatch):
    real = probe.stream_request
    calls = []

    async def first_only(*args, **kwargs):
        calls.append(1)
        if len(calls) > 1:
            raise RuntimeError("the second request breaks")
        return await real(*args, **kwargs)
    monkeypatch.setattr(probe, "stream_request", first_only)
    started = time.monotonic()
    with pytest.raises(record.BenchError, match="requests fail during the window: RuntimeError: the second"):
        probe_run(server, window_s=20.0, max_tokens=8)
    assert time.monotonic() - started < 20  # the window closed on the failure, not at its end
