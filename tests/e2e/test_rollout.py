"""The rollout on the simulated Spark, Molecule-style: converge bare hosts, converge again and demand zero
changes, flip the coding model (one box at a time, streams in flight finish, only the coders restart, nothing
re-downloads), reboot, and the two NVIDIA paths.
Each test needs the pair as the group data says (`converged_spark`) or just its first converge."""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import time

import httpx
import pytest

from sparkctl import REPO_ROOT
from sparkctl.config import groupdata
from sparkctl.measure import history
from tests.conftest import typed
from tests.e2e.conftest import GROUPS, PAIR, pyinfra, pyinfra_popen, record, sim_exec
from tests.e2e.helpers import (ROLLOUT, SERVICES, HealthSampler, box_json, chat, hub_file_gets, main_pids,
                               probe_all)

pytestmark = pytest.mark.scenario("rollout")


def dry_run_changes(*limit: str) -> tuple[list[str], float]:
    run = pyinfra("--dry", "--json", *limit, "inventory.py", "deploy.py")
    assert run.rc == 0, run.failure()
    plan = json.JSONDecoder().raw_decode(run.stdout[run.stdout.index("{"):])[0]["plan"]
    return [op["name"] for op in plan if op["hosts_with_change"]], run.seconds


def test_bare_hosts_converge_and_serve_through_the_proxy(first_converge, converged_spark):
    out = first_converge.output
    assert "health through https://10.250.0.11:443" in out and "health through https://10.250.0.12:443" in out
    assert out.count("healthy") >= 6  # three services on each box
    probe_all(converged_spark)


def test_a_second_converge_changes_nothing(converged_spark):
    changed, dry_s = dry_run_changes()
    record("dry-run gate over 2 hosts (pyinfra --dry --json)", dry_s)
    assert changed == []
    run = pyinfra("-y", "inventory.py", "deploy.py")
    record("no-op rerun, 2 hosts", run.seconds)
    assert run.rc == 0, run.failure()
    summary = [ln for ln in run.output.splitlines() if "Grand total" in ln]
    assert summary and re.search(r"Grand total\s+\d+\s+-\s+-\s+\d+", summary[0]), summary
    one = pyinfra("-y", "--limit", "spark-1", "inventory.py", "deploy.py")
    record("no-op rerun, 1 host", one.seconds)
    ratio = run.seconds / one.seconds
    print(f"no-op rerun: 2 hosts {run.seconds:.1f} s / 1 host {one.seconds:.1f} s = {ratio:.2f}x (goal <= 1.3x)")
    record(f"no-op rerun ratio 2 hosts / 1 host = {ratio:.2f}x (goal 1.3x)", ratio)
    # hosts are converged in parallel: a serial run would be ~2x. The 1.3x goal is reported, not asserted
    # (timings on a shared 2-core machine flake); 1.8x still catches a deploy that serialises its hosts.
    assert ratio < 1.8


HOSTS = ("spark-1", "spark-2")
# streams in flight on each box when the coders' rollout begins (pyinfra picks which box goes first): the sim decodes
# ~300-450 tokens/s, so two of 3,500 tokens outlast the start of the first box's drain by far, and it must wait for
# every one of them
STREAMS, STREAM_TOKENS = 2, 3500


def stream(spark, address: str, got: dict, max_tokens: int) -> None:
    """One streamed chat completion through a box's proxy: its status, chunks, usage, finish reason, [DONE]."""
    with spark.client() as c, c.stream(
            "POST", f"https://{address}:{spark.data['PROXY_PORT']}/coder/v1/chat/completions",
            headers={"Authorization": f"Bearer {spark.token}"},
            json={"model": "coder", "messages": [{"role": "user", "content": "count"}], "max_tokens": max_tokens,
                  "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}) as r:
        got["status"], got["chunks"] = r.status_code, 0
        for line in r.iter_lines():
            if line.startswith("data: {"):
                chunk = json.loads(line[6:])
                got["chunks"] += 1
                got["usage"] = chunk.get("usage") or got.get("usage")
                for choice in chunk.get("choices", []):
                    got["finish"] = choice.get("finish_reason") or got.get("finish")
            elif line == "data: [DONE]":
                got["done"] = True


class Prober:
    """A 4-token chat to each box every 0.5 s through its proxy, meanwhile: (time, ok per box), and each box's
    answers (time, status, Retry-After)."""

    def __init__(self, spark, addresses: list[str]):
        self.spark, self.addresses = spark, addresses
        self.samples: list[tuple] = []
        self.answers: list[list[tuple[float, int, str | None]]] = [[] for _ in addresses]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run)

    def run(self) -> None:
        while not self.stop.is_set():
            t = time.monotonic()
            oks = []
            for i, address in enumerate(self.addresses):
                try:
                    r = chat(self.spark, address, timeout=10)
                    oks.append(r.status_code == 200)
                    self.answers[i].append((t, r.status_code, r.headers.get("Retry-After")))
                except httpx.HTTPError:
                    oks.append(False)
            self.samples.append((t, *oks))
            self.stop.wait(max(0.0, 0.5 - (time.monotonic() - t)))

    def longest_gap(self, i: int) -> float:
        longest, start = 0.0, None
        for s in self.samples:
            if not s[i]:
                start = s[0] if start is None else start
                longest = max(longest, s[0] - start + 0.5)
            else:
                start = None
        return longest


def test_the_flip_goes_one_box_at_a_time_lets_streams_finish_and_downloads_nothing(converged_spark, sim_pair):
    """The flip as the cluster sees it: CODING_MODEL changed and the deploy rerun on the replicas pair. The boxes
    flip one at a time (a request to each every 0.5 s never finds both down); long streams started on each box as
    the coders' rollout begins all end with every token (the first box to roll out waits for its own) while new
    requests to a draining box get 503 with Retry-After; only the coders restart, nothing is downloaded, the served
    name stays, and the flip is judged (the matching stand-in draft's acceptance is what the sim's floor is set
    from). Flipping back downloads nothing."""
    spark = converged_spark
    before, gets0 = {h: main_pids(h) for h in HOSTS}, hub_file_gets()
    addresses = {h: sim_pair[h].address for h in HOSTS}
    prober = Prober(spark, [addresses[h] for h in HOSTS])
    got = {h: [dict() for _ in range(STREAMS)] for h in HOSTS}
    lines: list[str] = []
    rollout_began = threading.Event()
    t0 = time.monotonic()
    proc = pyinfra_popen("--data", "CODING_MODEL=laguna-s-2.1")

    def read():
        for line in proc.stdout:
            lines.append(line)
            if "Roll out vllm-coder.service" in line and "Starting" in line:
                rollout_began.set()

    reader = threading.Thread(target=read)
    reader.start()
    prober.thread.start()
    health = HealthSampler(spark, addresses).__enter__()  # the routers' view of the pool of two, beside the chats
    try:
        assert rollout_began.wait(900), "".join(lines)[-3000:]
        streams = [threading.Thread(target=stream, args=(spark, addresses[h], g, STREAM_TOKENS))
                   for h in HOSTS for g in got[h]]
        for t in streams:
            t.start()
        proc.wait(timeout=2400)
        reader.join()
        for t in streams:
            t.join(timeout=600)
    finally:
        time.sleep(2)
        prober.stop.set()
        prober.thread.join()
        health.__exit__()
    out = "".join(lines)
    record("flip of the replicas pair to laguna-s-2.1, one box at a time, streams in flight", time.monotonic() - t0)
    assert proc.returncode == 0, out[-4000:]

    # one box at a time: never both down, and each box really restarted its coder
    both_down = sum(1 for _t, a, b in prober.samples if not a and not b)
    gaps = {h: prober.longest_gap(i + 1) for i, h in enumerate(HOSTS)}
    print(f"flip: {len(prober.samples)} samples every 0.5 s, both boxes down in {both_down}; longest single-box gaps "
          f"{gaps}")
    record(f"flip, samples with both boxes down (of {len(prober.samples)})", both_down, "")
    record("flip, longest single-box gap", max(gaps.values()))
    assert both_down == 0
    assert all(g > 0 for g in gaps.values()), "each box restarted its coder (else the test proves nothing)"
    # a pool of two: MAX_UNAVAILABLE is one box out on purpose (its drain or unready file), and the box serving the
    # streams is never failing its router health path (what would take it out of a router in front)
    print(f"flip, router health paths: {health.summary()}")
    record("flip, the slowest router health answer of the pair (2 streams per box)", health.slowest())
    assert health.most_out_on_purpose() == 1, health.summary()
    assert health.failing_while_serving(spark.data["ROUTER_HEALTH_FAILURE_THRESHOLD"]) == {}, health.summary()

    # every stream in flight finished; the first box to roll out drained while its streams ran, and new requests to
    # a draining box were refused with Retry-After
    for h in HOSTS:
        for g in got[h]:
            assert g.get("done") and g["usage"]["completion_tokens"] == STREAM_TOKENS and g["finish"] == "length", got
    results = {h: box_json(h, f"{ROLLOUT}/vllm-coder.result.json") for h in HOSTS}
    assert all(r["outcome"] == "ready" for r in results.values()), results
    drained = [h for h in HOSTS if results[h]["drain_s"] > 0]
    assert drained, f"no box waited for its streams: {results}"
    assert re.search(r"draining: \d+ request\(s\) still running", out), out[-3000:]
    refused = [retry for answers in prober.answers for _t, status, retry in answers if status == 503]
    assert refused, "no request was refused while a box drained"
    assert set(refused) == {str(spark.data["DRAIN_RETRY_AFTER_S"])}, refused
    first = drained[0]
    print(f"{STREAMS} streams of {STREAM_TOKENS} tokens on each box completed during the flip; {first} drained "
          f"{results[first]['drain_s']} s, restart {results[first]['restart_s']} s, load (gate) "
          f"{results[first]['load_s']} s")
    record(f"flip with {STREAMS} x {STREAM_TOKENS}-token streams in flight per box: the draining box's wait",
           results[first]["drain_s"])

    # only the coders restarted, nothing was downloaded, the same served name answers
    for h in HOSTS:
        after = main_pids(h)
        assert after["vllm-coder.service"] != before[h]["vllm-coder.service"], h
        assert {u: after[u] for u in SERVICES[1:]} == {u: before[h][u] for u in SERVICES[1:]}, h  # embedders
        assert "SPARKCTL_MODEL=laguna-s-2.1" in sim_exec(h, "cat /etc/sparkctl/vllm-coder.env"), h
    assert hub_file_gets() == gets0  # Laguna and its draft were already on disk
    assert probe_all(spark)["coder"]["model"] == "coder"  # same served name, same URL

    # the flip was judged (the coders served before): the matching stand-in draft passed its floor
    data = groupdata.load(GROUPS)
    line = history.select(history.read(spark.host, typed(data)), model="laguna-s-2.1")[-1]
    sd = next(r["spec_decode"] for r in sorted(line["runs"], key=lambda r: r["streams"]) if r.get("spec_decode"))
    print(f"ACCEPTANCE matching stand-in draft: rate {sd['acceptance_rate']:.3f}, tokens per step "
          f"{sd.get('tokens_per_step')}, per position {sd.get('per_position_acceptance')}")
    record("flip to laguna: the matching stand-in draft's acceptance rate (1 stream)", sd["acceptance_rate"], "")

    run = pyinfra("-y", "inventory.py", "deploy.py")  # back to the file's qwen3.8-27b
    record("flip of the pair back to qwen3.8-27b", run.seconds)
    assert run.rc == 0, run.failure()
    assert hub_file_gets() == gets0  # flipping back downloads zero bytes
    for h in HOSTS:
        assert "SPARKCTL_MODEL=qwen3.8-27b" in sim_exec(h, "cat /etc/sparkctl/vllm-coder.env"), h
        assert main_pids(h)["vllm-embed-qwen3.service"] == before[h]["vllm-embed-qwen3.service"], h


def test_services_come_back_after_a_reboot(converged_spark):
    from sparkctl.sim import api as sim

    before = main_pids("spark-1")
    t0 = time.monotonic()
    PAIR.disturbed("spark-1")  # whatever does not come back is put back before the next scenario
    sim.reboot("spark-1", wait=True)
    deadline = time.monotonic() + 600
    while True:
        try:
            probe_all(converged_spark)
            break
        except (AssertionError, httpx.HTTPError):
            assert time.monotonic() < deadline, "services did not come back after reboot"
            time.sleep(3)
    record("reboot spark-1 until every service answers through the proxy", time.monotonic() - t0)
    assert main_pids("spark-1") != before  # really restarted
    assert sim_exec("spark-1", "systemctl is-active " + " ".join(SERVICES + ["nginx.service"])).split() == \
        ["active"] * 4


def test_nvidia_packages_only_on_the_plain_ubuntu_box(first_converge):
    def installed(name):
        out = sim_exec(name, "dpkg-query -W -f='${Package} ${Status}\\n' cuda-keyring nvidia-open-580 "
                             "nvidia-driver-pinning-580 cuda-toolkit-13-0 2>/dev/null || true")
        return sorted(ln.split()[0] for ln in out.splitlines() if "install ok installed" in ln)

    assert installed("spark-1") == []  # DGX OS: nothing installed
    assert installed("spark-2") == ["cuda-keyring", "cuda-toolkit-13-0", "nvidia-driver-pinning-580",
                                    "nvidia-open-580"]
    assert "NVIDIA GB10" in sim_exec("spark-2", "nvidia-smi --query-gpu=name --format=csv,noheader")


def test_the_readme_main_command_deploys_and_prints_the_health_table(first_converge):
    PAIR.disturbed()
    r = subprocess.run(["make", "deploy"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=1800,
                       env={**os.environ, "GX10_HOSTS": ""})
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    PAIR.settled()  # `make deploy` is the plain deploy of every simulated box
    out = r.stdout + r.stderr
    assert "KV tokens (vLLM)" in out and "healthy" in out
