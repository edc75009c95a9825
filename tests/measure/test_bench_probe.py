"""The probe's I/O without a box: the HTTP client, SSE parsing and per-event timing (httpx-sse), and the whole probe
against an in-process fake vLLM that is busy while it streams (num_requests_running counts its open streams) and
whose /metrics scrapes take time, reading the counters at the worst instants inside them. No assertions on speed."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
from rich.console import Console

from sparkctl.check.load import host_config
from sparkctl.config import groupdata
from sparkctl.measure import client, maths, probe, prometheus, record, report
from sparkctl.measure.workloads import load

SETTINGS = groupdata.load(["all"])
TOLERANCE = SETTINGS["BENCH_AGREEMENT_TOLERANCE"]
SSE = {"content-type": "text/event-stream"}


# ------------------------------------------------------------------------------------------------- HTTP client

def test_client_has_long_timeout_no_retries_no_env():
    ep = client.Endpoint("https://box:443/coder/v1", "coder", token="tok", ca=None)
    c = client.make_client(ep, 7200)
    try:
        assert c.timeout.read == 7200 and c.timeout.connect == 7200
        assert c.trust_env is False
        assert c._transport._pool._retries == 0
        assert c.headers["authorization"] == "Bearer tok"
    finally:
        asyncio.run(c.aclose())


def test_endpoint_root_url():
    assert client.Endpoint("https://box:443/coder/v1", "coder").root_url == "https://box:443/coder"
    assert client.Endpoint("http://127.0.0.1:8000/v1/", "coder").root_url == "http://127.0.0.1:8000"


def _sse(events: list) -> bytes:
    out = []
    for e in events:
        out.append(e if isinstance(e, str) else "data: " + json.dumps(e))
        out.append("")
    return ("\n".join(out) + "\n").encode()


def _run_stream(content, status: int = 200, headers: dict | None = None) -> maths.RequestLog:
    async def go():
        transport = httpx.MockTransport(lambda req: httpx.Response(status, content=content,
                                                                   headers=SSE if headers is None else headers))
        async with httpx.AsyncClient(transport=transport) as c:
            log = maths.RequestLog(t_sent=time.perf_counter())
            await client.stream_request(c, "http://x/v1/chat/completions", {}, log)
            return log
    return asyncio.run(go())


def test_stream_parsing_with_continuous_usage():
    def chunk(content, cum, finish=None):
        return {"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": finish}],
                "usage": {"prompt_tokens": 21, "completion_tokens": cum}}
    body = _sse([": keep-alive comment", chunk("", 0), chunk("a", 1), chunk("bcd", 4),
                 "data:" + json.dumps(chunk("ef", 6, "length")),  # no space after data:
                 {"choices": [], "usage": {"prompt_tokens": 21, "completion_tokens": 6}}, "data: [DONE]",
                 {"choices": [{"delta": {"content": "after done"}}]}])
    log = _run_stream(body)
    assert log.error is None and log.continuous_usage
    assert log.cum_tokens == [0, 1, 4, 6, 6]  # one point per event; nothing after [DONE]
    assert log.prompt_tokens == 21
    assert log.t_first is not None and log.t_done is not None


def test_stream_parsing_fallback_counts_chunks_then_trusts_final_usage():
    def chunk(content):
        return {"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}]}
    body = _sse([chunk("a"), chunk("bb"), chunk("c"), {"choices": [], "usage": {"completion_tokens": 5}},
                 "data: [DONE]"])
    log = _run_stream(body)
    assert not log.continuous_usage
    assert log.cum_tokens == [1, 2, 3, 5]


def test_every_event_is_timed_when_it_arrives():
    gap = 0.05

    async def body():
        for cum in (1, 2, 3):
            await asyncio.sleep(gap)
            yield _sse([{"choices": [{"delta": {"content": "x"}}], "usage": {"completion_tokens": cum}}])
        yield b"data: [DONE]\n\n"

    log = _run_stream(body())
    assert log.cum_tokens == [1, 2, 3]
    # each event carries its own arrival time, not the end of the body's: the timeline has the server's spacing
    spacing = [b - a for a, b in zip([log.t_sent, *log.times], log.times)]
    assert all(s >= 0.9 * gap for s in spacing), spacing
    assert log.t_first == log.times[0]


def test_stream_http_error_is_recorded():
    log = _run_stream(b'{"error": "max_model_len"}', status=400)
    assert log.error.startswith("HTTP 400")


def test_a_non_event_stream_is_an_error_not_zero_tokens():
    log = _run_stream(b"<html>gateway</html>", headers={"content-type": "text/html"})
    assert log.error.startswith("not a server-sent event stream") and not log.times


# ----------------------------------------------------------------------------------- the probe, against a fake vLLM

CREATED = 1795994924.0


class ClosingStream(httpx.AsyncByteStream):
    """A streamed body that, like a real connection, ends the server's generator when the client closes it (an
    async generator handed to httpx.Response is never closed by MockTransport)."""

    def __init__(self, gen):
        self.gen = gen

    async def __aiter__(self):
        async for part in self.gen:
            yield part

    async def aclose(self) -> None:
        await self.gen.aclose()


class FakeVLLM:
    """Streams tokens in chunks of `step` (like speculative decoding) and keeps vLLM's counters for them.

    running: requests whose stream is open (vllm:num_requests_running), so the probe's idle waits really wait.
    other_client_tokens: tokens per step the counter also counts for a client the probe cannot see."""

    def __init__(self, step: int = 3, interval: float = 0.002, max_model_len: int = 4096,
                 other_client_tokens: int = 0):
        self.step, self.interval, self.max_model_len = step, interval, max_model_len
        self.other_client_tokens = other_client_tokens
        self.c = {"generation": 0, "prompt": 0, "hits": 0, "queries": 0, "drafts": 0, "draft_tokens": 0,
                  "accepted": 0, "pos0": 0, "pos1": 0}
        self.running = 0
        self.seen_prompts: set[str] = set()
        self.requests: list[dict] = []
        self.prefill_s: list[float] = []  # per completion request in turn, its time to the first token; then 0.01

    def metrics_text(self) -> str:
        lab = 'engine="0",model_name="coder"'
        lines = []

        def counter(name, value, extra=""):
            labels = lab + (f",{extra}" if extra else "")
            lines.extend([f"# TYPE {name}_total counter", f"{name}_total{{{labels}}} {float(value)}",
                          f"# TYPE {name}_created gauge", f"{name}_created{{{labels}}} {CREATED}"])
        lines += ["# TYPE vllm:num_requests_running gauge", f"vllm:num_requests_running{{{lab}}} {self.running}.0",
                  "# TYPE vllm:num_requests_waiting gauge", f"vllm:num_requests_waiting{{{lab}}} 0.0"]
        counter("vllm:generation_tokens", self.c["generation"])
        counter("vllm:prompt_tokens", self.c["prompt"])
        counter("vllm:prefix_cache_queries", self.c["queries"])
        counter("vllm:prefix_cache_hits", self.c["hits"])
        counter("vllm:spec_decode_num_drafts", self.c["drafts"])
        counter("vllm:spec_decode_num_draft_tokens", self.c["draft_tokens"])
        counter("vllm:spec_decode_num_accepted_tokens", self.c["accepted"])
        lines += ["# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter",
                  f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="0"}} {self.c["pos0"]}',
                  f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="1"}} {self.c["pos1"]}']
        return "\n".join(lines) + "\n"

    @staticmethod
    def count(text: str) -> int:
        return len(text) // 4 + 3

    def _prefill(self, prompt: str) -> int:
        n = self.count(prompt)
        hit = 128 if prompt[:200] in self.seen_prompts and n > 128 else 0
        self.seen_prompts.add(prompt[:200])
        self.c["prompt"] += n
        self.c["queries"] += n
        self.c["hits"] += hit
        return n

    async def handler(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if request.headers.get("authorization") != "Bearer tok":
            return httpx.Response(401, json={"error": "unauthorized"})
        if path == "/coder/v1/models":
            return httpx.Response(200, json={"data": [{"id": "coder", "max_model_len": self.max_model_len}]})
        if path == "/coder/version":
            return httpx.Response(200, json={"version": "0.32.0"})
        body = json.loads(request.content)
        self.requests.append(body)
        if path == "/coder/tokenize":
            text = body.get("prompt") or "".join(m["content"] for m in body["messages"])
            return httpx.Response(200, json={"count": self.count(text)})
        if path == "/coder/v1/chat/completions":
            return httpx.Response(200, stream=ClosingStream(self._open(self._chat(body))), headers=SSE)
        if path == "/coder/v1/completions":
            return httpx.Response(200, stream=ClosingStream(self._open(self._completion(body))), headers=SSE)
        return httpx.Response(404)

    async def _open(self, gen):
        self.running += 1
        try:
            async for part in gen:
                yield part
        finally:
            self.running -= 1

    async def _chat(self, body):
        n_prompt = self._prefill(body["messages"][0]["content"])
        cum = 0
        yield self._data({"choices": [{"delta": {"role": "assistant", "content": ""}}],
                          "usage": {"prompt_tokens": n_prompt, "completion_tokens": 0}})
        while cum < body["max_tokens"]:
            await asyncio.sleep(self.interval)
            k = min(self.step, body["max_tokens"] - cum)
            cum += k
            self.c["generation"] += k + self.other_client_tokens
            self.c["drafts"] += 1
            self.c["draft_tokens"] += 2
            self.c["accepted"] += k - 1
            self.c["pos0"] += 1 if k > 1 else 0
            self.c["pos1"] += 1 if k > 2 else 0
            finish = "length" if cum >= body["max_tokens"] else None
            yield self._data({"choices": [{"delta": {"content": "x" * k}, "finish_reason": finish}],
                              "usage": {"prompt_tokens": n_prompt, "completion_tokens": cum}})
        yield self._data({"choices": [], "usage": {"prompt_tokens": n_prompt, "completion_tokens": cum}})
        yield b"data: [DONE]\n\n"

    async def _completion(self, body):
        n = self._prefill(body["prompt"])
        await asyncio.sleep(self.prefill_s.pop(0) if self.prefill_s else 0.01)
        self.c["generation"] += 1
        yield self._data({"choices": [{"text": "x", "finish_reason": "length"}]})
        yield self._data({"choices": [], "usage": {"prompt_tokens": n, "completion_tokens": 1}})
        yield b"data: [DONE]\n\n"

    @staticmethod
    def _data(obj) -> bytes:
        return ("data: " + json.dumps(obj) + "\n\n").encode()


class FakeMetrics(probe.MetricsSource):
    """A scrape that takes `duration` seconds, like ssh + curl on a loaded box, and reads the counters at one of
    its ends, alternating: a window's counter then spans half a scrape more (or less) at each end than the
    scrapes' midpoints say, the worst case the agreement check must allow for."""

    def __init__(self, fake: FakeVLLM, duration: float = 0.1):
        super().__init__([])
        self.fake, self.duration = fake, duration
        self.calls = 0
        self.running_seen: list[int] = []

    async def __call__(self) -> maths.Scrape:
        read_at = self.duration * (self.calls % 2)  # 0: at the start, duration: at the end
        self.calls += 1
        t0 = time.perf_counter()
        await asyncio.sleep(read_at)
        self.running_seen.append(self.fake.running)
        text = self.fake.metrics_text()
        await asyncio.sleep(self.duration - read_at)
        return maths.Scrape(t0, time.perf_counter(), prometheus.parse(text))


@pytest.fixture
def fake(monkeypatch):
    server = FakeVLLM()

    def make_client(ep, timeout_s, max_connections=64):
        return httpx.AsyncClient(transport=httpx.MockTransport(server.handler), timeout=timeout_s,
                                 headers={"Authorization": f"Bearer {ep.token}"})
    monkeypatch.setattr(probe, "make_client", make_client)
    return server


LABELS = {"model": {"key": "qwen3.8-27b", "served_name": "coder"}, "revision": "a" * 40,
          "box": {"name": "spark-1", "address": "10.0.0.1", "simulated": True}}
EP = client.Endpoint("http://fake/coder/v1", "coder", token="tok")


def settings(**kw) -> probe.ProbeSettings:
    """The group data's probe settings, with a short window for the fake."""
    base = dict(workload=load(), streams=[1], window_s=0.4, max_tokens=40, prefill_tokens=[], ignore_eos=True,
                timeout_s=float(SETTINGS["BENCH_CLIENT_TIMEOUT_S"]), settle_s=0.05, idle_timeout_s=5,
                agreement_tolerance=TOLERANCE)
    return probe.ProbeSettings(**{**base, **kw})


def test_probe_end_to_end_against_a_busy_fake_server(fake):
    metrics = FakeMetrics(fake)
    s = settings(streams=[1, 3], prefill_tokens=[2000, 9000])
    rec = asyncio.run(probe.run_probe(EP, metrics, s, LABELS, roofline_single=1000.0))
    assert rec["schema"] == record.SCHEMA == "sparkctl.bench/1"
    assert record.validate_record(rec) == json.loads(json.dumps(rec))  # the model holds all the probe writes
    assert rec["workload"]["name"] == "codegen" and rec["workload"]["version"] == 1
    assert rec["vllm_version"] == "0.32.0" and rec["streams"] == [1, 3] and rec["window_s"] == 0.4
    # the server was busy while the windows were scraped, and idle again (every stream closed) after the probe
    assert max(metrics.running_seen) == 3 and fake.running == 0
    for run in rec["runs"]:
        lo, hi = run["client_tokens_bracket"]
        assert all(d >= 0.1 for d in run["scrape_s"]), run  # the scrapes took time ...
        assert hi - lo > 0, run  # ... while tokens kept arriving
        assert run["agree"] and run["counter_outside_bracket"] == 0, run
        # read at the scrapes' far ends, the counter is well off the midpoint count: only the bracket agrees
        assert abs(run["client_vs_counter"]) > TOLERANCE, run
        assert run["client_count_method"] == "usage"
        assert run["spec_decode"]["acceptance_rate"] == pytest.approx(run["spec_decode"]["accepted_tokens"]
                                                                      / run["spec_decode"]["draft_tokens"])
        assert run["requests_finished"] >= 1  # streams were refilled inside the window
        assert run["roofline_pct"] is not None
    p12, p_big = rec["prefill"]
    assert p12["fresh"] and p12["prefix_cache_hits_delta"] == 0
    assert 2000 - 32 <= p12["prompt_tokens"] <= 2000 and p12["token_count_source"] == "tokenize"
    assert p_big["error"].startswith("does not fit")
    assert rec["problems"] == ["prefill 9000: does not fit max_model_len 4096"]
    # every chat request was a streamed, greedy, usage-reporting request of the workload
    chats = [r for r in fake.requests if "messages" in r and "max_tokens" in r]
    assert chats and all(r["stream"] and r["temperature"] == 0 and r["ignore_eos"] for r in chats)
    assert all(r["stream_options"] == {"include_usage": True, "continuous_usage_stats": True} for r in chats)
    assert {r["messages"][0]["content"] for r in chats} <= set(load().prompts)


def test_probe_refuses_a_counter_that_counts_another_client(fake):
    fake.other_client_tokens = fake.step  # someone else decodes as fast as the probe, in the same batches
    rec = asyncio.run(probe.run_probe(EP, FakeMetrics(fake), settings(), LABELS))
    (run,) = rec["runs"]
    lo, hi = run["client_tokens_bracket"]
    assert run["counter_tokens"] > hi and not run["agree"]
    assert run["counter_outside_bracket"] < -TOLERANCE
    assert len(rec["problems"]) == 1 and "client and counter tokens disagree" in rec["problems"][0]


def test_probe_refuses_a_server_that_never_goes_idle(fake):
    fake.running = 1  # another client's request that never ends
    with pytest.raises(record.BenchError, match="still has requests in flight"):
        asyncio.run(probe.run_probe(EP, FakeMetrics(fake, duration=0.01), settings(idle_timeout_s=0.3), LABELS))


def test_probe_refuses_wrong_token(fake):
    ep = client.Endpoint("http://fake/coder/v1", "coder", token="wrong")
    with pytest.raises(record.BenchError, match="401"):
        asyncio.run(probe.run_probe(ep, FakeMetrics(fake), settings(window_s=0.1, max_tokens=8), LABELS))


def test_prefill_prompt_is_unique_each_time(fake):
    s = settings(streams=[], prefill_tokens=[1000, 1000])
    rec = asyncio.run(probe.run_probe(EP, FakeMetrics(fake, duration=0.01), s, LABELS))
    assert [p["prefix_cache_hits_delta"] for p in rec["prefill"]] == [0, 0]
    prompts = [r["prompt"] for r in fake.requests if "prompt" in r and "max_tokens" in r]
    assert len(prompts) == 2 and prompts[0] != prompts[1] and prompts[0][:8] == "Session "


def test_repeated_prefill_reports_the_median_sample_so_one_hiccup_does_not_decide(fake):
    fake.prefill_s = [0.02, 0.02, 0.5, 0.02, 0.02]  # the third prompt meets a 0.5 s stall
    s = settings(streams=[], prefill_tokens=[1000], prefill_repeats=5)
    rec = asyncio.run(probe.run_probe(EP, FakeMetrics(fake, duration=0.01), s, LABELS))
    assert record.validate_record(rec) == json.loads(json.dumps(rec))
    (p,) = rec["prefill"]
    rates = p["samples_tokens_per_s"]
    assert len(rates) == 5 and min(rates) == rates[2] and min(rates) < p["tokens_per_s"] / 5
    assert p["tokens_per_s"] == sorted(rates)[2] and p["ttft_s"] < 0.1 and p["fresh"]
    prompts = [r["prompt"] for r in fake.requests if "prompt" in r and "max_tokens" in r]
    assert len(set(prompts)) == 5  # every sample's prompt was fresh
    console = Console(width=160, record=True)
    for table in report.record_tables(rec):
        console.print(table)
    assert f"{p['tokens_per_s']:.0f} (median of 5)" in console.export_text()


def test_repeated_prefill_is_not_fresh_when_any_sample_hit_the_cache():
    fresh = {"tokens_per_s": 100.0, "fresh": True, "prefix_cache_hits_delta": 0, "prompt_tokens_cached_delta": 0}
    stale = {"tokens_per_s": 900.0, "fresh": False, "prefix_cache_hits_delta": 128, "prompt_tokens_cached_delta": 0}
    p = maths.median_prefill([fresh, stale, dict(fresh, tokens_per_s=110.0)])
    assert p["tokens_per_s"] == 110.0 and p["samples_tokens_per_s"] == [100.0, 900.0, 110.0]
    assert not p["fresh"] and p["prefix_cache_hits_delta"] == 128
    assert record.check_record({"prefill": [dict(p, target_tokens=1000)]}) == [
        "prefill 1000: prefix cache hit 128 tokens, the prompt was not fresh"]


# ------------------------------------------------------------------------------------------------ the CLI's options

def _parse(*argv):
    from sparkctl.__main__ import build_parser
    return build_parser().parse_args(list(argv))


@pytest.mark.parametrize("argv, dest, expected", [
    (["bench", "--streams", "1", "--streams", "4"], "streams", [1, 4]),
    (["bench", "--streams", "1,4"], "streams", [1, 4]),
    (["bench", "--streams", "1,2", "--streams", "8"], "streams", [1, 2, 8]),
    (["bench", "--prefill", "12K", "--prefill", "54K,204800"], "prefill", [12288, 55296, 204800]),
    (["bench", "--groups", "all", "--groups", "gx10,sim"], "groups", ["all", "gx10", "sim"]),
    (["niah", "--lengths", "1K", "--lengths", "2K,3072"], "lengths", [1024, 2048, 3072]),
    (["niah", "--depths", "10", "--depths", "50,90"], "depths", [10.0, 50.0, 90.0]),
    (["bench"], "streams", None),  # absent: the group data's BENCH_STREAMS
])
def test_every_list_option_takes_repeats_and_comma_lists(argv, dest, expected):
    assert getattr(_parse(*argv), dest) == expected


@pytest.mark.parametrize("argv, says", [
    (["bench", "--streams", "0"], "expected positive integers"),
    (["bench", "--streams", ","], "expected positive integers"),
    (["bench", "--prefill", "12K", "--no-prefill"], "not allowed with argument --prefill"),
    (["niah", "--depths", "x"], "not a comma-separated list of numbers"),
])
def test_bad_list_options_are_refused(argv, says, capsys):
    with pytest.raises(SystemExit) as exc:
        _parse(*argv)
    assert exc.value.code == 2 and says in capsys.readouterr().err


def test_bench_cli_sweeps_repeated_streams_and_no_prefill_prints_no_prefill_table(fake, monkeypatch, tmp_path,
                                                                                  capsys):
    from sparkctl.__main__ import main
    from sparkctl.measure import cli

    config = host_config(groupdata.load(["all", "gx10"]))
    monkeypatch.setattr(cli, "resolve_target", lambda args: cli.Target(config, EP, FakeMetrics(fake, 0.01), LABELS))
    out = tmp_path / "b.json"
    rc = main(["bench", "--streams", "1", "--streams", "2", "--window", "0.3", "--max-tokens", "40", "--ignore-eos",
               "--no-prefill", "--no-plot", "--out", str(out)])
    rec = record.load_record(out)
    assert rc == 0 and rec["problems"] == []
    assert [r["streams"] for r in rec["runs"]] == [1, 2] and rec["prefill"] == []
    text = capsys.readouterr().out
    assert "tok/s (roofline)" in text and "prefill (fresh prompt" not in text


@pytest.mark.parametrize("name, value", [("BENCH_AGREEMENT_TOLERANCE", 0), ("BENCH_SETTLE_S", -1.0),
                                         ("BENCH_IDLE_TIMEOUT_S", "2m")])
def test_bench_cli_names_a_bad_setting_before_measuring(fake, monkeypatch, capsys, name, value):
    from sparkctl.__main__ import main
    from sparkctl.measure import cli

    data = {**groupdata.load(["all", "gx10"]), name: value}  # the target's settings go through the check layer
    monkeypatch.setattr(cli, "resolve_target",
                        lambda args: cli.Target(host_config(data), EP, FakeMetrics(fake, 0.01), LABELS))
    assert main(["bench", "--no-plot"]) == 2
    assert name in capsys.readouterr().err and fake.requests == []
