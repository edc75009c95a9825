"""Faults and hardening on the converged simulated Spark: each test asserts the outcome and prints what it measured.

SIGKILLed coder, killed download, a flip to a checkpoint that cannot load (automatic rollback), a client that
disconnects mid-stream, and the security claims (loopback-only vLLM, root-only secrets, no token in argv). Each test
starts from the pair as the group data says (`converged_spark`).
"""

from __future__ import annotations

import ipaddress
import json
import re
import subprocess
import time

import pytest

from sparkctl import REPO_ROOT
from sparkctl.lock.refresh import refresh_lock
from sparkctl.measure import prometheus
from tests.e2e.conftest import GROUPS, PAIR, broken_candidate_overrides, pyinfra, pyinfra_popen, record, sim_exec
from tests.e2e.helpers import chat_ok, wait_for

pytestmark = pytest.mark.scenario("faults")

HOST = "spark-1"


def metric(port: int, name: str) -> float:
    """Sum of a metric's samples over every label set on the box (prometheus_client's parser, as the bench uses)."""
    return prometheus.parse(sim_exec(HOST, f"curl -fsS http://127.0.0.1:{port}/metrics")).total(name)


def test_sigkilled_coder_is_brought_back_by_systemd(converged_spark):
    pid = sim_exec(HOST, "systemctl show -P MainPID vllm-coder.service").strip()
    t0 = time.monotonic()
    PAIR.disturbed(HOST)
    sim_exec(HOST, f"kill -9 {pid}")
    wait_for(lambda: not chat_ok(converged_spark), 30, "the coder to go down")
    wait_for(lambda: chat_ok(converged_spark), 300, "systemd to restart the coder", interval=2)
    record("SIGKILL coder -> serving again (RestartSec + load)", time.monotonic() - t0)
    assert sim_exec(HOST, "systemctl show -P MainPID vllm-coder.service").strip() != pid


def test_client_disconnect_cancels_the_request_in_vllm(converged_spark):
    """A client that goes away mid-stream must free the GPU: nginx closes the upstream, vLLM aborts."""
    port, max_tokens = converged_spark.data["CODER_PORT"], 3500
    gen0 = metric(port, "vllm:generation_tokens_total")
    t0 = time.monotonic()
    with converged_spark.client() as c:
        with c.stream("POST", converged_spark.base_url("coder") + "/chat/completions",
                      headers={"Authorization": f"Bearer {converged_spark.token}"},
                      json={"model": "coder", "messages": [{"role": "user", "content": "count"}],
                            "max_tokens": max_tokens, "ignore_eos": True, "stream": True}) as r:
            chunks = 0
            for _ in r.iter_lines():
                chunks += 1
                if chunks > 20:
                    break  # the client goes away mid-stream
    wait_for(lambda: metric(port, "vllm:num_requests_running") == 0, 30, "vLLM to drop the request")
    stopped = time.monotonic() - t0
    time.sleep(3)  # had it kept generating, the counter would keep rising
    produced = metric(port, "vllm:generation_tokens_total") - gen0
    record(f"client disconnect -> request gone from vLLM ({produced:.0f} of {max_tokens} tokens generated)", stopped)
    assert produced < max_tokens / 2, f"vLLM generated {produced} tokens for a client that left after 20 chunks"
    assert metric(port, "vllm:num_requests_running") == 0


def test_killed_download_resumes_and_the_service_never_sees_partial_files(converged_spark):
    """Drop MiniLM's verified snapshot on the box, throttle the stand-in hub, kill the download mid-file."""
    data = converged_spark.data
    lock = json.loads((REPO_ROOT / data["MODEL_LOCK_FILE"]).read_text())["checkpoints"]["sim/all-minilm-l6-v2"]
    store = data["MODEL_STORE"]
    cache = f"{store}/hub/models--sim--all-minilm-l6-v2"
    env_before = sim_exec(HOST, "cat /etc/sparkctl/vllm-embed-qwen3.env")
    PAIR.disturbed(HOST)
    sim_exec(HOST, f"rm -rf {cache} {store}/verified/sim--all-minilm-l6-v2@{lock['sha']}")
    throttle = REPO_ROOT / ".sim" / "hub-throttle"
    throttle.write_text("3000000\n")  # 3 MB/s: the 90 MB weights take ~30 s
    try:
        proc = pyinfra_popen("--limit", HOST)
        partial = wait_for(lambda: sim_exec(HOST, f"find {cache} -name '*.incomplete' -size +5M 2>/dev/null || true")
                           .strip(), 300, "a partial download")
        sim_exec(HOST, "pkill -9 -f '[f]etch_checkpoint.py'")  # [f]: not the sh running pkill
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode != 0, "the deploy must fail when its download is killed"
    finally:
        throttle.unlink(missing_ok=True)
    print(f"killed mid-file: {partial}")
    snapshot = f"{cache}/snapshots/{lock['sha']}"
    assert "model.safetensors" not in sim_exec(HOST, f"ls {snapshot} 2>/dev/null || true")  # no partial at the path
    assert sim_exec(HOST, "cat /etc/sparkctl/vllm-embed-qwen3.env") == env_before
    assert sim_exec(HOST, f"ls {store}/verified/").count("all-minilm") == 0
    run = pyinfra("-y", "--limit", HOST, "inventory.py", "deploy.py")
    record("rerun after a killed download (re-fetch MiniLM, 90 MB)", run.seconds)
    assert run.rc == 0, run.failure()
    assert sim_exec(HOST, f"ls {store}/verified/").count("all-minilm") == 1
    size = int(sim_exec(HOST, f"stat -L -c %s {snapshot}/model.safetensors"))
    assert size == lock["files"]["model.safetensors"]["size"]


# a failed candidate's rollback: the core set's killed-control-side flip to the same broken checkpoint rolls back too
@pytest.mark.e2e_extended(cost_s=115)  # the whole deploy with its rollback measured 113.8 s (docs/measured.md)
def test_flip_to_a_checkpoint_that_cannot_load_rolls_back(converged_spark):
    try:
        overrides = broken_candidate_overrides()
        embed_pid = sim_exec(HOST, "systemctl show -P MainPID vllm-embed-qwen3.service").strip()
        t0 = time.monotonic()
        # the box remembers a failed candidate and does not retry it unless asked: ask, so this test can run again
        run = pyinfra("-y", "--limit", HOST, "--data", "CODING_MODEL=laguna-s-2.1", "--data",
                      "ROLLOUT_RETRY_FAILED=True", "--data", overrides, "inventory.py", "deploy.py")
        record("flip to a broken checkpoint -> automatic rollback", time.monotonic() - t0)
        assert run.rc != 0, "a failed rollout must fail the deploy"
        assert "ROLLED BACK vllm-coder.service to qwen3.8-27b" in run.output, run.failure()
        assert re.search(r"journal", run.output)
        env = sim_exec(HOST, "cat /etc/sparkctl/vllm-coder.env")
        assert "SPARKCTL_MODEL=qwen3.8-27b" in env
        assert chat_ok(converged_spark)  # the box still serves a coding model
        assert sim_exec(HOST, "systemctl show -P MainPID vllm-embed-qwen3.service").strip() == embed_pid
        # the next plain deploy converges again, with nothing to change for the coder
        run = pyinfra("-y", "--limit", HOST, "inventory.py", "deploy.py")
        assert run.rc == 0, run.failure()
    finally:
        refresh_lock(GROUPS)


def test_hardening_claims_hold_on_the_box(converged_spark):
    listening = sim_exec(HOST, "ss -Htln")
    public = set()
    for line in listening.splitlines():
        addr, port = line.split()[3].rsplit(":", 1)
        addr = addr.strip("[]").split("%")[0]
        if addr in ("*", "0.0.0.0", "::") or not ipaddress.ip_address(addr).is_loopback:
            public.add(int(port))
    assert sorted(public) == [22, 443], listening  # vLLM, its engines and the embedders on loopback only
    for path in ("/etc/nginx/sparkctl-token.conf", "/etc/nginx/sparkctl-tls/server.key",
                 "/etc/sparkctl/vllm-coder.env", "/etc/sparkctl/vllm-coder.env.next"):
        assert sim_exec(HOST, f"stat -c '%a %U' {path}").split() == ["600", "root"], path
    assert sim_exec(HOST, "stat -c '%a' /etc/sparkctl").strip() == "700"
    token = converged_spark.token
    assert token not in sim_exec(HOST, "ps -eo args")  # never in argv
    assert token not in sim_exec(HOST, "cat /etc/nginx/sites-available/sparkctl.conf")
    with converged_spark.client() as c:
        r = c.get(converged_spark.base_url("coder").rsplit("/v1", 1)[0] + "/metrics",
                  headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 401  # /coder/metrics opens with the scrape token only, never the API token
    for unit in ("vllm-coder.service", "vllm-embed-qwen3.service"):
        out = sim_exec(HOST, f"systemd-analyze security {unit} --no-pager | tail -1")
        exposure = float(re.search(r"level for \S+: ([0-9.]+)", out).group(1))
        print(f"{unit}: systemd-analyze security exposure {exposure}")
        assert exposure <= 3.0
    ver = subprocess.run(["openssl", "s_client", "-connect", f"{converged_spark.host.address}:443", "-tls1_1"],
                         input="", capture_output=True, text=True, errors="replace", timeout=30)
    assert ver.returncode != 0  # TLS 1.1 refused
    h2 = subprocess.run(["openssl", "s_client", "-connect", f"{converged_spark.host.address}:443", "-alpn", "h2"],
                        input="", capture_output=True, text=True, errors="replace", timeout=30)
    assert "ALPN protocol: h2" in h2.stdout  # HTTP/2 on
