"""What several end-to-end scenarios do to the simulated Sparks, defined once: wait for a condition, talk to the
coder through the proxy, read a unit's process or invocation, a box's JSON state, the stand-in hub's log."""

from __future__ import annotations

import json
import time

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
