"""The HTTP side of bench and NIAH: the endpoint, the httpx client, streamed completions timed per chunk, the
server's facts (/v1/models, /version, /tokenize) and sizing a prompt to a token count.

Client settings: timeout BENCH_CLIENT_TIMEOUT_S on every phase and no retries at any layer (a retry resends a
possibly huge prompt; silent 10-minute cuts and resends were exactly the failure this replaces).
"""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
from httpx_sse import EventSource, SSEError

from sparkctl.measure.maths import RequestLog
from sparkctl.measure.record import BenchError

FALLBACK_CHARS_PER_TOKEN = 4.0  # only when the server has no /tokenize


@dataclass(frozen=True)
class Endpoint:
    """Where the probe talks: the OpenAI base URL of one served model through the proxy."""

    base_url: str  # https://<box>:<PROXY_PORT>/<served>/v1
    served_name: str
    token: str = ""
    ca: str | None = None  # CA bundle (PEM) that signed the proxy's certificate; None: system trust
    headers: tuple[tuple[str, str], ...] = ()  # extra request headers (the acceptance probe's drain exemption)

    @property
    def root_url(self) -> str:
        """The vLLM server root behind the prefix (/version, /tokenize live there)."""
        base = self.base_url.rstrip("/")
        return base[: -len("/v1")] if base.endswith("/v1") else base

    def url(self, path: str) -> str:
        """An OpenAI route under the base URL, e.g. url("/chat/completions")."""
        return self.base_url.rstrip("/") + path


def make_client(ep: Endpoint, timeout_s: float, max_connections: int = 64) -> httpx.AsyncClient:
    """httpx client: one long timeout for every phase, no retries, only the given CA, no proxy env."""
    verify: ssl.SSLContext | bool = True
    if ep.ca:
        verify = ssl.create_default_context(cafile=ep.ca)
    transport = httpx.AsyncHTTPTransport(
        verify=verify, retries=0,
        limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections))
    headers = {**dict(ep.headers), **({"Authorization": f"Bearer {ep.token}"} if ep.token else {})}
    return httpx.AsyncClient(transport=transport, timeout=httpx.Timeout(timeout_s), trust_env=False,
                             headers=headers)


def oneline(text: str, limit: int = 300) -> str:
    return " ".join(text.split())[:limit]


def _carries_tokens(choice: dict) -> bool:
    delta = choice.get("delta") or {}
    return bool(delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
                or delta.get("tool_calls") or choice.get("text"))


def _take_usage(log: RequestLog, usage: dict, now: float, with_choices: bool) -> None:
    """Fold a chunk's usage block into the log (with choices: the server streams per-chunk usage)."""
    if usage.get("prompt_tokens") is not None:
        log.prompt_tokens = usage["prompt_tokens"]
    if usage.get("completion_tokens") is not None:
        if with_choices:
            log.continuous_usage = True
        log.record(now, int(usage["completion_tokens"]))  # the final usage-only chunk corrects the count


def _take_chunk(log: RequestLog, chunk: dict, now: float, chunk_tokens: int) -> int:
    """Fold one streamed chunk, received at `now`, into the log; returns the chunk-counted tokens so far."""
    usage = chunk.get("usage") or None
    choices = chunk.get("choices") or []
    if choices:
        if log.t_first is None:
            log.t_first = now
        if _carries_tokens(choices[0]):
            chunk_tokens += 1
    if usage:
        _take_usage(log, usage, now, bool(choices))
    elif choices:
        log.record(now, chunk_tokens)  # fallback: one token per content chunk
    return chunk_tokens


async def stream_request(client: httpx.AsyncClient, url: str, body: dict, log: RequestLog,
                         on_tokens: Callable[[], None] | None = None) -> None:
    """POST a streaming completion and fill `log` with the token timeline; errors land in log.error.

    Each event is timed (perf_counter) the moment httpx-sse hands it over, before its JSON is parsed, so the
    client-side timeline is when the tokens arrived, not when they were processed."""
    chunk_tokens = 0
    headers = {"Accept": "text/event-stream"}
    async with client.stream("POST", url, json=body, headers=headers) as resp:
        if resp.status_code != 200:
            text = (await resp.aread()).decode(errors="replace")
            log.error = f"HTTP {resp.status_code}: {oneline(text)}"
            return
        try:
            async for event in EventSource(resp).aiter_sse():
                now = time.perf_counter()
                if event.data == "[DONE]":
                    break
                try:
                    chunk = json.loads(event.data)
                except json.JSONDecodeError:
                    log.error = f"unparsable SSE payload: {event.data[:200]}"
                    continue
                if "error" in chunk and not chunk.get("choices"):
                    log.error = f"server error in stream: {str(chunk['error'])[:300]}"
                    continue
                chunk_tokens = _take_chunk(log, chunk, now, chunk_tokens)
                if on_tokens is not None:
                    on_tokens()
        except SSEError as exc:  # not an event stream (a proxy's HTML page, a JSON error with status 200)
            log.error = f"not a server-sent event stream: {exc}"
            return
    log.t_done = time.perf_counter()


async def get_json(client: httpx.AsyncClient, url: str) -> Any:
    r = await client.get(url)
    if r.status_code != 200:
        raise BenchError(f"GET {url} answered HTTP {r.status_code}: {oneline(r.text)}")
    return r.json()


async def server_info(client: httpx.AsyncClient, ep: Endpoint) -> dict:
    """vLLM version (/version at the server root) and the served model's card (/v1/models)."""
    try:
        models = await get_json(client, ep.url("/models"))
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


@dataclass
class _Bracket:
    """What fit_text's search knows: the best text within the target and the fewest characters known too many."""

    below: tuple[int, str, int] | None = None  # (chars, text, tokens) with tokens <= target
    above: int | None = None  # chars known to give more than target

    def add(self, n_chars: int, text: str, tokens: int, target: int) -> None:
        if tokens > target:
            self.above = n_chars if self.above is None else min(self.above, n_chars)
        elif self.below is None or tokens > self.below[2]:
            self.below = (n_chars, text, tokens)

    def next_size(self, guess: int) -> int | None:
        """The proportional guess kept inside the bracket (its middle when the guess repeats a known size), or
        None when the bracket has closed."""
        lo = self.below[0] + 1 if self.below else 1
        hi = self.above - 1 if self.above is not None else max(guess, lo)
        if hi < lo:
            return None
        if self.below and self.above is not None and guess in (self.below[0], self.above):
            return (lo + hi) // 2
        return min(max(guess, lo), hi)


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
    bracket = _Bracket()
    n_chars: int | None = max(int(aim * ratio), 1)
    for _ in range(max_steps):
        text = build(n_chars)
        c = await count(text)
        if c is None:
            return text, None, "estimate"
        bracket.add(n_chars, text, c, target)
        if low <= c <= target:
            break
        n_chars = bracket.next_size(n_chars + int((aim - c) * ratio))
        if n_chars is None:
            break
    if bracket.below is None:
        return text, c, "tokenize"
    return bracket.below[1], bracket.below[2], "tokenize"
