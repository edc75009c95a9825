"""The decode/prefill probe behind `python -m sparkctl bench`, and its reports (table, plot, compare).

What it measures (the probe the model decision was made from):

* Decode. N concurrent streams of code-generation chat requests (a fixed, versioned prompt set, round-robin),
  kept full for the whole window: each stream replaces a finished request at once. Once every stream has
  produced tokens, /metrics is scraped (on the box, over ssh: it is not public), the window runs (BENCH_WINDOW_S),
  /metrics is scraped again. The decode rate is Δ vllm:generation_tokens_total / Δt between the two scrapes,
  summed over label sets. The same window is counted on the client, and both are reported.
* Speculative decoding over the same window: acceptance rate, tokens per step, per-position rates (metrics.py).
* Prefill. After the decode sweep, on an idle server, one fresh prompt per requested length (12K by default):
  a unique prefix at token 0 so no prefix-cache block can match (verified: Δ prefix_cache_hits_total must be 0),
  `max_tokens` 1, timed to the first streamed token; prefill tokens/s = usage.prompt_tokens / TTFT.

Client token count, defined so that it measures what the counter measures. Every request streams with
`stream_options: {include_usage: true, continuous_usage_stats: true}`: vLLM then puts the request's cumulative
`usage.completion_tokens` on every chunk, so the client knows, per request, how many tokens it had received at
any instant (a chunk under speculative decoding carries several tokens; the cumulative count stays exact). The
client count of a window [t0, t1] is

    Σ over requests of  cum_tokens(t1) - cum_tokens(t0)

where cum_tokens(t) is the last cumulative count received at or before t (0 before the first chunk). Requests
that started before t0, finished inside the window, or are still running at t1 contribute exactly their tokens
inside the window. The reported client count uses the midpoints of the two scrape commands (perf_counter on
both sides) as t0 and t1. But the counters were read at some unknown instant inside each command (ssh, curl and
vLLM's /metrics handler on a busy event loop: tens of ms on an idle box, over half a second on a loaded one),
so the client count that matches the counter lies between

    lo = count over [end of scrape 0, start of scrape 1]   and   hi = count over [start of scrape 0, end of scrape 1]

and the check is made against that bracket: the gap is how far the counter lies outside [lo, hi], relative to the
counter (0 inside it). What is left beyond the bracket is tokens in flight between engine and client
(milliseconds). Other clients of the same vLLM make the counter larger than the client count: a gap above 5 %
means the counter figure is not the probe's alone, and the probe exits non-zero. A server without continuous usage stats falls back to
one token per content chunk corrected by the final usage (marked "client_count_method": "chunks").

Client settings: timeout BENCH_CLIENT_TIMEOUT_S (7200 s) on every phase and no retries at any layer (a retry
resends a possibly huge prompt; silent 10-minute cuts and resends were exactly the failure this replaces).
"""

from __future__ import annotations

import asyncio
import bisect
import datetime as _dt
import json
import re
import shutil
import ssl
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from sparkctl import REPO_ROOT
from sparkctl.config.lock import cache_dirname
from sparkctl.errors import SparkctlError
from sparkctl.measure import prometheus
from sparkctl.measure.workloads import Workload, haystack

SCHEMA = "sparkctl.measure.bench/1"
AGREEMENT_TOLERANCE = 0.05  # counter vs client tokens: relative gap above which the probe fails
DEFAULT_STREAMS = (1, 2, 4, 8)
PREFILL_SUFFIX = "\n\nSummarize the text above in one sentence."
FALLBACK_CHARS_PER_TOKEN = 4.0  # only when the server has no /tokenize


class BenchError(SparkctlError):
    """The probe could not measure (server refused, counters missing, endpoint unreachable)."""


# ================================================================================================================
# Pure maths: token timelines and window results
# ================================================================================================================

@dataclass
class RequestLog:
    """One request of a stream, as the client saw it. Times are time.perf_counter() seconds."""

    stream: int
    prompt_index: int
    t_sent: float
    t_first: float | None = None  # first chunk that carried choices (time to first token)
    t_done: float | None = None  # stream ended ([DONE] received)
    times: list[float] = field(default_factory=list)  # chunk arrival times ...
    cum_tokens: list[int] = field(default_factory=list)  # ... and cumulative completion tokens at each
    usage_completion_tokens: int | None = None  # the final usage chunk
    prompt_tokens: int | None = None
    finish_reason: str | None = None
    continuous_usage: bool = False  # counts came from per-chunk usage (exact) rather than chunk counting
    error: str | None = None
    cancelled: bool = False

    def record(self, t: float, cum: int) -> None:
        if self.cum_tokens and cum < self.cum_tokens[-1]:
            cum = self.cum_tokens[-1]  # never let the count go backwards
        self.times.append(t)
        self.cum_tokens.append(cum)

    def tokens_at(self, t: float) -> int:
        """Cumulative completion tokens received at or before t (0 before the first chunk)."""
        i = bisect.bisect_right(self.times, t)
        return self.cum_tokens[i - 1] if i else 0


def tokens_in_window(logs: Sequence[RequestLog], t0: float, t1: float) -> int:
    """Tokens the client received in [t0, t1] over all requests: Σ cum(t1) - cum(t0) (see module docstring)."""
    return sum(r.tokens_at(t1) - r.tokens_at(t0) for r in logs)


def relative_gap(client: float, counter: float) -> float | None:
    """(client - counter) / counter; None when the counter moved by nothing."""
    return (client - counter) / counter if counter else None


def gap_outside(lo: float, hi: float, counter: float) -> float | None:
    """How far the counter lies outside the client's bracket [lo, hi], relative to the counter, signed like
    relative_gap (positive: the client saw more); 0 inside the bracket, None when the counter moved by nothing."""
    if not counter:
        return None
    if counter < lo:
        return relative_gap(lo, counter)
    if counter > hi:
        return relative_gap(hi, counter)
    return 0.0


def aggregate_roofline(single_stream_tokens_per_s: float | None, streams: int) -> float | None:
    """The aggregate decode roofline at N streams from the planner's single-stream one.

    Decode is bound by the bytes one step reads; a step of N streams reads the weights once and emits N times the
    tokens, so (bandwidth-bound, KV reads neglected) the bound is N x the single-stream roofline. Roofline % is
    then aggregate / bound, the same as per-stream rate / single-stream roofline.
    """
    if not single_stream_tokens_per_s:
        return None
    return single_stream_tokens_per_s * streams


@dataclass(frozen=True)
class Scrape:
    """One /metrics read: when the command ran (perf_counter) and what it returned."""

    t_start: float
    t_end: float
    snapshot: prometheus.Snapshot

    @property
    def t(self) -> float:
        """Best estimate of the instant the counters were read: the middle of the command."""
        return (self.t_start + self.t_end) / 2

    @property
    def duration(self) -> float:
        return self.t_end - self.t_start


def window_result(streams: int, s0: Scrape, s1: Scrape, logs: Sequence[RequestLog],
                  roofline_single: float | None = None) -> dict:
    """Everything one decode window yields, from the two scrapes and the client's request logs."""
    dt = s1.t - s0.t
    counter = prometheus.generation_tokens(s0.snapshot, s1.snapshot)
    client = tokens_in_window(logs, s0.t, s1.t)
    bracket = (tokens_in_window(logs, s0.t_end, s1.t_start), tokens_in_window(logs, s0.t_start, s1.t_end))
    gap = gap_outside(*bracket, counter)
    spec = prometheus.spec_decode(s0.snapshot, s1.snapshot)
    counter_rate = counter / dt if dt > 0 else 0.0
    bound = aggregate_roofline(roofline_single, streams)
    in_window = [r for r in logs if r.t_sent <= s1.t and (r.t_done is None or r.t_done >= s0.t)]
    finished = [r for r in logs if r.t_done is not None and s0.t <= r.t_done <= s1.t]
    started = [r for r in logs if s0.t <= r.t_sent <= s1.t]
    ttfts = [r.t_first - r.t_sent for r in started if r.t_first is not None]
    methods = {("usage" if r.continuous_usage else "chunks") for r in in_window if r.times}
    return {
        "streams": streams,
        "window_s": dt,
        "counter_tokens": counter,
        "client_tokens": client,
        "counter_tokens_per_s": counter_rate,
        "client_tokens_per_s": client / dt if dt > 0 else 0.0,
        "per_stream_tokens_per_s": counter_rate / streams,
        "client_tokens_bracket": list(bracket),  # the client count over the scrapes' earliest/latest instants
        "client_vs_counter": relative_gap(client, counter),  # midpoint count, for information
        "counter_outside_bracket": gap,  # what the agreement check uses (module docstring)
        "agree": gap is not None and abs(gap) <= AGREEMENT_TOLERANCE,
        "client_count_method": "usage" if methods == {"usage"} else ("chunks" if methods else None),
        "roofline_tokens_per_s": bound,
        "roofline_pct": 100.0 * counter_rate / bound if bound else None,
        "spec_decode": spec.to_dict() if spec else None,
        "requests_started": len(started),
        "requests_finished": len(finished),
        "requests_errored": sum(1 for r in logs if r.error and r.t_sent <= s1.t),
        "ttft_s_mean": statistics.fmean(ttfts) if ttfts else None,
        "scrape_s": [s0.duration, s1.duration],
    }


def prefill_result(target_tokens: int, prompt_tokens: int | None, ttft_s: float | None,
                   before: prometheus.Snapshot, after: prometheus.Snapshot, token_count_source: str) -> dict:
    d = prometheus.prefill(before, after)
    rate = prompt_tokens / ttft_s if prompt_tokens and ttft_s else None
    return {
        "target_tokens": target_tokens,
        "prompt_tokens": prompt_tokens,
        "ttft_s": ttft_s,
        "tokens_per_s": rate,
        "server_prefill_s": d.server_prefill_s,
        "server_tokens_per_s": (d.prompt_tokens / d.server_prefill_s) if d.server_prefill_s else None,
        "prompt_tokens_delta": d.prompt_tokens,
        "prefix_cache_queries_delta": d.prefix_cache_queries,
        "prefix_cache_hits_delta": d.prefix_cache_hits,
        "prompt_tokens_cached_delta": d.prompt_tokens_cached,
        "fresh": d.prefix_cache_hits == 0 and not d.prompt_tokens_cached,
        "token_count_source": token_count_source,
        "error": None,
    }


def served_sha(model_root: str | None) -> str | None:
    """The commit a vLLM serves, from its model path (.../snapshots/<40 hex>), or None."""
    m = re.search(r"/snapshots/([0-9a-f]{40})(?:/|$)", model_root or "")
    return m.group(1) if m else None


def check_record(record: dict) -> list[str]:
    """Why a record's figures cannot be trusted (empty: they can)."""
    problems = []
    repo = (record.get("model") or {}).get("repo")
    root = record.get("served_model_root")
    if repo and root and "/snapshots/" in root and f"{cache_dirname(repo)}/" not in root:
        problems.append(f"the server runs {root}, not the configured checkpoint {repo}: labels would be wrong")
    sha = record.get("served_sha")
    if sha and record.get("revision") and sha != record["revision"]:
        problems.append(f"the server runs commit {sha}, the lock file says {record['revision']}")
    for run in record.get("runs", []):
        if not run.get("agree"):
            gap = run.get("counter_outside_bracket")
            lo, hi = run.get("client_tokens_bracket") or (None, None)
            why = "no counter movement" if gap is None else \
                f"{100 * gap:+.1f} % outside the client's {lo}-{hi} tokens, counter {run.get('counter_tokens'):g}"
            problems.append(f"{run['streams']} streams: client and counter tokens disagree ({why})")
    for p in record.get("prefill", []):
        if p.get("error"):
            problems.append(f"prefill {p['target_tokens']}: {p['error']}")
        elif not p.get("fresh"):
            problems.append(f"prefill {p['target_tokens']}: prefix cache hit {p['prefix_cache_hits_delta']:g} "
                            "tokens, the prompt was not fresh")
    return problems


# ================================================================================================================
# I/O: endpoints, metrics scraping, streaming requests
# ================================================================================================================

@dataclass(frozen=True)
class Endpoint:
    """Where the probe talks: the OpenAI base URL of one served model through the proxy."""

    base_url: str  # https://<box>:<PROXY_PORT>/<served>/v1
    served_name: str
    token: str = ""
    ca: str | None = None  # CA bundle (PEM) that signed the proxy's certificate; None: system trust

    @property
    def root_url(self) -> str:
        """The vLLM server root behind the prefix (/version, /tokenize live there)."""
        base = self.base_url.rstrip("/")
        return base[: -len("/v1")] if base.endswith("/v1") else base


def make_client(ep: Endpoint, timeout_s: float, max_connections: int = 64) -> httpx.AsyncClient:
    """httpx client: one long timeout for every phase, no retries, only the given CA, no proxy env."""
    verify: ssl.SSLContext | bool = True
    if ep.ca:
        verify = ssl.create_default_context(cafile=ep.ca)
    transport = httpx.AsyncHTTPTransport(
        verify=verify, retries=0,
        limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections))
    headers = {"Authorization": f"Bearer {ep.token}"} if ep.token else {}
    return httpx.AsyncClient(transport=transport, timeout=httpx.Timeout(timeout_s), trust_env=False,
                             headers=headers)


class MetricsSource:
    """Reads vLLM's /metrics by running a command (curl on the box over ssh, or locally) and parses it."""

    def __init__(self, argv: list[str], start: list[str] | None = None, cleanup: list[str] | None = None,
                 tmpdir: str | None = None):
        self.argv = argv
        self._start, self._cleanup, self._tmpdir = start, cleanup, tmpdir
        self._started = False

    @staticmethod
    async def _quiet(argv: list[str]) -> int:
        proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.DEVNULL,
                                                    stdout=asyncio.subprocess.DEVNULL,
                                                    stderr=asyncio.subprocess.DEVNULL)
        return await proc.wait()

    async def __call__(self) -> Scrape:
        if self._start and not self._started:
            self._started = True
            await self._quiet(self._start)  # a failed master only costs speed: scrapes then connect directly
        t0 = time.perf_counter()
        proc = await asyncio.create_subprocess_exec(*self.argv, stdin=asyncio.subprocess.DEVNULL,
                                                    stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.PIPE)
        out, err = await proc.communicate()
        t1 = time.perf_counter()
        if proc.returncode != 0:
            raise BenchError(f"reading /metrics failed (exit {proc.returncode}): "
                             f"{err.decode(errors='replace').strip()[-400:]} [{' '.join(self.argv[-1:])}]")
        return Scrape(t0, t1, prometheus.parse(out.decode(errors="replace")))

    async def close(self) -> None:
        if self._cleanup and self._started:
            await self._quiet(self._cleanup)
        if self._tmpdir:
            shutil.rmtree(self._tmpdir, ignore_errors=True)

    @classmethod
    def local(cls, url: str) -> "MetricsSource":
        return cls(["curl", "-fsS", url])

    @classmethod
    def ssh(cls, host, port: int, multiplex: bool = True) -> "MetricsSource":
        """curl on the box over ssh. With multiplex, one ssh master connection (started once, detached, stdio on
        /dev/null) carries every scrape, so a scrape takes milliseconds instead of a handshake: less timing
        uncertainty per window. Scrapes never become masters themselves (ControlMaster=no): a backgrounded
        master holding a scrape's stderr pipe would hang the read."""
        argv = host.ssh_argv(f"curl -fsS http://127.0.0.1:{int(port)}/metrics")
        if not multiplex or not argv or argv[0] != "ssh":
            return cls(argv)
        tmpdir = tempfile.mkdtemp(prefix="sparkctl-ssh-")
        sock = str(Path(tmpdir) / "cm")
        base = argv[1:-1]  # options and destination, without the remote command
        start = ["ssh", "-o", "ControlMaster=yes", "-o", f"ControlPath={sock}", "-o", "ControlPersist=300",
                 "-N", "-f", *base]
        scrape = ["ssh", "-o", "ControlMaster=no", "-o", f"ControlPath={sock}", *argv[1:]]
        cleanup = ["ssh", "-o", f"ControlPath={sock}", "-O", "exit", *base]
        return cls(scrape, start=start, cleanup=cleanup, tmpdir=tmpdir)


def _oneline(text: str, limit: int = 300) -> str:
    return " ".join(text.split())[:limit]


def _sse_payloads(line: str) -> str | None:
    """The JSON payload of one SSE line, or None for blank/comment/non-data lines."""
    if not line or line.startswith(":") or not line.startswith("data:"):
        return None
    return line[5:].strip()


async def stream_request(client: httpx.AsyncClient, url: str, body: dict, log: RequestLog,
                         on_tokens: Callable[[], None] | None = None) -> None:
    """POST a streaming completion and fill `log` with the token timeline; errors land in log.error."""
    chunk_tokens = 0
    async with client.stream("POST", url, json=body) as resp:
        if resp.status_code != 200:
            text = (await resp.aread()).decode(errors="replace")
            log.error = f"HTTP {resp.status_code}: {_oneline(text)}"
            return
        async for line in resp.aiter_lines():
            payload = _sse_payloads(line)
            if payload is None:
                continue
            if payload == "[DONE]":
                break
            now = time.perf_counter()
            try:
                chunk = json.loads(payload)
            except json.JSONDecodeError:
                log.error = f"unparsable SSE payload: {payload[:200]}"
                continue
            if "error" in chunk and not chunk.get("choices"):
                log.error = f"server error in stream: {str(chunk['error'])[:300]}"
                continue
            usage = chunk.get("usage") or None
            choices = chunk.get("choices") or []
            if choices:
                if log.t_first is None:
                    log.t_first = now
                c0 = choices[0]
                if c0.get("finish_reason"):
                    log.finish_reason = c0["finish_reason"]
                delta = c0.get("delta") or {}
                if delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") \
                        or delta.get("tool_calls") or c0.get("text"):
                    chunk_tokens += 1
            if usage:
                if usage.get("prompt_tokens") is not None:
                    log.prompt_tokens = usage["prompt_tokens"]
                if usage.get("completion_tokens") is not None:
                    if choices:
                        log.continuous_usage = True
                    log.record(now, int(usage["completion_tokens"]))
                    if not choices:  # the final usage-only chunk
                        log.usage_completion_tokens = int(usage["completion_tokens"])
            elif choices:
                log.record(now, chunk_tokens)  # fallback: one token per content chunk
            if on_tokens is not None:
                on_tokens()
    log.t_done = time.perf_counter()


# ================================================================================================================
# The probe
# ================================================================================================================

@dataclass
class ProbeSettings:
    workload: Workload
    streams: Sequence[int] = DEFAULT_STREAMS
    window_s: float = 40.0
    max_tokens: int = 1024
    prefill_tokens: Sequence[int] = (12288,)
    ignore_eos: bool = False
    temperature: float = 0.0
    timeout_s: float = 7200.0
    settle_s: float = 1.0  # after every stream has its first token, before the window opens
    idle_timeout_s: float = 120.0  # waiting for vLLM to drain between phases
    seed: int = 0  # haystack text of the prefill prompts


class Reporter:
    """Progress callbacks; the CLI's rich display implements them, tests use this silent one."""

    def phase(self, text: str) -> None: ...

    def window(self, streams: int, elapsed: float, window: float, client_tokens: int) -> None: ...

    def done(self, text: str) -> None: ...


def chat_body(ep: Endpoint, s: ProbeSettings, prompt: str) -> dict:
    body = {
        "model": ep.served_name,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": s.max_tokens,
        "temperature": s.temperature,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    if s.ignore_eos:
        body["ignore_eos"] = True
    return body


async def get_json(client: httpx.AsyncClient, url: str) -> Any:
    r = await client.get(url)
    if r.status_code != 200:
        raise BenchError(f"GET {url} answered HTTP {r.status_code}: {_oneline(r.text)}")
    return r.json()


async def server_info(client: httpx.AsyncClient, ep: Endpoint) -> dict:
    """vLLM version (/version at the server root) and the served model's card (/v1/models)."""
    try:
        models = await get_json(client, ep.base_url.rstrip("/") + "/models")
    except httpx.HTTPError as exc:
        raise BenchError(f"{ep.base_url} is unreachable: {exc!r}") from None
    card = next((m for m in models.get("data", []) if m.get("id") == ep.served_name), None)
    if card is None:
        raise BenchError(f"{ep.base_url}/models does not list {ep.served_name!r}: "
                         f"{[m.get('id') for m in models.get('data', [])]}")
    try:
        version = (await get_json(client, ep.root_url + "/version")).get("version")
    except (BenchError, httpx.HTTPError, ValueError):
        version = None
    return {"vllm_version": version, "max_model_len": card.get("max_model_len"), "model_root": card.get("root")}


async def tokenize_count(client: httpx.AsyncClient, ep: Endpoint, *, prompt: str | None = None,
                         messages: list[dict] | None = None) -> int | None:
    """Token count by the server's own tokenizer (POST /tokenize at the server root); None if unavailable."""
    body: dict = {"model": ep.served_name}
    if messages is not None:
        body.update(messages=messages, add_generation_prompt=True)
    else:
        body.update(prompt=prompt, add_special_tokens=True)
    try:
        r = await client.post(ep.root_url + "/tokenize", json=body)
    except httpx.HTTPError:
        return None
    if r.status_code != 200:
        return None
    try:
        return int(r.json()["count"])
    except (ValueError, KeyError, TypeError):
        return None


async def fit_text(count: Callable[[str], Any], build: Callable[[int], str], target: int,
                   sample_chars: int = 8000, max_steps: int = 20) -> tuple[str, int | None, str]:
    """Size build(n_chars) until count(text) lands in [target - tol, target], tol = max(32, 0.5 %).

    A bracketing search on the character count (proportional guesses kept inside the bracket), so it converges
    even where tokens per character drift along the text. Never above target when the server can count (a
    prompt over the target may not fit the context). Returns (text, measured tokens or None, source)."""
    sample = build(sample_chars)
    c = await count(sample)
    if c is None:
        return build(int(target * FALLBACK_CHARS_PER_TOKEN)), None, "estimate"
    ratio = max(len(sample) / max(c, 1), 0.5)
    low = target - max(32, int(0.005 * target))
    aim = (low + target) / 2
    below: tuple[int, str, int] | None = None  # (chars, text, tokens) with tokens <= target
    above: int | None = None  # chars known to give more than target
    n_chars = max(int(aim * ratio), 1)
    for _ in range(max_steps):
        text = build(n_chars)
        c = await count(text)
        if c is None:
            return text, None, "estimate"
        if c <= target:
            if below is None or c > below[2]:
                below = (n_chars, text, c)
            if c >= low:
                break
        else:
            above = n_chars if above is None else min(above, n_chars)
        guess = n_chars + int((aim - c) * ratio)
        lo = below[0] + 1 if below else 1
        hi = above - 1 if above is not None else max(guess, lo)
        if hi < lo:
            break
        n_chars = min(max(guess, lo), hi)
        if below and above is not None and guess in (below[0], above):
            n_chars = (lo + hi) // 2
    if below is None:
        return text, c, "tokenize"
    return below[1], below[2], "tokenize"


async def wait_idle(metrics_source: MetricsSource, timeout_s: float) -> Scrape:
    """Scrape until vLLM has no running or waiting request (aborted streams drain in well under a second)."""
    deadline = time.monotonic() + timeout_s
    while True:
        s = await metrics_source()
        if prometheus.requests_in_flight(s.snapshot) == 0:
            return s
        if time.monotonic() > deadline:
            raise BenchError(f"vLLM still has requests in flight after {timeout_s:.0f} s; another client is "
                             "using it, so the counters would not be the probe's alone")
        await asyncio.sleep(0.5)


async def decode_window(client: httpx.AsyncClient, ep: Endpoint, metrics_source: MetricsSource,
                        s: ProbeSettings, streams: int, reporter: Reporter, start_index: int = 0,
                        roofline_single: float | None = None) -> tuple[dict, int]:
    """One decode window at `streams` concurrent streams; returns (window result, next prompt index)."""
    url = ep.base_url.rstrip("/") + "/chat/completions"
    logs: list[RequestLog] = []
    stop = asyncio.Event()
    first_token = [asyncio.Event() for _ in range(streams)]
    counter = {"next": start_index}
    fatal: list[str] = []

    async def worker(i: int) -> None:
        consecutive_errors = 0
        while not stop.is_set():
            idx = counter["next"]
            counter["next"] += 1
            log = RequestLog(stream=i, prompt_index=idx, t_sent=time.perf_counter())
            logs.append(log)
            try:
                await stream_request(client, url, chat_body(ep, s, s.workload.prompt(idx)), log,
                                     on_tokens=first_token[i].set)
            except asyncio.CancelledError:
                log.cancelled = True
                raise
            except httpx.HTTPError as exc:
                log.error = f"{type(exc).__name__}: {exc}"
            except Exception as exc:  # a bug or a malformed stream: stop the window, never hang it
                log.error = f"{type(exc).__name__}: {exc}"
                fatal.append(log.error)
                first_token[i].set()
                return
            if log.error:
                consecutive_errors += 1
                if consecutive_errors >= 3:
                    fatal.append(log.error)
                    first_token[i].set()
                    return
                await asyncio.sleep(1.0)
            else:
                consecutive_errors = 0

    tasks = [asyncio.create_task(worker(i)) for i in range(streams)]
    try:
        reporter.phase(f"{streams} stream(s): filling")
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in first_token)), timeout=s.timeout_s)
        if fatal:
            raise BenchError(f"requests fail: {fatal[0]}")
        await asyncio.sleep(s.settle_s)
        s0 = await metrics_source()
        t_open = time.perf_counter()
        while (elapsed := time.perf_counter() - t_open) < s.window_s:
            if fatal:
                raise BenchError(f"requests fail during the window: {fatal[0]}")
            reporter.window(streams, elapsed, s.window_s, tokens_in_window(logs, s0.t, time.perf_counter()))
            await asyncio.sleep(min(0.25, max(s.window_s - elapsed, 0.0)))
        s1 = await metrics_source()
        reporter.window(streams, s.window_s, s.window_s, tokens_in_window(logs, s0.t, s1.t))
    finally:
        stop.set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return window_result(streams, s0, s1, logs, roofline_single), counter["next"]


async def measure_prefill(client: httpx.AsyncClient, ep: Endpoint, metrics_source: MetricsSource,
                          s: ProbeSettings, target: int, max_model_len: int | None) -> dict:
    """One fresh prompt of about `target` tokens, max_tokens 1: TTFT and the prefix-cache check."""
    if max_model_len and target + 1 > max_model_len:
        return {"target_tokens": target, "error": f"does not fit max_model_len {max_model_len}",
                "prompt_tokens": None, "ttft_s": None, "tokens_per_s": None, "fresh": None}
    prefix = f"Session {uuid.uuid4().hex}. Read the following notes.\n\n"

    def build(n_chars: int) -> str:
        # whole sentences step ~70 tokens at a time: cut a longer text at a word boundary to size it finely
        body = haystack.text(n_chars + 400, s.seed)[:n_chars]
        return prefix + body[:body.rfind(" ") + 1 or len(body)] + PREFILL_SUFFIX

    text, counted, source = await fit_text(lambda t: tokenize_count(client, ep, prompt=t), build, target)
    body = {"model": ep.served_name, "prompt": text, "max_tokens": 1, "temperature": 0.0, "stream": True,
            "stream_options": {"include_usage": True}}
    before = await wait_idle(metrics_source, s.idle_timeout_s)
    log = RequestLog(stream=0, prompt_index=-1, t_sent=time.perf_counter())
    try:
        await stream_request(client, ep.base_url.rstrip("/") + "/completions", body, log)
    except httpx.HTTPError as exc:
        log.error = f"{type(exc).__name__}: {exc}"
    after = await wait_idle(metrics_source, s.idle_timeout_s)
    if log.error:
        return {"target_tokens": target, "error": log.error, "prompt_tokens": counted, "ttft_s": None,
                "tokens_per_s": None, "fresh": None}
    ttft = log.t_first - log.t_sent if log.t_first else None
    return prefill_result(target, log.prompt_tokens or counted, ttft, before.snapshot, after.snapshot, source)


async def _probe(client: httpx.AsyncClient, ep: Endpoint, metrics_source: MetricsSource, s: ProbeSettings,
                 reporter: Reporter, roofline_single: float | None) -> tuple[dict, list, list]:
    reporter.phase("server info")
    info = await server_info(client, ep)
    reporter.phase("waiting for an idle server")
    await wait_idle(metrics_source, s.idle_timeout_s)
    runs = []
    idx = 0
    for n in s.streams:
        run, idx = await decode_window(client, ep, metrics_source, s, n, reporter, idx, roofline_single)
        runs.append(run)
        reporter.done(f"{n} stream(s): {run['counter_tokens_per_s']:.1f} tok/s")
        await wait_idle(metrics_source, s.idle_timeout_s)
    prefill = []
    for target in s.prefill_tokens:
        reporter.phase(f"prefill {target} tokens")
        p = await measure_prefill(client, ep, metrics_source, s, target, info.get("max_model_len"))
        prefill.append(p)
        reporter.done(f"prefill {target}: " + (p["error"] or f"{p['tokens_per_s']:.0f} tok/s"))
    return info, runs, prefill


async def run_probe(ep: Endpoint, metrics_source: MetricsSource, s: ProbeSettings, labels: dict,
                    reporter: Reporter | None = None, roofline_single: float | None = None) -> dict:
    """The whole probe: decode sweep, then prefill; returns the JSON record (see bench_cli for the schema)."""
    reporter = reporter or Reporter()
    date = _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    try:
        async with make_client(ep, s.timeout_s, max_connections=max(64, 2 * max(s.streams, default=1))) as client:
            info, runs, prefill = await _probe(client, ep, metrics_source, s, reporter, roofline_single)
    finally:
        await metrics_source.close()
    record = {
        "schema": SCHEMA,
        "date": date,
        **labels,
        "vllm_version": info["vllm_version"] or labels.get("vllm_version"),
        "workload": s.workload.to_dict(),
        "window_s": s.window_s,
        "streams": list(s.streams),
        "max_tokens": s.max_tokens,
        "temperature": s.temperature,
        "ignore_eos": s.ignore_eos,
        "endpoint": ep.base_url,
        "max_model_len": info.get("max_model_len"),
        "served_model_root": info.get("model_root"),
        "served_sha": served_sha(info.get("model_root")),
        "roofline_single_stream_tokens_per_s": roofline_single,
        "runs": runs,
        "prefill": prefill,
    }
    record["problems"] = check_record(record)
    return record


# ================================================================================================================
# Labels: model, locked revision, box, roofline (group data, catalog, lock file, planner)
# ================================================================================================================

def read_lock(data: dict) -> dict:
    """The lock file's {"checkpoints": {repo: {...}}} part, read defensively ({} when absent or malformed)."""
    path = Path(data.get("MODEL_LOCK_FILE", "models.lock.json"))
    if not path.is_absolute():
        path = REPO_ROOT / path
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    checkpoints = raw.get("checkpoints") if isinstance(raw, dict) else None
    return checkpoints if isinstance(checkpoints, dict) else {}


def _checkpoint_label(ckpt, lock: dict) -> dict:
    entry = lock.get(ckpt.repo) if isinstance(lock.get(ckpt.repo), dict) else {}
    sha = entry.get("sha") or entry.get("commit")
    return {"repo": ckpt.repo, "revision": entry.get("revision") or ckpt.revision,
            "sha": sha if isinstance(sha, str) else None}


def model_labels(data: dict) -> dict:
    """{"model": {...}, "revision": <locked sha or None>} for the configured coding model."""
    from sparkctl.config import catalog

    key = data.get("CODING_MODEL", "")
    served = data.get("CODER_SERVED_NAME", "coder")
    try:
        spec = catalog.lookup(catalog.resolve(data.get("CATALOG_OVERRIDES")), "CODING_MODEL", key, catalog.CODER)
    except SparkctlError:
        return {"model": {"key": key, "served_name": served}, "revision": None}
    lock = read_lock(data)
    ckpt = _checkpoint_label(spec.checkpoint, lock)
    model = {"key": spec.key, "title": spec.title, "served_name": served, **ckpt,
             "draft": _checkpoint_label(spec.draft, lock) if spec.draft else None,
             "speculative": spec.speculative, "kv_cache_dtype": spec.kv_cache_dtype,
             "max_model_len": spec.max_model_len}
    return {"model": model, "revision": ckpt["sha"]}


def box_labels(host, data: dict) -> dict:
    return {"box": {"name": host.name, "address": host.address, "simulated": bool(host.simulated),
                    "usable_memory_gib": data.get("BOX_USABLE_MEMORY_GIB"),
                    "memory_bandwidth_gbps": data.get("BOX_MEMORY_BANDWIDTH_GBPS")}}


def _find_coder_plan(plan, key: str):
    for attr in ("coder", "coding", "coding_model"):
        p = getattr(plan, attr, None)
        if p is not None and hasattr(p, "roofline_tokens_per_s"):
            return p
    models = getattr(plan, "models", None) or getattr(plan, "model_plans", None) or []
    items = models.values() if isinstance(models, dict) else models
    for p in items:
        ident = {getattr(p, a, None) for a in ("key", "model", "name")}
        spec = getattr(p, "spec", None)
        if spec is not None:
            ident.add(getattr(spec, "key", None))
        if key in ident and hasattr(p, "roofline_tokens_per_s"):
            return p
    return None


def roofline_single_stream(data: dict) -> tuple[float | None, str]:
    """The planner's single-stream decode roofline of the coding model, or (None, why not)."""
    try:
        from sparkctl.capacity import planner  # written separately; optional here
        from sparkctl.config import catalog
    except ImportError as exc:
        return None, f"planner unavailable ({exc})"
    key = data.get("CODING_MODEL", "")
    try:
        plan = planner.plan_box(data, catalog.resolve(data.get("CATALOG_OVERRIDES")), coding_model=key)
        p = _find_coder_plan(plan, key)
        value = getattr(p, "roofline_tokens_per_s", None) if p is not None else None
        if callable(value):
            value = value(1)
        return (float(value), "sparkctl.capacity.planner") if value else (None, "planner gave no roofline")
    except Exception as exc:  # the planner is optional: any failure only drops the roofline column
        return None, f"planner failed ({type(exc).__name__}: {exc})"


# ================================================================================================================
# Reports: table, compare, plot, files
# ================================================================================================================

def load_record(path: str | Path) -> dict:
    try:
        rec = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise BenchError(f"{path}: not a readable bench record ({exc})") from None
    if not isinstance(rec, dict) or not str(rec.get("schema", "")).startswith("sparkctl.measure.bench/"):
        raise BenchError(f"{path}: not a sparkctl bench record (no schema {SCHEMA!r})")
    return rec


def write_record(record: dict, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path


def _fmt(v, spec: str = ".1f", none: str = "-") -> str:
    return none if v is None else format(v, spec)


def run_label(rec: dict) -> str:
    m = rec.get("model") or {}
    rev = (rec.get("revision") or "")[:8]
    return f"{m.get('key', '?')}{'@' + rev if rev else ''} {str(rec.get('date', ''))[:10]}"


def _workload_label(rec: dict) -> str:
    w = rec.get("workload") or {}
    return f"{w.get('name', '?')}-v{w.get('version', '?')}"


def differences(a: dict, b: dict) -> list[str]:
    """What makes two records not directly comparable, in words for the table header."""
    out = []
    if _workload_label(a) != _workload_label(b) or (a.get("workload") or {}).get("sha256") != \
            (b.get("workload") or {}).get("sha256"):
        out.append(f"WORKLOADS DIFFER: {_workload_label(a)} vs {_workload_label(b)}")
    if a.get("window_s") != b.get("window_s"):
        out.append(f"WINDOWS DIFFER: {a.get('window_s')} s vs {b.get('window_s')} s")
    for key, name in (("max_tokens", "max_tokens"), ("ignore_eos", "ignore_eos"), ("temperature", "temperature")):
        if a.get(key) != b.get(key):
            out.append(f"{name} differs: {a.get(key)} vs {b.get(key)}")
    if (a.get("box") or {}).get("name") != (b.get("box") or {}).get("name"):
        out.append(f"boxes differ: {(a.get('box') or {}).get('name')} vs {(b.get('box') or {}).get('name')}")
    return out


def _runs_by_streams(rec: dict) -> dict[int, dict]:
    return {int(r["streams"]): r for r in rec.get("runs", [])}


def _prefill_by_target(rec: dict) -> dict[int, dict]:
    return {int(p["target_tokens"]): p for p in rec.get("prefill", [])}


def _decode_cell(run: dict | None) -> str:
    if run is None:
        return "-"
    pct = run.get("roofline_pct")
    if pct is None:
        return f"{run['counter_tokens_per_s']:.1f}"
    return f"{run['counter_tokens_per_s']:.1f} ({pct:.0f}%)" if pct >= 1 else \
        f"{run['counter_tokens_per_s']:.1f} ({pct:.2g}%)"


def record_table(rec: dict):
    """The terminal table of one probe run."""
    from rich.table import Table

    t = Table(title=f"{run_label(rec)} on {(rec.get('box') or {}).get('name', '?')}  "
                    f"vLLM {rec.get('vllm_version') or '?'}  {_workload_label(rec)}  window {rec.get('window_s')} s",
              caption="tok/s from vllm:generation_tokens_total; (x%) of the planner's decode roofline")
    for col in ("streams", "tok/s (roofline)", "per stream", "client tok/s", "client vs counter",
                "acceptance", "tokens/step", "per-position", "reqs done"):
        t.add_column(col, justify="right")
    for run in rec.get("runs", []):
        sd = run.get("spec_decode") or {}
        per_pos = ", ".join(f"{v:.2f}" for v in (sd.get("per_position_acceptance") or {}).values())
        gap = run.get("client_vs_counter")
        t.add_row(str(run["streams"]), _decode_cell(run), _fmt(run.get("per_stream_tokens_per_s")),
                  _fmt(run.get("client_tokens_per_s")),
                  ("-" if gap is None else f"{100 * gap:+.1f}%") + ("" if run.get("agree") else " !"),
                  _fmt(sd.get("acceptance_rate"), ".0%"), _fmt(sd.get("tokens_per_step"), ".2f"),
                  per_pos or "-", str(run.get("requests_finished", "-")))
    p = Table(title="prefill (fresh prompt, max_tokens 1)")
    for col in ("target", "prompt tokens", "TTFT s", "tok/s", "server tok/s", "prefix-cache hits"):
        p.add_column(col, justify="right")
    for pf in rec.get("prefill", []):
        if pf.get("error"):
            p.add_row(str(pf["target_tokens"]), "-", "-", pf["error"], "-", "-")
            continue
        p.add_row(str(pf["target_tokens"]), _fmt(pf.get("prompt_tokens"), "d"), _fmt(pf.get("ttft_s"), ".3f"),
                  _fmt(pf.get("tokens_per_s"), ".0f"), _fmt(pf.get("server_tokens_per_s"), ".0f"),
                  _fmt(pf.get("prefix_cache_hits_delta"), ".0f"))
    return t, p


def compare_rows(a: dict, b: dict) -> list[tuple[str, str, str, str]]:
    """(row label, A, B, B/A) for the side-by-side table."""
    rows: list[tuple[str, str, str, str]] = []

    def ratio(x, y) -> str:
        return f"{y / x:.2f}x" if x and y else "-"

    rows.append(("model", (a.get("model") or {}).get("key", "?"), (b.get("model") or {}).get("key", "?"), ""))
    rows.append(("locked revision", (a.get("revision") or "?")[:12], (b.get("revision") or "?")[:12], ""))
    rows.append(("vLLM", str(a.get("vllm_version")), str(b.get("vllm_version")), ""))
    rows.append(("box", str((a.get("box") or {}).get("name")), str((b.get("box") or {}).get("name")), ""))
    rows.append(("date", str(a.get("date")), str(b.get("date")), ""))
    ra, rb = _runs_by_streams(a), _runs_by_streams(b)
    for n in sorted(set(ra) | set(rb)):
        x, y = ra.get(n), rb.get(n)
        rows.append((f"decode tok/s, {n} stream{'s' if n > 1 else ''}", _decode_cell(x), _decode_cell(y),
                     ratio(x and x["counter_tokens_per_s"], y and y["counter_tokens_per_s"])))
    for n in sorted(set(ra) | set(rb)):
        x, y = (ra.get(n) or {}).get("spec_decode") or {}, (rb.get(n) or {}).get("spec_decode") or {}
        if x or y:
            rows.append((f"acceptance / tokens per step, {n}",
                         f"{_fmt(x.get('acceptance_rate'), '.0%')} / {_fmt(x.get('tokens_per_step'), '.2f')}",
                         f"{_fmt(y.get('acceptance_rate'), '.0%')} / {_fmt(y.get('tokens_per_step'), '.2f')}", ""))
    pa, pb = _prefill_by_target(a), _prefill_by_target(b)
    for n in sorted(set(pa) | set(pb)):
        x, y = pa.get(n) or {}, pb.get(n) or {}
        rows.append((f"prefill tok/s, {f'{n // 1024}K' if n % 1024 == 0 else n} prompt",
                     x.get("error") or _fmt(x.get("tokens_per_s"), ".0f"),
                     y.get("error") or _fmt(y.get("tokens_per_s"), ".0f"),
                     ratio(x.get("tokens_per_s"), y.get("tokens_per_s"))))
    return rows


def compare_table(a: dict, b: dict, name_a: str = "A", name_b: str = "B"):
    from rich.table import Table

    diffs = differences(a, b)
    title = f"{name_a}: {run_label(a)}  vs  {name_b}: {run_label(b)}"
    if diffs:
        title += "\n" + "\n".join(f"[bold red]{d}[/]" for d in diffs)
    else:
        title += f"\nsame workload {_workload_label(a)}, same {a.get('window_s')} s window"
    t = Table(title=title)
    t.add_column("")
    t.add_column(name_a, justify="right")
    t.add_column(name_b, justify="right")
    t.add_column(f"{name_b}/{name_a}", justify="right")
    for row in compare_rows(a, b):
        t.add_row(*row)
    return t


def plot_records(records: Sequence[dict], path: str | Path, labels: Sequence[str] | None = None) -> Path:
    """PNG: aggregate decode tokens/s (counter) against streams, one line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    all_streams: set[int] = set()
    for i, rec in enumerate(records):
        runs = sorted(rec.get("runs", []), key=lambda r: r["streams"])
        xs = [r["streams"] for r in runs]
        all_streams.update(xs)
        label = labels[i] if labels else f"{run_label(rec)} ({_workload_label(rec)}, {rec.get('window_s')} s)"
        ax.plot(xs, [r["counter_tokens_per_s"] for r in runs], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(all_streams) or [1])
    ax.set_xticklabels([str(x) for x in sorted(all_streams)] or ["1"])
    ax.set_xlabel("concurrent streams")
    ax.set_ylabel("aggregate decode tokens/s (vLLM counter)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("sparkctl bench: decode throughput")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
