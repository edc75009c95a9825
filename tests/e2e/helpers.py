"""What several end-to-end scenarios do to the simulated Sparks, defined once: wait for a condition, talk to the
coder through the proxy, read a unit's process or invocation, a box's JSON state, the stand-in hub's log."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field

import httpx
import pytest

from sparkctl import REPO_ROOT
from tests.e2e.conftest import sim_exec

SERVICES = ["vllm-coder.service", "vllm-embed-qwen3.service", "vllm-embed-bge-m3.service"]
ROLLOUT = "/var/lib/sparkctl/rollout"  # the box's rollout state directory (STATE_DIR/rollout)


def wait_for(predicate, timeout: float, what: str, interval: float = 1.0):
    """predicate's first true value, polled every interval seconds; fails naming what after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s waiting for {what}"
        time.sleep(interval)
    return value


def chat(spark, address: str | None = None, max_tokens: int = 4, timeout: float = 30) -> httpx.Response:
    """One chat completion to the coder through the proxy (of spark, or of the box at address)."""
    base = spark.base_url("coder") if address is None else \
        f"https://{address}:{spark.data['PROXY_PORT']}/coder/v1"
    with spark.client() as c:
        return c.post(base + "/chat/completions", headers={"Authorization": f"Bearer {spark.token}"}, timeout=timeout,
                      json={"model": "coder", "messages": [{"role": "user", "content": "x"}],
                            "max_tokens": max_tokens})


def chat_ok(spark, address: str | None = None, max_tokens: int = 4) -> bool:
    """The coder answers a chat completion through the proxy."""
    try:
        return chat(spark, address, max_tokens).status_code == 200
    except httpx.HTTPError:
        return False


def main_pid(host: str, unit: str = "vllm-coder.service") -> str:
    return sim_exec(host, f"systemctl show -P MainPID {unit}").strip()


def main_pids(host: str) -> dict[str, str]:
    """The main process of every vLLM service on host: a changed one was restarted."""
    return {u: main_pid(host, u) for u in SERVICES}


def invocation(host: str, unit: str = "vllm-coder.service") -> str:
    """systemd's InvocationID of unit: a new one means systemd started it again."""
    return sim_exec(host, f"systemctl show -P InvocationID {unit}").strip()


def box_json(host: str, path: str) -> dict:
    text = sim_exec(host, f"cat {path} 2>/dev/null || true").strip()
    return json.loads(text) if text else {}


def hub_file_gets() -> int:
    """Files downloaded from the stand-in hub so far (a flip that downloads nothing leaves it unchanged)."""
    log = REPO_ROOT / ".sim" / "logs" / "hub.log"
    return sum(1 for line in log.read_text().splitlines() if line.startswith("REQ GET") and "/resolve/" in line)


def hub_log_lines() -> list[str]:
    return (REPO_ROOT / ".sim" / "logs" / "hub.log").read_text(errors="replace").splitlines()


def probe_all(spark) -> dict:
    """A real chat completion and a real embedding on both embedders, through TLS (our CA only) + token."""
    out = {}
    with spark.client() as c:
        h = {"Authorization": f"Bearer {spark.token}"}
        r = c.post(spark.base_url("coder") + "/chat/completions", headers=h, json={
            "model": "coder", "messages": [{"role": "user", "content": "def fib(n):"}], "max_tokens": 16,
            "temperature": 0, "ignore_eos": True})
        assert r.status_code == 200, r.text
        out["coder"] = r.json()
        assert out["coder"]["usage"]["completion_tokens"] == 16
        for served in ("embed-qwen3", "embed-bge-m3"):
            r = c.post(spark.base_url(served) + "/embeddings", headers=h,
                       json={"model": served, "input": ["a sentence", "another"]})
            assert r.status_code == 200, r.text
            assert len(r.json()["data"]) == 2 and len(r.json()["data"][0]["embedding"]) > 0
            out[served] = r.json()
        assert c.get(spark.base_url("coder") + "/models").status_code == 401  # no token, no answer
        assert c.get(spark.base_url("coder") + "/models",
                     headers={"Authorization": "Bearer wrong"}).status_code == 401
    with pytest.raises(httpx.ConnectError):  # the default trust store does not know our CA: TLS is real
        httpx.get(spark.base_url("coder") + "/models", verify=True, trust_env=False, timeout=10)
    return out


ON_PURPOSE = 503  # a box's router health path while its drain or unready file stands: out of the routers by design


@dataclass
class HealthSampler:
    """Each box's router health path (/coder/health through its proxy, what a router asks) every `interval` s, with
    the routers' own timeout (ROUTER_HEALTH_TIMEOUT_S): (time, {box: status, or the error's name}, {box: seconds}).

    A 503 is a box out on purpose (its rollout's drain or unready file); anything else not 200 (a 504 from the box's
    nginx, a timeout, a 502) is a box that a router would count as failing though nobody took it out."""

    spark: object  # tests.e2e.conftest.Spark: token, CA, settings
    addresses: dict  # box -> address
    interval: float = 0.5
    samples: list = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self):
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=60)

    def _run(self) -> None:
        port, timeout = self.spark.data["PROXY_PORT"], self.spark.data["ROUTER_HEALTH_TIMEOUT_S"]
        with self.spark.client() as c:
            while not self._stop.is_set():
                t0, codes, seconds = time.monotonic(), {}, {}
                for box, address in self.addresses.items():
                    t1 = time.monotonic()
                    try:
                        codes[box] = c.get(f"https://{address}:{port}/coder/health", timeout=timeout,
                                           headers={"Authorization": f"Bearer {self.spark.token}"}).status_code
                    except httpx.HTTPError as exc:
                        codes[box] = type(exc).__name__
                    seconds[box] = time.monotonic() - t1
                self.samples.append((t0, codes, seconds))
                self._stop.wait(max(0.0, self.interval - (time.monotonic() - t0)))

    def most_out_on_purpose(self) -> int:
        """The most boxes out by their drain or unready file in one sample: what MAX_UNAVAILABLE bounds."""
        return max((sum(1 for c in codes.values() if c == ON_PURPOSE) for _t, codes, _s in self.samples), default=0)

    def failing_while_serving(self, threshold: int, spare: tuple[str, ...] = ()) -> dict[str, int]:
        """Boxes whose health path failed `threshold` samples in a row with neither 200 nor the 503 of their drain
        (what would take a serving box out of a router), with their longest such run; `spare`: boxes a scenario
        kills on purpose."""
        longest: dict[str, int] = {}
        for box in self.addresses:
            run = 0
            for _t, codes, _s in self.samples:
                run = run + 1 if codes.get(box) not in (200, ON_PURPOSE) else 0
                longest[box] = max(longest.get(box, 0), run)
        return {b: n for b, n in longest.items() if n >= threshold and b not in spare}

    def slow(self) -> list[tuple[str, object, float]]:
        """Every answer neither 200 nor 503 (box, status or error, seconds): reported apart from the boxes out on
        purpose."""
        return [(b, codes[b], secs[b]) for _t, codes, secs in self.samples for b in codes
                if codes[b] not in (200, ON_PURPOSE)]

    def slowest(self) -> float:
        return max((s for _t, _c, secs in self.samples for s in secs.values()), default=0.0)

    def summary(self) -> str:
        return (f"{len(self.samples)} health samples every {self.interval} s: at most {self.most_out_on_purpose()} of "
                f"{len(self.addresses)} boxes out on purpose (503) at once; {len(self.slow())} answers neither 200 "
                f"nor 503 {self.slow()[:4]}; the slowest answer {self.slowest():.3f} s against the routers' "
                f"{self.spark.data['ROUTER_HEALTH_TIMEOUT_S']} s timeout")
