"""The rollout on the simulated Spark, Molecule-style: converge bare hosts, converge again and demand zero
changes, flip the coding model (only the coder restarts, nothing re-downloads), reboot, and the two NVIDIA paths.
Each test needs the pair as the group data says (`converged_spark`) or just its first converge."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time

import httpx
import pytest

from sparkctl import REPO_ROOT
from tests.e2e.conftest import PAIR, pyinfra, record, sim_exec

SERVICES = ["vllm-coder.service", "vllm-embed-qwen3.service", "vllm-embed-bge-m3.service"]


def main_pids(name: str) -> dict[str, str]:
    return {u: sim_exec(name, f"systemctl show -P MainPID {u}").strip() for u in SERVICES}


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


def dry_run_changes(*limit: str) -> tuple[list[str], float]:
    run = pyinfra("--dry", "--json", *limit, "inventory.py", "deploy.py")
    assert run.rc == 0, run.failure()
    plan = json.JSONDecoder().raw_decode(run.stdout[run.stdout.index("{"):])[0]["plan"]
    return [op["name"] for op in plan if op["hosts_with_change"]], run.seconds


def hub_file_gets() -> int:
    log = REPO_ROOT / ".sim" / "logs" / "hub.log"
    return sum(1 for line in log.read_text().splitlines() if line.startswith("REQ GET") and "/resolve/" in line)


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


def test_a_flip_restarts_only_the_coder_and_downloads_nothing(converged_spark):
    before, gets0 = main_pids("spark-1"), hub_file_gets()
    other_before = main_pids("spark-2")
    run = pyinfra("-y", "--limit", "spark-1", "--data", "CODING_MODEL=laguna-s-2.1", "inventory.py", "deploy.py")
    record("flip spark-1 to laguna-s-2.1", run.seconds)
    assert run.rc == 0, run.failure()
    after = main_pids("spark-1")
    assert after["vllm-coder.service"] != before["vllm-coder.service"]
    assert {u: after[u] for u in SERVICES[1:]} == {u: before[u] for u in SERVICES[1:]}  # embedders untouched
    assert main_pids("spark-2") == other_before  # the other box is not touched by --limit
    assert hub_file_gets() == gets0  # Laguna and its draft were already on disk
    env = sim_exec("spark-1", "cat /etc/sparkctl/vllm-coder.env")
    assert "SPARKCTL_MODEL=laguna-s-2.1" in env
    models = probe_all(converged_spark)
    assert models["coder"]["model"] == "coder"  # same served name, same URL
    run = pyinfra("-y", "--limit", "spark-1", "inventory.py", "deploy.py")  # back to the file's qwen3.8-27b
    record("flip spark-1 back to qwen3.8-27b", run.seconds)
    assert run.rc == 0, run.failure()
    assert hub_file_gets() == gets0  # flipping back downloads zero bytes
    assert "SPARKCTL_MODEL=qwen3.8-27b" in sim_exec("spark-1", "cat /etc/sparkctl/vllm-coder.env")
    assert main_pids("spark-1")["vllm-embed-qwen3.service"] == before["vllm-embed-qwen3.service"]


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
