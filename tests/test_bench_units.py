"""The probe's maths and mechanics without a server: token timelines, window results, SSE parsing, the whole
probe against an in-process fake vLLM (httpx.MockTransport + counters), reports. No timing assertions."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from sparkctl.measure import bench, prometheus
from sparkctl.measure.workloads import haystack, load

FIX = Path(__file__).resolve().parent / "fixtures" / "bench"


def snap(name: str) -> prometheus.Snapshot:
    return prometheus.parse((FIX / name).read_text())


def log_with(points, t_sent=0.0, t_done=None) -> bench.RequestLog:
    r = bench.RequestLog(stream=0, prompt_index=0, t_sent=t_sent, t_done=t_done, continuous_usage=True)
    for t, cum in points:
        r.record(t, cum)
    return r


# ----------------------------------------------------------------------------------------------- token timelines

def test_tokens_at_and_window_counting():
    # a request that started before the window, multi-token chunks (speculative decoding), finishes inside it
    early = log_with([(0.5, 0), (1.0, 4), (2.0, 8), (3.0, 12)], t_sent=0.4, t_done=3.0)
    # one that starts inside and is still running at the end
    late = log_with([(2.5, 1), (4.0, 5), (6.0, 9)], t_sent=2.4)
    assert early.tokens_at(0.9) == 0 and early.tokens_at(1.0) == 4 and early.tokens_at(99) == 12
    # window [1.5, 4.5]: early contributes 12 - 4, late 5 - 0
    assert bench.tokens_in_window([early, late], 1.5, 4.5) == 8 + 5
    assert bench.tokens_in_window([early, late], 10, 20) == 0


def test_cumulative_count_never_goes_back():
    r = log_with([(1.0, 5), (2.0, 3)])
    assert r.cum_tokens == [5, 5]


def test_relative_gap_and_roofline():
    assert bench.relative_gap(105, 100) == pytest.approx(0.05)
    assert bench.relative_gap(3, 0) is None
    assert bench.aggregate_roofline(20.0, 8) == 160.0
    assert bench.aggregate_roofline(None, 8) is None


def test_window_result_from_recorded_scrapes():
    s0 = bench.Scrape(10.0, 10.2, snap("vllm-0.32-ngram-before.txt"))
    s1 = bench.Scrape(20.0, 20.2, snap("vllm-0.32-ngram-after.txt"))
    # the client saw the same 128 tokens (two requests of 64) inside [10.1, 20.1]
    logs = [log_with([(11.0 + i * 0.1, (i + 1) * 4) for i in range(16)], t_sent=10.5, t_done=12.6),
            log_with([(13.0 + i * 0.1, (i + 1) * 4) for i in range(16)], t_sent=12.7, t_done=14.6)]
    r = bench.window_result(2, s0, s1, logs, roofline_single=32.0)
    assert r["window_s"] == pytest.approx(10.0)
    assert r["counter_tokens"] == 128 and r["client_tokens"] == 128
    assert r["counter_tokens_per_s"] == pytest.approx(12.8)
    assert r["per_stream_tokens_per_s"] == pytest.approx(6.4)
    assert r["agree"] and r["client_vs_counter"] == 0 and r["counter_outside_bracket"] == 0
    assert r["client_tokens_bracket"] == [128, 128]  # no chunk arrived while a scrape ran
    assert r["client_count_method"] == "usage"
    assert r["roofline_tokens_per_s"] == 64.0 and r["roofline_pct"] == pytest.approx(20.0)
    assert r["spec_decode"]["tokens_per_step"] == pytest.approx(1 + 94 / 34)
    assert r["requests_finished"] == 2 and r["requests_started"] == 2
    # a client that saw 10 % fewer tokens than the counter (another client on the server) disagrees
    short = bench.window_result(2, s0, s1, logs[:1] + [log_with([(13.0, 51)], t_sent=12.7)])
    assert not short["agree"] and short["client_vs_counter"] == pytest.approx((115 - 128) / 128)
    assert short["counter_outside_bracket"] == pytest.approx((115 - 128) / 128)
    assert short["roofline_pct"] is None


def test_agreement_allows_for_when_the_scrapes_read_the_counters():
    # 100 tokens/s on one request from t=0 to t=20; two slow scrapes (0.6 s each), as on a loaded 2-core host
    logs = [log_with([(i / 100, i) for i in range(1, 2001)], t_sent=0.0, t_done=20.0)]
    slow0, slow1 = (10.0, 10.6), (15.0, 15.6)
    before, after = snap("vllm-0.32-ngram-before.txt"), snap("vllm-0.32-ngram-after.txt")
    r = bench.window_result(1, bench.Scrape(*slow0, before), bench.Scrape(*slow1, after), logs)
    # the counter moved 128 tokens; the client's bracket over these scrapes is [15.0-10.6, 15.6-10.0] s
    assert r["client_tokens_bracket"] == [440, 560] and r["client_tokens"] == 500
    assert not r["agree"] and r["counter_outside_bracket"] == pytest.approx((440 - 128) / 128)
    # read late in the first scrape and early in the second, a counter of 450 is consistent (midpoint gap +11 %)
    assert bench.gap_outside(440, 560, 450) == 0 and bench.relative_gap(500, 450) > 0.1
    assert bench.gap_outside(440, 560, 600) == pytest.approx((560 - 600) / 600)
    assert bench.gap_outside(440, 560, 0) is None


def test_prefill_result_freshness():
    before, after = snap("vllm-0.32-ngram-before.txt"), snap("vllm-0.32-ngram-after.txt")
    hit = bench.prefill_result(494, 494, 0.1, before, after, "tokenize")
    assert hit["tokens_per_s"] == pytest.approx(4940)
    assert hit["prefix_cache_hits_delta"] == 384 and hit["fresh"] is False
    fresh = bench.prefill_result(494, 494, 0.1, before, before, "tokenize")
    assert fresh["fresh"] is True and fresh["prefix_cache_hits_delta"] == 0


def test_check_record_names_every_problem():
    rec = {"runs": [{"streams": 1, "agree": True, "counter_outside_bracket": 0.0},
                    {"streams": 2, "agree": False, "counter_outside_bracket": -0.2, "counter_tokens": 1000,
                     "client_tokens_bracket": [780, 800]}],
           "prefill": [{"target_tokens": 12288, "error": None, "fresh": False, "prefix_cache_hits_delta": 256},
                       {"target_tokens": 204800, "error": "does not fit max_model_len 4096"}]}
    problems = bench.check_record(rec)
    assert len(problems) == 3
    assert "2 streams" in problems[0] and "-20.0 %" in problems[0] and "780-800" in problems[0]
    assert "prefix cache hit 256" in problems[1]
    assert "does not fit" in problems[2]


def test_served_checkpoint_is_checked_against_the_labels():
    sha = "c" * 40
    root = f"/srv/models/hub/models--sim--tiny-qwen/snapshots/{sha}"
    assert bench.served_sha(root) == sha and bench.served_sha("/models/tiny") is None
    rec = {"model": {"repo": "sim/tiny-qwen"}, "revision": sha, "served_model_root": root, "served_sha": sha}
    assert bench.check_record(rec) == []
    flipped = dict(rec, served_model_root=root.replace("tiny-qwen", "tiny-laguna"))
    assert "not the configured checkpoint sim/tiny-qwen" in bench.check_record(flipped)[0]
    stale = dict(rec, revision="d" * 40)
    assert "the lock file says" in bench.check_record(stale)[0]


# ------------------------------------------------------------------------------------------------- HTTP client

def test_client_has_long_timeout_no_retries_no_env():
    ep = bench.Endpoint("https://box:443/coder/v1", "coder", token="tok", ca=None)
    client = bench.make_client(ep, 7200)
    try:
        assert client.timeout.read == 7200 and client.timeout.connect == 7200
        assert client.trust_env is False
        assert client._transport._pool._retries == 0
        assert client.headers["authorization"] == "Bearer tok"
    finally:
        asyncio.run(client.aclose())


def test_endpoint_root_url():
    assert bench.Endpoint("https://box:443/coder/v1", "coder").root_url == "https://box:443/coder"
    assert bench.Endpoint("http://127.0.0.1:8000/v1/", "coder").root_url == "http://127.0.0.1:8000"


def _sse(events: list) -> bytes:
    out = []
    for e in events:
        out.append(e if isinstance(e, str) else "data: " + json.dumps(e))
        out.append("")
    return ("\n".join(out) + "\n").encode()


def _run_stream(body: bytes, status: int = 200) -> bench.RequestLog:
    async def go():
        transport = httpx.MockTransport(lambda req: httpx.Response(status, content=body))
        async with httpx.AsyncClient(transport=transport) as client:
            log = bench.RequestLog(stream=0, prompt_index=0, t_sent=0.0)
            await bench.stream_request(client, "http://x/v1/chat/completions", {}, log)
            return log
    return asyncio.run(go())


def test_stream_parsing_with_continuous_usage():
    def chunk(content, cum, finish=None):
        return {"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": finish}],
                "usage": {"prompt_tokens": 21, "completion_tokens": cum}}
    body = _sse([": keep-alive comment", chunk("", 0), chunk("a", 1), chunk("bcd", 4),
                 "data:" + json.dumps(chunk("ef", 6, "length")),  # no space after data:
                 {"choices": [], "usage": {"prompt_tokens": 21, "completion_tokens": 6}}, "data: [DONE]"])
    log = _run_stream(body)
    assert log.error is None and log.continuous_usage
    assert log.cum_tokens[-1] == 6 and log.usage_completion_tokens == 6
    assert log.prompt_tokens == 21 and log.finish_reason == "length"
    assert log.t_first is not None and log.t_done is not None


def test_stream_parsing_fallback_counts_chunks_then_trusts_final_usage():
    def chunk(content):
        return {"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}]}
    body = _sse([chunk("a"), chunk("bb"), chunk("c"), {"choices": [], "usage": {"completion_tokens": 5}},
                 "data: [DONE]"])
    log = _run_stream(body)
    assert not log.continuous_usage
    assert log.cum_tokens == [1, 2, 3, 5]


def test_stream_http_error_is_recorded():
    log = _run_stream(b'{"error": "max_model_len"}', status=400)
    assert log.error.startswith("HTTP 400")


# ----------------------------------------------------------------------------------- the probe, against a fake vLLM

CREATED = 1795994924.0


class FakeVLLM:
    """Streams tokens in chunks of `step` (like speculative decoding) and keeps vLLM's counters for them."""

    def __init__(self, step: int = 3, interval: float = 0.002, max_model_len: int = 4096):
        self.step, self.interval, self.max_model_len = step, interval, max_model_len
        self.c = {"generation": 0, "prompt": 0, "hits": 0, "queries": 0, "drafts": 0, "draft_tokens": 0,
                  "accepted": 0, "pos0": 0, "pos1": 0}
        self.seen_prompts: set[str] = set()
        self.requests: list[dict] = []

    def metrics_text(self) -> str:
        lab = 'engine="0",model_name="coder"'
        lines = []

        def counter(name, value, extra=""):
            labels = lab + (f",{extra}" if extra else "")
            lines.extend([f"# TYPE {name}_total counter", f"{name}_total{{{labels}}} {float(value)}",
                          f"# TYPE {name}_created gauge", f"{name}_created{{{labels}}} {CREATED}"])
        # httpx's MockTransport never closes an abandoned response generator, so a cancelled stream cannot be
        # seen here: the fake reports an idle engine (stream closing is checked against real vLLM in e2e)
        lines += ["# TYPE vllm:num_requests_running gauge", f"vllm:num_requests_running{{{lab}}} 0.0",
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
            return httpx.Response(200, content=self._chat(body))
        if path == "/coder/v1/completions":
            return httpx.Response(200, content=self._completion(body))
        return httpx.Response(404)

    async def _chat(self, body):
        n_prompt = self._prefill(body["messages"][0]["content"])
        cum = 0
        yield self._data({"choices": [{"delta": {"role": "assistant", "content": ""}}],
                          "usage": {"prompt_tokens": n_prompt, "completion_tokens": 0}})
        while cum < body["max_tokens"]:
            await asyncio.sleep(self.interval)
            k = min(self.step, body["max_tokens"] - cum)
            cum += k
            self.c["generation"] += k
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
        await asyncio.sleep(0.01)
        self.c["generation"] += 1
        yield self._data({"choices": [{"text": "x", "finish_reason": "length"}]})
        yield self._data({"choices": [], "usage": {"prompt_tokens": n, "completion_tokens": 1}})
        yield b"data: [DONE]\n\n"

    @staticmethod
    def _data(obj) -> bytes:
        return ("data: " + json.dumps(obj) + "\n\n").encode()


class FakeMetrics(bench.MetricsSource):
    def __init__(self, fake: FakeVLLM):
        super().__init__([])
        self.fake = fake

    async def __call__(self) -> bench.Scrape:
        import time
        t = time.perf_counter()
        return bench.Scrape(t, t, prometheus.parse(self.fake.metrics_text()))


@pytest.fixture
def fake(monkeypatch):
    server = FakeVLLM()

    def client(ep, timeout_s, max_connections=64):
        return httpx.AsyncClient(transport=httpx.MockTransport(server.handler), timeout=timeout_s,
                                 headers={"Authorization": f"Bearer {ep.token}"})
    monkeypatch.setattr(bench, "make_client", client)
    return server


LABELS = {"model": {"key": "qwen3.8-27b", "served_name": "coder"}, "revision": "a" * 40,
          "box": {"name": "spark-1", "address": "10.0.0.1", "simulated": True}}


def test_probe_end_to_end_against_fake_server(fake):
    ep = bench.Endpoint("http://fake/coder/v1", "coder", token="tok")
    s = bench.ProbeSettings(workload=load(), streams=[1, 3], window_s=0.4, max_tokens=40, prefill_tokens=[2000, 9000],
                            ignore_eos=True, settle_s=0.05, idle_timeout_s=5)
    rec = asyncio.run(bench.run_probe(ep, FakeMetrics(fake), s, LABELS, roofline_single=1000.0))
    assert rec["schema"] == bench.SCHEMA
    for key in ("date", "workload", "window_s", "streams", "model", "revision", "vllm_version", "box", "runs",
                "prefill", "problems"):
        assert key in rec
    assert rec["workload"]["name"] == "codegen" and rec["workload"]["version"] == 1
    assert rec["vllm_version"] == "0.32.0" and rec["streams"] == [1, 3] and rec["window_s"] == 0.4
    for run in rec["runs"]:
        assert run["counter_tokens"] > 0
        assert abs(run["client_vs_counter"]) <= 0.05, run
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


def test_probe_refuses_wrong_token(fake):
    ep = bench.Endpoint("http://fake/coder/v1", "coder", token="wrong")
    s = bench.ProbeSettings(workload=load(), streams=[1], window_s=0.1, max_tokens=8, prefill_tokens=[],
                            idle_timeout_s=5)
    with pytest.raises(bench.BenchError, match="401"):
        asyncio.run(bench.run_probe(ep, FakeMetrics(fake), s, LABELS))


def test_prefill_prompt_is_unique_each_time(fake):
    ep = bench.Endpoint("http://fake/coder/v1", "coder", token="tok")
    s = bench.ProbeSettings(workload=load(), streams=[], window_s=0.1, prefill_tokens=[1000, 1000],
                            idle_timeout_s=5)
    rec = asyncio.run(bench.run_probe(ep, FakeMetrics(fake), s, LABELS))
    assert [p["prefix_cache_hits_delta"] for p in rec["prefill"]] == [0, 0]
    prompts = [r["prompt"] for r in fake.requests if "prompt" in r and "max_tokens" in r]
    assert len(prompts) == 2 and prompts[0] != prompts[1] and prompts[0][:8] == "Session "


# ------------------------------------------------------------------------------------------------------ reports

def _record(key="qwen3.8-27b", window=40, workload=("codegen", 1, "abc"), rates=(18.3, 40, 73, 122)):
    return {"schema": bench.SCHEMA, "date": "2026-11-20T10:00:00Z", "model": {"key": key}, "revision": "f" * 40,
            "vllm_version": "0.32.0", "box": {"name": "spark-1"}, "window_s": window, "max_tokens": 1024,
            "ignore_eos": False, "temperature": 0.0,
            "workload": {"name": workload[0], "version": workload[1], "sha256": workload[2]},
            "runs": [{"streams": n, "counter_tokens_per_s": r, "roofline_pct": 50.0,
                      "spec_decode": {"acceptance_rate": 0.5, "tokens_per_step": 2.5}}
                     for n, r in zip((1, 2, 4, 8), rates)],
            "prefill": [{"target_tokens": 12288, "tokens_per_s": 2088.0, "error": None}]}


def _render(table) -> str:
    from rich.console import Console
    console = Console(width=200, record=True)
    console.print(table)
    return console.export_text()


def test_compare_same_workload():
    a, b = _record(), _record("laguna-s-2.1", rates=(46.5, 52, 96, 176))
    assert bench.differences(a, b) == []
    rows = {r[0]: r for r in bench.compare_rows(a, b)}
    assert rows["decode tok/s, 8 streams"][1:] == ("122.0 (50%)", "176.0 (50%)", "1.44x")
    assert rows["prefill tok/s, 12K prompt"][1] == "2088"
    text = _render(bench.compare_table(a, b, "qwen", "laguna"))
    assert "same workload codegen-v1, same 40 s window" in text


def test_compare_says_when_workloads_or_windows_differ():
    a, b = _record(), _record(window=10, workload=("codegen", 2, "def"))
    diffs = bench.differences(a, b)
    assert "WORKLOADS DIFFER: codegen-v1 vs codegen-v2" in diffs
    assert "WINDOWS DIFFER: 40 s vs 10 s" in diffs
    text = _render(bench.compare_table(a, b))
    assert "WORKLOADS DIFFER" in text and "WINDOWS DIFFER" in text
    # same name and version but edited prompts is still a different workload
    assert bench.differences(a, _record(workload=("codegen", 1, "edited")))[0].startswith("WORKLOADS DIFFER")


def test_record_table_and_plot(tmp_path):
    rec = _record()
    for run in rec["runs"]:
        run.update(per_stream_tokens_per_s=1.0, client_tokens_per_s=1.0, client_vs_counter=0.01, agree=True,
                   requests_finished=3)
    decode, prefill = bench.record_table(rec)
    assert "122.0 (50%)" in _render(decode)
    png = bench.plot_records([rec, _record("laguna-s-2.1")], tmp_path / "p.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_write_and_load_record(tmp_path):
    path = bench.write_record(_record(), tmp_path / "r" / "x.json")
    assert bench.load_record(path)["model"]["key"] == "qwen3.8-27b"
    (tmp_path / "bad.json").write_text('{"runs": []}')
    with pytest.raises(bench.BenchError, match="not a sparkctl bench record"):
        bench.load_record(tmp_path / "bad.json")


# ------------------------------------------------------------------------------------------------------ workloads

def test_workload_is_versioned_data():
    w = load("codegen-v1")
    assert (w.name, w.version, w.label) == ("codegen", 1, "codegen-v1")
    assert len(w.prompts) >= 16 and len(set(w.prompts)) == len(w.prompts)
    assert w.prompt(0) == w.prompt(len(w.prompts))
    assert len(w.sha256) == 64


def test_haystack_is_deterministic_and_digit_free():
    t = haystack.text(20000, seed=3)
    assert t == haystack.text(20000, seed=3) and t != haystack.text(20000, seed=4)
    assert haystack.text(40000, seed=3).startswith(t)
    assert not any(ch.isdigit() for ch in t)
    assert 19000 < len(t) <= 20000


def test_model_labels_read_the_lock(tmp_path):
    from sparkctl.config import groupdata
    data = groupdata.load(["all", "gx10"])
    lock = tmp_path / "lock.json"
    lock.write_text(json.dumps({"checkpoints": {"unsloth/Qwen3.8-27B-NVFP4": {"revision": "main", "sha": "1" * 40}}}))
    data["MODEL_LOCK_FILE"] = str(lock)
    labels = bench.model_labels(data)
    assert labels["revision"] == "1" * 40
    assert labels["model"]["key"] == "qwen3.8-27b" and labels["model"]["served_name"] == "coder"
    data["MODEL_LOCK_FILE"] = str(tmp_path / "missing.json")
    assert bench.model_labels(data)["revision"] is None
    lock.write_text("not json")
    data["MODEL_LOCK_FILE"] = str(lock)
    assert bench.model_labels(data)["revision"] is None


def test_roofline_from_planner():
    from sparkctl.config import groupdata
    # the configured coder (Qwen): 273 GB/s over 16 GB of weights read a step, 2.5 tokens a step
    assert bench.roofline_single_stream(groupdata.load(["all", "gx10"])) == (
        pytest.approx(273 / 16.0 * 2.5), "sparkctl.capacity.planner")
