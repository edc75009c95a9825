"""Hardening on the converged simulated Spark: the proxy publishes the API and nothing else, the running
sshd carries its OOM score, earlyoom's name lists fit the box's real processes, and a same-size corrupted checkpoint
blob is refused by content. Each test starts from the pair as the group data says (`converged_spark`).
"""

from __future__ import annotations

import json
import re
import ssl

import pytest

from sparkctl import REPO_ROOT
from sparkctl.config.lock import cache_dirname, marker_path
from tests.deploy.test_oom_guard import posix_matches
from tests.e2e.conftest import PAIR, pyinfra, record, sim_exec
from tests.render.test_proxy import ALLOWED, DENIED, dot_segments_resolved, request

pytestmark = pytest.mark.scenario("hardening")

HOST = "spark-1"


def nginx_404(status: int, body: bytes, method: str = "GET") -> bool:
    """nginx's own 404 page (the catch-all), not a 404 vLLM answered (JSON); a HEAD answer has no body at all."""
    return status == 404 and (b"<center>nginx" in body if method != "HEAD" else body == b"")


@pytest.fixture(scope="module")
def tls(spark_1):
    return (spark_1.host.address, spark_1.data["PROXY_PORT"]), ssl.create_default_context(cafile=spark_1.ca)


def test_proxy_allow_list_on_the_real_box(converged_spark, tls):
    address, ctx = tls
    token = converged_spark.token
    leaks, blocked = [], []
    for method, path in DENIED:
        status, _h, body = request(address, ctx, method, path, token)
        # a path nginx normalises to a scrape path (/<served>/metrics) needs the scrape token: 401 to the API token
        scrape = re.fullmatch(r"/[^/]+/metrics", dot_segments_resolved(path))
        if not (status == 401 if scrape else nginx_404(status, body, method)) or b"vllm:" in body:
            leaks.append((method, path, status, body[:80]))
    for method, path, _upstream in ALLOWED:
        status, _h, body = request(address, ctx, method, path, token)
        if status in (401, 403) or nginx_404(status, body, method):
            blocked.append((method, path, status))
    assert leaks == [], f"answered through the proxy: {leaks}"
    assert blocked == [], f"allowed routes that did not reach vLLM: {blocked}"
    status, _h, body = request(address, ctx, "GET", "/coder/v1/models", token)
    assert status == 200 and json.loads(body)["data"][0]["id"] == "coder"
    for method, path, *_ in ALLOWED + DENIED:
        assert request(address, ctx, method, path, None)[0] == 401, (method, path)
    print(f"proxy: {len(ALLOWED)} allowed spellings reach vLLM, {len(DENIED)} others are nginx's 404 (401 where "
          "they are a scrape path), all 401 without the token")


def test_the_running_sshd_has_its_oom_score_and_memory_floor(converged_spark):
    want = converged_spark.data["SSHD_OOM_SCORE_ADJUST"]
    pid = int(sim_exec(HOST, "systemctl show -P MainPID ssh.service").strip())
    assert pid > 0
    adj = int(sim_exec(HOST, f"cat /proc/{pid}/oom_score_adj").strip())
    print(f"sshd listener pid {pid}: oom_score_adj {adj} (setting {want})")
    caps = int(sim_exec(HOST, "awk '/^CapEff:/ {print $2}' /proc/self/status").strip(), 16)
    if not caps >> 24 & 1:  # CAP_SYS_RESOURCE: without it no process here can lower its OOM score
        pytest.skip("the test host's root lacks CAP_SYS_RESOURCE (this sandbox): OOM scores cannot be lowered here, "
                    "so systemd ignores OOMScoreAdjust= and the deploy says so (tests/deploy/test_oom_guard.py)")
    assert adj <= want
    cg = sim_exec(HOST, "systemctl show -P ControlGroup ssh.service").strip()
    floor = sim_exec(HOST, f"cat /sys/fs/cgroup{cg}/memory.min 2>/dev/null || echo absent").strip()
    print(f"ssh.service memory.min: {floor}")  # absent where the test host's cgroup has no memory controller
    if floor != "absent":
        from tasks.oom_guard import size_setting_bytes

        assert int(floor) == size_setting_bytes("SSHD_MEMORY_MIN", converged_spark.data["SSHD_MEMORY_MIN"])


def test_a_rerun_leaves_the_running_sshd_alone(converged_spark):
    pid = sim_exec(HOST, "systemctl show -P MainPID ssh.service").strip()
    run = pyinfra("-y", "--limit", HOST, "inventory.py", "deploy.py")
    assert run.rc == 0, run.failure()
    assert "Apply the sshd OOM score" in run.output
    assert sim_exec(HOST, "systemctl show -P MainPID ssh.service").strip() == pid  # never restarted


def test_earlyoom_lists_fit_the_real_processes(converged_spark):
    d = converged_spark.data
    argv = sim_exec(HOST, "tr '\\0' '\\n' < /proc/$(pgrep -o -x earlyoom)/cmdline").splitlines()
    assert argv[argv.index("--prefer") + 1] == d["EARLYOOM_PREFER"]
    assert argv[argv.index("--avoid") + 1] == d["EARLYOOM_AVOID"]
    rows = sim_exec(HOST, "for p in /proc/[0-9]*; do printf '%s\\t%s\\n' \"$(cat $p/comm 2>/dev/null)\" "
                          "\"$(grep -m1 '^0::' $p/cgroup 2>/dev/null)\"; done").splitlines()
    procs = [tuple(r.split("\t", 1)) for r in rows if "\t" in r]
    names = sorted({comm for comm, _cg in procs if comm})
    preferred = posix_matches(d["EARLYOOM_PREFER"], names)
    avoided = posix_matches(d["EARLYOOM_AVOID"], names)
    print(f"earlyoom prefers {sorted(preferred)}, avoids {sorted(avoided)} of {len(names)} process names")
    for comm, cg in procs:  # every preferred process is one of vLLM's services
        if comm in preferred:
            assert "/vllm-" in cg, (comm, cg)
    assert {"vllm", "sshd", "nginx", "systemd", "systemd-journal"} <= set(names)
    assert "vllm" in preferred and {"sshd", "nginx", "systemd", "systemd-journal"} <= avoided


def test_a_same_size_corrupted_blob_is_refused_then_fetched_again(converged_spark):
    data = converged_spark.data
    repo = "sim/all-minilm-l6-v2"
    lock = json.loads((REPO_ROOT / data["MODEL_LOCK_FILE"]).read_text())["checkpoints"][repo]
    store = data["MODEL_STORE"]
    weights = f"{store}/hub/{cache_dirname(repo)}/snapshots/{lock['sha']}/model.safetensors"
    marker = marker_path(store, repo, lock["sha"])
    blob = sim_exec(HOST, f"readlink -f {weights}").strip()
    size = int(sim_exec(HOST, f"stat -c %s {blob}"))
    # flip one byte in the middle, same size; drop the marker as if the box had never verified it
    flip = ("import sys; f = open(sys.argv[1], 'r+b'); f.seek(int(sys.argv[2])); b = f.read(1); "
            "f.seek(int(sys.argv[2])); f.write(bytes([b[0] ^ 255]))")
    PAIR.disturbed(HOST)
    sim_exec(HOST, f"python3 -c \"{flip}\" {blob} {size // 2} && rm -f {marker}")
    env_before = sim_exec(HOST, "cat /etc/sparkctl/vllm-embed-qwen3.env")
    run = pyinfra("-y", "--limit", HOST, "inventory.py", "deploy.py")
    assert run.rc != 0, "a corrupted checkpoint must fail the deploy"
    assert "model.safetensors: sha256" in run.output and "is not the locked" in run.output, run.failure()
    assert sim_exec(HOST, f"ls {marker} 2>/dev/null || true").strip() == ""
    assert sim_exec(HOST, "cat /etc/sparkctl/vllm-embed-qwen3.env") == env_before
    assert int(sim_exec(HOST, f"stat -c %s {blob}")) == size
    sim_exec(HOST, f"rm -f {blob}")  # what the refusal says to do
    run = pyinfra("-y", "--limit", HOST, "inventory.py", "deploy.py")
    record("rerun after a corrupted blob was deleted (re-fetch + sha256 of MiniLM, 90 MB)", run.seconds)
    assert run.rc == 0, run.failure()
    assert json.loads(sim_exec(HOST, f"cat {marker}"))["sha"] == lock["sha"]
