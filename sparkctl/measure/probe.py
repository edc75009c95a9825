"""The decode/prefill probe behind `python -m sparkctl bench` (the probe the model decision was made from).

* Decode. N concurrent streams of code-generation chat requests (a fixed, versioned prompt set, round-robin),
  kept full for the whole window: each stream replaces a finished request at once. Once every stream has
  produced tokens (and BENCH_SETTLE_S more), /metrics is scraped (on the box, over ssh: it is not public), the
  window runs (BENCH_WINDOW_S), /metrics is scraped again. The decode rate is Δ vllm:generation_tokens_total / Δt
  between the two scrapes, summed over label sets. The same window is counted on the client, and both are
  reported; how the two are compared is in maths.py.
* Speculative decoding over the same window: acceptance rate, tokens per step, per-position rates (prometheus.py).
* Prefill. After the decode sweep, on an idle server, one fresh prompt per requested length (12K by default):
  a unique prefix at token 0 so no prefix-cache block can match (verified: Δ prefix_cache_hits_total must be 0),
  `max_tokens` 1, timed to the first streamed token; prefill tokens/s = usage.prompt_tokens / TTFT. With
  `prefill_repeats` > 1 (the rollout's quick run) each length is measured that many times, each prompt fresh, and
  the median sample is reported with every sample's rate.

Between phases the probe waits (at most BENCH_IDLE_TIMEOUT_S) for vLLM to have no request in flight: another
client's requests would make the counters not the probe's alone.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from sparkctl.errors import SettingError
from sparkctl.measure import prometheus
from sparkctl.measure.client import (
    Endpoint,
    fit_text,
    make_client,
    server_info,
    stream_request,
    tokenize_count,
)
from sparkctl.measure.maths import (
    RequestLog,
    Scrape,
    median_prefill,
    prefill_failure,
    prefill_result,
    tokens_in_window,
    window_result,
)
from sparkctl.measure.record import (
    SCHEMA,
    BenchError,
    check_record,
    served_sha,
    utc_timestamp,
)
from sparkctl.measure.workloads import Workload, haystack

PREFILL_SUFFIX = "\n\nSummarize the text above in one sentence."
WINDOW_REFRESH_S = 0.25  # seconds between progress updates of the client's token count during a window


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


@dataclass
class ProbeSettings:
    """What one probe run does; the CLI fills every field from group data (BENCH_*) and its options."""

    workload: Workload
    streams: Sequence[int]  # BENCH_STREAMS
    window_s: float  # BENCH_WINDOW_S
    max_tokens: int  # BENCH_MAX_TOKENS
    prefill_tokens: Sequence[int]  # BENCH_PREFILL_TOKENS
    ignore_eos: bool  # BENCH_IGNORE_EOS
    timeout_s: float  # BENCH_CLIENT_TIMEOUT_S
    settle_s: float  # BENCH_SETTLE_S: after every stream has its first token, before the window opens
    idle_timeout_s: float  # BENCH_IDLE_TIMEOUT_S: waiting for vLLM to drain between phases
    agreement_tolerance: float  # BENCH_AGREEMENT_TOLERANCE: counter vs client, relative
    temperature: float = 0.0  # greedy: the same prompts give the same work run after run
    seed: int = 0  # haystack text of the prefill prompts
    prefill_repeats: int = 1  # fresh prompts per prefill length, the median reported (ACCEPTANCE_PREFILL_REPEATS)


def distinct(setting: str, values: Sequence[int]) -> list[int]:
    """values, refused before anything is measured when one repeats: a record holds one figure per stream count and
    prompt length (record.BenchRecord refuses two), so a second window at the same count would only be thrown away."""
    repeated = sorted({v for i, v in enumerate(values) if v in values[:i]})
    if repeated:
        raise SettingError(setting, list(values), "distinct values (each measured once)",
                           f"{', '.join(map(str, repeated))} appear(s) more than once")
    return list(values)


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


async def wait_idle(metrics_source: MetricsSource, timeout_s: float) -> Scrape:
    """Scrape until vLLM has no running or waiting request (aborted streams drain in well under a second)."""
    deadline = time.monotonic() + timeout_s
    while True:
        s = await metrics_source()
        if prometheus.requests_in_flight(s.snapshot) == 0:
            return s
        if time.monotonic() > deadline:
            raise BenchError(f"vLLM still has requests in flight after {timeout_s:.0f} s (BENCH_IDLE_TIMEOUT_S); "
                             "another client is using it, so the counters would not be the probe's alone")
        await asyncio.sleep(0.5)


class _Streams:
    """The concurrent streams of one decode window: each sends its next prompt as soon as a request ends, and
    gives up (marking the window failed) on an unexpected error or on ERRORS_IN_A_ROW failed requests."""

    ERRORS_IN_A_ROW = 3
    ERROR_PAUSE_S = 1.0  # before a stream retries after a failed request

    def __init__(self, client: httpx.AsyncClient, ep: Endpoint, s: ProbeSettings, streams: int, start_index: int):
        self.client, self.ep, self.s = client, ep, s
        self.url = ep.url("/chat/completions")
        self.logs: list[RequestLog] = []
        self.first_token = [asyncio.Event() for _ in range(streams)]  # set once stream i has tokens (or gave up)
        self.next_index = start_index  # the next prompt of the workload
        self.fatal: list[str] = []
        self._stop = asyncio.Event()
        self._tasks = [asyncio.create_task(self._stream(i)) for i in range(streams)]

    async def stop(self) -> None:
        self._stop.set()
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _give_up(self, i: int, error: str) -> None:
        self.fatal.append(error)
        self.first_token[i].set()

    async def _request(self, i: int) -> RequestLog | None:
        """One request of stream i; None when it failed in a way that must stop the window."""
        idx = self.next_index
        self.next_index += 1
        log = RequestLog(t_sent=time.perf_counter())
        self.logs.append(log)
        try:
            await stream_request(self.client, self.url, chat_body(self.ep, self.s, self.s.workload.prompt(idx)), log,
                                 on_tokens=self.first_token[i].set)
        except httpx.HTTPError as exc:
            log.error = f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # a bug or a malformed stream: stop the window, never hang it
            log.error = f"{type(exc).__name__}: {exc}"
            self._give_up(i, log.error)
            return None
        return log

    async def _stream(self, i: int) -> None:
        errors_in_a_row = 0
        while not self._stop.is_set():
            log = await self._request(i)
            if log is None:
                return
            if not log.error:
                errors_in_a_row = 0
                continue
            errors_in_a_row += 1
            if errors_in_a_row >= self.ERRORS_IN_A_ROW:
                self._give_up(i, log.error)
                return
            await asyncio.sleep(self.ERROR_PAUSE_S)


async def _scrape_window(w: _Streams, metrics_source: MetricsSource, s: ProbeSettings, streams: int,
                         reporter: Reporter) -> tuple[Scrape, Scrape]:
    """Fill every stream, settle, then the two scrapes BENCH_WINDOW_S apart."""
    reporter.phase(f"{streams} stream(s): filling")
    await asyncio.wait_for(asyncio.gather(*(e.wait() for e in w.first_token)), timeout=s.timeout_s)
    if w.fatal:
        raise BenchError(f"requests fail: {w.fatal[0]}")
    await asyncio.sleep(s.settle_s)
    s0 = await metrics_source()
    t_open = time.perf_counter()
    while (elapsed := time.perf_counter() - t_open) < s.window_s:
        if w.fatal:
            raise BenchError(f"requests fail during the window: {w.fatal[0]}")
        reporter.window(streams, elapsed, s.window_s, tokens_in_window(w.logs, s0.t, time.perf_counter()))
        await asyncio.sleep(min(WINDOW_REFRESH_S, max(s.window_s - elapsed, 0.0)))
    s1 = await metrics_source()
    reporter.window(streams, s.window_s, s.window_s, tokens_in_window(w.logs, s0.t, s1.t))
    return s0, s1


async def decode_window(client: httpx.AsyncClient, ep: Endpoint, metrics_source: MetricsSource,
                        s: ProbeSettings, streams: int, reporter: Reporter, start_index: int = 0,
                        roofline_single: float | None = None) -> tuple[dict, int]:
    """One decode window at `streams` concurrent streams; returns (window result, next prompt index)."""
    w = _Streams(client, ep, s, streams, start_index)
    try:
        s0, s1 = await _scrape_window(w, metrics_source, s, streams, reporter)
    finally:
        await w.stop()
    result = window_result(streams, s0, s1, w.logs, tolerance=s.agreement_tolerance, roofline_single=roofline_single)
    return result, w.next_index


async def measure_prefill(client: httpx.AsyncClient, ep: Endpoint, metrics_source: MetricsSource,
                          s: ProbeSettings, target: int, max_model_len: int | None) -> dict:
    """`s.prefill_repeats` fresh prompts of about `target` tokens, max_tokens 1, each on an idle server: the
    sample with the median rate (its own TTFT, counters and prefix-cache check), every sample's rate beside it.
    One sample of a short prefill is at the mercy of one scheduler hiccup; the median of several is not."""
    if max_model_len and target + 1 > max_model_len:
        return prefill_failure(target, f"does not fit max_model_len {max_model_len}")
    samples = []
    for _ in range(s.prefill_repeats):
        one = await _one_prefill(client, ep, metrics_source, s, target)
        if one["error"]:
            return one
        samples.append(one)
    return median_prefill(samples)


async def _one_prefill(client: httpx.AsyncClient, ep: Endpoint, metrics_source: MetricsSource,
                       s: ProbeSettings, target: int) -> dict:
    prefix = f"Session {uuid.uuid4().hex}. Read the following notes.\n\n"  # a new prefix: no cache block matches

    def build(n_chars: int) -> str:
        # whole sentences step ~70 tokens at a time: cut a longer text at a word boundary to size it finely
        body = haystack.text(n_chars + 400, s.seed)[:n_chars]
        return prefix + body[:body.rfind(" ") + 1 or len(body)] + PREFILL_SUFFIX

    text, counted, source = await fit_text(lambda t: tokenize_count(client, ep, prompt=t), build, target)
    body = {"model": ep.served_name, "prompt": text, "max_tokens": 1, "temperature": 0.0, "stream": True,
            "stream_options": {"include_usage": True}}
    before = await wait_idle(metrics_source, s.idle_timeout_s)
    log = RequestLog(t_sent=time.perf_counter())
    try:
        await stream_request(client, ep.url("/completions"), body, log)
    except httpx.HTTPError as exc:
        log.error = f"{type(exc).__name__}: {exc}"
    after = await wait_idle(metrics_source, s.idle_timeout_s)
    if log.error:
        return prefill_failure(target, log.error, counted)
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
    """The whole probe: decode sweep, then prefill; returns the JSON record (record.BenchRecord)."""
    reporter = reporter or Reporter()
    date = utc_timestamp()
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
